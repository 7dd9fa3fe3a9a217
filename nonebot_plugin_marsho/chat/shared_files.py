"""Files people share (issue 29): the files a message carries or quotes, downloaded under the
pictures' address rules, and why one could not be had, in the chat's language. The knowledge
base (`marsho.kb add`, chat/kb.py) and the files read with a question (chat/question_files.py)
both use it.

Files: OneBot v11 `file` segments (NapCat, LLOneBot: `file` name, `file_id`, `file_size`, `url`),
with `get_group_file_url` (groups) or `get_file` when there is no URL; Discord attachments that
are not pictures (alconna keeps only their names; the address is on the event, or on the quoted
message); Feishu file messages, from their message's resources; files given by id alone
(Telegram documents, OneBot v12) through the adapter; elsewhere the adapter's file segment with
its URL (nonebot-plugin-alconna's File; Kook's file key is its URL). Downloaded under the
pictures' address rules (MARSHO_IMAGE_ALLOW_PRIVATE), within MARSHO_FILE_MAX_BYTES and
MARSHO_FILE_TIMEOUT.
"""

from __future__ import annotations

import asyncio
import json
import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from nonebot.adapters import Bot, Event

from ..agent.documents import CODES, DocumentError
from ..agent.framing import CONTROL
from ..i18n import Texts
from ..net.download import DownloadError, download_file
from ..redaction import logger
from .where import Where

if TYPE_CHECKING:  # (chat/app.py imports what imports this)
    from .app import Marsho

Purpose = Literal["kb", "file"]
"""What a file was for, which words its refusal uses: added to the knowledge base ("kb": "not
added"), read for a question ("file": "not read")."""


@dataclass(frozen=True)
class SharedFile:
    """A file a message carries: its name and declared size, and how to have it (a URL, or the
    OneBot implementation's file id)."""

    name: str
    size: int | None = None
    url: str = ""
    file_id: str = ""
    busid: Any = None
    message_id: str = ""
    """The message that holds it, where the platform gives a file by message (Feishu)."""

    def __post_init__(self) -> None:
        # the name is the sender's: every reply, listing and log line shows it one line long
        object.__setattr__(self, "name", shown_name(self.name))


SHOWN_NAME_CHARS = 80
"""Characters of a file's name shown in the chat (its extension kept)."""


def shown_name(name: str) -> str:
    """A file's name as the chat is shown it: one line without control characters, bidirectional
    overrides or zero-width spaces, at most SHOWN_NAME_CHARS characters with its extension kept
    (what it is read as may depend on it)."""
    one = " ".join(CONTROL.sub(" ", name).split()) or "file"
    if len(one) <= SHOWN_NAME_CHARS:
        return one
    suffix = Path(one).suffix
    suffix = suffix if len(suffix) <= 10 else ""
    return one[: SHOWN_NAME_CHARS - len(suffix) - 1] + "…" + suffix


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


def discord_attachments(message: Any) -> list[SharedFile]:
    """The attachments of a Discord message that are not pictures (those are read as pictures)."""
    files = []
    for attachment in getattr(message, "attachments", None) or ():
        name = str(getattr(attachment, "filename", "") or "file")
        kind = getattr(attachment, "content_type", None) or mimetypes.guess_type(name)[0]
        url = getattr(attachment, "url", None)
        if url and not (isinstance(kind, str) and kind.startswith(("image", "video", "audio"))):
            size = getattr(attachment, "size", None)
            files.append(SharedFile(Path(name).name or "file", size if isinstance(size, int) else None,
                                    str(url)))
    return files


def files_of(bot: Bot, event: Event, message: Any, quoted: Any = None) -> list[SharedFile]:
    """The files of the message `event` quotes, then of the message itself. `message`: the event's
    UniMessage with its reply attached (OneBot reads its own segments instead); `quoted`: the
    quoted message as the platform gave it (Discord's, for its attachments)."""
    platform = bot.adapter.get_name()
    if platform == "OneBot V11":
        reply = getattr(event, "reply", None)
        found = _segments_files(getattr(reply, "message", None)) if reply is not None else []
        try:
            return found + _segments_files(event.get_message())
        except Exception:  # not a message event
            return found
    if platform == "Discord":
        return discord_attachments(quoted) + discord_attachments(event)
    if platform == "Feishu":
        return _feishu_files(event, message)
    from nonebot_plugin_alconna.uniseg import File, Reply, UniMessage

    def shared(file: File) -> SharedFile:
        return SharedFile(UNNAMED.get(file.name, file.name), None, file.url or "", file.id or "")

    found = []
    for reply in message[Reply]:
        if reply.msg is not None and not isinstance(reply.msg, str):
            found += [shared(f) for f in UniMessage.of(reply.msg, bot=bot)[File]]
    return found + [shared(f) for f in message[File]]


def _feishu_files(event: Event, message: Any) -> list[SharedFile]:
    """A Feishu file message quoted (its body: {"file_key", "file_name"}), then the message's own
    files; each fetched by the message that holds it."""
    from nonebot_plugin_alconna.uniseg import File, Reply

    found = []
    for reply in message[Reply]:
        origin = reply.origin
        if getattr(origin, "msg_type", None) == "file":
            try:
                body = json.loads(getattr(getattr(origin, "body", None), "content", None) or "{}")
            except ValueError:
                continue
            if isinstance(body, dict) and body.get("file_key"):
                found.append(SharedFile(Path(str(body.get("file_name") or "file")).name or "file",
                                        file_id=str(body["file_key"]),
                                        message_id=str(getattr(origin, "message_id", "") or reply.id)))
    own = str(getattr(event, "message_id", "") or "")
    return found + [SharedFile(f.name, file_id=f.id or "", message_id=own) for f in message[File]]


