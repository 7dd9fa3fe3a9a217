"""An answer as the chat gets it: split at paragraphs or sent as one forward message, formulas
and markdown images drawn as pictures when they can be, the thinking in a forward message of
its own when asked for, and tool progress lines. Answers go where they are told (`to`: a saved
chat's Target, or an event), else to the event NoneBot is handling (a handler's answer)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from nonebot.adapters import Bot, Event
from nonebot.adapters.onebot.v11 import Message as V11Message
from nonebot.adapters.onebot.v11 import MessageSegment as V11Segment
from nonebot.exception import ActionFailed
from nonebot.matcher import current_bot, current_event
from nonebot_plugin_alconna.uniseg import (
    CustomNode,
    Image,
    Reference,
    Segment,
    Target,
    Text,
    UniMessage,
    get_message_id,
)

from ..i18n import Texts
from ..redaction import logger, redact
from .loops import marked, with_marker
from .media import MediaError, download_image, sniff_image
from .richtext import (
    FormulaPart,
    ImageLinkPart,
    Part,
    TextPart,
    find_rich,
    render_formula,
    split_paragraphs,
)

MAX_FORMULAS = 8
"""Formulas of one answer drawn as pictures; the rest stay text."""
MAX_LINKED_IMAGES = 4
"""Markdown images of one answer downloaded; the rest stay text."""
REASONING_NODE_CHARS = 3000
FORWARD_PLATFORMS = frozenset({"OneBot V11"})
"""Adapters whose chats take a forward message (a bundle of messages); elsewhere a long answer
goes in parts and the thinking as a message of its own."""


def picture_segment(data: bytes) -> Image:
    """A picture to send, with its type (Satori and others need it: without one an image may
    arrive as the text "[image]")."""
    return Image(raw=data, mimetype=sniff_image(data) or "image/png")


def has_forward(bot: Bot) -> bool:
    return bot.adapter.get_name() in FORWARD_PLATFORMS


@dataclass(frozen=True)
class Delivery:
    """How answers go out (MARSHO_LONG_ANSWER and the rendering settings)."""

    long_answer: Literal["split", "forward", "single"] = "split"
    split_chars: int = 800
    max_split_messages: int = 4
    render_latex: bool = True
    render_inline_latex: bool = False
    render_images: bool = True
    image_max_bytes: int = 5_000_000
    image_timeout: float = 10.0
    name: str = "marsho"
    max_forward_nodes: int = 30
    """Messages one forward message may hold (MARSHO_MAX_FORWARD_NODES)."""
    texts: Texts = field(default_factory=Texts)
    """The language of what is said around the answer (MARSHO_LANG)."""


_destination: ContextVar[tuple[Bot, Event | Target] | None] = ContextVar("marsho_destination", default=None)
"""Where this task's messages go (through which bot), when not to the event being handled."""


def speak_to(bot: Bot, to: Event | Target) -> None:
    """Send what this task says from now on (tool progress lines too) to `to` through `bot`: for
    a task that speaks outside a handler (an unsolicited reply, a reminder), where NoneBot is
    handling no event. It holds in the calling task's own context, and ends with it."""
    _destination.set((bot, to))


@contextmanager
def _speaking_to(bot: Bot, to: Event | Target | None) -> Iterator[None]:
    """`speak_to` for the block only; None: where this task already speaks."""
    if to is None:
        yield
        return
    token = _destination.set((bot, to))
    try:
        yield
    finally:
        _destination.reset(token)


async def _send(message: UniMessage[Segment], *, reply: bool) -> bool | None:
    """Send where this task speaks (`speak_to`), else to the event being handled; a failure is
    logged (the turn is already stored), never raised. True: sent; False: refused (ActionFailed:
    not delivered); None: unknown (a network error or a timeout, after which the message may
    well have arrived). Only a message to an event can quote it (`reply`)."""
    destination = _destination.get()
    try:
        if destination is None:
            if not await _sent_plainly(message, reply=reply):
                await message.send(reply_to=reply)
        else:
            bot, to = destination
            await message.send(target=to, bot=bot, reply_to=reply and isinstance(to, Event))
        return True
    except ActionFailed as error:
        logger.opt(exception=error).error(f"marsho: the chat refused the message: {error}")
        return False
    except Exception as error:
        logger.opt(exception=error).error(f"marsho: could not send the message: {error}")
        return None


