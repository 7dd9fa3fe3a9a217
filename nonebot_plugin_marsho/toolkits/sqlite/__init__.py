"""Built-in toolkit `sqlite`: read-only SQL on one SQLite database file the owner names.

Dangerous (whatever the database holds can end up in the chat), so superuser-only and off
until the owner enables it and names the file::

    MARSHO_ENABLED_TOOLKITS=["sqlite"]
    MARSHO_TOOLKIT_SETTINGS={"sqlite": {"database": "/srv/bot/stats.db"}}

Nothing is sent anywhere. Three locks keep the database unchanged: the file is opened
read-only (`file:...?mode=ro`), `PRAGMA query_only=ON` is set, and an authorizer lets through
only reading (SELECT, WITH, read-only functions, informational PRAGMAs such as table_info):
writes, ATTACH (which could create files), VACUUM INTO, transactions and setting PRAGMAs are
refused.

Bounds, all settings: each query runs in a process of its own (worker.py) limited to
`memory_mb` (256) of address space, so even one enormous row cannot take the bot's memory;
it is stopped after `timeout` seconds (5; the process is killed a moment later in any case).
The result is read row by row and never held whole: at most `max_rows` rows (100) are shown,
reading stops once `max_result_bytes` bytes of values (1,000,000) were read, a blob shows as
its size and a long text as its first `max_cell_chars` characters (200) with its length.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any

from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

WORKER = Path(__file__).with_name("worker.py")

KILL_GRACE_SECONDS = 2.0
"""How long past its own time limit the worker may take before it is killed."""

MAX_WORKER_OUTPUT = 1_000_000
"""Bytes of the worker's stdout (one JSON line, a table of at most 12,000 characters) and of its
stderr that are read; the rest is discarded."""

MB = 1024 * 1024

tools = Toolbox()


class _Refused(Exception):
    """A query this tool will not run, worded for the model."""


def _database(database: str) -> str:
    if not database:
        raise _Refused(
            "no database is configured for the sqlite toolkit: the bot owner must name one SQLite "
            'file in .env, e.g. MARSHO_TOOLKIT_SETTINGS={"sqlite": {"database": '
            '"/path/to/data.db"}}'
        )
    path = Path(database).expanduser()
    if not path.is_file():
        raise _Refused(f"the configured database {str(path)!r} does not exist or is not a file "
                       "(check the sqlite toolkit's database setting)")
    return str(path.resolve())


def _setting(name: str, value: Any, minimum: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < minimum:
        raise _Refused(f"the sqlite toolkit's {name} setting must be a number of at least "
                       f"{minimum:g}, not {value!r} (fix MARSHO_TOOLKIT_SETTINGS)")
    return number


async def _read_capped(stream: asyncio.StreamReader | None, cap: int) -> bytes:
    """Everything up to `cap` bytes; the rest is read and dropped, so the writer never blocks."""
    kept = bytearray()
    while stream is not None and (chunk := await stream.read(65536)):
        kept += chunk[: max(0, cap - len(kept))]
    return bytes(kept)


def _ended(returncode: int | None, stderr: bytes, memory_mb: int) -> str:
    """Why the worker gave no answer, for the model."""
    text = stderr.decode("utf-8", "replace").strip()
    if "MemoryError" in text or returncode == -signal.SIGKILL:
        return (f"the query needed more than the {memory_mb} MB it may use: select fewer or "
                "shorter values, e.g. length(x) or substr(x, 1, 100)")
    last = text.splitlines()[-1] if text else f"exit status {returncode}"
    return f"the query process failed: {last[-500:]}"


async def _run_worker(job: dict[str, Any], seconds: float) -> ToolResponse:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", "-B", str(WORKER),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"LC_ALL": "C.UTF-8"},  # nothing of the bot's environment (its keys live there)
    )
    try:
        assert process.stdin is not None
        process.stdin.write(json.dumps(job).encode())
        process.stdin.close()
        try:
            out, err, _ = await asyncio.wait_for(asyncio.gather(
                _read_capped(process.stdout, MAX_WORKER_OUTPUT),
                _read_capped(process.stderr, MAX_WORKER_OUTPUT),
                process.wait(),
            ), seconds + KILL_GRACE_SECONDS)
        except asyncio.TimeoutError:
            return ToolResponse.error(
                f"the query was stopped after {seconds:g} s (the time limit): make it cheaper "
                "(filter with WHERE, use indexed columns, add LIMIT)"
            )
    finally:
        if process.returncode is None:  # timed out, or the call was cancelled
            process.kill()
            await process.wait()
    try:
        answer = json.loads(out)
        status, content = answer["status"], str(answer["content"])
    except (ValueError, KeyError, TypeError):
        return ToolResponse.error(_ended(process.returncode, err, job["memory_bytes"] // MB))
    return ToolResponse.success(content) if status == "success" else ToolResponse.error(content)


@tools.tool(permission="superuser", database="", max_rows=100, timeout=5.0, max_cell_chars=200,
            max_result_bytes=1_000_000, memory_mb=256)
async def query(
    sql: str,
    database: str = "",
    max_rows: int = 100,
    timeout: float = 5.0,
    max_cell_chars: int = 200,
    max_result_bytes: int = 1_000_000,
    memory_mb: int = 256,
) -> ToolResponse:
    """Run one read-only SQL statement on the bot owner's SQLite database; rows come back as a table.

    Only reading is allowed: SELECT or WITH queries, and PRAGMAs that report, such as
    table_info(name). List the tables with: SELECT name, sql FROM sqlite_schema WHERE
    type = 'table'. At most 100 rows are shown, so aggregate or add LIMIT for big tables.

    Args:
        sql: One SQL statement, e.g. "SELECT name, count(*) FROM users GROUP BY name".
        database: Preset: the SQLite file to query.
        max_rows: Preset: the most rows shown.
        timeout: Preset: seconds before a query is stopped.
        max_cell_chars: Preset: longer values are cut.
        max_result_bytes: Preset: reading stops once the rows read hold this many bytes.
        memory_mb: Preset: the memory (address space) the query's process may use, in MB.
    """
    try:
        seconds = _setting("timeout", timeout, 0.01)
        job = {
            "max_rows": int(_setting("max_rows", max_rows, 1)),
            "timeout": seconds,
            "max_cell_chars": int(_setting("max_cell_chars", max_cell_chars, 4)),
            "max_result_bytes": int(_setting("max_result_bytes", max_result_bytes, 1)),
            "memory_bytes": int(_setting("memory_mb", memory_mb, 32)) * MB,
            "sql": sql.strip(),
            "parent": os.getpid(),
        }
        if not job["sql"]:
            raise _Refused("the SQL is empty: pass one statement, e.g. SELECT ...")
        job["database"] = _database(str(database or ""))
    except _Refused as refused:
        return ToolResponse.error(str(refused))
    try:
        return await _run_worker(job, seconds)
    except OSError as error:
        return ToolResponse.error(f"the query process could not be started: {error}")
