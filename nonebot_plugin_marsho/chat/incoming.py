"""A question as the model gets it: the asker's text, the quoted message (labelled), and the
pictures of both, downloaded within caps for vision models or left out with a tip for others."""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from nonebot.adapters import Bot, Event
from nonebot_plugin_alconna.uniseg import At, Image, Reply, UniMessage, image_fetch

from ..agent.documents import Extracted
from ..agent.framing import framed
from ..agent.persona import tagged_speaker
from ..i18n import Texts
from ..redaction import logger
from . import telegram_names
from .group_base import own_ids
from .media import MediaError, data_url, download_image, sniff_image
from .native import Content, own_content, quoted_content
from .shared_files import SharedFile, files_of
from .where import platform_name


@dataclass(frozen=True)
class Limits:
    """How many pictures, how big, how long to wait for each (MARSHO_MAX_IMAGES...)."""

    max_images: int = 4
    max_bytes: int = 5_000_000
    timeout: float = 10.0
    allow_private: bool = False
    """Fetch from private and loopback addresses too (MARSHO_IMAGE_ALLOW_PRIVATE)."""


@dataclass
class Question:
    """What goes to the model as the user's message, and tips for the asker."""

    parts: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI content parts: text and `image_url` (pictures as data URLs)."""
    tips: list[str] = field(default_factory=list)
    images_seen: int = 0
    """Pictures in the message and the quote (sent or not)."""
    quoted_text: str = ""
    """The quoted message's text, if the asker replied to one."""
    files: list[SharedFile] = field(default_factory=list)
    """The files of the quoted message, then of the message itself (not read yet:
    chat/question_files.py reads them)."""
    read: list[Extracted] = field(default_factory=list)
    """Those of `files` that were read (chat/question_files.py), for the model."""
    unread: list[str] = field(default_factory=list)
    """The names of those that could not be read (the asker gets a tip for each)."""

    @property
    def text(self) -> str:
        return "\n".join(p["text"] for p in self.parts if p["type"] == "text").strip()

    @property
    def has_pictures(self) -> bool:
        return any(p["type"] == "image_url" for p in self.parts)

    def content(self) -> str | list[dict[str, Any]]:
        """A plain string when there is no picture (what every endpoint accepts), else parts."""
        return self.parts if self.has_pictures else self.text


def _megabytes(count: int) -> str:
    return f"{count / 1_000_000:.3g} MB"


def sees_pictures(model: str, patterns: Iterable[str]) -> bool:
    """Whether MARSHO_VISION_MODELS names `model` (shell-style patterns, any case)."""
    # asked at every turn with the same model and list: the answer is kept by both (a model or
    # a list changed at run time is another key)
    return _sees_pictures(model, tuple(patterns))


@functools.lru_cache(maxsize=128)
def _sees_pictures(model: str, patterns: tuple[str, ...]) -> bool:
    name = model.casefold()
    return any(fnmatch.fnmatchcase(name, pattern.casefold()) for pattern in patterns)


def text_only(bot: Bot, event: Event) -> bool:
    """True when the message has nothing but text: no picture, no quote (the cheap check that
    spares plain questions alconna's message conversion). Only OneBot v11 says so cheaply (its
    quote is `event.reply`); elsewhere a quote lives in fields of each platform's own (Telegram's
    `reply_to_message`, Kook's quote, Feishu's parent id) and a rich-text post hides pictures in a
    text segment, so alconna reads every message there."""
    if bot.adapter.get_name() != "OneBot V11" or getattr(event, "reply", None):
        return False
    try:
        return all(segment.is_text() for segment in event.get_message())
    except Exception:  # not a message event
        return True


_SENDER_FIELDS = ("sender", "author", "from_", "user")
"""Where a quoted message names its sender: OneBot and QQ `sender`, Discord `author`, Telegram
`from_`, Satori and Kook `user`/`author`."""
_ID_FIELDS = ("user_id", "id", "id_", "open_id", "user_openid", "member_openid")
_NAME_FIELDS = ("card", "nickname", "nick", "global_name", "first_name", "username", "name")


def _sender(bot: Bot, origin: Any, marsho_name: str) -> tuple[str | None, str | None]:
    """(the name a quoted message's sender goes by, their id; None for the bot's own)."""
    # (a Satori segment's `author` is its builder, not a sender: the quote's author is a child)
    sender = next((s for f in _SENDER_FIELDS
                   if (s := getattr(origin, f, None)) is not None and not callable(s)), None)
    sender = sender if sender is not None else _satori_author(origin)
    if sender is None:
        return None, None
    user_id = next((i for f in _ID_FIELDS if (i := getattr(sender, f, None)) is not None), None)
    if user_id is not None and str(user_id) in own_ids(bot):
        return marsho_name, None
    name = next((n for f in _NAME_FIELDS if isinstance(n := getattr(sender, f, None), str) and n), None)
    name = name or user_id
    return (str(name) if name else None), (str(user_id) if user_id is not None else None)


