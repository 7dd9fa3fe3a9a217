"""Built-in toolkit `sqlite`: read-only SQL on one SQLite database file the owner names.

Dangerous (whatever the database holds can end up in the chat), so superuser-only and off
until the owner enables it and names the file::

    MARSHO_ENABLED_TOOLKITS=["sqlite"]
    MARSHO_TOOLKIT_SETTINGS={"sqlite": {"database": "/srv/bot/stats.db"}}

Nothing is sent anywhere. Three locks keep the database unchanged: the file is opened
read-only (`file:...?mode=ro`), `PRAGMA query_only=ON` is set, and an authorizer lets through
only reading (SELECT, WITH, read-only functions, informational PRAGMAs such as table_info):
writes, ATTACH (which could create files), VACUUM INTO, transactions and setting PRAGMAs are
refused. Each query is stopped after `timeout` seconds (a progress handler), at most
`max_rows` rows are shown, long cells are cut at `max_cell_chars`.
"""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

MAX_TABLE_CHARS = 12_000
"""The table is cut (by whole rows) past this many characters, so the result stays readable."""

MAX_VALUE_BYTES = 10_000_000
"""SQLITE_LIMIT_LENGTH: no string or blob bigger than this (zeroblob(1e9) would fill memory)."""

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

tools = Toolbox()


class _Refused(Exception):
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


def _cell(value: Any, width: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, bytes):
        text = f"<blob, {len(value)} bytes>"
    else:
        text = str(value).replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _table(columns: list[str], rows: list[tuple[Any, ...]], more: bool, max_rows: int,
           width: int) -> str:
    lines = [" | ".join(_cell(c, width) for c in columns)]
    size = len(lines[0])
    shown = 0
    for row in rows:
        line = " | ".join(_cell(v, width) for v in row)
        if size + len(line) + 1 > MAX_TABLE_CHARS and shown:
            more = True
            break
        lines.append(line)
        size += len(line) + 1
        shown += 1
    if not rows:
        head = "No rows."
    elif more:
        head = (f"The first {shown} rows (more exist; the limit is {max_rows} rows and "
                f"{MAX_TABLE_CHARS} characters: narrow the query with WHERE, LIMIT or an "
                "aggregate):")
    else:
        head = f"{shown} row{'s' if shown != 1 else ''}:"
    return "\n".join([head, *lines])


def _open(database: str) -> sqlite3.Connection:
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
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
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


def _setting(name: str, value: Any, minimum: float) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < minimum:
        raise _Refused(f"the sqlite toolkit's {name} setting must be a number of at least "
                       f"{minimum:g}, not {value!r} (fix MARSHO_TOOLKIT_SETTINGS)")
    return number


@tools.tool(permission="superuser", database="", max_rows=100, timeout=5.0, max_cell_chars=200)
def query(
    sql: str,
    database: str = "",
    max_rows: int = 100,
    timeout: float = 5.0,
    max_cell_chars: int = 200,
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
    """
    try:
        rows_limit = int(_setting("max_rows", max_rows, 1))
        seconds = _setting("timeout", timeout, 0.01)
        width = int(_setting("max_cell_chars", max_cell_chars, 4))
        statement = sql.strip()
        if not statement:
            raise _Refused("the SQL is empty: pass one statement, e.g. SELECT ...")
        connection = _open(str(database or ""))
    except _Refused as refused:
        return ToolResponse.error(str(refused))
    except sqlite3.Error as error:
        return ToolResponse.error(f"the database could not be opened: {error}")
    refusals: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        connection.set_authorizer(_authorizer(refusals))
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        cursor = connection.execute(statement)
        if cursor.description is None:
            return ToolResponse.success("The statement ran and returned no rows.")
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchmany(rows_limit + 1)
        more = len(rows) > rows_limit
        return ToolResponse.success(_table(columns, rows[:rows_limit], more, rows_limit, width))
    except sqlite3.Warning as warning:  # several statements (Python < 3.12 wording)
        return ToolResponse.error(f"{warning}: send exactly one statement per call")
    except sqlite3.ProgrammingError as error:
        if "one statement" in str(error):
            return ToolResponse.error("only one SQL statement per call: send them one at a time")
        return ToolResponse.error(f"SQL error: {error}")
    except sqlite3.Error as error:
        message = str(error)
        if refusals:
            return ToolResponse.error(
                f"refused: this tool only reads the database, and {refusals[0]}. Do not retry "
                "a write; tell the user the database is read-only here."
            )
        if "interrupted" in message:
            return ToolResponse.error(
                f"the query was stopped after {seconds:g} s (the time limit): make it cheaper "
                "(filter with WHERE, use indexed columns, add LIMIT)"
            )
        if "readonly" in message or "read-only" in message:
            return ToolResponse.error("refused: the database is read-only here")
        return ToolResponse.error(f"SQL error: {message}")
    finally:
        connection.close()
