"""What alconna does not read of each platform's messages: the text and pictures of a Feishu
rich-text post (alconna keeps it as an opaque Hyper segment), Discord's attachments (alconna
keeps only their file names) and referenced message, a Kook picture quote, the attachments of a
quoted QQ message. Everything else is read through alconna's UniMessage.

A quoted picture is fetched like the asker's own (the same caps and guard); one that needs the
platform's API (Feishu) remembers which message it belongs to.
"""

from __future__ import annotations

import json
import mimetypes
from dataclasses import dataclass, field
from typing import Any

from nonebot.adapters import Bot, Event
from nonebot_plugin_alconna.uniseg import Hyper, Image, Reply, UniMessage


@dataclass
class Content:
    """A message's text and pictures as marsho reads them."""

    text: str = ""
    images: list[Image] = field(default_factory=list)
    sources: dict[int, str] = field(default_factory=dict)
    """id(image) -> the id of the message that holds it, for pictures fetched by message (Feishu)."""


def _attachment_images(attachments: Any) -> list[Image]:
    """Pictures among a message's attachments (QQ, Discord: objects with a URL)."""
    images = []
    for attachment in attachments or ():
        url = getattr(attachment, "url", None)
        if not url:
            continue
        kind = getattr(attachment, "content_type", None) or mimetypes.guess_type(
            getattr(attachment, "filename", None) or str(url).split("?")[0])[0]
        if kind is None or str(kind).startswith("image"):  # QQ gives no type: a picture is what it sends
            url = url if "://" in str(url) else f"https://{url}"  # QQ's addresses come without a scheme
            images.append(Image(url=str(url), id=getattr(attachment, "filename", None) or str(url)))
    return images


def feishu_post(data: Any) -> tuple[str, list[str]] | None:
    """(text, image keys) of a Feishu rich-text post ({"title", "content": [[element...]...]},
    or the same as JSON text, or keyed by language); None if `data` is not one. Leading mentions
    are left out of the text, as an @ of the bot is in a plain message."""
    post = _feishu_post_object(data)
    if post is None:
        return None
    lines: list[str] = []
    keys: list[str] = []
    for paragraph in post["content"]:
        line = _feishu_line(paragraph if isinstance(paragraph, list) else [], bool(lines), keys)
        if line:
            lines.append(line)
    title = str(post.get("title") or "").strip()
    return "\n".join([title, *lines] if title else lines), keys


def _feishu_post_object(data: Any) -> dict[str, Any] | None:
    """The post itself, from JSON text or from inside its one language key; None if `data` is
    not a post."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except ValueError:
            return None
    if isinstance(data, dict) and "content" not in data and len(data) == 1:
        data = next(iter(data.values()))  # {"zh_cn": {...}}
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        return None
    return data


def _feishu_line(paragraph: list[Any], after_text: bool, keys: list[str]) -> str:
    """One paragraph's text (its pictures' keys go to `keys`); `after_text`: lines came before
    it, so a mention at its start is inside the message, not the leading @ of the bot."""
    words: list[str] = []
    for element in paragraph:
        tag = element.get("tag") if isinstance(element, dict) else None
        if tag in ("text", "a", "md", "code_block"):
            words.append(str(element.get("text", "")))
        elif tag == "img" and element.get("image_key"):
            keys.append(str(element["image_key"]))
        elif tag == "at" and (words or after_text):  # an @ inside the sentence stays readable
            words.append(f"@{element.get('user_name') or element.get('user_id', '')}")
    return "".join(words).strip()


def own_content(bot: Bot, event: Event, message: UniMessage) -> Content:
    """The asker's message: its text segments and pictures, with what alconna left out."""
    platform = bot.adapter.get_name()
    content = Content(text=message.extract_plain_text(), images=list(message[Image]))
    if platform == "Feishu":
        for segment in message[Hyper]:
            post = feishu_post(segment.content if segment.content is not None else segment.raw)
            if post is not None:
                text, keys = post
                content.text = "\n".join(t for t in (content.text, text) if t)
                content.images += [Image(id=key) for key in keys]
    elif platform == "Discord":
        # alconna names an attachment by its file name only; the address is on the event
        content.images = [i for i in content.images if i.url] + _attachment_images(
            getattr(event, "attachments", None))
    return content


