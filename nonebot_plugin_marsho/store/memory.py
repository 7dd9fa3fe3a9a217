"""What marsho remembers about people and groups (issue 18): each memory with its owner, the chat
it was learned in and whether that chat was private, found again with the database's own
full-text search (SQLite FTS5, PostgreSQL's to_tsvector), within limits per owner.

Who may see what is decided here, in the queries (`Sight`), so no caller can forget a rule:
- in a private chat: the person's memories (under MARSHO_MEMORY_SCOPE=chat, only those learned in
  that private chat);
- in a group: the asker's memories learned in groups (under `chat`, in this group), and the
  group's own memories;
- never a memory learned in a private chat in a group, nor anyone's but the asker's (a group's
  memories in their own group aside).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    and_,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import StoreError
from .asyncio_engine import AsyncConnection
from .fulltext import query_terms, ranked_matches, search_terms, words_of
from .sql import SqlStore, _describe, _held_connection, _lock_id, memories_table

About = Literal["user", "group"]

IMPORTED = "import:marshoai"
"""The `author` of memories `import-memory` brought from nonebot-plugin-marshoai."""

def same_text(a: str, b: str) -> bool:
    """Whether two memories say the same (case, width and spacing aside)."""
    return words_of(a) == words_of(b) and words_of(a) != []


@dataclass(frozen=True)
class Memory:
    """One thing remembered."""

    id: int
    about: About
    owner: str
    """`user`: "<platform>:<user id>"; `group`: the group's key."""
    learned_in: str
    """The key of the chat it was told in ("import" for memories imported without one)."""
    private: bool
    """Told in a private chat: never used in a group."""
    author: str
    """Who told it: "<platform>:<user id>"."""
    text: str
    created_at: float
    used_at: float


@dataclass(frozen=True)
class Sight:
    """Which memories one turn may use: the asker's, and in a group the group's."""

    person: str
    """The asker: "<platform>:<user id>"."""
    chat: str
    """The key of the chat asked in."""
    group: str | None = None
    """The group's key when asked in a group or channel; None in a private chat."""
    per_chat: bool = False
    """MARSHO_MEMORY_SCOPE=chat: a person's memories only in the chat they were learned in."""
    fresh_after: float = 0.0
    """Memories last used before this time (MARSHO_MEMORY_DAYS) are as good as gone."""

    @property
    def private(self) -> bool:
        return self.group is None

    def condition(self) -> ColumnElement[bool]:
        """The memories this turn may use, as a WHERE clause."""
        m = memories_table.c
        # no person (an unsolicited reply, an anonymous sender): nobody's memories
        mine: ColumnElement[bool] = (and_(m.about == "user", m.owner == self.person) if self.person
                                     else false())
        if self.per_chat:
            mine = and_(mine, m.learned_in == self.chat)
        if self.group is not None:
            mine = and_(mine, m.private == 0)  # what was said in private stays there
            mine = or_(mine, and_(m.about == "group", m.owner == self.group))
        return and_(mine, m.used_at >= self.fresh_after) if self.fresh_after else mine


def _row(row: Any) -> Memory:
    return Memory(id=int(row.id), about=row.about, owner=row.owner, learned_in=row.learned_in,
                  private=bool(row.private), author=row.author, text=row.text,
                  created_at=float(row.created_at), used_at=float(row.used_at))


_COLUMNS = [memories_table.c[name] for name in
            ("id", "about", "owner", "learned_in", "private", "author", "text", "created_at", "used_at")]


@dataclass(frozen=True)
class Added:
    """What `MemoryStore.add` did: the memory kept (or the same one already kept, `again`), and
    the ones forgotten to make room: for the author's share (`per_author`), then for the owner's
    limit."""

    memory: Memory
    again: bool = False
    evicted: tuple[Memory, ...] = ()
    author_evicted: tuple[Memory, ...] = ()


