"""The sqlite toolkit's worker: runs ONE read-only query in its own process and prints the answer.

Started by the toolkit as `python -I -S -B worker.py`, with the job as JSON on stdin; it prints
one JSON line, {"status": "success" | "error", "content": "..."}. Standard library only.

Why a process of its own: memory. SQLite computes a whole row before anyone can look at it, so
`WITH x AS (SELECT randomblob(9999999) b) SELECT b, b, b, ...` holds 10 MB per column inside
SQLite (40 columns: 783 MB in the bot, measured) and no check in the bot could stop it. Here an
address-space limit (`memory_bytes`) ends such a query with a clear message, and the bot is not
touched. Within that, the result is read row by row and never kept whole: each row is turned
into its line of the table (a blob shows as its size, a long text as its start and length)
and dropped, and reading stops once `max_result_bytes` bytes of values came from the database.

The worker dies with the bot (prctl PR_SET_PDEATHSIG on Linux), and its query stops at
`timeout` (a progress handler); the toolkit also kills it a little later in any case.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from typing import Any
from urllib.parse import quote

MAX_TABLE_CHARS = 12_000
"""The table is cut (by whole rows) past this many characters, so the result stays readable."""

MAX_VALUE_BYTES = 10_000_000
"""SQLITE_LIMIT_LENGTH: no string or blob bigger than this (zeroblob(1e9) would fill memory)."""

PR_SET_PDEATHSIG = 1
SIGKILL = 9

INFORMATIONAL_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "foreign_key_check", "database_list", "collation_list",
    "function_list", "module_list", "pragma_list", "compile_options", "integrity_check",
    "quick_check",
})
"""Pragmas that only report, whatever their argument (a table or index name)."""

READABLE_PRAGMAS = frozenset({
    "user_version", "application_id", "schema_version", "page_count", "page_size",
    "freelist_count", "encoding", "journal_mode", "auto_vacuum", "foreign_keys", "query_only",
})
"""Pragmas that may be read (no value given), never set."""

DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})

# The authorizer's action codes (sqlite3.h); some are missing from older Pythons' sqlite3.
_SELECT = 21
_READ = 20
_FUNCTION = 31
_PRAGMA = 19
_RECURSIVE = 33
_UPDATE = 23
_INSERT = 18
_DELETE = 9
_ATTACH = 24
_ACTIONS = {
    1: "CREATE INDEX", 2: "CREATE TABLE", 3: "CREATE TEMP INDEX", 4: "CREATE TEMP TABLE",
    5: "CREATE TEMP TRIGGER", 6: "CREATE TEMP VIEW", 7: "CREATE TRIGGER", 8: "CREATE VIEW",
    9: "DELETE", 10: "DROP INDEX", 11: "DROP TABLE", 12: "DROP TEMP INDEX",
    13: "DROP TEMP TABLE", 14: "DROP TEMP TRIGGER", 15: "DROP TEMP VIEW", 16: "DROP TRIGGER",
    17: "DROP VIEW", 18: "INSERT", 19: "PRAGMA", 22: "a transaction (BEGIN/COMMIT/ROLLBACK)",
    23: "UPDATE", 24: "ATTACH", 25: "DETACH", 26: "ALTER TABLE", 27: "REINDEX", 28: "ANALYZE",
    29: "CREATE VIRTUAL TABLE", 30: "DROP VIRTUAL TABLE", 32: "SAVEPOINT",
}


class Refused(Exception):
    """A query this tool will not run, worded for the model."""


def _authorizer(refusals: list[str]) -> Any:
    """An authorizer that lets reading through and notes why anything else was refused."""

    selecting = False

    def authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None,
                  _trigger: str | None) -> int:
        nonlocal selecting
        if action in (_SELECT, _READ, _RECURSIVE):
            selecting = True
            return sqlite3.SQLITE_OK
        if action == _FUNCTION:
            if (arg2 or "").lower() in DENIED_FUNCTIONS:
                refusals.append(f"the function {arg2}() is not allowed")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == _PRAGMA:
            name = (arg1 or "").lower()
            if name in INFORMATIONAL_PRAGMAS or (name in READABLE_PRAGMAS and arg2 is None):
                return sqlite3.SQLITE_OK
            refusals.append(f"PRAGMA {arg1}" + (f" = {arg2}" if arg2 is not None else "") +
                            " is not allowed (only reading PRAGMAs such as table_info, "
                            "index_list or user_version)")
            return sqlite3.SQLITE_DENY
        if action in (_INSERT, _UPDATE, _DELETE) and (arg1 or "").startswith("sqlite_"):
            if selecting:  # how SQLite sets up a pragma function inside a SELECT
                refusals.append("table-valued pragma functions such as pragma_table_info() are "
                                "not supported; use PRAGMA table_info(name) instead")
            else:
                refusals.append("changing the schema (CREATE, DROP, ALTER...) is not allowed")
            return sqlite3.SQLITE_DENY
        if action == _ATTACH and not arg1:
            refusals.append("VACUUM is not allowed")
            return sqlite3.SQLITE_DENY
        refusals.append(f"{_ACTIONS.get(action, f'action {action}')} is not allowed")
        return sqlite3.SQLITE_DENY

    return authorize


def value_bytes(value: Any) -> int:
    """About how many bytes a value took to read from the database."""
    if value is None:
        return 0
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "replace"))
    return 8


def cell(value: Any, width: int) -> str:
    """A value as the table shows it: at most `width` characters (a blob as its size)."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<blob, {len(value)} bytes>"
    if isinstance(value, str):
        text = value[: width + 1]  # never a copy of the whole of a long text
        long = len(value) > width
    else:
        text, long = str(value), False
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    if len(text) <= width and not long:
        return text
    shown = text[: max(1, width - 1)] + "…"
    return shown + f" ({len(value)} characters)" if isinstance(value, str) else shown


