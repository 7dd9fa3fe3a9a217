"""Each chat's knowledge base (issue 29): its documents and their passages, found again with the
database's own full-text search (store/fulltext, as memories are), and the passages' vectors.

Whose is what is one rule, kept in the queries: every read and delete names the `owner`, the
chat's key (a group's, or a person's private chat's), so nothing of one chat's knowledge base
reaches another chat, and a person's private one never reaches a group.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import StoreError
from .asyncio_engine import AsyncConnection
from .fulltext import query_terms, ranked_matches, search_terms
from .sql import SqlStore, _describe, _held_connection, _lock_id, documents_table, passages_table

FTS_TABLE = "marsho_kb_passages_fts"


@dataclass(frozen=True)
class Document:
    """One document of a knowledge base."""

    id: int
    owner: str
    name: str
    kind: str
    sha256: str
    bytes: int
    pages: int
    passages: int
    added_by: str
    added_at: float
    embedding_model: str = ""


@dataclass(frozen=True)
class NewPassage:
    """A passage to keep: where it is (a JSON-able dict: page, heading, sheet, rows), its text,
    and its vector as float32 bytes (None without embeddings)."""

    place: dict[str, Any]
    text: str
    vector: bytes | None = None


@dataclass(frozen=True)
class Hit:
    """A passage found: its id, its document's id and name, its place and text."""

    id: int
    document_id: int
    document: str
    place: dict[str, Any]
    text: str


