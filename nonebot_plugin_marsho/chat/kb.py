"""`marsho.kb`: a chat's knowledge base (issue 29), and the file a message quotes, downloaded.

- `marsho.kb` lists the chat's documents (number, size, pages and passages, when added): anyone
  in the chat may look, so members know what is read before each answer.
- `marsho.kb add`, quoting a file message: in a group its admins and owner (and superusers), in a
  private chat anyone, for their own. "report.pdf: 12 pages, 48 passages".
- `marsho.kb remove <number>`: the same people; its passages and vectors go with it.

The knowledge base is the chat's (`group_key`: the group's, the guild channel's, or the private
chat's key), the same key the turn's ToolContext.chat_key names, so a question reads only its
own chat's documents.

Files: OneBot v11 `file` segments (NapCat, LLOneBot: `file` name, `file_id`, `file_size`, `url`),
with `get_group_file_url` (groups) or `get_file` when there is no URL; elsewhere the adapter's
file segment with its URL (nonebot-plugin-alconna's File). Downloaded under the pictures' address
rules (MARSHO_IMAGE_ALLOW_PRIVATE), within MARSHO_FILE_MAX_BYTES and MARSHO_FILE_TIMEOUT.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nonebot.adapters import Bot, Event

from ..agent.documents import DocumentError
from ..agent.embeddings import EmbeddingError
from ..agent.knowledge import Added, KnowledgeBase, KnowledgeFullError
from ..i18n import Texts
from ..net.download import DownloadError, download_file
from ..redaction import logger
from .app import Marsho
from .observe import group_key
from .where import Where

if TYPE_CHECKING:
    from .commands.registry import CommandContext

ADD_WORDS = ("add", "+", "添加", "加入")
REMOVE_WORDS = ("remove", "rm", "delete", "del", "forget", "删除")


@dataclass(frozen=True)
class SharedFile:
    """A file a message carries: its name and declared size, and how to have it (a URL, or the
    OneBot implementation's file id)."""

    name: str
    size: int | None = None
    url: str = ""
    file_id: str = ""
    busid: Any = None


def _onebot_file(data: dict[str, Any]) -> SharedFile:
    name = str(data.get("name") or data.get("file") or data.get("file_name") or "file")
    size = data.get("file_size") or data.get("size")
    try:
        declared = int(size) if size not in (None, "") else None
    except (TypeError, ValueError):
        declared = None
    return SharedFile(name=Path(name).name or "file", size=declared, url=str(data.get("url") or ""),
                      file_id=str(data.get("file_id") or data.get("id") or ""), busid=data.get("busid"))


def _segments_files(message: Any) -> list[SharedFile]:
    files = []
    for segment in message or []:
        if getattr(segment, "type", None) == "file":
            files.append(_onebot_file(dict(segment.data)))
    return files


async def shared_files(bot: Bot, event: Event) -> list[SharedFile]:
    """The files of the message `event` quotes, then of the message itself."""
    if bot.adapter.get_name() == "OneBot V11":
        reply = getattr(event, "reply", None)
        quoted = _segments_files(getattr(reply, "message", None)) if reply is not None else []
        return quoted + _segments_files(event.get_message())
    from nonebot_plugin_alconna.uniseg import File, Reply, UniMessage

    try:
        message = await UniMessage.of(event.get_message(), bot=bot).attach_reply(event, bot)
        found: list[SharedFile] = []
        for reply in message[Reply]:
            if reply.msg is not None and not isinstance(reply.msg, str):
                found += [SharedFile(f.name, None, f.url or "", f.id or "")
                          for f in UniMessage.of(reply.msg, bot=bot)[File]]
        return found + [SharedFile(f.name, None, f.url or "", f.id or "") for f in message[File]]
    except Exception as error:  # an adapter alconna cannot read
        logger.warning(f"marsho: could not read the message's files: {error}")
        return []


async def _file_url(bot: Bot, where: Where, shared: SharedFile) -> str:
    """Where to download a OneBot file without a URL: the implementation's answer to
    get_group_file_url (in a group), else get_file (its url, inline base64, or a local path)."""
    if where.group_id is not None and where.kind == "group":
        try:
            found = await bot.call_api("get_group_file_url", group_id=int(where.group_id),
                                       file_id=shared.file_id, busid=shared.busid or 0)
            if isinstance(found, dict) and found.get("url"):
                return str(found["url"])
        except Exception as error:  # some implementations have only get_file
            logger.info(f"marsho: get_group_file_url failed, trying get_file: {error}")
    found = await bot.call_api("get_file", file_id=shared.file_id)
    if not isinstance(found, dict):
        return ""
    if found.get("base64"):
        return f"base64://{found['base64']}"
    return str(found.get("url") or found.get("file") or "")


async def fetch(app: Marsho, bot: Bot, where: Where, shared: SharedFile) -> bytes:
    """The file's bytes. Raises DownloadError."""
    config = app.config
    url = shared.url
    if not url and shared.file_id and bot.adapter.get_name() == "OneBot V11":
        url = await _file_url(bot, where, shared)
    if not url:
        raise DownloadError("bad_url", "no address")
    local = Path(url.removeprefix("file://")) if url.startswith(("/", "file://")) else None
    if local is not None:  # the implementation's own copy, on this machine
        if not local.is_file():
            raise DownloadError("bad_url", "the OneBot implementation's copy is not on this machine")
        if local.stat().st_size > config.marsho_file_max_bytes:
            raise DownloadError("too_large", "", limit=config.marsho_file_max_bytes)
        return local.read_bytes()
    # an address from the chat platform is still not trusted with the bot's network: private and
    # loopback addresses only when the owner allows them (as for pictures)
    guarded = not config.marsho_image_allow_private
    return await download_file(url, max_bytes=config.marsho_file_max_bytes,
                               timeout=config.marsho_file_timeout, guarded=guarded)


def size_text(count: int) -> str:
    """A file's size as people read it: 812 B, 34 KB, 1.2 MB."""
    if count < 1000:
        return f"{count} B"
    if count < 1_000_000:
        return f"{count / 1000:.3g} KB"
    return f"{count / 1_000_000:.3g} MB"


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
    app, t, name, config = context.app, context.t, context.name, context.app.config
    files = await shared_files(context.bot, context.event) if context.event is not None else []
    if not files:
        return t("kb.no_file", name=name)
    shared = files[0]
    limit = config.marsho_file_max_bytes
    if shared.size is not None and shared.size > limit:
        return t("kb.too_large", file=shared.name, size=size_text(shared.size), limit=size_text(limit))
    try:
        data = await fetch(app, context.bot, context.where, shared)
    except DownloadError as error:
        if error.kind == "too_large":
            return t("kb.too_large_unknown", file=shared.name, limit=size_text(limit))
        if error.kind == "bad_url" and error.detail == "no address":
            return t("kb.no_url", file=shared.name)
        logger.warning(f"marsho: {shared.name} not downloaded: {error}")
        return t("kb.download_failed", file=shared.name, reason=error.detail or error.kind)
    except Exception as error:  # the implementation refused get_file
        logger.warning(f"marsho: {shared.name} not downloaded: {error}")
        return t("kb.download_failed", file=shared.name, reason=type(error).__name__)
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


def refusal_text(t: Texts, file: str, error: DocumentError) -> str:
    """Why a file was not read, in the chat's language (the detail, with its limit, in English)."""
    detail = error.detail
    texts = {
        "too_large": lambda: t("kb.error.too_large", file=file, detail=detail),
        "too_many_pages": lambda: t("kb.error.too_many_pages", file=file, detail=detail),
        "zip_bomb": lambda: t("kb.error.zip_bomb", file=file, detail=detail),
        "no_text": lambda: t("kb.error.no_text", file=file, detail=detail),
        "unsupported": lambda: t("kb.error.unsupported", file=file, detail=detail),
        "mismatch": lambda: t("kb.error.mismatch", file=file, detail=detail),
        "encrypted": lambda: t("kb.error.encrypted", file=file, detail=detail),
        "timeout": lambda: t("kb.error.timeout", file=file, detail=detail),
        "too_many_passages": lambda: t("kb.error.too_many_passages", file=file, detail=detail),
    }
    return texts.get(error.code, lambda: t("kb.error.corrupt", file=file, detail=detail))()


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
