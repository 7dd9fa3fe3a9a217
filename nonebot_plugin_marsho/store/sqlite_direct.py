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
import functools
import queue
import sqlite3
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

BUSY_TIMEOUT = 30
"""Seconds a write waits for another process's writer (as SQLAlchemy's connections do)."""

T = TypeVar("T")
Rows = list[dict[str, Any]]
"""The named parameters of one statement's rows."""

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[sqlite3.Connection], Any]]


class SqliteDirect:
    """Calls on one sqlite3 connection to the SQLite file at `path`, on a thread of their own.

    The thread takes the calls from a queue and hands each result back with the caller's loop's
    `call_soon_threadsafe`, as aiosqlite does: a hop costs about half of a ThreadPoolExecutor's
    (its submit and its worker share a semaphore's lock and chain two futures per call)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._jobs: queue.SimpleQueue[_Job | None] | None = None
        self._connection: sqlite3.Connection | None = None
        """Opened and used on the thread only."""

    async def call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work(connection)` on the thread (autocommit: it says BEGIN and COMMIT itself); raises
        what it raises (sqlite3.Error, the ValueError of a text SQLite cannot take)."""
        return await _queued(self._queue(), work)

    def _queue(self) -> queue.SimpleQueue[_Job | None]:
        jobs = self._jobs
        if jobs is None:
            jobs = self._jobs = queue.SimpleQueue()
            # the thread holds the object weakly: one dropped unclosed ends its thread too
            threading.Thread(target=_serve, args=(weakref.ref(self), jobs), name="marsho-sqlite",
                             daemon=True).start()
            weakref.finalize(self, jobs.put, None)
        return jobs

    def _put(self, job: _Job) -> None:
        self._queue().put(job)

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

    async def insert_holding(self, lock: asyncio.Lock, sql: str, rows: Rows, *more: tuple[str, Rows]) -> None:
        """`insert` with `lock` (the store's write lock) held until the transaction has ended on
        the thread. A caller cancelled meanwhile is cancelled at once, but the lock stays held
        until then: the call runs to its end whatever the caller does, and a later write (a
        `marsho.reset` after a cancelled summary save) must not go first and be undone by it."""
        await lock.acquire()
        try:
            loop = asyncio.get_running_loop()
            done: asyncio.Future[None] = loop.create_future()
            self._put((loop, done, lambda connection: _insert(connection, [(sql, rows), *more])))
        except BaseException:
            lock.release()
            raise
        done.add_done_callback(functools.partial(_release, lock))
        await asyncio.shield(done)

    async def close(self) -> None:
        """Close the connection and end the thread (a later call opens them again)."""
        jobs, self._jobs = self._jobs, None
        if jobs is None:
            return
        await _queued(jobs, _closing)
        jobs.put(None)  # the thread ends after the calls queued before

    def _close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


async def _queued(jobs: queue.SimpleQueue[_Job | None], work: Callable[[sqlite3.Connection], T]) -> T:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    jobs.put((loop, done, work))
    return await done


def _serve(direct: weakref.ref[SqliteDirect], jobs: queue.SimpleQueue[_Job | None]) -> None:
    """The thread's loop: each queued call run, its outcome handed to its caller's loop."""
    while (job := jobs.get()) is not None:
        loop, done, work = job
        result: Any = None
        error: BaseException | None = None
        owner = direct()
        try:
            if owner is None:
                raise RuntimeError("the SQLite connection's owner is gone")
            if work is _closing:
                owner._close()
            else:
                result = owner._run(work)
        except BaseException as raised:  # handed to the caller, whatever it is
            error = raised
        del owner
        try:
            loop.call_soon_threadsafe(_settle, done, result, error)
        except RuntimeError:  # the caller's loop is closed: nobody waits for it
            pass


def _closing(_connection: sqlite3.Connection) -> None:
    """The call that closes the connection (run as `_close`, never opening it first)."""


def _release(lock: asyncio.Lock, done: asyncio.Future[Any]) -> None:
    lock.release()
    if not done.cancelled():
        done.exception()  # read here too: a cancelled caller's failed write is not "never retrieved"


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.cancelled():  # the caller gave up waiting; the work was done all the same
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(result)


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
