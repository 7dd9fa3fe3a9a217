"""Where each chat is, kept in the database so marsho can speak there later, after a restart too:
one row per chat key with the chat's dumped target (plain JSON here; chat/targets.py knows what
it means), the adapter, the bot's self id and when the chat was last seen."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import StoreError
from .sql import SqlStore, _describe, targets_table


@dataclass(frozen=True)
class SavedTarget:
    """One chat's row: its key, its target as dumped, which adapter and bot answered there, and
    when (seconds since the epoch) the chat was last seen."""

    chat_key: str
    target: dict[str, Any]
    adapter: str
    self_id: str
    seen_at: float


class TargetStore:
    """Reads and writes marsho_targets through the history's SqlStore."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    async def save(self, saved: SavedTarget) -> None:
        """Keep the chat's target, replacing the one before (one statement)."""
        values = {"chat_key": saved.chat_key, "adapter": saved.adapter, "self_id": saved.self_id,
                  "seen_at": saved.seen_at,
                  "target": json.dumps(saved.target, ensure_ascii=False, sort_keys=True)}
        statement = self.store.upsert(targets_table).values(**values)
        statement = statement.on_conflict_do_update(
            index_elements=["chat_key"], set_={name: statement.excluded[name] for name in values
                                               if name != "chat_key"})
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                await conn.execute(statement)
        except (SQLAlchemyError, TypeError, ValueError) as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None

    async def save_all(self, take: Callable[[], Sequence[SavedTarget]]) -> None:
        """Keep the targets `take()` gives, replacing the ones before, in one statement: `take`
        is called once the write can start, so saves that arrive while it waits for its turn
        (SQLite's writers take turns) join it."""
        statement = self.store.upsert(targets_table)
        statement = statement.on_conflict_do_update(
            index_elements=["chat_key"],
            set_={name: statement.excluded[name] for name in ("target", "adapter", "self_id", "seen_at")})
        await self.store._ready()
        try:
            async with self.store._connection(write=True) as conn:
                rows = [{"chat_key": saved.chat_key, "adapter": saved.adapter, "self_id": saved.self_id,
                         "seen_at": saved.seen_at,
                         "target": json.dumps(saved.target, ensure_ascii=False, sort_keys=True)}
                        for saved in take()]
                if rows:
                    await conn.execute(statement, rows)
        except (SQLAlchemyError, TypeError, ValueError) as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None

    async def get(self, chat_key: str) -> SavedTarget | None:
        """The chat's saved target, or None when marsho has none for it (one read by key)."""
        columns = targets_table.c
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                row = (await conn.execute(
                    select(columns.target, columns.adapter, columns.self_id, columns.seen_at)
                    .where(columns.chat_key == chat_key))).first()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        if row is None:
            return None
        try:
            target = json.loads(row.target)
        except ValueError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        return SavedTarget(chat_key, target, row.adapter, row.self_id, row.seen_at)

    async def newest(self, limit: int) -> list[SavedTarget]:
        """The `limit` chats seen last, the most recently seen first (one read)."""
        columns = targets_table.c
        await self.store._ready()
        try:
            async with self.store._connection(write=False) as conn:
                rows = (await conn.execute(
                    select(columns.chat_key, columns.target, columns.adapter, columns.self_id,
                           columns.seen_at)
                    .order_by(columns.seen_at.desc()).limit(limit))).all()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        found = []
        for row in rows:
            try:
                target = json.loads(row.target)
            except ValueError:
                continue  # unreadable: `get` says so when the chat is spoken to
            found.append(SavedTarget(row.chat_key, target, row.adapter, row.self_id, row.seen_at))
        return found
