"""A turn's insert into a SQLite file, and the read of a session's newest turns, through one
connection of the standard library's sqlite3 on a thread of its own: one hop to that thread per
transaction.

Through SQLAlchemy's async engine on aiosqlite a turn's insert took a connection from the pool,
began, executed, committed and gave the connection back (rolling back), each step a hop to
aiosqlite's thread and back: about 1.6 ms between the answer and its send, 0.55 ms of it CPU, for
a write SQLite does in a tenth of that; the read of a session this process has not kept in
memory (a group's first question since the start) paid the same hops. Here the whole
transaction (BEGIN, the rows, COMMIT, or ROLLBACK on failure), or the whole read, runs in one
call on the thread.

Only for a SQLite file (an in-memory database is one connection's own: SQLAlchemy's is the only
one that sees it). Writes run only while the caller holds the store's write lock (store/sql.py):
the writers of a process take turns, so this connection and SQLAlchemy's never wait for each
other. The connection is opened at the first call, with the settings SQLAlchemy's get (WAL is
the file's; `synchronous=NORMAL` and the 30 s busy timeout are the connection's).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

BUSY_TIMEOUT = 30
"""Seconds a write waits for another process's writer (as SQLAlchemy's connections do)."""

T = TypeVar("T")
Rows = list[dict[str, Any]]
"""The named parameters of one statement's rows."""


class SqliteDirect:
    """Calls on one sqlite3 connection to the SQLite file at `path`, on a thread of their own."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._executor: ThreadPoolExecutor | None = None
        self._connection: sqlite3.Connection | None = None
        """Opened and used on the executor's one thread only."""

    async def call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work(connection)` on the thread (autocommit: it says BEGIN and COMMIT itself); raises
        what it raises (sqlite3.Error, the ValueError of a text SQLite cannot take)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="marsho-sqlite")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, work)

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        connection = self._connection
        if connection is None:
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
            connection.execute("PRAGMA synchronous=NORMAL")
            self._connection = connection
        return work(connection)

    async def insert(self, sql: str, rows: Rows, *more: tuple[str, Rows]) -> None:
        """Run `sql` for each of `rows` (named parameters), then each further (sql, rows) of `more`,
        in one transaction: all or none."""
        await self.call(lambda connection: _insert(connection, [(sql, rows), *more]))

    async def close(self) -> None:
        """Close the connection (a later call opens it again)."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(executor, self._close)
        executor.shutdown(wait=False)

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _insert(connection: sqlite3.Connection, statements: list[tuple[str, Rows]]) -> None:
    connection.execute("BEGIN")
    try:
        for sql, rows in statements:
            connection.executemany(sql, rows)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
