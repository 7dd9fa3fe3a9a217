"""Each chat's knowledge base as the model uses it (issue 29): documents added (read, cut into
passages, optionally embedded, kept once per content hash), the best passages for each question
beside it in the turn's note (`note`), and the built-in tool `docs__search`.

A knowledge base belongs to one chat: its key (ToolContext.chat_key: a group's, a guild
channel's, or a person's private chat's) is the owner of every document, and every search names
it, so nothing of one chat's knowledge base reaches another.

For the turn pipeline: `await knowledge.note(context, question)` is the note's block ("" for
none), the same shape as MemoryBook.note; agent/turn.build_request puts it after the memories'.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import StoreError
from ..i18n import Language, Texts
from ..redaction import logger
from ..store.fulltext import query_terms
from ..store.knowledge import Document, Hit, KnowledgeFull, KnowledgeStore, NewPassage
from ..tools.model import ToolContext, Toolkit, ToolResponse
from ..tools.schema import function_tool
from .documents import DocumentError, Extracted, Limits, Section, extract, passages
from .embeddings import Embedder, EmbeddingError, fused, matrix_of, nearest, to_blob
from .framing import framed

if TYPE_CHECKING:
    import numpy

TOOLKIT = "docs"
DOCS_TOOLS = (f"{TOOLKIT}__search",)
SEARCH_LIMIT = 8
"""Passages one docs__search gives at most."""
CANDIDATES = 20
"""Passages each ranking (full text, vectors) offers to the fusion."""
OWNERS_TTL = 60.0
"""Seconds the list of chats with documents (and a chat's vectors) is trusted before it is read
again: a document another bot process adds is found within this long; this process's at once."""
QUERY_TIMEOUT = 10.0
"""Seconds a question waits for its own embedding before it goes on with full-text search alone."""

OUTSIDE_CHAT = ("The knowledge base belongs to a chat: this call has no chat (the command line, or a "
                "library call without one), so there is nothing to search here.")
STORE_FAILED = ("The knowledge base is unavailable right now (the database failed); say so and try again "
                "later.")


@dataclass(frozen=True)
class Added:
    """What `KnowledgeBase.add` did: the document kept, or the same file kept before (`again`)."""

    document: Document
    again: bool = False
    cut: bool = False
    """The file's text passed the characters read from one file and was cut."""


class KnowledgeFullError(Exception):
    """The chat has MARSHO_KB_MAX_DOCUMENTS documents already."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"the knowledge base holds {limit} documents already (MARSHO_KB_MAX_DOCUMENTS)")


def place_of(section: Section) -> dict[str, Any]:
    """A section's place as the store keeps it (only what it has)."""
    place: dict[str, Any] = {}
    if section.page is not None:
        place["page"] = section.page
    if section.heading:
        place["heading"] = section.heading
    if section.sheet:
        place["sheet"] = section.sheet
    if section.rows is not None:
        place["rows"] = list(section.rows)
    return place


class KnowledgeBase:
    """The knowledge bases on one KnowledgeStore, with the MARSHO_KB_* and MARSHO_FILE_* settings
    and, when MARSHO_EMBEDDING_MODEL is set, its Embedder."""

    def __init__(self, store: KnowledgeStore, *, embedder: Embedder | None = None,
                 limits: Limits | None = None, timeout: float = 60.0, passage_chars: int = 800,
                 max_passages: int = 2000, max_documents: int = 50, recall: int = 3,
                 language: Language = "zh-CN") -> None:
        self.store = store
        self.embedder = embedder
        self.limits = limits or Limits()
        self.timeout = timeout
        self.passage_chars = passage_chars
        self.max_passages = max_passages
        self.max_documents = max_documents
        self.recall = recall
        self.texts = Texts(language)
        self._owners: set[str] | None = None
        self._owners_read = 0.0
        self._reading: asyncio.Task[None] | None = None
        self._vectors: dict[str, tuple[float, list[int], Any]] = {}
        """owner -> (when read, passage ids, their unit vectors as one matrix)."""

    # adding, listing, removing

    async def add(self, owner: str, name: str, data: bytes, *, added_by: str) -> Added:
        """Read file `name` into `owner`'s knowledge base. The same bytes already there cost
        nothing (`again`). Raises DocumentError (the file), KnowledgeFullError, EmbeddingError,
        StoreError."""
        digest = hashlib.sha256(data).hexdigest()
        same = await self.store.find(owner, digest)
        if same is not None:
            return Added(same, again=True)
        if self.max_documents and len(await self.store.documents(owner)) >= self.max_documents:
            raise KnowledgeFullError(self.max_documents)
        extracted = await extract(data, name, limits=self.limits, timeout=self.timeout)
        found = passages(extracted, chars=self.passage_chars, max_passages=self.max_passages)
        vectors: Sequence[bytes | None] = [None] * len(found)
        if self.embedder is not None and found:
            matrix = await self.embedder.embed([passage.text for passage in found])
            vectors = [to_blob(row) for row in matrix]
        kept = [NewPassage(place_of(passage.section), passage.text, vector)
                for passage, vector in zip(found, vectors, strict=True)]
        try:
            document, new = await self.store.add(
                owner, name=name, kind=extracted.kind, sha256=digest, size=len(data), pages=extracted.pages,
                passages=kept, added_by=added_by, max_documents=self.max_documents,
                embedding_model=self.embedder.model if self.embedder is not None else "")
        except KnowledgeFull as full:
            raise KnowledgeFullError(full.limit) from None
        self._changed(owner)
        return Added(document, again=not new, cut=extracted.cut)

    async def documents(self, owner: str) -> list[Document]:
        """The chat's documents, oldest first."""
        return await self.store.documents(owner)

    async def remove(self, owner: str, document_id: int) -> Document | None:
        """Remove one of the chat's documents with its passages and vectors (None: no such one)."""
        gone = await self.store.remove(owner, document_id)
        if gone is not None:
            self._changed(owner)
        return gone

    def _changed(self, owner: str) -> None:
        self._vectors.pop(owner, None)
        if self._owners is not None:
            self._owners.add(owner)  # a removal may leave it empty: one query too many, no harm

    # searching

    async def search(self, owner: str, query: str, *, limit: int) -> list[Hit]:
        """The chat's passages best for `query`: full-text search, fused with the vectors' ranking
        (reciprocal rank fusion) when there are embeddings; at most `limit`."""
        if limit <= 0:
            return []
        if self.embedder is None:
            return await self.store.search(owner, query, limit=limit)
        words, near = await asyncio.gather(self.store.search(owner, query, limit=CANDIDATES),
                                           self._nearest(owner, query))
        if not near:
            return words[:limit]
        order = fused([hit.id for hit in words], near)[:limit]
        have = {hit.id: hit for hit in words}
        missing = [i for i in order if i not in have]
        have.update({hit.id: hit for hit in await self.store.passages(owner, missing)})
        return [have[i] for i in order if i in have]

    async def _nearest(self, owner: str, query: str) -> list[int]:
        """The ids of the passages nearest the query's embedding; [] when it cannot be had in
        time (the question goes on with full-text search alone)."""
        assert self.embedder is not None
        ids, matrix = await self._owner_vectors(owner)
        if not ids or matrix is None or not query.strip():
            return []
        try:
            vector = (await asyncio.wait_for(self.embedder.embed([query]), QUERY_TIMEOUT))[0]
        except (EmbeddingError, asyncio.TimeoutError) as error:
            logger.warning("marsho: knowledge base: the question's embedding failed, full-text search "
                           f"alone: {error or 'timed out'}")
            return []
        return nearest(vector, ids, matrix, CANDIDATES)

    async def _owner_vectors(self, owner: str) -> tuple[list[int], numpy.ndarray | None]:
        cached = self._vectors.get(owner)
        if cached is not None and time.monotonic() - cached[0] < OWNERS_TTL:
            return cached[1], cached[2]
        ids, blobs = await self.store.vectors(owner)
        dimension = len(blobs[-1]) // 4 if blobs else 0  # the newest documents' model, if it changed
        kept, matrix = matrix_of(blobs, dimension) if dimension else ([], None)
        chosen = [ids[i] for i in kept]
        self._vectors[owner] = (time.monotonic(), chosen, matrix)
        return chosen, matrix

    def place_text(self, place: dict[str, Any]) -> str:
        """A passage's place as people read it: "第 3 页", "“安装”", "工作表 Sales，第 2–41 行"."""
        t = self.texts
        parts = []
        if "page" in place:
            parts.append(t("kb.place_page", page=place["page"]))
        if place.get("sheet"):
            parts.append(t("kb.place_sheet", sheet=place["sheet"]))
        if place.get("heading"):
            parts.append(t("kb.place_heading", heading=place["heading"]))
        if place.get("rows"):
            first, last = place["rows"]
            parts.append(t("kb.place_rows", first=first, last=last))
        return t("kb.place_joint").join(parts)

    def label(self, hit: Hit) -> str:
        """Where a passage is from: its document and its place."""
        place = self.place_text(hit.place)
        return self.texts("kb.label_place", document=hit.document, place=place) if place else self.texts(
            "kb.label", document=hit.document)

    def shown(self, hit: Hit) -> str:
        """A passage as the model reads it: its label (its document's name and place framed on
        one line), then its text framed as every text from people is (agent/framing.py: no line
        of a document can pass for a speaker, a mark of ours or an instruction)."""
        text = "\n".join(line for line in hit.text.splitlines() if line.strip())
        return f"{framed(self.label(hit), alone=False)}\n{framed(text, alone=True)}"

    # beside each question

    def owner_of(self, context: ToolContext | None) -> str | None:
        """Whose knowledge base a turn asked with `context` uses: its chat's; None outside a chat."""
        if context is None or not context.platform or not context.chat_key:
            return None
        return context.chat_key

    async def note(self, context: ToolContext | None, question: str) -> str:
        """The chat's passages full-text search (and the vectors) find for `question`, at most
        MARSHO_KB_RECALL, as a labelled block for the turn's note; "" for none. Never raises: a
        failure is logged and gives ""."""
        owner = self.owner_of(context)
        if owner is None or self.recall <= 0 or not query_terms(question):
            return ""
        try:
            if not await self._may_have(owner):
                return ""
            found = await self.search(owner, question, limit=self.recall)
        except Exception as error:  # the question goes on without its documents
            logger.warning(f"marsho: knowledge base passages for a question in {owner} not read: {error}")
            return ""
        if not found:
            return ""
        return self.texts("kb.note", passages="\n".join(self.shown(hit) for hit in found))

    async def _may_have(self, owner: str) -> bool:
        """Whether the chat may have documents (False: surely none, no search)."""
        if self._owners is None:
            await self._read_owners()
        elif time.monotonic() - self._owners_read > OWNERS_TTL and self._reading is None:
            self._reading = asyncio.get_running_loop().create_task(self._read_owners())
        return owner in (self._owners or set())

    async def _read_owners(self) -> None:
        background = self._owners is not None
        try:
            self._owners, self._owners_read = await self.store.owners(), time.monotonic()
        except Exception as error:
            if not background:
                raise
            logger.warning(f"marsho: which chats have documents not read again: {error}")
            self._owners_read = time.monotonic()
        finally:
            self._reading = None

    async def settled(self) -> None:
        """Wait for a background read of who has documents (before closing the database)."""
        if self._reading is not None:
            await asyncio.gather(self._reading, return_exceptions=True)

    async def close(self) -> None:
        await self.settled()
        if self.embedder is not None:
            await self.embedder.close()

    # the tool

    def toolkit(self) -> Toolkit:
        """`docs__search`, for everyone."""

        async def search(query: str, context: ToolContext) -> ToolResponse:
            return await self.search_text(context, query)

        search.__doc__ = """Search this chat's knowledge base: the documents its people added.

        The most relevant passages already come with each message; use this to look further,
        with a few words of what you need. Each passage comes with its document and place (page,
        heading, sheet): say where you read a fact when you use it.

        Args:
            query: Words to search for.
        """
        tool = function_tool(search, name=f"{TOOLKIT}__search", toolkit=TOOLKIT)
        # what it finds is this chat's: a conversation that follows a person across chats
        # (MARSHO_SESSION_SCOPE=user) must not carry it into the next one
        tool.keeps_result = False
        return Toolkit(name=TOOLKIT, source="built-in", tools=[tool])

    async def search_text(self, context: ToolContext | None, query: str) -> ToolResponse:
        """What docs__search answers: the passages found, labelled, best first."""
        owner = self.owner_of(context)
        if owner is None:
            return ToolResponse.error(OUTSIDE_CHAT)
        try:
            found = await self.search(owner, query, limit=SEARCH_LIMIT) if query_terms(query) else []
        except StoreError as error:
            logger.warning(f"marsho: docs__search in {owner} failed: {error}")
            return ToolResponse.error(STORE_FAILED)
        if not found:
            documents = await self.store.documents(owner)
            if not documents:
                return ToolResponse.success("This chat's knowledge base has no documents.")
            names = ", ".join(document.name for document in documents[:20])
            return ToolResponse.success(f"No passage matches {query.strip()!r}. The documents: {names}.")
        return ToolResponse.success("\n\n".join([f"Passages matching {query.strip()!r}, best first:",
                                                 *(self.shown(hit) for hit in found)]))


__all__ = ["DOCS_TOOLS", "TOOLKIT", "Added", "DocumentError", "Extracted", "KnowledgeBase",
           "KnowledgeFullError"]