def _satori_author(origin: Any) -> Any:
    """The sender of a Satori `<quote>` element: its `<author id name>` child (as an object with
    `id` and `name`); None without one."""
    for child in getattr(origin, "children", None) or ():
        if getattr(child, "type", None) == "author" and isinstance(getattr(child, "data", None), dict):
            data = child.data
            return SimpleNamespace(id=data.get("id"), name=data.get("name") or data.get("nick"))
    return None


NAME_CHARS = 32
"""Characters of a display name shown beside an id (a mention, a quote's sender)."""
_BRACKETS = re.compile(r"[()（）\[\]【】]")


def clean_name(name: str) -> str:
    """A display name as shown beside an id: one line, no brackets (a name cannot write its own
    "(id:...)" part, nor close a marker), at most NAME_CHARS characters."""
    return " ".join(_BRACKETS.sub("", name).split())[:NAME_CHARS]


def labelled(name: str | None, user_id: str, t: Texts) -> str:
    """A person as the model reads them where it may act on them: `Alice(id:123)`."""
    return f"{clean_name(name or '') or t('mention.unnamed')}(id:{user_id})"


@dataclass(frozen=True)
class Quoted:
    """The quoted message as read: its content, who sent it (their name and id, None when
    unknown or the bot itself) and its id."""

    content: Content
    sender: str | None = None
    sender_id: str | None = None
    message_id: str = ""

    def label(self, t: Texts, platform: str, reserved: Iterable[str] = ()) -> str:
        """The line that opens the quote: who sent it (a speaker's label with their short id,
        `Bob#1a2b`: one line, nobody else's), and with its id (for group__recall) their id."""
        if not self.message_id:
            if not self.sender:
                return t("quote.label_unknown")
            if self.sender_id is None:  # the bot's own (named by MARSHO_NAME), or an unknown id
                return t("quote.label", sender=clean_name(self.sender))
            return t("quote.label", sender=tagged_speaker(self.sender, platform, self.sender_id, reserved))
        if self.sender_id is not None:
            sender = labelled(self.sender, self.sender_id, t)
            return t("quote.label_ids", message_id=self.message_id, sender=sender)
        if self.sender:
            return t("quote.label_ids", message_id=self.message_id, sender=clean_name(self.sender))
        return t("quote.label_id", message_id=self.message_id)


def mentions(bot: Bot, message: UniMessage, event: Event | None = None) -> list[tuple[str, str | None]]:
    """The people a message @-mentions, in order, once each: (id, name as shown, if the platform
    gives one). A mention of the bot itself is left out: it calls marsho, it is no target. On
    Telegram an `@username` reads as its user's id where they were seen in the chat
    (chat/telegram_names.py)."""
    found: dict[str, str | None] = {}
    mine = own_ids(bot)
    telegram = bot.adapter.get_name() == "Telegram"
    telegram_chat = getattr(getattr(event, "chat", None), "id", None) if telegram else None
    for segment in message[At]:
        if segment.flag == "user" and segment.target and segment.target not in mine:
            target, shown = str(segment.target), segment.display
            if telegram_chat is not None and target.startswith("@"):
                if target[1:].casefold() == str(getattr(bot, "username", "") or "").casefold():
                    continue  # the bot's own username
                user = telegram_names.user_of(telegram_chat, target)
                target, shown = (user, shown or target) if user is not None else (target, shown)
            found.setdefault(target, shown)
    return list(found.items())


def _check(data: bytes, limits: Limits) -> tuple[bytes, str]:
    if len(data) > limits.max_bytes:
        raise MediaError("too_large", f"{len(data)} bytes, the limit is {limits.max_bytes}")
    mime = sniff_image(data)
    if mime is None:
        raise MediaError("not_image")
    return data, mime


