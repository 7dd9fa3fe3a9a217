"""The dangerous built-in toolkits (issue 5, item 3): `python` (a sandboxed snippet), `sqlite`
(read-only SQL on one configured file) and `files` (one workspace folder). Each is off until
enabled, superuser-only, and kept inside its bounds: time, memory, network and folder for the
sandbox; no writes for SQL; no `..`, outside absolute paths or symbolic links for files.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.tools import (
    BUILTIN_TOOLSET,
    ToolCall,
    ToolContext,
    ToolResult,
    ToolRunner,
    Toolset,
    ToolsetSource,
    load_toolset,
)
from tests.conftest import DATA_DIR

DANGEROUS = ("python", "sqlite", "files")
DANGEROUS_TOOLS = {
    "python__run", "sqlite__query",
    "files__read", "files__write", "files__list", "files__move", "files__delete",
}
SUPERUSER = ToolContext(user_id="1", role="superuser")
MEMBER = ToolContext(user_id="2", group_id="100", role="member")

FULL_ISOLATION_MISSING = "it could read any file its user may read"
NETWORK_MISSING = "could not cut the program off the network"


def load(settings: dict[str, Any] | None = None, enabled: tuple[str, ...] = DANGEROUS) -> Toolset:
    toolset = load_toolset(
        [ToolsetSource(BUILTIN_TOOLSET, "built-in")], enabled=list(enabled), settings=settings or {}
    )
    assert [str(p) for p in toolset.problems if p.toolkit in DANGEROUS] == []
    return toolset


async def call(
    toolset: Toolset, name: str, arguments: dict[str, Any] | None = None,
    context: ToolContext = SUPERUSER, timeout: float = 20,
) -> ToolResult:
    runner = ToolRunner(toolset, timeout=timeout)
    try:
        return await runner.run_one(ToolCall("call_1", name, json.dumps(arguments or {})), context)
    finally:
        runner.close()


def python(**settings: Any) -> Toolset:
    """The python toolkit with degraded runs allowed, so that these tests of its limits run on
    any machine (where namespaces and Landlock are present, as they should be, that changes
    nothing); the floor itself is tested in test_hostile_toolkits.py."""
    return load({"python": {"allow_degraded": True, **settings}}, enabled=("python",))


def processes_mentioning(marker: str) -> list[int]:
    """Live processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def sleeper_code(marker: str) -> str:
    """A snippet that starts a long-running child (named by `marker`), then spins forever."""
    return (
        "import os, subprocess, sys\n"
        "print('cwd', os.getcwd(), flush=True)\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\n"
        "while True:\n    pass\n"
    )


