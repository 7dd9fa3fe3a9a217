"""Turns written together: the rows of the turns that end while one write is under way go into
the next write, in one transaction (a group commit).

On SQLite the writers of a process take turns anyway (store/sql.py's write lock), so 200 groups
answered at once were 200 transactions one after another, each paying SQLAlchemy's statement,
the connection's checkout and the commit, and several hops to aiosqlite's thread. A turn that
comes while the database is idle is written at once, alone; the ones that come while it is busy
wait for the write under way (as they did) and are then written in one transaction.

Each turn still succeeds or fails whole, and alone: when a transaction of several turns fails,
each of its turns is written again in a transaction of its own, so one turn the database refuses
(a text it cannot take) fails only itself. A turn whose writer is cancelled before its write began
is withdrawn (not stored); once its write began, it completes as a write under way does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]
Write = Callable[[list[Row]], Awaitable[None]]
"""One transaction that inserts these rows, all or none (the caller holds the write lock)."""


@dataclass
class _Pending:
    rows: list[Row]
    done: asyncio.Future[None]


@dataclass
class _Batch:
    turns: list[_Pending] = field(default_factory=list)


class GroupCommit:
    """Writes each turn's rows with `write`, the turns that wait for `lock` together."""

    def __init__(self, write: Write, lock: asyncio.Lock) -> None:
        self._write = write
        self._lock = lock
        self._open: _Batch | None = None
        """The batch turns join: its write waits for the lock, or has not started yet."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def write(self, rows: list[Row]) -> None:
        """Insert `rows` (one turn's), in a transaction with the turns that wait beside it;
        raises what the database raised for this turn."""
        loop = asyncio.get_running_loop()
        pending = _Pending(rows, loop.create_future())
        pending.done.add_done_callback(_retrieved)
        batch = self._open
        if batch is None:
            batch = self._open = _Batch()
            task = loop.create_task(self._flush(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        batch.turns.append(pending)
        try:
            await asyncio.shield(pending.done)
        except asyncio.CancelledError:
            if self._open is batch:  # its write has not begun: withdrawn, nothing stored
                batch.turns.remove(pending)
            raise

    async def _flush(self, batch: _Batch) -> None:
        try:
            async with self._lock:
                if self._open is batch:
                    self._open = None  # turns that come from now on go in the next write
                await self._written(batch.turns)
        except BaseException as error:  # cancelled (the loop is closing): nobody waits forever
            for pending in batch.turns:
                _settle(pending, error)
            raise

    async def _written(self, turns: list[_Pending]) -> None:
        if not turns:
            return
        try:
            await self._write([row for pending in turns for row in pending.rows])
        except Exception as error:
            if len(turns) == 1:
                _settle(turns[0], error)
                return
            for pending in turns:  # each alone: only the turn the database refuses fails
                try:
                    await self._write(pending.rows)
                except Exception as own:
                    _settle(pending, own)
                else:
                    _settle(pending, None)
            return
        for pending in turns:
            _settle(pending, None)


def _settle(pending: _Pending, error: BaseException | None) -> None:
    if pending.done.done():
        return
    if error is None:
        pending.done.set_result(None)
    elif isinstance(error, asyncio.CancelledError):
        pending.done.cancel()
    else:
        pending.done.set_exception(error)


def _retrieved(future: asyncio.Future[None]) -> None:
    """A turn's writer cancelled after its write began is not there to read the outcome: read
    here, so asyncio does not log it as never retrieved (the writer's caller logs failures)."""
    if not future.cancelled():
        future.exception()