async def _through_adapter(bot: Bot, event: Event, image: Image, limits: Limits,
                           message_id: str | None = None) -> tuple[bytes, str]:
    """A picture the platform names by a file id only (Telegram, OneBot v12, Feishu): alconna
    asks the adapter for it, within the time cap; the size cap is checked on what came back
    (the platform's own API bounds it: Telegram's at 20 MB). Whatever goes wrong is logged as
    the kind of error only: a Telegram file address carries the bot's token."""
    if message_id is not None and bot.adapter.get_name() == "Feishu":  # a quoted message's picture
        fetching = bot.call_api(f"im/v1/messages/{message_id}/resources/{image.id}", method="GET",
                                params={"type": "image"})
    else:
        fetching = image_fetch(event, bot, {}, image)
    try:
        data = await asyncio.wait_for(fetching, limits.timeout)
    except asyncio.TimeoutError:
        raise MediaError("timeout", f"the adapter did not give the picture in {limits.timeout:g} s") from None
    except Exception as error:
        kind = type(error).__name__
        raise MediaError("network", f"the adapter could not fetch the picture: {kind}") from None
    if not data:
        raise MediaError("bad_url", "the adapter has no way to fetch this picture")
    return _check(bytes(data), limits)


async def _fetch(bot: Bot, event: Event, image: Image, limits: Limits,
                 message_id: str | None = None) -> tuple[bytes, str]:
    """A picture's bytes and type: given inline, downloaded from the adapter's address, or
    fetched through the adapter by its file id (of message `message_id`, for a quoted one)."""
    if image.raw is not None:
        return _check(image.raw_bytes, limits)
    if not image.url:
        if image.id:
            return await _through_adapter(bot, event, image, limits, message_id)
        raise MediaError("bad_url", "the picture has no address")
    # the address comes from the chat platform (QQ's picture servers) through the adapter; an
    # address in a message is still not trusted with the bot's network: private and loopback
    # addresses only when the owner allows them (an implementation serving files locally)
    return await download_image(image.url, max_bytes=limits.max_bytes, timeout=limits.timeout,
                                guarded=not limits.allow_private)


async def read_question(
    bot: Bot,
    event: Event,
    text: str,
    *,
    vision: bool,
    model: str,
    limits: Limits,
    marsho_name: str,
    t: Texts,
    speaker: str = "",
    ids: bool = False,
    continued: bool = False,
) -> Question:
    """The user's message for the model: `speaker` ("Alice#3f2a", in shared chats: every message
    starts with who speaks), the quoted message (labelled, with its pictures), then `text` (the
    question), then the asker's own pictures. With `ids` (where the group tools are offered),
    the quote's label carries its id and its sender's, and the people the message @-mentions
    follow the text with theirs (`@Alice(id:123)`); without, the question reads as before.
    `continued`: the message continues a labelled one above it (joined, MARSHO_DEBOUNCE_SECONDS).
    The quoted text is framed (framing.framed) and, in a shared chat, the question too: no line
    of theirs starts like a speaker's label or one of our marks."""
    question = Question()
    own: list[Image] = []
    quote: Quoted | None = None
    mentioned: list[tuple[str, str | None]] = []
    if not text_only(bot, event):
        own, quote, mentioned, question.files = await _read_message(bot, event, marsho_name)
    quoted = quote.content if quote else None
    if quote is not None and not ids:  # its sender's id only for their short id
        quote = Quoted(quote.content, quote.sender, quote.sender_id)
    mentioned = mentioned if ids else []
    quoted_images = quoted.images if quoted else []
    question.images_seen = len(own) + len(quoted_images)
    question.quoted_text = quoted.text.strip() if quoted else ""
    wanted = [*quoted_images, *own]
    tried = {id(image) for image in wanted[: limits.max_images]} if vision else set()
    pictures = await _pictures(bot, event, wanted, quoted.sources if quoted else {}, question.tips,
                               vision=vision, model=model, limits=limits, t=t)
    prefix = f"{speaker}: " if speaker else ""
    if quote is not None and quoted is not None:
        label = quote.label(t, platform_name(bot), [marsho_name])
        body = framed(quoted.text.strip(), alone=True) if quoted.text.strip() else ""
        question.parts.append({"type": "text", "text": f"{prefix}{label}\n{body}".strip()})
        question.parts += _image_parts(quoted_images, pictures, tried, t)
        question.parts.append({"type": "text", "text": t("quote.end")})
        prefix = ""
    text = _words(text, mentioned, t, frame=bool(speaker) or continued, alone=continued or quote is not None)
    if (prefix + text).strip():  # no empty text part: some OpenAI-compatible endpoints refuse one
        question.parts.append({"type": "text", "text": (prefix + text).rstrip()})
    question.parts += _image_parts(own, pictures, tried, t)
    return question