async def gone(marker: str, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while processes_mentioning(marker):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


# --- all three: off by default, superuser-only --------------------------------------------------


def test_dangerous_toolkits_are_off_by_default() -> None:
    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")])

    assert not DANGEROUS_TOOLS & set(toolset.tools)
    for name in DANGEROUS:
        assert name in toolset.available
        assert toolset.available[name].startswith("nothing")


def test_enabled_they_are_superuser_only_and_hide_their_presets() -> None:
    toolset = load()

    mine = {name: tool for name, tool in toolset.tools.items() if tool.toolkit in DANGEROUS}
    assert set(mine) == DANGEROUS_TOOLS
    assert {tool.permission for tool in mine.values()} == {"superuser"}
    for role in ("member", "admin", "owner"):
        offered = {s["function"]["name"] for s in toolset.schemas(ToolContext(role=role))}
        assert not offered & DANGEROUS_TOOLS
    offered = {s["function"]["name"] for s in toolset.schemas(SUPERUSER)}
    assert DANGEROUS_TOOLS <= offered
    # presets (limits, the database, the workspace) never reach the model
    assert set(mine["python__run"].parameters["properties"]) == {"code"}
    assert set(mine["sqlite__query"].parameters["properties"]) == {"sql"}
    assert set(mine["files__read"].parameters["properties"]) == {"path", "offset"}
    assert set(mine["files__move"].parameters["properties"]) == {"source", "destination", "overwrite"}


async def test_a_members_call_is_denied_and_does_nothing(tmp_path: Path) -> None:
    database = tmp_path / "data.db"
    sqlite3.connect(database).close()
    workspace = tmp_path / "workspace"
    toolset = load({"sqlite": {"database": str(database)}, "files": {"workspace": str(workspace)}})
    marker = tmp_path / "ran"
    calls = {
        "python__run": {"code": f"open({str(marker)!r}, 'w')"},
        "sqlite__query": {"sql": "SELECT 1"},
        "files__read": {"path": "a.txt"},
        "files__write": {"path": "a.txt", "content": "member was here"},
        "files__list": {},
        "files__move": {"source": "a.txt", "destination": "b.txt"},
        "files__delete": {"path": "a.txt"},
    }
    assert set(calls) == DANGEROUS_TOOLS

    for name, arguments in calls.items():
        result = await call(toolset, name, arguments, MEMBER)
        assert result.status == "denied", (name, result.content)
        assert "superusers" in result.content

    assert not marker.exists()
    assert not (workspace / "a.txt").exists()


# --- python: the sandbox ------------------------------------------------------------------------


async def test_python_runs_a_snippet_and_returns_its_output() -> None:
    result = await call(python(), "python__run", {"code": "import math\nprint(math.factorial(20))"})

    assert result.status == "ok", result.content
    assert "exit status 0" in result.content
    assert "2432902008176640000" in result.content


async def test_python_failure_is_an_error_with_the_traceback() -> None:
    result = await call(python(), "python__run", {"code": "print('before')\nraise ValueError('boom')"})

    assert result.status == "error"
    assert "exit status 1" in result.content
    assert "before" in result.content and "ValueError: boom" in result.content


async def test_python_infinite_loop_is_stopped_and_everything_it_started_killed() -> None:
    marker = f"marsho-test-{uuid.uuid4().hex}"
    started = time.monotonic()

    result = await call(python(timeout=1.5, cpu_seconds=30), "python__run",
                        {"code": sleeper_code(marker)})

    assert time.monotonic() - started < 20  # the 1.5 s limit; the snippet would sleep for ever
    assert result.status == "error"
    assert "time limit" in result.content and "killed" in result.content
    assert await gone(marker), "the snippet's child survived the timeout"
    workdir = next(line.split(" ", 1)[1] for line in result.content.splitlines()
                   if line.startswith("cwd "))
    assert not Path(workdir).exists(), "the working directory was not deleted"


async def test_python_is_killed_when_the_runner_gives_up_first() -> None:
    marker = f"marsho-test-{uuid.uuid4().hex}"
    before = set(Path(tempfile.gettempdir()).glob("marsho-python-*"))

    result = await call(python(timeout=30, cpu_seconds=30), "python__run",
                        {"code": sleeper_code(marker)}, timeout=1.0)

    assert result.status == "timeout"
    assert await gone(marker), "cancelling the tool did not kill the snippet"
    for _ in range(50):  # the working directory goes too, just after
        if set(Path(tempfile.gettempdir()).glob("marsho-python-*")) <= before:
            break
        await asyncio.sleep(0.05)
    assert set(Path(tempfile.gettempdir()).glob("marsho-python-*")) <= before


async def test_python_cpu_limit() -> None:
    result = await call(python(timeout=10, cpu_seconds=1), "python__run",
                        {"code": "while True:\n    pass"})

    assert result.status == "error"
    assert "CPU" in result.content


async def test_python_memory_bomb_fails_cleanly() -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(10_000_000))"
    started = time.monotonic()

    result = await call(python(memory_mb=128), "python__run", {"code": code})

    assert time.monotonic() - started < 20
    assert result.status == "error"
    assert "Out of memory" in result.content and "128 MB" in result.content


async def test_python_output_is_capped() -> None:
    result = await call(python(max_output_bytes=2000), "python__run",
                        {"code": "while True:\n    print('x' * 100)"})

    assert result.status == "error"
    assert "output limit" in result.content
    assert len(result.content) < 3000


