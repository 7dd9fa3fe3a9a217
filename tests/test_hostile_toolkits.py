"""Issue 12, "safe in a hostile group": the dangerous built-in toolkits hold when the model is
steered by someone who means harm. `files` refuses a hard link (another name of the file may
be outside the workspace); `python` stays shut where the OS cannot isolate a snippet, and its
processes die with the bot; `sqlite` reads a result row by row up to a byte bound.

Every test drives the real tool, loaded from the built-in toolset and run by a ToolRunner.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_toolkit_dangerous import call, load, processes_mentioning

REPO = Path(__file__).resolve().parent.parent

# --- files: hard links ---------------------------------------------------------------------------


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    """(workspace, a file outside it) with workspace/link.txt a hard link to that file."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("top secret", encoding="utf-8")
    os.link(secret, workspace / "link.txt")
    return workspace, secret


def files(workspace: Path) -> Any:
    return load({"files": {"workspace": str(workspace)}}, enabled=("files",))


async def test_files_refuse_to_read_or_write_a_hard_link_to_a_file_outside(
    linked: tuple[Path, Path],
) -> None:
    workspace, secret = linked
    kit = files(workspace)

    read = await call(kit, "files__read", {"path": "link.txt"})
    write = await call(kit, "files__write", {"path": "link.txt", "content": "pwned"})
    append = await call(kit, "files__write", {"path": "link.txt", "content": "!", "append": True})

    for result in (read, write, append):
        assert result.status == "error", result.content
        assert "2 hard links" in result.content and "outside the workspace" in result.content
    assert "top secret" not in read.content
    assert secret.read_text(encoding="utf-8") == "top secret"
    assert secret.stat().st_nlink == 2


async def test_files_refuse_to_move_delete_or_replace_a_hard_link(
    linked: tuple[Path, Path],
) -> None:
    workspace, secret = linked
    kit = files(workspace)
    (workspace / "folder").mkdir()
    os.link(secret, workspace / "folder" / "deep.txt")
    (workspace / "folder" / "plain.txt").write_text("plain", encoding="utf-8")
    (workspace / "new.txt").write_text("new", encoding="utf-8")

    attempts = {
        "move": await call(kit, "files__move", {"source": "link.txt", "destination": "moved.txt"}),
        "replace": await call(kit, "files__move", {"source": "new.txt", "destination": "link.txt",
                                                   "overwrite": True}),
        "delete": await call(kit, "files__delete", {"path": "link.txt"}),
        "delete the folder": await call(kit, "files__delete", {"path": "folder", "recursive": True}),
    }

    for what, result in attempts.items():
        assert result.status == "error", (what, result.content)
        assert "hard links" in result.content, (what, result.content)
    assert "folder/deep.txt" in attempts["delete the folder"].content
    assert (workspace / "link.txt").exists() and (workspace / "new.txt").exists()
    assert (workspace / "folder" / "plain.txt").exists(), "nothing is deleted before the refusal"
    assert secret.read_text(encoding="utf-8") == "top secret"


async def test_files_list_marks_a_hard_link_and_a_single_link_file_still_works(
    linked: tuple[Path, Path],
) -> None:
    workspace, secret = linked
    kit = files(workspace)

    listing = await call(kit, "files__list", {})
    assert "link.txt (10 bytes; 2 hard links, so refused" in listing.content

    secret.unlink()  # the workspace's name is now the file's only one
    assert (await call(kit, "files__read", {"path": "link.txt"})).content == "top secret"
    written = await call(kit, "files__write", {"path": "link.txt", "content": "mine"})
    assert written.status == "ok", written.content
    assert (await call(kit, "files__delete", {"path": "link.txt"})).status == "ok"


# --- sqlite: bounded memory ---------------------------------------------------------------------

HUNDRED_AND_ONE_BIG_BLOBS = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 101) "
    "SELECT zeroblob(9999999) FROM n"
)
"""101 rows of 10 MB: built whole, this result took the bot to 1 GB (VmHWM 1,007,380 kB)."""

SQLITE_BOT = """
import asyncio, json, resource, sys
from nonebot_plugin_marsho.tools import (BUILTIN_TOOLSET, ToolCall, ToolContext, ToolRunner,
                                         ToolsetSource, load_toolset)

def peak_kb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

async def main():
    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")], enabled=["sqlite"],
                           settings={"sqlite": {"database": sys.argv[1]}})
    runner = ToolRunner(toolset, timeout=60)
    before = peak_kb()
    result = await runner.run_one(ToolCall("1", "sqlite__query", json.dumps({"sql": sys.argv[2]})),
                                  ToolContext(user_id="1", role="superuser"))
    runner.close()
    print(json.dumps({"status": result.status, "content": result.content, "before_kb": before,
                      "after_kb": peak_kb(),
                      "children_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))

asyncio.run(main())
"""
"""A bot of its own: loads the sqlite toolkit, runs one query, reports its peak memory (VmHWM)
before and after, and the largest peak of its children (the query's worker)."""