def read_table(cursor: sqlite3.Cursor, max_rows: int, width: int, max_bytes: int) -> str:
    """The rows of `cursor` as a compact table, read one at a time and never kept whole."""
    columns = [d[0] for d in cursor.description]
    lines = [" | ".join(cell(c, width) for c in columns)]
    size = len(lines[0])
    shown = 0
    read = 0
    stop = ""
    for row in cursor:
        if shown >= max_rows:
            stop = f"more exist; the limit is {max_rows} rows"
            break
        read += sum(value_bytes(v) for v in row)
        line = " | ".join(cell(v, width) for v in row)
        del row  # a row may hold a 10 MB value: only its line is kept
        if shown and size + len(line) + 1 > MAX_TABLE_CHARS:
            stop = f"more exist; the table is cut at {MAX_TABLE_CHARS} characters"
            break
        lines.append(line)
        size += len(line) + 1
        shown += 1
        if read > max_bytes:
            stop = (f"reading stopped at the max_result_bytes bound: the rows read held {read} "
                    f"bytes of values (the bound is {max_bytes}), so there may be more")
            break
    if not shown:
        return "No rows."
    if stop:
        head = (f"The first {shown} row{'s' if shown != 1 else ''} ({stop}: narrow the query with "
                "WHERE, LIMIT or an aggregate, or select fewer or shorter values, e.g. "
                "length(x) or substr(x, 1, 100)):")
    else:
        head = f"{shown} row{'s' if shown != 1 else ''}:"
    return "\n".join([head, *lines])


def open_database(path: str) -> sqlite3.Connection:
    uri = f"file:{quote(path)}?mode=ro"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=2.0)
    try:
        connection.execute("PRAGMA query_only = ON")
        setlimit = getattr(connection, "setlimit", None)  # Python 3.11+
        if setlimit is not None:
            setlimit(getattr(sqlite3, "SQLITE_LIMIT_LENGTH", 0), MAX_VALUE_BYTES)
            setlimit(getattr(sqlite3, "SQLITE_LIMIT_ATTACHED", 7), 0)
    except BaseException:
        connection.close()
        raise
    return connection


def run_query(job: dict[str, Any]) -> tuple[str, str]:
    """(status, content) of one query; sqlite3 errors and refusals worded for the model."""
    seconds = float(job["timeout"])
    try:
        connection = open_database(job["database"])
    except sqlite3.Error as error:
        return "error", f"the database could not be opened: {error}"
    refusals: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        connection.set_authorizer(_authorizer(refusals))
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        cursor = connection.execute(job["sql"])
        if cursor.description is None:
            return "success", "The statement ran and returned no rows."
        return "success", read_table(cursor, int(job["max_rows"]), int(job["max_cell_chars"]),
                                     int(job["max_result_bytes"]))
    except sqlite3.Warning as warning:  # several statements (Python < 3.12 wording)
        return "error", f"{warning}: send exactly one statement per call"
    except sqlite3.ProgrammingError as error:
        if "one statement" in str(error):
            return "error", "only one SQL statement per call: send them one at a time"
        return "error", f"SQL error: {error}"
    except sqlite3.Error as error:
        message = str(error)
        if refusals:
            return "error", (f"refused: this tool only reads the database, and {refusals[0]}. Do "
                             "not retry a write; tell the user the database is read-only here.")
        if "interrupted" in message:
            return "error", (f"the query was stopped after {seconds:g} s (the time limit): make "
                             "it cheaper (filter with WHERE, use indexed columns, add LIMIT)")
        if "out of memory" in message:
            raise MemoryError from None
        if "too big" in message:
            return "error", (f"a value is bigger than {MAX_VALUE_BYTES} bytes, the most one value "
                             "may hold here: select length(x) or substr(x, 1, 100) instead")
        if "readonly" in message or "read-only" in message:
            return "error", "refused: the database is read-only here"
        return "error", f"SQL error: {message}"
    finally:
        connection.close()


def _die_with_parent(parent: int) -> None:
    """Be killed when the bot dies (Linux); exit now if it already did."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if parent and os.getppid() != parent:
        os._exit(1)


def _limit_memory(memory_bytes: int) -> None:
    try:
        import resource
    except ImportError:  # not a POSIX system: no limit
        return
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    _die_with_parent(int(job.get("parent", 0)))
    _limit_memory(int(job["memory_bytes"]))
    out_of_memory = False
    try:
        status, content = run_query(job)
    except MemoryError:
        out_of_memory = True  # handled below, once the query's memory is released
    if out_of_memory:
        status, content = "error", (
            f"the query needed more than the {int(job['memory_bytes']) // (1024 * 1024)} MB it "
            "may use (big values, or many of them in one row): select fewer or shorter values, "
            "e.g. length(x) or substr(x, 1, 100)"
        )
    sys.stdout.write(json.dumps({"status": status, "content": content}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
