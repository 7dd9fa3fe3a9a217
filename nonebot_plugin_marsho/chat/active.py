"""Replies without being called (issue 17): in groups whose admins turned them on
(`marsho.active`), a message nobody addressed to marsho may get an answer, by the group's
chance, a keyword, or the judge model's word; and the guards around it (never itself or another
bot, a cooldown, a ceiling per hour, no repeated reply, quiet hours).

An unsolicited reply, and the judge's request before it, go on the group's bill, never on that
of the member it answers, who asked nothing (chat/ask.py's `_billing`, agent/judge.py).

Every group message that is not for marsho passes here, so the groups' choices are held in
memory (read at startup, then again in the background at most every `refresh` seconds, as
agent/chatlog.py does): where no group has them on nothing of the message is read.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from datetime import datetime
from datetime import time as clock_time
from typing import Any

from nonebot.adapters import Event

from ..config import QUIET_HOURS, Config
from ..exceptions import StoreError
from ..redaction import logger
from ..store.sql import SqlStore
from .fairuse import RateLimiter
from .lookup import attribute

ACTIVE_SETTING = "active"
"""The group setting holding the group's chance (`0.3`) or `off`."""
KEYWORDS_SETTING = "active_keywords"
"""The group setting holding the group's keywords (a JSON list)."""
MAX_KEYWORDS = 20
MAX_KEYWORD_CHARS = 32
RECENT_REPLIES = 5
"""Unsolicited replies remembered per group: one that repeats any of them is not sent."""
HOUR = 3600.0


@dataclass(frozen=True)
class GroupChoice:
    """What a group's admins chose: a chance (None: `off`) and keywords."""

    chance: float | None
    keywords: tuple[str, ...] = ()


def quiet_hours(text: str) -> tuple[clock_time, clock_time] | None:
    """MARSHO_ACTIVE_QUIET_HOURS as (start, end), None when empty."""
    match = QUIET_HOURS.fullmatch(text.strip())
    if match is None:
        return None
    h1, m1, h2, m2 = (int(part) for part in match.groups())
    return clock_time(h1, m1), clock_time(h2, m2)


def in_quiet_hours(now: datetime, hours: tuple[clock_time, clock_time] | None) -> bool:
    """Whether `now` falls in `hours` (which may span midnight)."""
    if hours is None:
        return False
    start, end = hours
    moment = now.time().replace(second=0, microsecond=0)
    if start <= end:
        return start <= moment < end
    return moment >= start or moment < end


def flagged_bot(event: Event) -> bool:
    """Whether the platform marks the sender as a bot, where the event says so for free:
    Discord's author.bot, Telegram's from_.is_bot, Satori's user.is_bot."""
    for holder in ("author", "from_", "user"):  # most events lack two or three of them
        who = attribute(event, holder)
        if who is not None and any(attribute(who, flag) is True for flag in ("bot", "is_bot")):
            return True
    return False