def sqlite_kit(database: Path, **settings: Any) -> Any:
    return load({"sqlite": {"database": str(database), **settings}}, enabled=("sqlite",))


@pytest.fixture
def empty_database(tmp_path: Path) -> Path:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    return path


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_sqlite_a_huge_result_is_cut_at_the_byte_bound_in_bounded_memory(
    empty_database: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SQLITE_BOT, str(empty_database), HUNDRED_AND_ONE_BIG_BLOBS],
        cwd=REPO, capture_output=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    report = json.loads(done.stdout.decode().splitlines()[-1])

    assert report["status"] == "ok", report["content"]
    assert report["content"].startswith("The first 1 row (reading stopped at the "
                                        "max_result_bytes bound")
    assert "(the bound is 1000000)" in report["content"]
    assert report["content"].endswith("\n<blob, 9999999 bytes>")
    grown_mb = (report["after_kb"] - report["before_kb"]) / 1024
    assert grown_mb < 50, f"the bot's peak memory grew by {grown_mb:.0f} MB"
    # the worker's peak (it counts the bot's pages it was forked with, so about the bot's size)
    assert report["children_kb"] / 1024 < 300, report


async def test_sqlite_stops_reading_at_max_result_bytes(empty_database: Path) -> None:
    sql = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 50) "
           "SELECT i, printf('%.100c', 'x') AS filler FROM n")

    result = await call(sqlite_kit(empty_database, max_result_bytes=1000), "sqlite__query",
                        {"sql": sql})

    assert result.status == "ok", result.content
    head, *lines = result.content.splitlines()
    assert head.startswith("The first 10 rows (reading stopped at the max_result_bytes bound: "
                           "the rows read held 1080 bytes of values (the bound is 1000)")
    assert len(lines) == 11  # the column names and 10 rows


async def test_sqlite_a_10_mb_value_shows_as_its_size_not_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE things (name TEXT, data BLOB, note TEXT)")
    connection.execute("INSERT INTO things VALUES (?, ?, ?)",
                       ("big", b"\x01" * 10_000_000, "y" * 10_000_000))
    connection.execute("INSERT INTO things VALUES ('small', x'00', 'short')")
    connection.commit()
    connection.close()

    result = await call(sqlite_kit(path, max_result_bytes=100_000_000), "sqlite__query",
                        {"sql": "SELECT name, data, note FROM things"})

    assert result.status == "ok", result.content
    assert result.content.splitlines() == [
        "2 rows:",
        "name | data | note",
        f"big | <blob, 10000000 bytes> | {'y' * 199}… (10000000 characters)",
        "small | <blob, 1 bytes> | short",
    ]


async def test_sqlite_a_row_too_big_for_its_memory_is_an_error_saying_so(
    empty_database: Path,
) -> None:
    wide = ", ".join(["b"] * 40)  # 40 columns of 10 MB: 400 MB in one row, inside SQLite
    sql = f"WITH x AS (SELECT randomblob(9999999) AS b) SELECT {wide} FROM x"

    result = await call(sqlite_kit(empty_database), "sqlite__query", {"sql": sql})

    assert result.status == "error"
    assert "needed more than the 256 MB it may use" in result.content
    assert "length(x)" in result.content


# --- python: the floor, and nothing outlives the bot --------------------------------------------

FLOOR_MISSING = "this machine lacks part of the sandbox the python tool requires"


def python_kit(**settings: Any) -> Any:
    return load({"python": settings}, enabled=("python",))


async def test_python_runs_without_a_note_where_the_floor_is_present() -> None:
    result = await call(python_kit(), "python__run", {"code": "print(6 * 7)"})

    if FLOOR_MISSING in result.content:
        pytest.skip(f"this machine lacks the sandbox's floor: {result.content}")
    assert result.status == "ok", result.content
    assert "42" in result.content
    assert "Sandbox note" not in result.content and "degraded" not in result.content


