"""Reminders as the database keeps them (issue 27): one row each in marsho_reminders, added within
the asker's and the chat's bounds, and fired at most once: a due reminder is claimed in the
database (`claim`: active → sending, one statement; PostgreSQL skips the rows another process
is claiming, `FOR UPDATE SKIP LOCKED`; on SQLite the conditional UPDATE is the claim), then sent,
then marked (`finish`, `failed`). A process that dies between claim and mark leaves the row
`sending`: `stale` finds it later, and it is never sent twice (agent/reminders decides what
becomes of it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, delete, func, insert, select, text, update
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import StoreError
from .sql import SqlStore, _describe, _lock_id, reminders_table

State = Literal["active", "sending", "paused"]
What = Literal["text", "prompt"]


@dataclass(frozen=True)
class Reminder:
    """One row of marsho_reminders (see its docstring in store/sql.py)."""

    id: int
    chat_key: str
    platform: str
    kind: str
    chat_id: str
    user_id: str
    asker: str
    what: What
    body: str
    due_at: float
    scheduled_at: float = 0.0
    every: str = ""
    zone: str = "UTC"
    name: str = ""
    session_key: str = ""
    guild_id: str = ""
    channel_id: str = ""
    state: State = "active"
    attempts: int = 0
    problem: str = ""
    claimed_by: str = ""
    claimed_at: float = 0.0
    created_at: float = 0.0
    first_at: float = 0.0
    """Its first time, which a repeat's times are counted from (0: `scheduled_at`)."""


_FIELDS = tuple(column.name for column in reminders_table.columns)


def _reminder(row: Any) -> Reminder:
    return Reminder(**{name: getattr(row, name) for name in _FIELDS})


class LimitReached(Exception):
    """A reminder over a bound: `scope` "user" or "group", `limit` the bound."""

    def __init__(self, scope: str, limit: int) -> None:
        super().__init__(f"{scope} limit {limit}")
        self.scope = scope
        self.limit = limit


Scope = Literal["mine", "chat", "all"]
"""Which reminders a listing reads: the asker's in one chat, the whole chat's, everyone's."""