def _kook_picture(origin: Any) -> list[Image]:
    if getattr(origin, "type", None) == 2 and isinstance(getattr(origin, "content", None), str):
        return [Image(url=origin.content, id=origin.content)]  # a picture message: its content is the address
    return []


def quoted_content(bot: Bot, event: Event, reply: Reply) -> Content | None:
    """The quoted message's text and pictures: alconna's reply fetching first, then the
    adapter's own reply origin (Discord's referenced message, Kook's quote, QQ's attachments,
    Feishu's post); None when the platform gave nothing to read."""
    platform = bot.adapter.get_name()
    origin = reply.origin
    body, extra = _quoted_body(platform, event, reply)
    if platform == "Feishu":
        raw = body if isinstance(body, str) else getattr(getattr(origin, "body", None), "content", None)
        post = _feishu_quoted_post(raw, reply) if raw else None
        if post is not None:
            return post
        if isinstance(raw, str):
            body = _feishu_plain_text(raw)
    if body is None:
        body = _origin_content(origin)
    if body is None and not extra:
        return None
    content = _read_quoted_body(bot, body, extra)
    if platform == "QQ":  # alconna may read the quoted text only; the pictures are attachments
        known = {image.url for image in content.images}
        content.images += [i for i in _attachment_images(getattr(origin, "attachments", None))
                           if i.url not in known]
    return content


def _quoted_body(platform: str, event: Event, reply: Reply) -> tuple[Any, list[Image]]:
    """(the quoted message as alconna or the platform gives it, pictures beside it): Discord's
    referenced message when alconna fetched none, a Kook picture quote."""
    if platform == "Discord" and reply.msg is None:
        referenced = getattr(event, "referenced_message", None)
        if referenced is not None:
            return (getattr(referenced, "content", None) or "",
                    _attachment_images(getattr(referenced, "attachments", None)))
    elif platform == "Kaiheila":
        extra = _kook_picture(reply.origin)
        if extra:
            return "", extra
    return reply.msg, []


def _feishu_quoted_post(raw: Any, reply: Reply) -> Content | None:
    """A quoted Feishu post, its pictures remembered as the quoted message's (fetched by it)."""
    post = feishu_post(raw)
    if post is None:
        return None
    text, keys = post
    content = Content(text=text, images=[Image(id=key) for key in keys])
    message_id = getattr(reply.origin, "message_id", None) or str(reply.id)
    content.sources = {id(image): str(message_id) for image in content.images}
    return content


def _feishu_plain_text(raw: str) -> str:
    """A plain Feishu message quoted: the text of {"text": "..."}, else the raw string."""
    try:
        loaded = json.loads(raw)
    except ValueError:
        return raw
    return loaded.get("text", raw) if isinstance(loaded, dict) else raw


def _read_quoted_body(bot: Bot, body: Any, extra: list[Image]) -> Content:
    """Text and pictures of a quoted body (text, or a message alconna can read), with `extra`
    pictures after its own."""
    content = Content(images=list(extra))
    if isinstance(body, str):
        content.text = body
    elif body is not None:
        try:
            message = UniMessage.of(body, bot=bot)
        except Exception:
            content.text = str(body)
        else:
            content.text = message.extract_plain_text()
            content.images = list(message[Image]) + content.images
    return content


_CONTENT_FIELDS = ("message", "content", "text")
"""Where an adapter's reply origin keeps the quoted message when alconna fetched no content."""


def _origin_content(origin: Any) -> Any:
    for name in _CONTENT_FIELDS:
        value = getattr(origin, name, None)
        if value and not callable(value):  # a segment's `text` is its builder, not a quote
            return value
    return None

