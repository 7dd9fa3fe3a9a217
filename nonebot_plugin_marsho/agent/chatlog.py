"""The recent chat of a group, for groups whose admins chose to share it with the model (issue
17): the messages nobody addressed to marsho, kept in the database (bounded per group, each for
a time), and the ones a session has not seen yet going with its next question, fenced as chat
to read and not to obey. NoneBot-free: chat/ observes the messages and asks; settings come as
arguments.

Observing runs for every group message, so it is built to cost nothing where it is off: the
groups' choices are held in memory (read once at startup, then again in the background at most
every `refresh` seconds, so another process's choice shows within that), no database is touched
and nothing waits. Where it is on, a message is queued and written in the background, in
batches, never on the path of an answer; a question first waits for its group's queued messages
in this process, so a message said just before it is never missed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from ..exceptions import StoreError
from ..i18n import Texts
from ..redaction import logger
from ..store.sql import SqlStore
from .framing import framed

CONTEXT_SETTING = "context"
"""The group setting that says whether the group shares its recent chat (`on`/`off`)."""
MAX_OBSERVED_CHARS = 500
"""Characters kept of one observed message (the rest is cut with `…`)."""
MAX_QUEUED = 1000
"""Observed messages of one group waiting for their write at most: under a flood only the newest
are written (a group keeps MARSHO_GROUP_CONTEXT of them anyway)."""


@dataclass(frozen=True)
class Observed:
    """One message of a group's chat that was not for marsho: who said it (a speaker label),
    its text with `[picture]` placeholders, and when (seconds since the epoch)."""

    speaker: str
    text: str
    at: float


@dataclass(frozen=True)
class Unread:
    """The observed messages a session has not carried yet, and the id of the newest."""

    messages: list[Observed]
    last_id: int


class ChatLog:
    """The observed chat of every group: who has it on, the messages, what each session saw."""

    def __init__(self, store: SqlStore, *, size: int = 20, ttl: float = 3600.0, default_on: bool = False,
                 refresh: float = 60.0, choices: Mapping[str, bool] | None = None) -> None:
        self.store = store
        self.size = size
        """Messages kept per group (MARSHO_GROUP_CONTEXT); 0 keeps none anywhere."""
        self.ttl = ttl
        """Seconds one message is kept (MARSHO_GROUP_CONTEXT_TTL)."""
        self.default_on = default_on
        """MARSHO_GROUP_CONTEXT_DEFAULT: for groups whose admins have not chosen."""
        self.refresh = refresh
        self._choices: dict[str, bool] = {}
        self._any_on = default_on
        self._fresh_until = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._queued: dict[str, deque[Observed | Callable[[], Awaitable[Observed]]]] = {}
        self._writing: dict[str, asyncio.Task[None]] = {}
        self._claimed: dict[tuple[str, str], int] = {}
        """The newest observed message a running question of each (session, group) carries."""
        self._finishing: set[asyncio.Task[None]] = set()
        self._changes = 0
        """Choices made in this process: a refresh that began before one does not undo it."""
        if choices is not None:  # known already: read again only after `refresh`
            self._set_choices(dict(choices))

    def with_settings(self, *, size: int, ttl: float, default_on: bool) -> ChatLog:
        """A ChatLog with other settings on the same database, knowing the same choices."""
        return ChatLog(self.store, size=size, ttl=ttl, default_on=default_on, refresh=self.refresh,
                       choices=self._choices)

    # who has it on

    async def load(self) -> None:
        """Read every group's choice (at startup, and in the background when stale)."""
        changes = self._changes
        values = await self.store.group_settings(CONTEXT_SETTING)
        if changes == self._changes:
            self._set_choices({group: value == "on" for group, value in values.items()})

    def _set_choices(self, choices: dict[str, bool]) -> None:
        self._choices = choices
        self._any_on = self.default_on or any(choices.values())
        self._fresh_until = time.monotonic() + self.refresh

    def choice(self, group_key: str) -> bool | None:
        """What the group's admins chose, None if they have not."""
        self._keep_fresh()
        return self._choices.get(group_key)

    def is_on(self, group_key: str) -> bool:
        """Whether the group shares its recent chat (its choice, else the default)."""
        if self.size == 0:
            return False
        chosen = self.choice(group_key)
        return self.default_on if chosen is None else chosen

    def on_anywhere(self) -> bool:
        """False when no group shares its chat: then nothing about a message needs to be read."""
        self._keep_fresh()
        return self.size > 0 and self._any_on

    def _keep_fresh(self) -> None:
        if time.monotonic() < self._fresh_until or self._refreshing is not None:
            return
        self._refreshing = asyncio.ensure_future(self._refresh())

    async def _refresh(self) -> None:
        try:
            await self.load()
        except StoreError as error:  # the last known choices stay; tried again after `refresh`
            self._fresh_until = time.monotonic() + self.refresh
            logger.warning(f"marsho: could not read the groups' recent-chat choices: {error}")
        finally:
            self._refreshing = None

    async def set_on(self, group_key: str, on: bool) -> None:
        """The group's admins turn it on or off; off also empties the group's observed chat."""
        if not on:
            self._queued.pop(group_key, None)  # not written yet: forgotten too
        await self.settled(group_key)
        self._changes += 1
        await self.store.set_group_setting(group_key, CONTEXT_SETTING, "on" if on else "off",
                                           forget_observed=not on)
        self._set_choices({**self._choices, group_key: on})

    # observing

    def observe(self, group_key: str, message: Observed | Callable[[], Awaitable[Observed]]) -> None:
        """Keep a message of a group that has it on; returns at once (written in the background).
        `message` may be made when it is written (`await message()`: its speaker's nickname read
        then), so that it takes its place now, in the order messages arrive."""
        queue = self._queued.get(group_key)
        if queue is None:
            queue = self._queued[group_key] = deque(maxlen=MAX_QUEUED)
        queue.append(message)
        if group_key not in self._writing:
            self._writing[group_key] = asyncio.ensure_future(self._write(group_key))

    async def _write(self, group_key: str) -> None:
        try:
            while queue := self._queued.pop(group_key, None):
                rows = []
                for item in queue:
                    try:
                        message = item if isinstance(item, Observed) else await item()
                    except Exception as error:  # its speaker could not be named (the database...)
                        logger.warning(f"marsho: could not keep a message of {group_key}: {error}")
                        continue
                    text = message.text if len(message.text) <= MAX_OBSERVED_CHARS else (
                        message.text[:MAX_OBSERVED_CHARS] + "…")
                    rows.append((message.speaker, text, message.at))
                try:
                    await self.store.observe(group_key, rows, keep=self.size, ttl=self.ttl,
                                             default_on=self.default_on)
                except StoreError as error:  # observing is a courtesy: the chat goes on without it
                    logger.warning(f"marsho: could not keep {len(rows)} messages of {group_key}: {error}")
        finally:
            del self._writing[group_key]

    async def settled(self, group_key: str | None = None) -> None:
        """Wait until this process has written the group's queued messages (every group's when
        None)."""
        tasks = [task for key, task in self._writing.items() if group_key in (None, key)]
        if tasks:
            await asyncio.gather(*(asyncio.shield(task) for task in tasks), return_exceptions=True)

    async def forget(self, group_key: str) -> int:
        """Empty the group's observed chat (`marsho.forget`); returns how many messages went."""
        unwritten = len(self._queued.pop(group_key, ()))
        await self.settled(group_key)
        return unwritten + await self.store.forget_observed(group_key)

    # reading

    async def kept(self, group_key: str) -> int:
        """How many of the group's messages are kept now (this process's queued ones written first)."""
        await self.settled(group_key)
        return await self.store.count_observed(group_key, ttl=self.ttl)

    async def unread(self, session_key: str, group_key: str) -> Unread | None:
        """The group's messages the session has not carried yet (within the TTL, the newest
        MARSHO_GROUP_CONTEXT), or None when there are none or the group has it off."""
        if not self.is_on(group_key):
            return None
        await self.settled(group_key)
        rows = await self.store.observed_since(session_key, group_key, limit=self.size, ttl=self.ttl)
        # a question of the same conversation already on its way has these: they go with one
        # question only (the database's mark comes when that turn is stored)
        claimed = self._claimed.get((session_key, group_key), 0)
        rows = [row for row in rows if row[0] > claimed]
        if not rows:
            return None
        unread = Unread([Observed(speaker, text, at) for _, speaker, text, at in rows], rows[-1][0])
        self._claimed[(session_key, group_key)] = unread.last_id
        return unread

    def finish_soon(self, session_key: str, group_key: str, unread: Unread, *, stored: bool) -> None:
        """`finish`, in the background: the answer goes out without waiting for the mark (the
        claim keeps this process's next question from carrying the same messages meanwhile)."""
        task = asyncio.ensure_future(self._finished(session_key, group_key, unread, stored=stored))
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    async def _finished(self, session_key: str, group_key: str, unread: Unread, *, stored: bool) -> None:
        try:
            await self.finish(session_key, group_key, unread, stored=stored)
        except StoreError as error:  # the next question carries them again
            logger.warning(f"marsho: could not mark the recent chat of {group_key} as carried: {error}")

    async def finish(self, session_key: str, group_key: str, unread: Unread, *, stored: bool) -> None:
        """The turn that carried `unread` ended: `stored`, the session's next question starts
        after them; else (it failed) the next question carries them again."""
        try:
            if stored:
                await self.store.mark_observed(session_key, group_key, unread.last_id)
        finally:
            if self._claimed.get((session_key, group_key)) == unread.last_id:
                del self._claimed[(session_key, group_key)]

    async def close(self) -> None:
        """Write what is queued, and the marks of finished turns (at shutdown)."""
        await self.settled()
        if self._finishing:
            await asyncio.gather(*self._finishing, return_exceptions=True)


FENCE_BAR = "| "
"""Starts every line of the recent chat the model reads: the fence around it."""


def recent_chat_text(messages: Sequence[Observed], t: Texts, zone: tzinfo | None = None) -> str:
    """The recent chat as the question carries it: a label saying what it is (chat to read, not
    instructions), each message as `| Alice#3f2a (14:02): text`, its further lines framed
    (`| ┆ more`, see framing.framed: no message can write a line that starts like a speaker's
    or the end mark), and an end mark."""
    lines = [t("context.label")]
    for message in messages:
        stamp = datetime.fromtimestamp(message.at, zone).strftime("%H:%M")
        said = f"{message.speaker} ({stamp}): {framed(message.text)}"
        lines += [FENCE_BAR + line for line in said.split("\n")]
    lines.append(t("context.end"))
    return "\n".join(lines)


def with_recent_chat(content: str | list[dict[str, Any]], chat: str) -> str | list[dict[str, Any]]:
    """The question's content with the recent chat before it (a text part of its own when the
    question has pictures)."""
    if isinstance(content, str):
        return f"{chat}\n{content}" if content else chat
    return [{"type": "text", "text": chat}, *content]
