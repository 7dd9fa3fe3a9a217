"""`marsho.kb`: a chat's knowledge base (issue 29): listed, added to (a quoted file) and removed from.

- `marsho.kb` lists the chat's documents (number, size, pages and passages, when added): anyone
  in the chat may look, so members know what is read before each answer.
- `marsho.kb add`, quoting a file message: in a group its admins and owner (and superusers), in a
  private chat anyone, for their own. "report.pdf: 12 pages, 48 passages".
- `marsho.kb remove <number>`: the same people; its passages and vectors go with it.

The knowledge base is the chat's (`group_key`: the group's, the guild channel's, or the private
chat's key), the same key the turn's ToolContext.chat_key names, so a question reads only its
own chat's documents.

Files are found and downloaded by chat/shared_files.py (as for the files read with a question).
"""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import TYPE_CHECKING

from ..agent.documents import DocumentError
from ..agent.embeddings import EmbeddingError
from ..agent.knowledge import Added, KnowledgeBase, KnowledgeFullError
from ..i18n import Texts
from ..redaction import logger
from .observe import group_key
from .shared_files import download, refusal_text, shared_files, size_text

if TYPE_CHECKING:
    from .commands.registry import CommandContext

ADD_WORDS = ("add", "+", "添加", "加入")
REMOVE_WORDS = ("remove", "rm", "delete", "del", "forget", "删除")


def parts_text(t: Texts, kind: str, pages: int, passages: int) -> str:
    """"12 pages, 48 passages" (pages of a PDF, sheets of a workbook; passages alone otherwise)."""
    counted = t.plural("count.passages", passages)
    if kind == "pdf":
        return t.plural("count.pages", pages) + t("kb.place_joint") + counted
    if kind == "xlsx":
        return t.plural("count.sheets", pages) + t("kb.place_joint") + counted
    return counted


async def kb_command(context: CommandContext) -> str:
    """The reply to `marsho.kb [add|remove <number>]`."""
    app, t, name = context.app, context.t, context.name
    knowledge = context.services.knowledge if context.services is not None else app.knowledge
    words = unicodedata.normalize("NFKC", context.text).split()
    first = words[0].casefold() if words else ""
    adding, removing = first in ADD_WORDS and len(words) == 1, first in REMOVE_WORDS and len(words) == 2
    if (adding or removing) and context.where.shared and not context.admin:  # the forms' rule
        return t("kb.admins", command=f"{name}.kb add") if adding else t("kb.remove_admins")
    if knowledge is None:
        return t("kb.off")
    owner = group_key(context.where)
    if not words:
        return await _listing(t, knowledge, owner, name)
    if adding:
        return await _add(context, knowledge, owner)
    if removing:
        return await _remove(t, knowledge, owner, name, words[1])
    return t("kb.bad", name=name)


async def _listing(t: Texts, knowledge: KnowledgeBase, owner: str, name: str) -> str:
    documents = await knowledge.documents(owner)
    if not documents:
        return t("kb.empty", name=name)
    lines = [t("kb.head", count_text=t.plural("count.documents", len(documents)))]
    lines += [t("kb.line", id=d.id, file=d.name, size=size_text(d.bytes),
                parts=parts_text(t, d.kind, d.pages, d.passages),
                day=datetime.fromtimestamp(d.added_at).strftime("%Y-%m-%d")) for d in documents]
    lines.append(t("kb.how", name=name))
    return "\n".join(lines)


async def _add(context: CommandContext, knowledge: KnowledgeBase, owner: str) -> str:
    app, t, name = context.app, context.t, context.name
    files = await shared_files(context.bot, context.event) if context.event is not None else []
    if not files:
        return t("kb.no_file", name=name)
    shared = files[0]
    data = await download(app, context.bot, context.where, shared, t, purpose="kb")
    if isinstance(data, str):
        return data
    try:
        added = await knowledge.add(owner, shared.name, data, added_by=context.where.person)
    except DocumentError as error:
        logger.info(f"marsho: knowledge base of {owner}: {error}")
        return refusal_text(t, shared.name, error)
    except KnowledgeFullError as full:
        return t("kb.full", limit=full.limit, name=name)
    except EmbeddingError as error:
        logger.warning(f"marsho: knowledge base of {owner}: {error}")
        return t("kb.embedding_failed", file=shared.name, detail=str(error))
    return _added_text(t, knowledge, added, shared.name, name)


def _added_text(t: Texts, knowledge: KnowledgeBase, added: Added, file: str, name: str) -> str:
    document = added.document
    if added.again:
        return t("kb.again", file=file, id=document.id)
    reply = t("kb.added", file=file, id=document.id, name=name,
              parts=parts_text(t, document.kind, document.pages, document.passages))
    if added.cut:
        reply += "\n" + t("kb.cut", chars=knowledge.limits.max_chars)
    return reply


async def _remove(t: Texts, knowledge: KnowledgeBase, owner: str, name: str, target: str) -> str:
    target = target.removeprefix("#")
    if not (target.isascii() and target.isdigit() and len(target) <= 18):
        return t("kb.bad", name=name)
    # the number the listing shows is the document's own: it stays when others come and go
    gone = await knowledge.remove(owner, int(target))
    if gone is None:
        return t("kb.no_number", number=int(target), name=name)
    return t("kb.removed", id=gone.id, file=gone.name,
             passages_text=t.plural("count.passages", gone.passages))