class MemoryStore:
    """The memories in the history database (store/sql.py's engine and connections)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    @property
    def dialect(self) -> str:
        return self.store.dialect

    @asynccontextmanager
    async def _connection(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """A connection of the pool's own, never the running turn's (PostgreSQL: the session
        lock's): memory tools run in parallel inside a turn, and one connection serves one
        statement at a time."""
        token = _held_connection.set(None)
        try:
            async with self.store._connection(write=write) as conn:
                yield conn
        finally:
            _held_connection.reset(token)

    async def add(self, about: About, owner: str, text_: str, *, learned_in: str, private: bool,
                  author: str, limit: int, per_author: int = 0, per_chat: bool = False, days: int = 0,
                  now: float | None = None) -> Added:
        """Keep a memory about `owner`; the same text already kept for them, seen wherever this
        one would be (`per_chat`: MARSHO_MEMORY_SCOPE=chat), is used again instead. Past
        `per_author` memories of the owner told by `author` (0: no such limit), the author's own
        unused for longest go, so that one teller cannot push out what others told; past `limit`
        memories of the owner, the ones unused for longest go; with `days`, so do the owner's
        unused for that long. All in one transaction."""
        await self.store._ready()
        now = time.time() if now is None else now
        m = memories_table.c
        of_owner = and_(m.about == about, m.owner == owner)
        try:
            async with self._connection(write=True) as conn:
                if self.store.shared:  # one add per owner at a time, in every bot process:
                    # READ COMMITTED would let parallel adds each see room and each insert
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                       {"id": _lock_id(f"marsho:memory:{about}:{owner}")})
                if days:
                    await conn.execute(delete(memories_table).where(of_owner, m.used_at < now - days * 86400))
                rows = (await conn.execute(select(*_COLUMNS).where(of_owner))).all()
                same = _kept_already(rows, text_, private=private, per_chat=per_chat,
                                     learned_in=learned_in)
                if same is not None:  # told again: fresher, not twice
                    await conn.execute(update(memories_table).where(m.id == same.id).values(used_at=now))
                    return Added(_with_used(_row(same), now), again=True)
                result = await conn.execute(insert(memories_table).values(
                    about=about, owner=owner, learned_in=learned_in, private=int(private), author=author,
                    text=text_, terms=search_terms(text_), created_at=now, used_at=now))
                new_id = int(result.inserted_primary_key[0])  # type: ignore[index]
                authors, oldest = _to_evict(rows, author, per_author=per_author, limit=limit)
                if oldest:
                    await conn.execute(delete(memories_table).where(m.id.in_([r.id for r in oldest])))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None
        memory = Memory(id=new_id, about=about, owner=owner, learned_in=learned_in, private=private,
                        author=author, text=text_, created_at=now, used_at=now)
        return Added(memory, evicted=tuple(_row(r) for r in oldest),
                     author_evicted=tuple(_row(r) for r in authors))

    async def search(self, sight: Sight, query: str, *, limit: int, touch: bool = True,
                     now: float | None = None) -> list[Memory]:
        """The memories `sight` may use that share words with `query`, best first (BM25 on
        SQLite, ts_rank on PostgreSQL), at most `limit`; found ones count as used (`touch`)."""
        terms = query_terms(query)
        if not terms or limit <= 0:
            return []
        await self.store._ready()
        try:
            async with self._connection(write=False) as conn:
                rows = (await conn.execute(self._search_query(sight, terms, limit))).all()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None
        found = [_row(row) for row in rows]
        if found and touch:
            await self.touch([memory.id for memory in found], now=now)
        return found

    def _search_query(self, sight: Sight, terms: Sequence[str], limit: int) -> Any:
        m = memories_table.c
        hits, where, rank = ranked_matches(self.dialect, "marsho_memories_fts", m.terms, m.id, terms)
        query = select(*_COLUMNS)
        if hits is not None:
            query = query.join(hits, hits.c.id == m.id)
        if where is not None:
            query = query.where(where)
        # another database (LIKE): newest use first, as before
        order = (rank,) if self.dialect in ("sqlite", "postgresql") else ()
        return query.where(sight.condition()).order_by(*order, m.used_at.desc()).limit(limit)

    async def touch(self, ids: Iterable[int], *, now: float | None = None) -> None:
        """The memories were used now (eviction goes by the oldest use)."""
        chosen = list(ids)
        if not chosen:
            return
        await self.store._ready()
        try:
            async with self._connection(write=True) as conn:
                await conn.execute(update(memories_table).where(memories_table.c.id.in_(chosen))
                                   .values(used_at=time.time() if now is None else now))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.store.safe_url, detail=_describe(error)) from None

    async def visible(self, sight: Sight, *, limit: int | None = None) -> list[Memory]:
        """Every memory `sight` may use, newest use first (at most `limit`)."""
        m = memories_table.c
        query = select(*_COLUMNS).where(sight.condition()).order_by(m.used_at.desc(), m.id.desc())
        return await self._read(query.limit(limit) if limit is not None else query)

    async def of_owner(self, about: About, owner: str, *, private: bool | None = None) -> list[Memory]:
        """Every memory about `owner`, oldest first (the numbering `marsho.memory` shows);
        `private` False: only those learned outside private chats, True: only those learned in
        them."""
        m = memories_table.c
        query = select(*_COLUMNS).where(m.about == about, m.owner == owner)
        if private is not None:
            query = query.where(m.private == int(private))
        return await self._read(query.order_by(m.created_at, m.id))

    async def count(self, about: About, owner: str) -> int:
        """How many memories about `owner` are kept."""
        m = memories_table.c
        query = select(func.count()).where(m.about == about, m.owner == owner)
        await self.store._ready()
        try:
            async with self._connection(write=False) as conn:
                return int((await conn.execute(query)).scalar_one())
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None

    async def expire(self, days: int, *, now: float | None = None) -> int:
        """Forget every memory unused for `days` days; returns how many went."""
        cutoff = (time.time() if now is None else now) - days * 86400
        await self.store._ready()
        try:
            async with self._connection(write=True) as conn:
                result = await conn.execute(delete(memories_table).where(memories_table.c.used_at < cutoff))
        except SQLAlchemyError as error:
            raise StoreError(code="store.clear", url=self.store.safe_url, detail=_describe(error)) from None
        return int(result.rowcount or 0)

    async def owners(self) -> set[tuple[str, str]]:
        """Every (about, owner) with at least one memory."""
        m = memories_table.c
        await self.store._ready()
        try:
            async with self._connection(write=False) as conn:
                return {(row.about, row.owner) for row in
                        (await conn.execute(select(m.about, m.owner).distinct())).all()}
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None

    async def get(self, memory_id: int, *, sight: Sight | None = None) -> Memory | None:
        """One memory by its id (with `sight`: only if that turn may use it)."""
        query = select(*_COLUMNS).where(memories_table.c.id == memory_id)
        found = await self._read(query.where(sight.condition()) if sight is not None else query)
        return found[0] if found else None

    async def delete(self, ids: Iterable[int]) -> int:
        """Forget these memories; returns how many went."""
        chosen = list(ids)
        if not chosen:
            return 0
        await self.store._ready()
        try:
            async with self._connection(write=True) as conn:
                result = await conn.execute(delete(memories_table).where(memories_table.c.id.in_(chosen)))
        except SQLAlchemyError as error:
            raise StoreError(code="store.clear", url=self.store.safe_url, detail=_describe(error)) from None
        return int(result.rowcount or 0)

    async def _read(self, query: Any) -> list[Memory]:
        await self.store._ready()
        try:
            async with self._connection(write=False) as conn:
                return [_row(row) for row in (await conn.execute(query)).all()]
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.store.safe_url, detail=_describe(error)) from None


def _kept_already(rows: Sequence[Any], text_: str, *, private: bool, per_chat: bool,
                  learned_in: str) -> Any | None:
    """The row of the same fact, kept where this one would be seen (told in private, it is not
    the same as this one told in a group; under `chat`, each chat has its own); None if none."""
    return next((r for r in rows if same_text(r.text, text_) and (private or not r.private)
                 and (not per_chat or r.learned_in == learned_in)), None)


def _to_evict(rows: Sequence[Any], author: str, *, per_author: int,
              limit: int) -> tuple[list[Any], list[Any]]:
    """The rows that go to make room for one more memory: (those past the author's share, unused
    for longest; all of them: those, then the owner's unused for longest past `limit`)."""
    by_use = sorted(rows, key=lambda r: (r.used_at, r.id))
    own = [r for r in by_use if r.author == author]
    authors = own[:max(0, len(own) + 1 - per_author)] if per_author else []
    rest = [r for r in by_use if r not in authors]  # rows: distinct ids, never equal
    return authors, authors + rest[:max(0, len(rest) + 1 - limit)]


def _with_used(memory: Memory, now: float) -> Memory:
    return Memory(**{**memory.__dict__, "used_at": now})