async def test_python_does_not_block_the_event_loop() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        result = await call(python(), "python__run", {"code": "import time\ntime.sleep(1)"})
    finally:
        ticker.cancel()
    assert result.status == "ok", result.content
    assert ticks >= 20


async def test_python_runs_in_a_throwaway_folder_with_nothing_of_the_bot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Guaranteed everywhere: a fresh temporary cwd (HOME and TMPDIR too), deleted afterwards;
    none of the bot's environment (its API keys live there); stdin at end of file."""
    monkeypatch.setenv("MARSHO_SECRET_PROBE", "sk-should-not-leak")
    code = (
        "import os, sys\n"
        "print('cwd', os.getcwd())\n"
        "print('entries', sorted(os.listdir('.')))\n"
        "print('home', os.environ.get('HOME') == os.getcwd())\n"
        "print('secret', 'MARSHO_SECRET_PROBE' in os.environ)\n"
        "print('stdin', repr(sys.stdin.read()))\n"
        "open('scratch.txt', 'w').write('temporary')\n"
    )

    result = await call(python(), "python__run", {"code": code})

    assert result.status == "ok", result.content
    lines = dict(line.split(" ", 1) for line in result.content.splitlines() if " " in line)
    workdir = Path(lines["cwd"])
    assert workdir != Path.cwd() and workdir.name.startswith("marsho-python-")
    assert lines["entries"] == "['snippet.py']"
    assert lines["home"] == "True"
    assert lines["secret"] == "False"
    assert lines["stdin"] == "''"
    assert not workdir.exists()
    assert "sk-should-not-leak" not in result.content


async def test_python_cannot_read_or_write_outside_its_folder(tmp_path: Path) -> None:
    """With Landlock (Linux 5.13+), reads are limited to the Python installation and system
    libraries, writes to the working directory. Without it, a snippet reads what its user may."""
    escape = tmp_path / "escape.txt"
    tmp_path.chmod(0o777)  # so only the sandbox, not file permissions, can stop the write
    code = (
        "for path in ['/etc/hostname', " + repr(__file__) + "]:\n"
        "    try:\n"
        "        open(path).read()\n"
        "        print('read', path)\n"
        "    except OSError as error:\n"
        "        print('refused', path, type(error).__name__)\n"
        "try:\n"
        f"    open({str(escape)!r}, 'w').write('out')\n"
        "    print('wrote outside')\n"
        "except OSError as error:\n"
        "    print('refused write', type(error).__name__)\n"
    )

    result = await call(python(), "python__run", {"code": code})

    if FULL_ISOLATION_MISSING in result.content:
        pytest.skip("Landlock is not available here: the snippet can read any file its user may "
                    "read (only its cwd is guaranteed to be a throw-away folder)")
    assert result.status == "ok", result.content
    assert "refused /etc/hostname PermissionError" in result.content
    assert f"refused {__file__} PermissionError" in result.content  # the bot's own files
    assert "refused write PermissionError" in result.content
    assert not escape.exists()


async def test_python_has_no_network() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "for host in ['127.0.0.1', '1.1.1.1']:\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=2)\n"
        "        print('connected', host)\n"
        "    except OSError as error:\n"
        "        print('blocked', host, error)\n"
    )
    try:
        result = await call(python(), "python__run", {"code": code})
        if NETWORK_MISSING in result.content:
            pytest.skip("neither a network namespace nor Landlock TCP rules are available here")
        assert result.status == "ok", result.content
        assert "blocked 127.0.0.1" in result.content and "blocked 1.1.1.1" in result.content
        assert "connected" not in result.content
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def sandbox_module(toolset: Toolset) -> Any:
    module = sys.modules[toolset.tools["python__run"].func.__module__]
    return sys.modules[module.__name__ + ".sandbox"], module


