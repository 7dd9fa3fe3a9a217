"""The log of group actions (issue 28): one row per mute, unmute, kick or recall marsho was asked
for, with who asked, on whom, and how it ended; read for `marsho.actions` and for the
per-asker hourly limit."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import StoreError
from .sql import SqlStore, _describe, group_actions_table


@dataclass(frozen=True)
class LoggedAction:
    """One logged action: when (seconds since the epoch), where, who asked it of whom, and how it
    ended (`done`, `denied` by the rules before any platform call, `failed` on the platform; or
    `pending`: allowed, its slot of the hourly bound taken, the platform call under way)."""

    at: float
    group_key: str
    asker: str
    action: str
    target: str
    detail: str
    outcome: str
    reason: str = ""


class GroupActionLog:
    """Reads and writes marsho_group_actions through the bot's SqlStore."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    async def add(self, entry: LoggedAction) -> int:
        """Keep one action (one statement, committed); its row's id."""
        values = {"at": entry.at, "group_key": entry.group_key, "asker": entry.asker[:255],
                  "action": entry.action, "target": entry.target[:255], "detail": entry.detail[:255],
                  "outcome": entry.outcome, "reason": entry.reason}
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                result = await conn.execute(insert(group_actions_table).values(**values))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None
        key = result.inserted_primary_key
        assert key is not None  # an insert of one row
        return int(key[0])

    async def settle(self, row: int, outcome: str, reason: str = "") -> None:
        """How the pending action of row `row` ended."""
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                await conn.execute(update(group_actions_table).where(group_actions_table.c.id == row)
                                   .values(outcome=outcome, reason=reason))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None

    async def recent(self, group_key: str, *, limit: int) -> list[LoggedAction]:
        """The group's last `limit` actions, newest first."""
        columns = group_actions_table.c
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                rows = (await conn.execute(
                    select(columns.at, columns.group_key, columns.asker, columns.action, columns.target,
                           columns.detail, columns.outcome, columns.reason)
                    .where(columns.group_key == group_key)
                    .order_by(columns.at.desc(), columns.id.desc()).limit(limit))).all()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        return [LoggedAction(*row) for row in rows]

    async def done_since(self, asker: str, since: float) -> int:
        """How many actions `asker` had done, or has under way (pending), anywhere since `since`:
        every process's, once committed."""
        columns = group_actions_table.c
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                count = (await conn.execute(
                    select(func.count()).select_from(group_actions_table)
                    .where(columns.asker == asker, columns.at >= since,
                           columns.outcome.in_(("done", "pending"))))).scalar()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        return int(count or 0)
