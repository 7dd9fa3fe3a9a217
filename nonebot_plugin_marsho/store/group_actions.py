"""The log of group actions (issue 28): one row per mute, unmute, kick or recall marsho was asked
for, with who asked, on whom, and how it ended; read for `marsho.actions` and for the
per-asker hourly limit."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, insert, select
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import StoreError
from .sql import SqlStore, _describe, group_actions_table


@dataclass(frozen=True)
class LoggedAction:
    """One logged action: when (seconds since the epoch), where, who asked it of whom, and how it
    ended (`done`, `denied` by the rules before any platform call, `failed` on the platform)."""

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

    async def add(self, entry: LoggedAction) -> None:
        """Keep one action (one statement)."""
        values = {"at": entry.at, "group_key": entry.group_key, "asker": entry.asker[:255],
                  "action": entry.action, "target": entry.target[:255], "detail": entry.detail[:255],
                  "outcome": entry.outcome, "reason": entry.reason}
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                await conn.execute(insert(group_actions_table).values(**values))
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
        """How many actions `asker` had done (anywhere) since `since`."""
        columns = group_actions_table.c
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                count = (await conn.execute(
                    select(func.count()).select_from(group_actions_table)
                    .where(columns.asker == asker, columns.at >= since, columns.outcome == "done"))).scalar()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        return int(count or 0)