def _words(text: str, mentioned: list[tuple[str, str | None]], t: Texts, *, frame: bool, alone: bool) -> str:
    """The asker's own words: `frame`d in a shared chat (`alone`: after a quote or another
    message, on lines of their own), then the people they @-mention, with their ids, so that the
    model can name them to a tool."""
    if frame and text.strip():
        text = framed(text.strip(), alone=alone)
    if mentioned:
        people = " ".join(f"@{labelled(name, user_id, t)}" for user_id, name in mentioned)
        text = f"{text.rstrip()}\n{t('mention.line', mentions=people)}".lstrip("\n")
    return text


def discord_quoted(event: Event) -> Any:
    """The message a Discord message quotes: the one the event carries (`referenced_message`),
    else the one the adapter fetched for it (`reply`, by get_channel_message: Discord leaves
    `referenced_message` out when it did not look the message up), else the first snapshot of
    a forwarded message; None when there is none."""
    for found in (getattr(event, "referenced_message", None), getattr(event, "reply", None)):
        if isinstance(getattr(found, "content", None), str):
            return found
    snapshots = getattr(event, "message_snapshots", None)
    if isinstance(snapshots, list) and snapshots:
        found = getattr(snapshots[0], "message", None)
        if isinstance(getattr(found, "content", None), str):
            return found
    return None


def _embed_text(message: Any) -> str:
    """The text of a Discord message's embeds (what many bots answer in): titles, descriptions,
    fields, footers."""
    lines: list[str] = []
    for embed in getattr(message, "embeds", None) or ():
        for value in (getattr(embed, "title", None), getattr(embed, "description", None)):
            if isinstance(value, str) and value:
                lines.append(value)
        for item in getattr(embed, "fields", None) or ():
            name, value = getattr(item, "name", ""), getattr(item, "value", "")
            lines.append(f"{name}: {value}" if isinstance(name, str) and name else str(value))
        footer = getattr(getattr(embed, "footer", None), "text", None)
        if isinstance(footer, str) and footer:
            lines.append(footer)
    return "\n".join(lines)


_told_intent = False


def _with_quoted(bot: Bot, event: Event) -> tuple[Event, Any]:
    """(the event as the quote readers take it, the quoted message as the platform gave it): on
    Discord, with the quoted message in `referenced_message` wherever the adapter found it, and
    its embeds' text as its text when it has none of its own (without this a quote read empty:
    `[Quoted message]` then `[End of quote]`)."""
    if bot.adapter.get_name() != "Discord":
        return event, None
    quoted = original = discord_quoted(event)
    if quoted is not None and not quoted.content:
        shown = _embed_text(quoted)
        try:
            quoted = quoted.model_copy(update={"content": shown}) if shown else quoted
        except Exception:  # not a pydantic message
            pass
        if not shown and not getattr(quoted, "attachments", None):
            _no_content_intent()
    if quoted is None or quoted is getattr(event, "referenced_message", None):
        return event, original
    try:
        return event.model_copy(update={"referenced_message": quoted}), original  # type: ignore[attr-defined]
    except Exception:  # not a pydantic event
        return event, original


def quotes_another_chat(bot: Bot, event: Event) -> bool:
    """Whether a OneBot v11 question quotes a message of another chat (the implementation's
    get_msg answer, `event.reply`: its type, and the group NapCat and LLOneBot name): a reply
    segment is the sender's to write, and a message id of another group's must not bring that
    group's words or files here. Where the answer names no group, a group's message is taken to
    be this group's (the client quotes only within a chat)."""
    reply = getattr(event, "reply", None)
    if reply is None or bot.adapter.get_name() != "OneBot V11":
        return False
    group = getattr(event, "group_id", None)
    kind = getattr(reply, "message_type", None)
    if kind in ("group", "private") and (kind == "group") != (group is not None):
        return True
    quoted_group = getattr(reply, "group_id", None)
    return group is not None and quoted_group is not None and str(quoted_group) != str(group)


def _no_content_intent() -> None:
    """A Discord quote with nothing in it: most likely the bot lacks the Message Content intent
    (off in the adapter's defaults), which empties every message that does not mention it."""
    global _told_intent
    if not _told_intent:
        _told_intent = True
        logger.warning("marsho: Discord gave a quoted message without its text: give the bot the Message "
                       "Content intent (Developer Portal > Bot > Privileged Gateway Intents, and "
                       '"intent": {"message_content": true} in DISCORD_BOTS)')