class ReminderStore:
    """Reads and writes marsho_reminders through the history's SqlStore."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    def _error(self, code: str, error: BaseException) -> StoreError:
        return StoreError(code=code, url=self.store.safe_url, detail=_describe(error))

    async def add(self, reminder: Reminder, *, per_user: int = 0, per_group: int = 0) -> Reminder:
        """Keep `reminder` (its id is given by the database) unless its asker already has
        `per_user` reminders that are not paused or its chat `per_group` (a shared chat's; 0: no
        bound), counted in the same transaction (LimitReached)."""
        values = {name: getattr(reminder, name) for name in _FIELDS if name != "id"}
        values.update(created_at=reminder.created_at or time.time(),
                      scheduled_at=reminder.scheduled_at or reminder.due_at,
                      first_at=reminder.first_at or reminder.scheduled_at or reminder.due_at)
        columns = reminders_table.c
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                if self.store.shared:  # one asker's adds in two processes count each other
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                       {"id": _lock_id(f"marsho:reminders:{reminder.chat_key}")})
                if per_user:
                    await self._within(conn, reminder.asker, per_user)
                if per_group and reminder.kind != "private":
                    chats = (await conn.execute(select(func.count()).where(
                        columns.chat_key == reminder.chat_key))).scalar_one()
                    if chats >= per_group:
                        raise LimitReached("group", per_group)
                row = (await conn.execute(insert(reminders_table).values(**values)
                                          .returning(*reminders_table.columns))).one()
        except SQLAlchemyError as error:
            raise self._error("store.save", error) from None
        return _reminder(row)

    @staticmethod
    async def _within(conn: Any, asker: str, per_user: int) -> None:
        """LimitReached when `asker` has `per_user` reminders that are not paused (a paused one
        waits for its asker to resume or cancel it, and takes no place)."""
        columns = reminders_table.c
        mine = (await conn.execute(select(func.count()).where(
            columns.asker == asker, columns.state != "paused"))).scalar_one()
        if mine >= per_user:
            raise LimitReached("user", per_user)

    async def resume(self, reminder: Reminder, *, due_at: float, per_user: int = 0) -> bool:
        """Make the paused `reminder` active again, due at `due_at` (its occurrence then), its
        tries and problem cleared, unless its asker already has `per_user` that are not paused
        (LimitReached; 0: no bound). False when it is not paused (any more)."""
        columns = reminders_table.c
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                if self.store.shared:
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                       {"id": _lock_id(f"marsho:reminders:{reminder.chat_key}")})
                if per_user:
                    await self._within(conn, reminder.asker, per_user)
                done = await conn.execute(update(reminders_table).where(
                    columns.id == reminder.id, columns.state == "paused").values(
                    state="active", due_at=due_at, scheduled_at=due_at, attempts=0, problem=""))
        except SQLAlchemyError as error:
            raise self._error("store.save", error) from None
        return int(done.rowcount or 0) > 0

    async def paused(self, asker: str) -> list[Reminder]:
        """The paused reminders of `asker`, in every chat."""
        columns = reminders_table.c
        return await self._read(and_(columns.asker == asker, columns.state == "paused"))

    async def get(self, reminder_id: int) -> Reminder | None:
        """One reminder by its number, None when there is none."""
        rows = await self._read(reminders_table.c.id == reminder_id)
        return rows[0] if rows else None

    async def listed(self, scope: Scope, *, chat_key: str = "", asker: str = "") -> list[Reminder]:
        """The reminders of `scope` (the asker's in chat `chat_key`, the chat's, everyone's),
        the soonest first."""
        columns = reminders_table.c
        where: ColumnElement[bool] = columns.id > 0
        if scope != "all":
            where = columns.chat_key == chat_key
        if scope == "mine":
            where = and_(where, columns.asker == asker)
        return await self._read(where)

    async def _read(self, where: ColumnElement[bool]) -> list[Reminder]:
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                rows = (await conn.execute(select(reminders_table).where(where).order_by(
                    reminders_table.c.due_at, reminders_table.c.id))).all()
        except SQLAlchemyError as error:
            raise self._error("store.read", error) from None
        return [_reminder(row) for row in rows]

    async def delete(self, reminder_id: int) -> bool:
        """Cancel a reminder (one being sent is sent, then gone); False when there was none."""
        return await self._write(delete(reminders_table).where(reminders_table.c.id == reminder_id)) > 0

    async def next_due(self) -> float | None:
        """When the soonest active reminder is due (seconds since the epoch), None for none."""
        await self.store._ready()
        columns = reminders_table.c
        try:
            async with self.store._connection(write=False) as conn:
                return (await conn.execute(select(func.min(columns.due_at)).where(
                    columns.state == "active"))).scalar()
        except SQLAlchemyError as error:
            raise self._error("store.read", error) from None

    async def claim(self, now: float, owner: str, *, limit: int = 100) -> list[Reminder]:
        """Take at most `limit` reminders due by `now` for `owner` to send (state sending, one
        statement): a reminder another process (or an earlier call) claimed is never returned
        again, so each is sent at most once."""
        columns = reminders_table.c
        due = (select(columns.id).where(columns.state == "active", columns.due_at <= now)
               .order_by(columns.due_at).limit(limit))
        if self.store.shared:
            due = due.with_for_update(skip_locked=True)
        # the state is checked again by the UPDATE itself: the claim, whatever the subquery saw
        statement = (update(reminders_table)
                     .where(columns.id.in_(due.scalar_subquery()), columns.state == "active")
                     .values(state="sending", claimed_by=owner, claimed_at=now)
                     .returning(*reminders_table.columns))
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                rows = (await conn.execute(statement)).all()
        except SQLAlchemyError as error:
            raise self._error("store.save", error) from None
        return sorted((_reminder(row) for row in rows), key=lambda reminder: reminder.due_at)

    async def stale(self, before: float) -> list[Reminder]:
        """Reminders claimed before `before` and never marked: their process died sending."""
        columns = reminders_table.c
        return await self._read(and_(columns.state == "sending", columns.claimed_at < before))

    async def finish(self, reminder: Reminder, *, next_at: float | None) -> bool:
        """The claimed `reminder` was sent (or dropped): gone, or, for a repeat, active again for
        its next time `next_at`. False when it was not this claim's any more (cancelled)."""
        if next_at is None:
            return await self._write(delete(reminders_table).where(self._claimed(reminder))) > 0
        return await self._write(update(reminders_table).where(self._claimed(reminder)).values(
            state="active", scheduled_at=next_at, due_at=next_at, attempts=0, problem="",
            claimed_by="", claimed_at=0.0)) > 0

    async def failed(self, reminder: Reminder, *, problem: str, retry_at: float | None) -> bool:
        """The claimed `reminder` could not be sent: tried again at `retry_at` (one attempt more),
        or paused (None) with `problem` saying why. False when it was cancelled meanwhile."""
        state: State = "paused" if retry_at is None else "active"
        return await self._write(update(reminders_table).where(self._claimed(reminder)).values(
            state=state, due_at=reminder.due_at if retry_at is None else retry_at,
            attempts=reminder.attempts + 1, problem=problem, claimed_by="", claimed_at=0.0)) > 0

    async def release(self, reminder: Reminder) -> bool:
        """Give a claimed `reminder` back unsent (its sending was stopped before it began)."""
        return await self._write(update(reminders_table).where(self._claimed(reminder)).values(
            state="active", claimed_by="", claimed_at=0.0)) > 0

    @staticmethod
    def _claimed(reminder: Reminder) -> ColumnElement[bool]:
        columns = reminders_table.c
        return and_(columns.id == reminder.id, columns.state == "sending",
                    columns.claimed_by == reminder.claimed_by)

    async def _write(self, statement: Any) -> int:
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                return int((await conn.execute(statement)).rowcount or 0)
        except SQLAlchemyError as error:
            raise self._error("store.save", error) from None

    async def count(self, ids: Sequence[int] = ()) -> int:
        """How many reminders are kept (of `ids`, when given)."""
        columns = reminders_table.c
        query = select(func.count())
        if ids:
            query = query.where(columns.id.in_(list(ids)))
        else:
            query = query.select_from(reminders_table)
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                return int((await conn.execute(query)).scalar_one())
        except SQLAlchemyError as error:
            raise self._error("store.read", error) from None