async def test_python_where_the_os_cannot_isolate_it_says_so_or_refuses() -> None:
    """Where namespaces and Landlock are refused (containers without them, old kernels, macOS)
    and degraded runs are allowed, the snippet still runs in its own folder with its limits, and
    the result says what is missing; with require_network_isolation it is refused instead."""
    sandbox, toolkit = sandbox_module(python())
    unavailable = ("namespaces", "landlock")

    options = sandbox.SandboxOptions(unavailable=unavailable, allow_degraded=True)
    result = await sandbox.run_sandboxed("print('still ran')", options)
    response = toolkit._report(result, options)
    assert response.status == "success"
    assert "still ran" in response.content
    assert NETWORK_MISSING in response.content and FULL_ISOLATION_MISSING in response.content

    options = sandbox.SandboxOptions(unavailable=unavailable, allow_degraded=True,
                                     require_network_isolation=True)
    result = await sandbox.run_sandboxed("print('should not run')", options)
    assert "refused to run" in result.error
    assert "should not run" not in result.output

    # without a PID namespace, what it leaves behind in its process group is killed at its end
    marker = f"marsho-test-{uuid.uuid4().hex}"
    code = ("import subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\n"
            "print('main done')")
    options = sandbox.SandboxOptions(unavailable=("namespaces",), timeout=60, allow_degraded=True)
    started = time.monotonic()
    result = await sandbox.run_sandboxed(code, options)
    assert time.monotonic() - started < 30  # neither the child's 60 s nor the time limit
    assert (result.exit_code, result.timed_out, result.stragglers) == (0, False, True)
    assert "main done" in result.output
    assert await gone(marker)


UNPRIVILEGED_PROBE = """
import asyncio, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("marsho_sandbox_probe", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
result = asyncio.run(module.run_sandboxed(sys.argv[2], module.SandboxOptions(timeout=5,
                                                                           allow_degraded=True)))
print(json.dumps({"exit": result.exit_code, "output": result.output, "error": result.error,
                  "isolation": result.isolation}))
"""


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv, to run the bot's side as an unprivileged user")
async def test_python_sandbox_works_for_a_bot_that_is_not_root() -> None:
    """The unprivileged path: namespaces inside a new user namespace, no user switch."""
    sandbox_file = str(BUILTIN_TOOLSET / "python" / "sandbox.py")
    code = (
        "import os, socket\n"
        "print('uid', os.getuid())\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    print('network')\n"
        "except OSError:\n"
        "    print('no network')\n"
    )
    errors = []
    for interpreter in dict.fromkeys([sys.executable, "/usr/local/bin/python3", "/usr/bin/python3"]):
        process = await asyncio.create_subprocess_exec(
            "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            interpreter, "-c", UNPRIVILEGED_PROBE, sandbox_file, code,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd="/",
        )
        out, err = await process.communicate()
        if process.returncode == 0:
            break
        errors.append(f"{interpreter}: {err.decode(errors='replace')[-300:]}")
    else:
        pytest.skip(f"no Python that uid 65534 can run: {errors}")

    report = json.loads(out)
    assert (report["error"], report["exit"]) == ("", 0), report
    assert "uid 65534" in report["output"]
    if report["isolation"]["network_isolated"]:
        assert "no network" in report["output"]


async def test_python_bad_setting_is_named() -> None:
    result = await call(python(timeout="soon"), "python__run", {"code": "print(1)"})

    assert result.status == "error"
    assert "timeout" in result.content and "MARSHO_TOOLKIT_SETTINGS" in result.content


# --- sqlite: read-only SQL ----------------------------------------------------------------------


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "stats.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, note TEXT)")
    connection.execute("CREATE INDEX users_by_name ON users (name)")
    connection.executemany("INSERT INTO users (name, note) VALUES (?, ?)",
                           [(f"user{i}", None if i % 2 else "line one\nline two") for i in range(300)])
    connection.commit()
    connection.close()
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sqlite_kit(database: Path | str, **settings: Any) -> Toolset:
    return load({"sqlite": {"database": str(database), **settings}}, enabled=("sqlite",))


async def test_sqlite_reads_as_a_compact_table(database: Path) -> None:
    result = await call(sqlite_kit(database), "sqlite__query",
                        {"sql": "SELECT id, name, note FROM users WHERE id <= 2 ORDER BY id"})

    assert result.status == "ok", result.content
    assert result.content.splitlines() == [
        "2 rows:",
        "id | name | note",
        "1 | user0 | line one\\nline two",
        "2 | user1 | NULL",
    ]