@pytest.mark.parametrize(("pretend", "lacking"), [
    (["namespaces"], "network isolation (no network namespace"),
    (["landlock"], "the filesystem sandbox (Landlock treated as unavailable"),
])
async def test_python_stays_shut_by_default_when_the_floor_is_missing(
    pretend: list[str], lacking: str,
) -> None:
    token = uuid.uuid4().hex

    result = await call(python_kit(pretend_unavailable=pretend), "python__run",
                        {"code": f"print('ran', {token!r})"})

    assert result.status == "error"
    assert result.content.startswith("Error: Refused: the code was not run: this machine lacks "
                                     "part of the sandbox the python tool requires: " + lacking)
    assert 'MARSHO_TOOLKIT_SETTINGS={"python": {"allow_degraded": true}}' in result.content
    assert token not in result.content and "Output" not in result.content


async def test_python_a_degraded_run_says_what_was_missing() -> None:
    kit = python_kit(allow_degraded=True, pretend_unavailable=["namespaces", "landlock"])

    result = await call(kit, "python__run", {"code": "print('still ran')"})

    assert result.status == "ok", result.content
    assert "still ran" in result.content
    note = next(line for line in result.content.splitlines() if line.startswith("Sandbox note"))
    assert "degraded run (allow_degraded is on), missing network isolation" in note
    assert "could not cut the program off the network" in note
    assert "and the filesystem sandbox (" in note and "could read any file its user may read" in note


async def test_python_require_network_isolation_refuses_even_a_degraded_run() -> None:
    kit = python_kit(allow_degraded=True, require_network_isolation=True,
                     pretend_unavailable=["namespaces"])

    result = await call(kit, "python__run", {"code": "print('should not run')"})

    assert result.status == "error"
    assert result.content.startswith("Error: Refused: the code was not run: this machine cannot "
                                     "cut a process off the network")
    assert "require_network_isolation" in result.content
    assert "should not run" not in result.content


@pytest.mark.parametrize("setting", [
    {"pretend_unavailable": ["seccomp"]},
    {"pretend_unavailable": "landlock"},
    {"allow_degraded": "yes"},
])
async def test_python_bad_floor_settings_are_named(setting: dict[str, Any]) -> None:
    result = await call(python_kit(**setting), "python__run", {"code": "print(1)"})

    assert result.status == "error"
    assert next(iter(setting)) in result.content and "MARSHO_TOOLKIT_SETTINGS" in result.content


PYTHON_BOT = """
import asyncio, json, sys
from nonebot_plugin_marsho.tools import (BUILTIN_TOOLSET, ToolCall, ToolContext, ToolRunner,
                                         ToolsetSource, load_toolset)

async def main():
    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")], enabled=["python"],
                           settings={"python": json.loads(sys.argv[1])})
    runner = ToolRunner(toolset, timeout=120)
    await runner.run_one(ToolCall("1", "python__run", json.dumps({"code": sys.argv[2]})),
                         ToolContext(user_id="1", role="superuser"))

asyncio.run(main())
"""
"""A bot of its own: loads the python toolkit and runs one snippet, until it is killed."""


def long_snippet(marker: str) -> str:
    """Starts a child that sleeps (named by `marker`), then sleeps itself."""
    return (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)', '{marker}'])\n"
        "time.sleep(120)\n"
    )