async def _sent_plainly(message: UniMessage[Segment], *, reply: bool) -> bool:
    """Send one text to the OneBot v11 event being handled the way alconna's `send` would (the
    same `send_msg`: the quote, then the text), without its conversion: the plain answer of
    nearly every turn. False, sending nothing, for any other message or chat."""
    if len(message) != 1 or type(message[0]) is not Text:
        return False
    bot, event = current_bot.get(None), current_event.get(None)
    if bot is None or event is None or bot.adapter.get_name() != "OneBot V11":
        return False
    segment = V11Segment.text(message[0].text)
    quoted = [V11Segment.reply(int(get_message_id(event, bot))), segment] if reply else [segment]
    await bot.send(event, V11Message(quoted))
    return True


def _marked(message: UniMessage[Segment]) -> UniMessage[Segment]:
    """`message` with the marker at the end of its last text where its text could call another
    marsho (chat/loops.py); a forward message, or one without text, as it is."""
    texts = [i for i, segment in enumerate(message) if isinstance(segment, Text)]
    if not texts:
        return message
    said = "".join(str(message[i]) for i in texts)
    if marked(said) == said:
        return message
    segments = list(message)
    last = segments[texts[-1]]
    assert isinstance(last, Text)
    segments[texts[-1]] = Text(with_marker(last.text))
    return UniMessage[Segment](segments)


async def _linked_image(url: str, delivery: Delivery) -> bytes | None:
    try:
        # the address comes from the model: only public addresses (SSRF guard), capped
        data, _ = await download_image(url, max_bytes=delivery.image_max_bytes,
                                       timeout=delivery.image_timeout, guarded=True)
        return data
    except MediaError as error:
        logger.info(f"marsho: markdown image {url} left as text: {error.kind} {error.detail}")
    except Exception as error:
        logger.opt(exception=error).warning(f"marsho: markdown image {url} left as text")
    return None


@dataclass
class Allowance:
    """Formulas still to draw and markdown images still to fetch for one answer: an answer split
    into chunks shares one, so the caps hold for the whole answer, not for each chunk."""

    formulas: int = MAX_FORMULAS
    links: int = MAX_LINKED_IMAGES


async def rich_segments(text: str, delivery: Delivery, allowance: Allowance | None = None) -> list[Segment]:
    """Text with formulas and markdown images as pictures where they can be drawn or fetched;
    whatever cannot stays as the text it was. At most MAX_FORMULAS formulas and MAX_LINKED_IMAGES
    images are tried (those of `allowance` when given, which this call uses up)."""
    if not (delivery.render_latex or delivery.render_images):
        return [Text(text)]
    parts = find_rich(text, inline_formulas=delivery.render_latex and delivery.render_inline_latex)
    formulas, links = _to_draw(parts, delivery, allowance if allowance is not None else Allowance())
    if not formulas and not links:
        return [Text(text)]
    drawn = await asyncio.gather(
        *(asyncio.to_thread(render_formula, p.source) for p in formulas),
        *(_linked_image(p.url, delivery) for p in links),
    )
    return _assembled(parts, dict(zip(map(id, [*formulas, *links]), drawn, strict=True)))


def _to_draw(parts: Sequence[Part], delivery: Delivery,
             allowance: Allowance) -> tuple[list[FormulaPart], list[ImageLinkPart]]:
    """The formulas and images of `parts` to try, within what `allowance` has left (used up
    here, before any await: chunks gathered in order use the allowance in order)."""
    formulas = [p for p in parts if isinstance(p, FormulaPart)] if delivery.render_latex else []
    links = [p for p in parts if isinstance(p, ImageLinkPart)] if delivery.render_images else []
    formulas, links = formulas[:max(0, allowance.formulas)], links[:max(0, allowance.links)]
    allowance.formulas -= len(formulas)
    allowance.links -= len(links)
    return formulas, links


def _assembled(parts: Sequence[Part], pictures: dict[int, bytes | None]) -> list[Segment]:
    """The segments of `parts`: a picture where one was drawn (`pictures`, by the part's id),
    the part's text elsewhere, runs of text joined; no segment of blank text."""
    segments: list[Segment] = []
    for part in parts:
        picture = pictures.get(id(part))
        last_text = segments[-1] if segments and isinstance(segments[-1], Text) else None
        if picture is not None:
            if last_text is not None:  # a display formula or an image stands on its own line
                segments[-1] = Text(last_text.text.rstrip(" \t"))
            segments.append(picture_segment(picture))
            continue
        piece = part.text if isinstance(part, TextPart) else part.raw
        if last_text is not None:
            segments[-1] = Text(last_text.text + piece)
        else:
            segments.append(Text(piece.lstrip("\n") if segments else piece))
    return [s for s in segments if not (isinstance(s, Text) and not s.text.strip())]