UNNAMED = {"file. bin": "document", "file.bin": "document"}
"""alconna's names for a file the adapter gave none (the Telegram adapter drops a document's
name): read by what its bytes are, named as what it is."""


async def shared_files(bot: Bot, event: Event) -> list[SharedFile]:
    """The files of the message `event` quotes, then of the message itself (read from the event)."""
    if bot.adapter.get_name() == "OneBot V11":
        return files_of(bot, event, None)
    from nonebot_plugin_alconna.uniseg import UniMessage

    from .incoming import discord_quoted

    try:
        message = await UniMessage.of(event.get_message(), bot=bot).attach_reply(event, bot)
        return files_of(bot, event, message, discord_quoted(event))
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


BY_ID = ("Telegram", "OneBot V12")
"""Platforms whose files come by id alone, fetched through the adapter (alconna's fetch)."""


async def _through_adapter(bot: Bot, shared: SharedFile, *, max_bytes: int, timeout: float) -> bytes:
    """A file the platform names by id only (a Telegram document, a OneBot v12 file; a Feishu file,
    by its message): alconna or the platform's API gives it, within the time cap; the size cap is
    checked on what came back (Telegram's own API gives at most 20 MB). What goes wrong is told
    by its kind only: a Telegram file address carries the bot's token."""
    from nonebot_plugin_alconna.uniseg import File, image_fetch

    if shared.message_id:  # Feishu: the message's resource (alconna's fetch asks for a picture)
        fetching = bot.call_api(f"im/v1/messages/{shared.message_id}/resources/{shared.file_id}",
                                method="GET", params={"type": "file"})
    else:  # (the event is read for Feishu only)
        fetching = image_fetch(None, bot, {}, File(id=shared.file_id, name=shared.name))  # type: ignore[arg-type]
    try:
        data = await asyncio.wait_for(fetching, timeout)
    except asyncio.TimeoutError:
        raise DownloadError("timeout", f"the platform did not give the file in {timeout:g} s") from None
    except Exception as error:
        kind = type(error).__name__
        raise DownloadError("network", f"the platform could not give the file: {kind}") from None
    if not data:
        raise DownloadError("bad_url", "no address")
    if len(data) > max_bytes:
        raise DownloadError("too_large", "", limit=max_bytes)
    return bytes(data)


async def fetch(app: Marsho, bot: Bot, where: Where, shared: SharedFile) -> bytes:
    """The file's bytes. Raises DownloadError."""
    config = app.config
    url = shared.url
    platform = bot.adapter.get_name()
    asked = False  # the address is the implementation's answer to our own call, not the message's
    if not url and shared.file_id and platform == "OneBot V11":
        url, asked = await _file_url(bot, where, shared), True
    elif not url and shared.file_id.startswith(("https://", "http://")):  # Kook's file key is its address
        url = shared.file_id
    elif not url and shared.file_id and (platform in BY_ID or shared.message_id):
        return await _through_adapter(bot, shared, max_bytes=config.marsho_file_max_bytes,
                                      timeout=config.marsho_file_timeout)
    if not url:
        raise DownloadError("bad_url", "no address")
    local = Path(url.removeprefix("file://")) if url.startswith(("/", "file://")) else None
    if local is not None and not asked:  # a message names no file of this machine
        raise DownloadError("bad_url", "a message's file may not name a path on this machine")
    if local is not None:  # the implementation's own copy, on this machine (get_file's answer)
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


async def download(app: Marsho, bot: Bot, where: Where, shared: SharedFile, t: Texts, *,
                   purpose: Purpose) -> bytes | str:
    """The file's bytes, or why it could not be had (naming the file, and the limit when it was
    too big): one declared too big is not downloaded at all."""
    limit = app.config.marsho_file_max_bytes
    if shared.size is not None and shared.size > limit:
        return t(f"{purpose}.too_large", file=shared.name, size=size_text(shared.size),
                 limit=size_text(limit))
    try:
        return await fetch(app, bot, where, shared)
    except DownloadError as error:
        if error.kind == "too_large":
            return t(f"{purpose}.too_large_unknown", file=shared.name, limit=size_text(limit))
        if error.kind == "bad_url" and error.detail == "no address":
            return t(f"{purpose}.no_url", file=shared.name)
        logger.warning(f"marsho: {shared.name} not downloaded: {error}")
        return t(f"{purpose}.download_failed", file=shared.name, reason=error.detail or error.kind)
    except Exception as error:  # the implementation refused get_file
        logger.warning(f"marsho: {shared.name} not downloaded: {error}")
        return t(f"{purpose}.download_failed", file=shared.name, reason=type(error).__name__)


def refusal_text(t: Texts, file: str, error: DocumentError, *, purpose: Purpose = "kb") -> str:
    """Why a file was not read, in the chat's language (the detail, with its limit, in English)."""
    code = error.code if error.code in CODES else "corrupt"
    return t(f"{purpose}.error.{code}", file=file, detail=error.detail)
