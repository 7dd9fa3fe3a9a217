"""An answer delivered while it is written (MARSHO_SEGMENTED_REPLY): the text a streamed turn
tells (agent/model/stream.py says what it is told) taken as it grows, and what to send or edit.

Where a sent message can be edited (EDITING_PLATFORMS) it is one message that grows, edited at
most once every EDIT_INTERVAL seconds (what comes meanwhile goes in the next edit), the last edit
carrying the whole final text (past EDIT_ROOM characters it goes on in a new message);
pictures (drawn formulas, markdown images, the tools' pictures) follow it in one message, the
formulas staying as text in the edited message. Elsewhere each
finished paragraph (a blank line after it, outside a fenced code block: a table or a $$ formula
holds no blank line, chat/richtext.py) is sent as it is done, rendered as `send_answer` renders
an answer, in at most `limit` messages, the first quoting the question; what is past the first
`limit - 1` goes in the last. MARSHO_SPLIT_CHARS, MARSHO_MAX_SPLIT_MESSAGES and
MARSHO_LONG_ANSWER do not apply to an answer that streamed; one that did not goes as before."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar

from nonebot.adapters import Bot
from nonebot_plugin_alconna.uniseg import Image, Receipt, Segment, Text, UniMessage

from ..agent.llm import TextHook
from ..redaction import logger, redact
from .loops import marked
from .outgoing import Delivery, picture_segment, rich_segments, send_answer
from .richtext import code_fences

EDITING_PLATFORMS = frozenset({"Telegram", "Discord", "Kaiheila"})
"""Adapters whose sent messages marsho edits as the answer grows (through uniseg's Receipt:
Telegram `edit_message_text`, Discord's message PATCH, Kook `message_update`)."""
EDIT_ROOM = {"Telegram": 4000, "Discord": 1900, "Kaiheila": 4000}
"""Characters of answer one edited message holds (Telegram takes 4,096, Discord 2,000; room is
left for the loop marker and redaction's longer placeholder): a longer answer goes on in a new
message."""
EDIT_INTERVAL = 1.0
"""Seconds between two edits of a growing message at least (Telegram allows about one a second
per chat)."""

_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_LAST_WORD = re.compile(r"\S+\Z")


def settled(text: str) -> str:
    """`text` as it may be shown while it still grows: without the word being written (half of
    a secret is not yet what redaction finds)."""
    return _LAST_WORD.sub("", text)


class Paragraphs:
    """The paragraphs of a text as it grows: each one finished (followed by a blank line outside
    any fenced code block) is taken once, stripped; the one still being written is not."""

    def __init__(self) -> None:
        self.text = ""
        self.taken = 0
        """Where the text not taken yet starts."""

    def add(self, piece: str) -> list[str]:
        """Take `piece`; the paragraphs it finished."""
        self.text += piece
        if "\n" not in piece:
            return []
        text = self.text
        # an unclosed fence reaches the end of the text: no blank line inside it is a break
        fences = [(fence.start, fence.end) for fence in code_fences(text) if fence.end > self.taken]
        finished: list[str] = []
        for blank in _BLANK_LINE.finditer(text, self.taken):
            if any(start <= blank.start() < end for start, end in fences):
                continue
            paragraph = text[self.taken:blank.start()].strip()
            self.taken = blank.end()
            if paragraph:
                finished.append(paragraph)
        return finished

    def rest(self) -> str:
        """What was told and not taken yet, stripped."""
        return self.text[self.taken:].strip()


def cut_at(text: str, room: int) -> int:
    """Where a message of at most `room` characters of `text` ends: after its last paragraph
    that fits (a blank line outside code blocks), else its last line, else its last word,
    else at `room`."""
    head = text[:room]
    fences = [(fence.start, fence.end) for fence in code_fences(text)]
    breaks = [blank.start() for blank in _BLANK_LINE.finditer(head)
              if not any(start <= blank.start() < end for start, end in fences)]
    for found in (breaks[-1] if breaks else -1, head.rfind("\n"), head.rfind(" ")):
        if found > 0:
            return found
    return room


def remainder(text: str, sent: Sequence[str]) -> str:
    """`text` without the start already sent: the longest run of the last `sent` pieces it
    starts with (pieces of an earlier response, such as the words before a round of tool calls,
    are not in the final text); all of it when it starts with none."""
    for count in range(len(sent), 0, -1):
        rest = text.lstrip()
        for piece in sent[-count:]:
            if not rest.startswith(piece):
                break
            rest = rest[len(piece):].lstrip()
        else:
            return rest.rstrip()
    return text.strip()


Sleep = Callable[[float], Awaitable[None]]


class SegmentedReply:
    """One question's answer as it streams: `hook()` is the turn's `on_text`, `finish` sends
    what is left of the final text (False: nothing streamed, deliver it as before), `fail` sends
    what was told and not shown when the turn fails."""

    def __init__(self, bot: Bot, delivery: Delivery, *, limit: int, edits: bool | None = None,
                 on_sent: Callable[[str], object] | None = None, interval: float = EDIT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.bot = bot
        self.on_sent = on_sent
        """Told each segment's text before it goes (the loop guard knows what marsho said: an
        echo of a later segment is an echo too)."""
        self.delivery = delivery
        self.limit = max(1, limit)
        self.edits = bot.adapter.get_name() in EDITING_PLATFORMS if edits is None else edits
        self.interval, self.clock, self.sleep = interval, clock, sleep
        self.paragraphs = Paragraphs()
        self.sent: list[str] = []
        """The paragraphs sent so far (each its own message)."""
        self.told = False
        """Some text streamed: the answer is delivered here, not as before."""
        self.receipt: Receipt | None = None
        self.shown = ""
        """The text the growing message holds."""
        self.finished: list[str] = []
        """The texts of the growing messages that were full: the answer went on in another."""
        self.base = 0
        """Where, in the text told, the growing message's own text starts."""
        self.room = EDIT_ROOM.get(bot.adapter.get_name(), min(EDIT_ROOM.values()))
        """Characters one growing message holds at most."""
        self.broken = False
        """The growing message could not be sent or edited: the answer goes as before."""
        self.on_shown: Callable[[], object] | None = None
        """Told once, as the answer's first text streams in (a line that comes later cannot join
        the question any more: its answer is on its way to the chat)."""
        self.last_edit = 0.0
        self._pump: asyncio.Task[None] | None = None

    def hook(self) -> TextHook:
        """The text hook of one attempt at the turn (a question asked again with the lines that
        joined it starts a new text; what was sent stays sent)."""
        self.paragraphs, self.base = Paragraphs(), 0
        return self._told

    async def _told(self, piece: str) -> None:
        if not self.told and self.on_shown is not None:
            self.on_shown()
        self.told = True
        if self.edits:
            await self._grow(piece)
            return
        for paragraph in self.paragraphs.add(piece):
            if len(self.sent) < self.limit - 1:
                await self._send(paragraph, ())
                self.sent.append(paragraph)

    async def finish(self, text: str, images: Sequence[bytes] = ()) -> bool:
        """The turn is answered with `text` (the answer with its tips): what is not shown yet is
        sent (or edited in), the pictures with it. False when nothing streamed (or the growing
        message failed): the caller sends the answer as before."""
        if not self.told:
            return False
        if self.edits:
            return await self._finish_edits(text, images)
        rest = remainder(text, self.sent)
        if rest or images:
            await self._send(rest, images)
        return True

    async def fail(self) -> None:
        """The turn failed after part of it streamed: what was told and not shown yet goes now,
        before the failure's message."""
        if not self.told:
            return
        if self.edits:
            await self._stop_pump()
            if not self.broken and (self.receipt is not None or self.finished):
                await self._show(self._growing())
            return
        rest = remainder(settled(self.paragraphs.text), self.sent)
        if rest:
            await self._send(rest, ())

    async def _send(self, text: str, images: Sequence[bytes]) -> None:
        """One segment, rendered and marked as an answer is (chat/outgoing.py), quoting the
        question when it is the first."""
        single = dataclasses.replace(self.delivery, long_answer="single")
        if self.on_sent is not None:
            self.on_sent(text)
        await send_answer(self.bot, text, images, single, quote=not self.sent)

    # where messages are edited -------------------------------------------------------------

    def _growing(self) -> str:
        """What the growing message is to hold now: the text told since it began, settled."""
        return settled(self.paragraphs.text[self.base:])

    async def _grow(self, piece: str) -> None:
        self.paragraphs.add(piece)
        if self.broken:
            return
        if self.receipt is None and not self.finished:  # the first piece goes at once
            self.base += await self._show(self._growing())
        elif self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._edits())

    async def _edits(self) -> None:
        """Edit the message with the text told so far until it holds all of it, at most once
        every `interval` seconds."""
        while self._growing() != self.shown and not self.broken:
            wait = self.last_edit + self.interval - self.clock()
            if wait > 0:
                await self.sleep(wait)
            self.base += await self._show(self._growing())

    async def _stop_pump(self) -> None:
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        self._pump = None

    async def _show(self, text: str) -> int:
        """Make the growing message hold `text`; where that is more than a message holds
        (`room`), the message is finished at a paragraph (else a line, a word) and a new one
        started with the rest. The characters of `text` now in finished messages."""
        done = 0
        while not self.broken:
            rest = text[done:]
            cut = len(rest) if len(rest) <= self.room else cut_at(rest, self.room)
            shown = await (self._edit(rest[:cut]) if self.receipt is not None else self._start(rest[:cut]))
            if not shown or cut == len(rest):
                break
            self.finished.append(rest[:cut].strip())
            self.receipt, done = None, done + cut  # the rest starts a message of its own
        return done

    async def _start(self, text: str) -> bool:
        """A new growing message holding `text`; the first one quotes the question."""
        try:
            self.receipt = await UniMessage([Text(self._said(text))]).send(reply_to=not self.finished)
        except Exception as error:
            logger.opt(exception=error).warning(f"marsho: the growing answer could not be sent: {error}")
            self.broken = True
            return False
        self.last_edit = self.clock()
        self.shown = text
        return True

    async def _edit(self, text: str) -> bool:
        if text.strip() == self.shown.strip():
            self.shown = text
            return True
        assert self.receipt is not None
        try:
            await self.receipt.edit(UniMessage([Text(self._said(text))]))
        except Exception as error:
            logger.opt(exception=error).warning(f"marsho: the growing answer could not be edited: {error}")
            self.broken = True
            return False
        self.last_edit = self.clock()
        self.shown = text
        return True

    async def _finish_edits(self, text: str, images: Sequence[bytes]) -> bool:
        await self._stop_pump()
        if self.broken or (self.receipt is None and not self.finished):
            return False
        await self._show(remainder(text, self.finished))
        if self.broken:
            return False
        pictures: list[Segment] = [s for s in await rich_segments(redact(text), self.delivery)
                                   if isinstance(s, Image)]
        pictures += [picture_segment(image) for image in images]
        if pictures:
            await UniMessage(pictures).send()
        return True

    @staticmethod
    def _said(text: str) -> str:
        """The text as the growing message shows it: redacted, marked (chat/loops.py)."""
        return marked(redact(text.strip())) or "…"


_current: ContextVar[SegmentedReply | None] = ContextVar("marsho_segmented_reply", default=None)


def segmented(reply: SegmentedReply | None) -> None:
    """The answer of the question this task handles goes through `reply` (None: as before)."""
    _current.set(reply)


def current_segments() -> SegmentedReply | None:
    """The segmented reply of the question this task handles, if any (`segmented`)."""
    return _current.get()


def segments_hook() -> TextHook | None:
    """The text hook of a new attempt at the question this task handles, when its answer is
    shown as it is written (None: it is not)."""
    shown = _current.get()
    return shown.hook() if shown is not None else None