def running_in_group(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """The process lives (and is not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_until(condition: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"after {within} s: {what}")
        time.sleep(0.05)
    return value


@pytest.fixture
def bot_killer(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """What a test started: the bot, the sandbox's process group (its own session, never the
    tests'), other processes and the working directory; all of it is ended and removed
    afterwards, whatever the test found."""
    started: dict[str, Any] = {}
    yield started
    if "bot" in started and started["bot"].poll() is None:
        started["bot"].kill()
        started["bot"].wait()
    if "pgid" in started and running_in_group(started["pgid"]):
        assert started["pgid"] != os.getpgid(0)
        os.killpg(started["pgid"], signal.SIGKILL)
    for pid in started.get("pids", []):
        if running(pid):
            os.kill(pid, signal.SIGKILL)
    for path in started.get("paths", []):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals are Linux's")
@pytest.mark.parametrize("settings", [
    pytest.param({}, id="full-sandbox"),
    pytest.param({"pretend_unavailable": ["namespaces"]}, id="no-pid-namespace"),
])
def test_python_sandbox_dies_with_a_killed_bot_and_the_next_load_removes_its_folder(
    settings: dict[str, Any], bot_killer: dict[str, Any], tmp_path: Path,
) -> None:
    marker = f"marsho-test-{uuid.uuid4().hex}"
    settings = {"allow_degraded": True, "timeout": 120, "cpu_seconds": 120, **settings}
    with open(tmp_path / "bot.log", "wb") as log:
        bot = subprocess.Popen(
            [sys.executable, "-c", PYTHON_BOT, json.dumps(settings), long_snippet(marker)],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        )
    bot_killer["bot"] = bot

    bot_line = [sys.executable.encode(), b"-c", PYTHON_BOT.encode()]

    def forked_bot(pid: int) -> bool:  # a fork of the bot that has not exec'd the launcher yet
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:3] == bot_line
        except OSError:
            return False

    def sleeper() -> int | None:  # the snippet's child (the bot's command line names it too)
        # not the bot, nor such a fork (the bot's folder and process group: taking it for the
        # child was a rare race)
        found = [pid for pid in processes_mentioning(marker) if pid != bot.pid and not forked_bot(pid)]
        return found[0] if found else None

    child = wait_until(sleeper, 30, "the snippet's child never started: "
                       + (tmp_path / "bot.log").read_text(errors="replace")[-2000:])
    pgid = os.getpgid(child)
    bot_killer["pgid"] = pgid
    workdir = Path(os.readlink(f"/proc/{child}/cwd"))
    bot_killer["paths"] = [workdir, Path(str(workdir) + ".lock")]
    assert workdir.name.startswith("marsho-python-")
    group = running_in_group(pgid)
    assert len(group) >= 3, group  # the launcher, the snippet, its child
    assert bot.pid not in group

    bot.kill()
    bot.wait()

    wait_until(lambda: not running_in_group(pgid) and not sleeper(), 10,
               f"the sandbox outlived the bot: {running_in_group(pgid)} still run")
    assert workdir.is_dir(), "the killed bot could not delete its working directory"

    python_kit()  # the next load

    assert not workdir.exists()
    assert not Path(str(workdir) + ".lock").exists()


def test_python_load_removes_only_folders_no_run_holds() -> None:
    sandbox = sys.modules[python_kit().tools["python__run"].func.__module__ + ".sandbox"]
    folder = Path(tempfile.gettempdir())
    name = f"{sandbox.WORKDIR_PREFIX}test-{uuid.uuid4().hex}"
    stale, legacy, busy = (folder / f"{name}-stale", folder / f"{name}-legacy",
                           folder / f"{name}-busy")
    locks = [Path(f"{path}{sandbox.LOCK_SUFFIX}") for path in (stale, busy)]
    for path in (stale, legacy, busy):
        (path / "sub").mkdir(parents=True)
        (path / "sub" / "file.txt").write_text("x", encoding="utf-8")
    for lock in locks:
        lock.touch()
    held = os.open(locks[1], os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a run in progress, in any process, holds it

        python_kit()

        assert not stale.exists() and not locks[0].exists()
        assert not legacy.exists()  # left by a version without lock files
        assert busy.is_dir() and locks[1].exists()
    finally:
        os.close(held)
        for path in (stale, legacy, busy, *locks):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()


SQLITE_FOREVER_BOT = """
import asyncio, json, sys
from nonebot_plugin_marsho.tools import (BUILTIN_TOOLSET, ToolCall, ToolContext, ToolRunner,
                                         ToolsetSource, load_toolset)

async def main():
    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")], enabled=["sqlite"],
                           settings={"sqlite": {"database": sys.argv[1], "timeout": 120}})
    runner = ToolRunner(toolset, timeout=120)
    sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    await runner.run_one(ToolCall("1", "sqlite__query", json.dumps({"sql": sql})),
                         ToolContext(user_id="1", role="superuser"))

asyncio.run(main())
"""


def children_of(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
                    reason="needs /proc/<pid>/task/<tid>/children (Linux)")
def test_sqlite_query_process_dies_with_a_killed_bot(
    empty_database: Path, bot_killer: dict[str, Any], tmp_path: Path,
) -> None:
    with open(tmp_path / "bot.log", "wb") as log:
        bot = subprocess.Popen([sys.executable, "-c", SQLITE_FOREVER_BOT, str(empty_database)],
                               cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    bot_killer["bot"] = bot

    def worker() -> int | None:
        for child in children_of(bot.pid):
            if "worker.py" in Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace"):
                return child
        return None

    query = wait_until(worker, 30, "the query's process never started: "
                       + (tmp_path / "bot.log").read_text(errors="replace")[-2000:])
    bot_killer["pids"] = [query]
    time.sleep(0.3)
    assert running(query), "the query ended by itself: the test proves nothing"

    bot.kill()
    bot.wait()

    wait_until(lambda: not running(query), 10, "the query's process outlived the bot")