def _forward(bot: Bot, name: str, contents: Sequence[list[Segment]]) -> UniMessage[Segment]:
    nodes = [CustomNode(uid=str(bot.self_id), name=name, content=list(content)) for content in contents]
    return UniMessage[Segment]([Reference(nodes=nodes)])


async def send_reasoning(bot: Bot, reasoning: str, delivery: Delivery, *,
                         to: Event | Target | None = None) -> None:
    """The model's thinking as a forward message of its own (skipped, with a log line, where
    the chat cannot take forward messages); `to` as for `send_answer`."""
    with _speaking_to(bot, to):
        await _reasoning(bot, reasoning, delivery)


async def _reasoning(bot: Bot, reasoning: str, delivery: Delivery) -> None:
    reasoning = redact(reasoning.strip())
    if not reasoning:
        return
    chunks = split_paragraphs(reasoning, REASONING_NODE_CHARS)[: delivery.max_forward_nodes]
    title = f"{delivery.name}: {delivery.texts('reply.reasoning_title')}"
    if not has_forward(bot):  # no forward messages here: the thinking in messages of its own
        for index, chunk in enumerate(chunks[: delivery.max_split_messages]):
            await _send(UniMessage([Text(f"{title}\n{chunk}" if index == 0 else chunk)]), reply=False)
        return
    if await _send(_forward(bot, title, [[Text(c)] for c in chunks]), reply=False) is not True:
        logger.warning("marsho: the reasoning was not sent (MARSHO_SEND_REASONING)")


def _capped(contents: list[list[Segment]], delivery: Delivery) -> list[list[Segment]]:
    """At most `max_forward_nodes` messages: an answer that long is cut, with a note."""
    if len(contents) <= delivery.max_forward_nodes:
        return contents
    cut = delivery.texts("reply.forward_cut", count=len(contents), limit=delivery.max_forward_nodes)
    return [*contents[: delivery.max_forward_nodes - 1], [Text(cut)]]


async def send_answer(bot: Bot, text: str, images: Sequence[bytes], delivery: Delivery, *,
                      quote: bool = True, to: Event | Target | None = None) -> None:
    """Send an answer through `bot` to `to` (a chat's Target, or an event), or where this task
    speaks (`speak_to`), else to the event being handled: the first message quotes the question
    (unless not `quote`: an unsolicited reply; a Target has no question to quote); pictures the
    tools made go last.
    No secret of the bot's goes out (the text is redacted), and a forward message holds at most
    `max_forward_nodes` messages."""
    with _speaking_to(bot, to):
        await _answer(bot, text, images, delivery, quote=quote)


async def _answer(bot: Bot, text: str, images: Sequence[bytes], delivery: Delivery, *, quote: bool) -> None:
    # an answer that starts with a trigger word ends with the marker (`_marked`): another marsho
    # in the chat does not answer it
    text = redact(text)
    pictures: list[Segment] = [picture_segment(i) for i in images]
    long = len(text) > delivery.split_chars
    if not long or delivery.long_answer == "single":
        await _send(_marked(UniMessage([*await rich_segments(text, delivery), *pictures])), reply=quote)
        return
    chunks = split_paragraphs(text, delivery.split_chars)
    allowance = Allowance()
    contents = list(await asyncio.gather(*(rich_segments(c, delivery, allowance) for c in chunks)))
    wants_forward = delivery.long_answer == "forward" or len(chunks) > delivery.max_split_messages
    if wants_forward and not has_forward(bot):  # parts, as many as a forward message may hold
        logger.debug(f"marsho: {bot.adapter.get_name()} has no forward messages; the answer goes in parts")
        contents = _capped(contents, delivery)
    elif wants_forward:
        nodes = _capped([*contents, pictures] if pictures else contents, delivery)
        if await _send(_forward(bot, delivery.name, nodes), reply=False) is not False:
            return  # sent, or perhaps sent: sending it again in parts could post it twice
        logger.info("marsho: the chat refused the forward message; sending the answer in parts")
    for index, content in enumerate(contents):
        last = index == len(contents) - 1
        # each part may start a message another marsho reads (chat/loops.py)
        await _send(_marked(UniMessage([*content, *(pictures if last else [])])), reply=quote and index == 0)


async def send_progress(tool_names: Sequence[str], delivery: Delivery) -> None:
    """"marsho is using weather__forecast …", once per round of tool calls (where this task
    speaks: `speak_to`, else the event being handled)."""
    shown = list(dict.fromkeys(tool_names))
    names = delivery.texts.join(shown)
    said = delivery.texts("progress.using", name=delivery.name, tools=names)
    await _send(UniMessage([Text(said)]), reply=False)
