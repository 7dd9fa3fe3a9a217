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

import re
import time
import unicodedata
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
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from ..exceptions import StoreError
from .sql import SqlStore, _describe, _held_connection, _lock_id, memories_table

About = Literal["user", "group"]

MAX_QUERY_TERMS = 32
"""Search terms taken from a question (the first ones): a long question is not a long query."""

IMPORTED = "import:marshoai"
"""The `author` of memories `import-memory` brought from nonebot-plugin-marshoai."""

_CJK = (r"\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
        r"\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f")
_MARKS = (r"\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed"
          r"\u0900-\u0dff\u0e31-\u0e3a\u0e47-\u0e4e\u0eb1-\u0ebc\u0ec8-\u0ecd\u0f18-\u0fbc"
          r"\u102b-\u109d\u17b4-\u17d3\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20f0\ufe20-\ufe2f")
r"""Combining marks that belong inside words (Devanagari and the other Indic scripts, Thai, Lao,
Tibetan, Myanmar, Khmer vowel signs; Hebrew and Arabic points; accents NFKC leaves apart): `\w`
leaves them out, which would split "है" into letters that match unrelated words."""
_RUN = re.compile(rf"[{_CJK}]+|(?:[^\W_{_CJK}]|[{_MARKS}])+", re.UNICODE)
_CJK_RUN = re.compile(rf"[{_CJK}]+")

STOPWORDS = frozenset(
    "a an and are as at be but by do does did for from has have how i in is it its me my of on "
    "or our so that the their them they this to was we were what when where which who why will "
    "with you your yours can could would should about just not no yes".split()
    + "的 了 是 我 你 他 她 它 们 吗 呢 吧 啊 呀 在 有 和 就 都 也 还 这 那 个".split()
    + "一 不 人 要 会 说 想 去 来 到 上 下 很 么 什 怎 没 对 好 多 能 让 把 被 给 得 地 着 过".split()
    + "什么 怎么 一个 我们 你们 不是 我的 你的".split()
)
"""Words too common to find anything by (in questions only: memories keep every word)."""


def _words(text: str) -> list[str]:
    """The text's words as the index keeps them: NFKC, case folded; a run of Chinese, Japanese or
    Korean characters (written without spaces) as its overlapping pairs and its characters (a
    word of one character, 猫 or 茶, is common)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words: list[str] = []
    for run in _RUN.findall(folded):
        if _CJK_RUN.fullmatch(run):
            words.extend(run[i:i + 2] for i in range(len(run) - 1))
            words.extend(run)
        else:
            words.append(run)
    return words


def search_terms(text: str) -> str:
    """What the full-text index reads of a memory (the `terms` column): its words, space apart."""
    return " ".join(_words(text))


def query_terms(text: str) -> list[str]:
    """The words of a question to look memories up by: without the commonest, each once, at most
    MAX_QUERY_TERMS."""
    seen: dict[str, None] = {}
    words = _words(text)
    # the pairs (and words) first: a long question keeps its most telling terms
    for word in sorted(words, key=lambda word: len(word) == 1 and bool(_CJK_RUN.fullmatch(word))):
        if word not in STOPWORDS and not (len(word) == 1 and word.isascii()):
            seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_TERMS]


def same_text(a: str, b: str) -> bool:
    """Whether two memories say the same (case, width and spacing aside)."""
    return _words(a) == _words(b) and _words(a) != []


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
        if self.dialect == "sqlite":
            # words only: no quote inside; a word also finds longer ones it begins (meet: meets)
            match = " OR ".join(f'"{term}"*' if _prefix(term) else f'"{term}"' for term in terms)
            fts = text("SELECT rowid AS id, bm25(marsho_memories_fts) AS rank FROM marsho_memories_fts "
                       "WHERE marsho_memories_fts MATCH :match").bindparams(match=match)
            hits = fts.columns(literal_column("id"), literal_column("rank")).subquery("hits")
            return (select(*_COLUMNS).join(hits, hits.c.id == m.id).where(sight.condition())
                    .order_by(hits.c.rank, m.used_at.desc()).limit(limit))
        if self.dialect == "postgresql":
            vector = func.to_tsvector(literal_column("'simple'::regconfig"), m.terms)
            query = func.to_tsquery(literal_column("'simple'::regconfig"),
                                    " | ".join(_pg_lexeme(term) + (":*" if _prefix(term) else "")
                                               for term in terms))
            return (select(*_COLUMNS).where(sight.condition(), vector.op("@@")(query))
                    .order_by(func.ts_rank(vector, query).desc(), m.used_at.desc()).limit(limit))
        # another database: no full-text index; every word, by LIKE (slow, but right)
        matches = [m.terms.like(f"%{term}%") for term in terms]
        return (select(*_COLUMNS).where(sight.condition(), or_(*matches) if matches else false())
                .order_by(m.used_at.desc()).limit(limit))

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


PREFIX_CHARS = 3
"""A question's word of at least this many letters finds the memories' words it begins (neither
tokenizer stems: "meet" finds "meets", "cat" finds "cats"); Chinese, Japanese and Korean pairs
match whole."""


def _prefix(term: str) -> bool:
    return len(term) >= PREFIX_CHARS and not _CJK_RUN.match(term)


def _pg_lexeme(term: str) -> str:
    """A word as a to_tsquery operand: quoted, so no word is read as an operator."""
    return "'" + term.replace("'", "''").replace("\\", "\\\\") + "'"