class KnowledgeFull(Exception):
    """The owner has `limit` documents already (MARSHO_KB_MAX_DOCUMENTS)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"{limit} documents already")


_DOCUMENT_COLUMNS = [documents_table.c[name] for name in (
    "id", "owner", "name", "kind", "sha256", "bytes", "pages", "passages", "added_by", "added_at",
    "embedding_model")]


def _document(row: Any) -> Document:
    return Document(id=int(row.id), owner=row.owner, name=row.name, kind=row.kind, sha256=row.sha256,
                    bytes=int(row.bytes), pages=int(row.pages), passages=int(row.passages),
                    added_by=row.added_by, added_at=float(row.added_at), embedding_model=row.embedding_model)


def _place(value: str) -> dict[str, Any]:
    try:
        found = json.loads(value)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


class KnowledgeStore:
    """The knowledge bases in the history database (store/sql.py's engine and connections)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store

    @property
    def dialect(self) -> str:
        return self.store.dialect

    @asynccontextmanager
    async def _connection(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """A connection of the pool's own, never the running turn's (see MemoryStore's)."""
        await self.store._ready()
        token = _held_connection.set(None)
        try:
            async with self.store._connection(write=write) as conn:
                yield conn
        except SQLAlchemyError as error:
            code = "store.save" if write else "store.read"
            raise StoreError(code=code, url=self.store.safe_url, detail=_describe(error)) from None
        finally:
            _held_connection.reset(token)

    async def find(self, owner: str, sha256: str) -> Document | None:
        """The owner's document with these bytes (the same file added before), None if none."""
        d = documents_table.c
        async with self._connection(write=False) as conn:
            row = (await conn.execute(select(*_DOCUMENT_COLUMNS)
                                      .where(d.owner == owner, d.sha256 == sha256))).first()
        return _document(row) if row is not None else None

    async def add(self, owner: str, *, name: str, kind: str, sha256: str, size: int, pages: int,
                  passages: Sequence[NewPassage], added_by: str, embedding_model: str = "",
                  max_documents: int = 0, now: float | None = None) -> tuple[Document, bool]:
        """Keep a document and its passages in one transaction: (the document, True), or (the
        same file kept before, False). KnowledgeFull when the owner has `max_documents` (0: no
        limit) already."""
        now = time.time() if now is None else now
        d = documents_table.c
        try:
            async with self._connection(write=True) as conn:
                if self.store.shared:  # one add per owner at a time, in every bot process
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                       {"id": _lock_id(f"marsho:kb:{owner}")})
                same = (await conn.execute(select(*_DOCUMENT_COLUMNS)
                                           .where(d.owner == owner, d.sha256 == sha256))).first()
                if same is not None:
                    return _document(same), False
                count = int((await conn.execute(select(func.count()).where(d.owner == owner))).scalar_one())
                if max_documents and count >= max_documents:
                    raise KnowledgeFull(max_documents)
                kept = Document(id=0, owner=owner, name=name[:255], kind=kind, sha256=sha256, bytes=size,
                                pages=pages, passages=len(passages), added_by=added_by, added_at=now,
                                embedding_model=embedding_model)
                values = {k: v for k, v in kept.__dict__.items() if k != "id"}
                result = await conn.execute(insert(documents_table).values(**values))
                document_id = int(result.inserted_primary_key[0])  # type: ignore[index]
                if passages:
                    await conn.execute(insert(passages_table), [
                        dict(document_id=document_id, owner=owner, seq=seq,
                             place=json.dumps(passage.place, ensure_ascii=False), text=passage.text,
                             terms=search_terms(passage.text), vector=passage.vector)
                        for seq, passage in enumerate(passages)])
        except StoreError:
            # the same file added meanwhile by another process (the unique index refused this one)
            found = await self.find(owner, sha256)
            if found is not None:
                return found, False
            raise
        return dataclasses.replace(kept, id=document_id), True

    async def documents(self, owner: str) -> list[Document]:
        """The owner's documents, oldest first."""
        d = documents_table.c
        async with self._connection(write=False) as conn:
            rows = (await conn.execute(select(*_DOCUMENT_COLUMNS).where(d.owner == owner)
                                       .order_by(d.added_at, d.id))).all()
        return [_document(row) for row in rows]

    async def remove(self, owner: str, document_id: int) -> Document | None:
        """Delete the owner's document `document_id` with its passages and vectors; the document
        gone, or None when the owner has no such document."""
        d, p = documents_table.c, passages_table.c
        async with self._connection(write=True) as conn:
            row = (await conn.execute(select(*_DOCUMENT_COLUMNS)
                                      .where(d.owner == owner, d.id == document_id))).first()
            if row is None:
                return None
            await conn.execute(delete(passages_table).where(p.document_id == document_id, p.owner == owner))
            await conn.execute(delete(documents_table).where(d.id == document_id))
        return _document(row)

    async def owners(self) -> set[str]:
        """Every chat with at least one document."""
        async with self._connection(write=False) as conn:
            rows = (await conn.execute(select(documents_table.c.owner).distinct())).all()
        return {row.owner for row in rows}

    async def search(self, owner: str, query: str, *, limit: int) -> list[Hit]:
        """The owner's passages that share words with `query`, best first (BM25 on SQLite,
        ts_rank on PostgreSQL), at most `limit`."""
        terms = query_terms(query)
        if not terms or limit <= 0:
            return []
        p, d = passages_table.c, documents_table.c
        hits, where, rank = ranked_matches(self.dialect, FTS_TABLE, p.terms, p.id, terms)
        query_ = (select(p.id, p.document_id, d.name, p.place, p.text)
                  .join(documents_table, d.id == p.document_id))
        if hits is not None:
            query_ = query_.join(hits, hits.c.id == p.id)
        if where is not None:
            query_ = query_.where(where)
        query_ = query_.where(p.owner == owner).order_by(rank, p.id).limit(limit)
        return await self._hits(query_)

    async def vectors(self, owner: str) -> tuple[list[int], list[bytes]]:
        """The ids and vectors of the owner's passages that have one, in id order."""
        p = passages_table.c
        async with self._connection(write=False) as conn:
            rows = (await conn.execute(select(p.id, p.vector).where(p.owner == owner, p.vector.is_not(None))
                                       .order_by(p.id))).all()
        return [int(row.id) for row in rows], [bytes(row.vector) for row in rows]

    async def passages(self, owner: str, ids: Sequence[int]) -> list[Hit]:
        """The owner's passages of these ids, in the order given (those it has)."""
        if not ids:
            return []
        p, d = passages_table.c, documents_table.c
        found = await self._hits(select(p.id, p.document_id, d.name, p.place, p.text)
                                 .join(documents_table, d.id == p.document_id)
                                 .where(p.owner == owner, p.id.in_(list(ids))))
        by_id = {hit.id: hit for hit in found}
        return [by_id[i] for i in ids if i in by_id]

    async def _hits(self, query: Any) -> list[Hit]:
        async with self._connection(write=False) as conn:
            rows = (await conn.execute(query)).all()
        return [Hit(id=int(row.id), document_id=int(row.document_id), document=row.name,
                    place=_place(row.place), text=row.text) for row in rows]