class ActiveReplies:
    """The groups' choices, and the guards every unsolicited reply passes."""

    def __init__(self, store: SqlStore | None, *, default: float = 0.0, ceiling: float = 1.0,
                 cooldown: float = 60.0, per_hour: int = 6, quiet: str = "", ignored: Iterable[str] = (),
                 now: Callable[[], datetime] = datetime.now, clock: Callable[[], float] = time.monotonic,
                 chance: Callable[[], float] = random.random, refresh: float = 60.0,
                 choices: dict[str, GroupChoice] | None = None) -> None:
        self.store = store
        self.default = min(default, ceiling)
        self.ceiling = ceiling
        self.cooldown = cooldown
        self.per_hour = per_hour
        self.quiet = quiet_hours(quiet)
        self.ignored = frozenset(ignored)
        self.now = now
        """The wall clock quiet hours are read on (MARSHO_TIMEZONE)."""
        self.clock = clock
        self.chance = chance
        self.refresh = refresh
        self._choices: dict[str, GroupChoice] = {}
        self._any_on = False
        self._fresh_until = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._hourly = RateLimiter(per_hour, HOUR, clock=clock)
        self._next: dict[str, float] = {}
        self._replies: dict[str, deque[str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._changes = 0
        self.judging: set[str] = set()
        """Groups whose message the judge model is being asked about (one at a time per group)."""
        self._set_choices(dict(choices or {}))

    @classmethod
    def from_config(cls, config: Config, store: SqlStore | None, now: Callable[[], datetime],
                    choices: dict[str, GroupChoice] | None = None) -> ActiveReplies:
        """Built from MARSHO_ACTIVE_* and MARSHO_IGNORED_USERS."""
        return cls(store, default=config.marsho_active_default, ceiling=config.marsho_active_max,
                   cooldown=config.marsho_active_cooldown, per_hour=config.marsho_active_per_hour,
                   quiet=config.marsho_active_quiet_hours, ignored=config.marsho_ignored_users, now=now,
                   choices=choices)

    def with_config(self, config: Config, now: Callable[[], datetime]) -> ActiveReplies:
        """The same groups' choices under other settings."""
        return ActiveReplies.from_config(config, self.store, now, self._choices)

    # the groups' choices

    async def load(self) -> None:
        """Read every group's choice (at startup, and in the background when stale)."""
        if self.store is None:
            return
        changes = self._changes
        chances = await self.store.group_settings(ACTIVE_SETTING)
        keywords = await self.store.group_settings(KEYWORDS_SETTING)
        if changes != self._changes:  # an admin chose meanwhile: what was read may be older
            return
        choices = {}
        for group in {*chances, *keywords}:
            choices[group] = GroupChoice(_chance_of(chances.get(group)), _keywords_of(keywords.get(group)))
        self._set_choices(choices)

    def _set_choices(self, choices: dict[str, GroupChoice]) -> None:
        self._choices = choices
        self._any_on = self.ceiling > 0 and self.per_hour > 0 and (
            self.default > 0 or any(self._on(choice) for choice in choices.values()))
        self._fresh_until = self.clock() + self.refresh

    @staticmethod
    def _on(choice: GroupChoice) -> bool:
        return choice.chance is not None or bool(choice.keywords)

    def choice(self, group: str) -> GroupChoice | None:
        """What the group's admins chose, None if they have not."""
        self._keep_fresh()
        return self._choices.get(group)

    def settings(self, group: str) -> GroupChoice:
        """The group's chance (capped at MARSHO_ACTIVE_MAX; None: off) and keywords."""
        chosen = self.choice(group)
        if chosen is None:
            return GroupChoice(self.default if self.default > 0 else None)
        chance = None if chosen.chance is None else min(chosen.chance, self.ceiling)
        return GroupChoice(chance, chosen.keywords)

    def on_anywhere(self) -> bool:
        """False when no group has active replies on: then nothing of a message is read."""
        self._keep_fresh()
        return self._any_on

    def is_on(self, group: str) -> bool:
        """Whether the group may get unsolicited replies at all."""
        return self.ceiling > 0 and self.per_hour > 0 and self._on(self.settings(group))

    def _keep_fresh(self) -> None:
        if self.store is None or self.clock() < self._fresh_until or self._refreshing is not None:
            return
        self._refreshing = asyncio.ensure_future(self._refresh())

    async def _refresh(self) -> None:
        try:
            await self.load()
        except StoreError as error:
            self._fresh_until = self.clock() + self.refresh
            logger.warning(f"marsho: could not read the groups' active-reply choices: {error}")
        finally:
            self._refreshing = None

    async def choose(self, group: str, chance: float | None = None, keywords: Iterable[str] | None = None,
                     *, off: bool = False) -> None:
        """The group's admins set its chance, its keywords, or (`off`) turn both off."""
        assert self.store is not None
        before = self._choices.get(group, GroupChoice(None))
        if off:
            after = GroupChoice(None)
        else:
            after = GroupChoice(before.chance if chance is None else chance,
                                before.keywords if keywords is None else tuple(keywords))
        chance_text = "off" if after.chance is None else f"{after.chance:g}"
        self._changes += 1  # a refresh begun before this choice does not undo it
        await self.store.set_group_setting(group, ACTIVE_SETTING, chance_text)
        await self.store.set_group_setting(group, KEYWORDS_SETTING,
                                           json.dumps(list(after.keywords), ensure_ascii=False))
        self._set_choices({**self._choices, group: after})

    # deciding

    def spawn(self, reply: Coroutine[Any, Any, None]) -> None:
        """Run an unsolicited reply in the background (kept until it ends)."""
        task = asyncio.ensure_future(reply)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settled(self) -> None:
        """Wait for the unsolicited replies under way (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def guards_pass(self, group: str) -> bool:
        """Quiet hours, the group's cooldown and its ceiling per hour (nothing counted)."""
        if in_quiet_hours(self.now(), self.quiet):
            return False
        if self._next.get(group, 0.0) > self.clock():
            return False
        return self._hourly.wait(group) == 0

    def called_by(self, group: str, text: str) -> str | None:
        """Why the message gets an answer without the judge: "keyword" or "chance"; None."""
        settings = self.settings(group)
        folded = text.casefold()
        if any(word.casefold() in folded for word in settings.keywords):
            return "keyword"
        if settings.chance and self.chance() < settings.chance:
            return "chance"
        return None

    def claim(self, group: str) -> bool:
        """Count one unsolicited reply in `group` (its cooldown starts), if the guards still let
        it through (two messages decided at once: one goes)."""
        if not self.guards_pass(group):
            return False
        self._next[group] = self.clock() + self.cooldown
        if len(self._next) > 10_000:
            now = self.clock()
            self._next = {k: v for k, v in self._next.items() if v > now}
        self._hourly.take(group)
        return True

    def repeats(self, group: str, reply: str) -> bool:
        """Whether `reply` repeats one of the bot's last few unsolicited replies in the group."""
        said = " ".join(reply.split()).casefold()
        return said in self._replies.get(group, ())

    def sent(self, group: str, reply: str) -> None:
        """Remember an unsolicited reply sent in the group."""
        replies = self._replies.get(group)
        if replies is None:
            replies = self._replies[group] = deque(maxlen=RECENT_REPLIES)
        replies.append(" ".join(reply.split()).casefold())


def _chance_of(value: str | None) -> float | None:
    if value is None or value == "off":
        return None
    try:
        chance = float(value)
    except ValueError:
        return None
    return chance if 0 <= chance <= 1 else None


def _keywords_of(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    try:
        words = json.loads(value)
    except ValueError:
        return ()
    if not isinstance(words, list):
        return ()
    return tuple(word for word in words if isinstance(word, str) and word)


def parse_keywords(text: str) -> list[str]:
    """Keywords as an admin wrote them (spaces between), without repeats, bounded."""
    words = list(dict.fromkeys(word for word in text.split() if word))
    return [word[:MAX_KEYWORD_CHARS] for word in words[:MAX_KEYWORDS]]