async def test_sqlite_caps_rows_and_allows_reading_pragmas(database: Path) -> None:
    toolset = sqlite_kit(database, max_rows=50)

    many = await call(toolset, "sqlite__query", {"sql": "SELECT * FROM users"})
    info = await call(toolset, "sqlite__query", {"sql": "PRAGMA table_info(users)"})

    assert many.status == "ok" and many.content.startswith("The first 50 rows")
    assert len(many.content.splitlines()) == 52
    assert info.status == "ok" and "name" in info.content


@pytest.mark.parametrize("sql", [
    "INSERT INTO users (name) VALUES ('mallory')",
    "UPDATE users SET name = 'mallory'",
    "DELETE FROM users",
    "DROP TABLE users",
    "CREATE TABLE more (x)",
    "CREATE TEMP TABLE more (x)",
    "ALTER TABLE users ADD COLUMN x",
    "PRAGMA query_only = OFF",
    "PRAGMA journal_mode = WAL",
    "PRAGMA user_version = 7",
    "BEGIN",
    "REINDEX",
    "VACUUM",
    "ATTACH DATABASE '{other}' AS other",
    "VACUUM INTO '{other}'",
    "SELECT load_extension('evil')",
])
async def test_sqlite_refuses_anything_but_reading(database: Path, sql: str) -> None:
    other = database.parent / "other.db"
    before = digest(database)

    result = await call(sqlite_kit(database), "sqlite__query", {"sql": sql.format(other=other)})

    assert result.status == "error"
    assert "refused" in result.content, result.content
    assert digest(database) == before
    assert not other.exists()


async def test_sqlite_without_a_configured_database_says_how_to_set_one() -> None:
    toolset = load(enabled=("sqlite",))

    result = await call(toolset, "sqlite__query", {"sql": "SELECT 1"})

    assert result.status == "error"
    assert 'MARSHO_TOOLKIT_SETTINGS={"sqlite": {"database": ' in result.content


async def test_sqlite_missing_file_one_statement_and_time_limit(tmp_path: Path, database: Path) -> None:
    missing = await call(sqlite_kit(tmp_path / "nope.db"), "sqlite__query", {"sql": "SELECT 1"})
    assert missing.status == "error" and "does not exist" in missing.content
    assert not (tmp_path / "nope.db").exists()

    two = await call(sqlite_kit(database), "sqlite__query", {"sql": "SELECT 1; SELECT 2"})
    assert two.status == "error" and "one SQL statement" in two.content

    forever = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
               "SELECT count(*) FROM n")
    started = time.monotonic()
    slow = await call(sqlite_kit(database, timeout=0.3), "sqlite__query", {"sql": forever})
    assert slow.status == "error" and "time limit" in slow.content
    assert time.monotonic() - started < 20  # the 0.3 s limit: the query never ends