async def _read_message(
    bot: Bot, event: Event, marsho_name: str
) -> tuple[list[Image], Quoted | None, list[tuple[str, str | None]], list[SharedFile]]:
    """(the asker's own pictures, the first quoted message that could be read, the people the
    message mentions, the files of the quote and of the message)."""
    try:
        message = await UniMessage.of(event.get_message(), bot=bot).attach_reply(event, bot)
    except Exception as error:  # an adapter alconna cannot read: the text is enough
        logger.warning(f"marsho: could not read the message's pictures or quote: {error}")
        message = UniMessage()
    event, platform_quote = _with_quoted(bot, event)
    foreign = quotes_another_chat(bot, event)
    if foreign:  # read as if it quoted nothing
        logger.info("marsho: the question quotes a message of another chat; the quote is not read")
        event = event.model_copy(update={"reply": None})  # type: ignore[attr-defined]
    own = own_content(bot, event, message).images
    mentioned = mentions(bot, message, event)
    try:
        files = files_of(bot, event, message, platform_quote)
    except Exception as error:  # a segment alconna cannot read: no files then
        logger.warning(f"marsho: could not read the message's files: {error}")
        files = []
    for reply in [] if foreign else message[Reply]:
        found = quoted_content(bot, event, reply)
        if found is None:  # the implementation could not find it (get_msg failed)
            continue
        quoted_by, sender_id = _sender(bot, reply.origin, marsho_name)
        if quoted_by is None and bot.adapter.get_name() == "Discord":
            quoted_by, sender_id = _sender(bot, getattr(event, "referenced_message", None), marsho_name)
        return own, Quoted(found, quoted_by, sender_id, str(reply.id or "")), mentioned, files
    return own, None, mentioned, files


async def _pictures(
    bot: Bot, event: Event, wanted: list[Image], sources: dict[int, str], tips: list[str], *,
    vision: bool, model: str, limits: Limits, t: Texts,
) -> dict[int, str]:
    """id(image) -> data URL of the `wanted` pictures the model gets; a tip in `tips` for those
    it does not (pictures off, a model without vision, too many, failed to load)."""
    if wanted and limits.max_images == 0:
        tips.append(t("tip.images_off"))
    elif wanted and not vision:
        left_out = t.plural("count.pictures", len(wanted))
        tips.append(t("tip.no_vision", model=model, pictures_text=left_out))
    elif wanted:
        kept = wanted[: limits.max_images]
        if len(wanted) > len(kept):
            at_most = t.plural("count.pictures", limits.max_images)
            tips.append(t("tip.image_too_many", pictures_text=at_most))
        return await _load_pictures(bot, event, kept, sources, tips, limits, t)
    return {}


async def _load_pictures(
    bot: Bot, event: Event, kept: list[Image], sources: dict[int, str], tips: list[str],
    limits: Limits, t: Texts,
) -> dict[int, str]:
    """Fetch `kept` side by side; id(image) -> data URL of those that loaded, one tip for the
    others."""
    pictures: dict[int, str] = {}
    results = await asyncio.gather(*(_fetch(bot, event, image, limits, sources.get(id(image)))
                                     for image in kept),
                                   return_exceptions=True)
    failures: list[str] = []
    for image, result in zip(kept, results, strict=True):
        if isinstance(result, MediaError):
            # the kind only: the details (hosts, addresses) are for the log, not the chat
            failures.append(t(f"media.{result.kind}", limit=_megabytes(limits.max_bytes),
                              seconds=f"{limits.timeout:g}"))
            hint = ("; if your OneBot implementation serves pictures on a local address, set "
                    "MARSHO_IMAGE_ALLOW_PRIVATE=true") if result.kind == "blocked" else ""
            where = image.url or f"file id {image.id}"
            logger.warning(f"marsho: picture {where}: {result.kind} {result.detail}{hint}")
        elif isinstance(result, BaseException):
            failures.append(t("media.network"))
            logger.opt(exception=result).warning("marsho: could not read a picture")
        else:
            pictures[id(image)] = data_url(*result)
    if failures:
        reasons = t("list.separator").join(failures)
        not_loaded = t.plural("count.pictures", len(failures))
        tips.append(t("tip.image_failed", pictures_text=not_loaded, reasons=reasons))
    return pictures


def _image_parts(
    images: list[Image], pictures: dict[int, str], tried: set[int], t: Texts
) -> list[dict[str, Any]]:
    """A part per picture: the picture itself when it loaded, else a placeholder saying whether
    it failed to load or was not sent."""
    parts: list[dict[str, Any]] = []
    for image in images:
        if id(image) in pictures:
            parts.append({"type": "image_url", "image_url": {"url": pictures[id(image)]}})
        elif id(image) in tried:
            parts.append({"type": "text", "text": t("image.failed_placeholder")})
        else:
            parts.append({"type": "text", "text": t("image.placeholder")})
    return parts
