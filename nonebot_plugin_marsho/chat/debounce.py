"""One answer to one thought (issue 17): messages from the same person in the same chat within
MARSHO_DEBOUNCE_SECONDS of a question join it. A picture sent just before `marsho what is
this` is kept (the last picture-only message of each person per chat, in memory, for the
window); a message that arrives while the question is being answered restarts it with the
merged question (at most MAX_RESTARTS times; the abandoned request's answer is dropped, and
the engine stores a turn only at its end, so nothing of it is kept).

A question with nothing following goes to the model at once: the common case pays nothing but
a dictionary entry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nonebot.adapters import Bot, Event

from .incoming import Question
from .where import sender_in_chat

MAX_RESTARTS = 2
"""Times one question is restarted with a follow-up; later messages are their own."""
MAX_KEPT_PICTURES = 10_000
"""Picture-only messages remembered at once (the oldest go first)."""


def person_in_chat(bot: Bot, event: Event) -> str:
    """Whose message where (chat/where.sender_in_chat), as a key; "" for an event without a
    sender (nothing joins it)."""
    return "\x1f".join(sender_in_chat(bot, event) or ())


def picture_only(event: Event) -> bool:
    """Whether the message holds pictures and nothing else but blank text."""
    try:
        segments = list(event.get_message())
    except Exception:
        return False
    pictures = [s for s in segments if getattr(s, "type", None) == "image"]
    return bool(pictures) and all(
        getattr(s, "type", None) == "image" or (getattr(s, "type", None) == "text" and not str(s).strip())
        for s in segments)


@dataclass(frozen=True)
class Joined:
    """A message that joined a question: the event (for its pictures) and its text."""

    event: Event
    text: str


@dataclass
class Pending:
    """A question being answered, and what joined it."""

    before: list[Joined] = field(default_factory=list)
    after: list[Joined] = field(default_factory=list)
    last: float = 0.0
    """When its last message came (monotonic)."""
    restarts: int = 0
    restart: bool = False
    """A follow-up came: the running request is being abandoned for the merged question."""
    committing: bool = False
    """The answer is being stored: too late to abandon it (a follow-up is a question of its own)."""
    task: asyncio.Future[Any] | None = None

    def commit(self, reply: Any) -> bool:
        """Called as the answer is about to be stored (Engine.chat's `keep`): from now on the
        question is not abandoned, so one thought never leaves two turns."""
        self.committing = True
        return True


def merged(questions: list[Question]) -> Question:
    """Several messages as one question, in their order (text parts and pictures, tips)."""
    joined = Question()
    for question in questions:
        joined.parts += question.parts
        joined.tips += question.tips
        joined.images_seen += question.images_seen
        joined.quoted_text = joined.quoted_text or question.quoted_text
    if not joined.has_pictures and joined.parts:  # plain text: one line each
        joined.parts = [{"type": "text", "text": joined.text}]
    return joined


class Debounce:
    """The questions being answered and the pictures sent just before one, per person per chat."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.clock = clock
        self._running: dict[str, Pending] = {}
        self._pictures: dict[str, tuple[float, Event]] = {}

    @property
    def on(self) -> bool:
        return self.seconds > 0

    @property
    def busy(self) -> bool:
        """Whether any question is being answered (else no message can join one)."""
        return bool(self._running)

    def keep_picture(self, key: str, event: Event) -> None:
        """Remember a picture-only message, for a question of the same person in the window."""
        self._pictures.pop(key, None)
        self._pictures[key] = (self.clock(), event)
        while len(self._pictures) > MAX_KEPT_PICTURES:
            del self._pictures[next(iter(self._pictures))]

    def picture(self, key: str) -> Event | None:
        """The person's picture-only message of the last `seconds`, if any."""
        kept = self._pictures.get(key)
        if kept is None:
            return None
        if self.clock() - kept[0] > self.seconds:
            del self._pictures[key]
            return None
        return kept[1]

    def begin(self, key: str) -> Pending:
        """A question starts: the picture sent just before it joins it."""
        pending = Pending(last=self.clock())
        picture = self.picture(key)
        if picture is not None:
            del self._pictures[key]
            pending.before.append(Joined(picture, ""))
        self._running[key] = pending
        return pending

    def end(self, key: str, pending: Pending) -> None:
        if self._running.get(key) is pending:
            del self._running[key]

    def join(self, key: str, event: Event, text: str) -> bool:
        """A message of the same person in the same chat: joins the question being answered
        (which restarts) if it came within the window and the restarts are not used up."""
        if not self._running:
            return False
        pending = self._running.get(key)
        now = self.clock()
        if pending is None or now - pending.last > self.seconds or pending.restarts >= MAX_RESTARTS:
            return False
        if pending.committing or (pending.task is not None and pending.task.done()):  # too late
            return False
        pending.after.append(Joined(event, text))
        pending.last = now
        pending.restarts += 1
        pending.restart = True
        if pending.task is not None:
            pending.task.cancel()
        return True