# --- files: one workspace folder ----------------------------------------------------------------


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """(workspace, a folder outside it holding secret.txt)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret", encoding="utf-8")
    return workspace, outside


def files_kit(workspace: Path, **settings: Any) -> Toolset:
    return load({"files": {"workspace": str(workspace), **settings}}, enabled=("files",))


async def test_files_write_read_list_move_delete(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    kit = files_kit(workspace)

    async def ok(name: str, **arguments: Any) -> str:
        result = await call(kit, f"files__{name}", arguments)
        assert result.status == "ok", (name, arguments, result.content)
        return result.content

    async def refused(name: str, **arguments: Any) -> str:
        result = await call(kit, f"files__{name}", arguments)
        assert result.status == "error", (name, arguments, result.content)
        return result.content

    assert "Wrote 5 bytes to notes/todo.txt" in await ok("write", path="notes/todo.txt", content="hello")
    await ok("write", path="notes/todo.txt", content=" world", append=True)
    assert await ok("read", path="notes/todo.txt") == "hello world"
    assert (workspace / "notes" / "todo.txt").read_text() == "hello world"
    assert await ok("list") == ". holds 1 entries:\nnotes/"
    assert await ok("list", path="notes") == "notes holds 1 entries:\ntodo.txt (11 bytes)"

    await ok("write", path="other.txt", content="x")
    assert "already exists" in await refused("move", source="other.txt", destination="notes/todo.txt")
    await ok("move", source="notes/todo.txt", destination="done.txt")
    await ok("move", source="done.txt", destination="notes")  # into an existing folder
    assert (workspace / "notes" / "done.txt").read_text() == "hello world"
    await ok("move", source="other.txt", destination="notes/done.txt", overwrite=True)
    assert (workspace / "notes" / "done.txt").read_text() == "x"

    assert "not empty" in await refused("delete", path="notes")
    await ok("delete", path="notes/done.txt")
    await ok("write", path="notes/deep/er/file.txt", content="x")
    assert "Deleted the folder notes" in await ok("delete", path="notes", recursive=True)
    assert list(workspace.iterdir()) == []
    assert "does not exist" in await refused("read", path="nothing.txt")


async def test_files_refuse_dot_dot(places: tuple[Path, Path]) -> None:
    workspace, outside = places
    kit = files_kit(workspace)
    (workspace / "sub").mkdir()
    attempts = [
        ("read", {"path": "../outside/secret.txt"}),
        ("read", {"path": "sub/../../outside/secret.txt"}),
        ("read", {"path": "..\\outside\\secret.txt"}),
        ("write", {"path": "../outside/secret.txt", "content": "pwned"}),
        ("write", {"path": "../escape.txt", "content": "pwned"}),
        ("list", {"path": ".."}),
        ("move", {"source": "../outside/secret.txt", "destination": "stolen.txt"}),
        ("move", {"source": "sub", "destination": "../sub"}),
        ("delete", {"path": "../outside/secret.txt"}),
        ("delete", {"path": "..", "recursive": True}),
    ]
    for name, arguments in attempts:
        result = await call(kit, f"files__{name}", arguments)
        assert result.status == "error", (name, arguments, result.content)
        assert "'..'" in result.content
    assert (outside / "secret.txt").read_text() == "top secret"
    assert not (workspace.parent / "escape.txt").exists()
    assert (workspace / "sub").is_dir() and not (workspace / "stolen.txt").exists()


async def test_files_refuse_absolute_paths_outside(places: tuple[Path, Path]) -> None:
    workspace, outside = places
    kit = files_kit(workspace)
    secret = str(outside / "secret.txt")
    for name, arguments in [
        ("read", {"path": secret}),
        ("read", {"path": "/etc/hostname"}),
        ("write", {"path": secret, "content": "pwned"}),
        ("write", {"path": str(workspace.parent / "escape.txt"), "content": "pwned"}),
        ("list", {"path": "/"}),
        ("move", {"source": secret, "destination": "stolen.txt"}),
        ("move", {"source": "a.txt", "destination": str(outside / "a.txt")}),
        ("delete", {"path": secret}),
    ]:
        result = await call(kit, f"files__{name}", arguments)
        assert result.status == "error", (name, arguments, result.content)
        assert "outside the workspace" in result.content
    assert (outside / "secret.txt").read_text() == "top secret"
    assert not (workspace.parent / "escape.txt").exists()

    (workspace / "a.txt").write_text("inside", encoding="utf-8")  # absolute but inside: fine
    result = await call(kit, "files__read", {"path": str(workspace / "a.txt")})
    assert (result.status, result.content) == ("ok", "inside")


async def test_files_do_not_follow_a_symlinked_file(places: tuple[Path, Path]) -> None:
    workspace, outside = places
    kit = files_kit(workspace)
    (workspace / "link.txt").symlink_to(outside / "secret.txt")

    read = await call(kit, "files__read", {"path": "link.txt"})
    write = await call(kit, "files__write", {"path": "link.txt", "content": "pwned"})
    append = await call(kit, "files__write", {"path": "link.txt", "content": "!", "append": True})
    listing = await call(kit, "files__list", {})

    for result in (read, write, append):
        assert result.status == "error" and "symbolic link" in result.content, result.content
    assert "top secret" not in read.content
    assert "link.txt -> " in listing.content and "not followed" in listing.content
    assert (outside / "secret.txt").read_text() == "top secret"

    deleted = await call(kit, "files__delete", {"path": "link.txt"})
    assert deleted.status == "ok" and "link" in deleted.content
    assert not (workspace / "link.txt").is_symlink()
    assert (outside / "secret.txt").read_text() == "top secret"


async def test_files_do_not_follow_a_symlinked_folder(places: tuple[Path, Path]) -> None:
    workspace, outside = places
    kit = files_kit(workspace)
    (workspace / "door").symlink_to(outside, target_is_directory=True)
    (workspace / "real").mkdir()
    (workspace / "real" / "hall").symlink_to(outside, target_is_directory=True)

    for name, arguments in [
        ("read", {"path": "door/secret.txt"}),
        ("read", {"path": "real/hall/secret.txt"}),
        ("write", {"path": "door/new.txt", "content": "pwned"}),
        ("write", {"path": "door/secret.txt", "content": "pwned"}),
        ("list", {"path": "door"}),
        ("move", {"source": "door/secret.txt", "destination": "stolen.txt"}),
        ("move", {"source": "real", "destination": "door/real"}),
        ("delete", {"path": "door/secret.txt"}),
    ]:
        result = await call(kit, f"files__{name}", arguments)
        assert result.status == "error", (name, arguments, result.content)
        assert "symbolic link" in result.content, result.content
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "top secret"

    # deleting the link (even recursively) removes the link, never what it points to
    result = await call(kit, "files__delete", {"path": "door", "recursive": True})
    assert result.status == "ok", result.content
    result = await call(kit, "files__delete", {"path": "real", "recursive": True})
    assert result.status == "ok", result.content
    assert list(workspace.iterdir()) == []
    assert (outside / "secret.txt").read_text() == "top secret"


async def test_files_workspace_root_cannot_be_deleted_or_moved(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    kit = files_kit(workspace)
    (workspace / "keep.txt").write_text("x", encoding="utf-8")

    for name, arguments in [
        ("delete", {"path": ".", "recursive": True}),
        ("delete", {"path": "", "recursive": True}),
        ("delete", {"path": str(workspace), "recursive": True}),
        ("move", {"source": ".", "destination": "elsewhere"}),
    ]:
        result = await call(kit, f"files__{name}", arguments)
        assert result.status == "error", (name, arguments, result.content)
        assert "workspace folder itself" in result.content
    assert (workspace / "keep.txt").exists()


async def test_files_size_caps_and_special_files(places: tuple[Path, Path]) -> None:
    workspace, _ = places
    kit = files_kit(workspace, max_read_bytes=10, max_write_bytes=100)
    (workspace / "big.txt").write_text("0123456789abcdefghij", encoding="utf-8")
    os.mkfifo(workspace / "pipe")

    too_big = await call(kit, "files__write", {"path": "x.txt", "content": "y" * 101})
    first = await call(kit, "files__read", {"path": "big.txt"})
    second = await call(kit, "files__read", {"path": "big.txt", "offset": 10})
    fifo = await call(kit, "files__read", {"path": "pipe"}, timeout=5)

    assert too_big.status == "error" and "at most 100" in too_big.content
    assert not (workspace / "x.txt").exists()
    assert first.content.startswith("0123456789\n") and "offset=10" in first.content
    assert second.content.startswith("abcdefghij\n")
    assert fifo.status == "error" and "not a regular file" in fifo.content


async def test_files_default_workspace_is_in_the_plugin_data_folder() -> None:
    kit = load(enabled=("files",))
    name = f"probe-{uuid.uuid4().hex}.txt"

    result = await call(kit, "files__write", {"path": name, "content": "x"})

    assert result.status == "ok", result.content
    [written] = list(DATA_DIR.rglob(name))
    assert written.parent.name == "workspace"
    assert "nonebot_plugin_marsho" in written.parts
    written.unlink()
