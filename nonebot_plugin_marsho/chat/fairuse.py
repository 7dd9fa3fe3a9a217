"""Fair use: who may ask, how many questions a user or a group may ask in a time window, and how
often a poke is answered."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable

from ..config import Config
from ..i18n import Texts


class RateLimiter:
    """At most `limit` events per key in any `window` seconds (a sliding window); 0 = no limit."""

    def __init__(
        self, limit: int, window: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._events: dict[str, deque[float]] = {}

    def wait(self, key: str) -> float:
        """Seconds until `key` may go again (0: now), without counting anything."""
        if self.limit <= 0:
            return 0.0
        events = self._recent(key)
        if len(events) < self.limit:
            return 0.0
        return max(0.0, events[0] + self.window - self._clock())

    def take(self, key: str) -> None:
        """Count one event for `key`."""
        if self.limit > 0:
            self._recent(key).append(self._clock())

    def _recent(self, key: str) -> deque[float]:
        now = self._clock()
        events = self._events.setdefault(key, deque())
        while events and events[0] <= now - self.window:
            events.popleft()
        if len(self._events) > 10_000:  # forget idle keys so memory stays bounded
            for idle in [k for k, v in self._events.items() if not v and k != key]:
                del self._events[idle]
        return events


def seconds_text(t: Texts, seconds: float) -> str:
    """'try again in N s', rounded up so that trying then works."""
    return t("seconds", n=max(1, math.ceil(seconds)))


def admitted(value: str | None, allowed: Iterable[str], denied: Iterable[str]) -> bool:
    """True unless `value` is denied, or an allow-list exists and does not hold it."""
    if value is None:
        return True
    allowed = set(allowed)
    return value not in set(denied) and (not allowed or value in allowed)


class FairUse:
    """Who may ask, and how often: the allow- and deny-lists and the per-user and per-group rate
    limits, one check for questions and pokes alike; superusers are exempt from both."""

    def __init__(
        self,
        *,
        user_limit: int = 0,
        group_limit: int = 0,
        window: float = 60.0,
        allowed_groups: Iterable[str] = (),
        denied_groups: Iterable[str] = (),
        allowed_users: Iterable[str] = (),
        denied_users: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.users = RateLimiter(user_limit, window, clock=clock)
        self.groups = RateLimiter(group_limit, window, clock=clock)
        self.allowed_groups, self.denied_groups = frozenset(allowed_groups), frozenset(denied_groups)
        self.allowed_users, self.denied_users = frozenset(allowed_users), frozenset(denied_users)

    @classmethod
    def from_config(cls, config: Config) -> FairUse:
        """The limits and lists of MARSHO_*_RATE_LIMIT, MARSHO_RATE_WINDOW, MARSHO_ALLOWED_* and
        MARSHO_DENIED_*."""
        return cls(
            user_limit=config.marsho_user_rate_limit, group_limit=config.marsho_group_rate_limit,
            window=config.marsho_rate_window,
            allowed_groups=config.marsho_allowed_groups, denied_groups=config.marsho_denied_groups,
            allowed_users=config.marsho_allowed_users, denied_users=config.marsho_denied_users,
        )

    def admits(self, group_id: str | None, user_id: str, *, superuser: bool) -> bool:
        """Whether marsho answers this person here at all."""
        if not admitted(group_id, self.allowed_groups, self.denied_groups):
            return False
        return superuser or admitted(user_id, self.allowed_users, self.denied_users)

    def charge(self, user_id: str, group_id: str | None, *, superuser: bool) -> float:
        """Seconds to wait before this person may ask here (0: go on, and it is counted)."""
        if superuser:
            return 0.0
        wait = self.users.wait(user_id)
        if group_id:
            wait = max(wait, self.groups.wait(group_id))
        if wait:
            return wait
        self.users.take(user_id)
        if group_id:
            self.groups.take(group_id)
        return 0.0


class Cooldown:
    """When each (chat, person) may be answered again."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._next: dict[tuple[str, str], float] = {}

    def ready(self, chat: str, user: str) -> bool:
        """True (and the cooldown starts) if this person's poke in this chat may be answered."""
        now = self._clock()
        if len(self._next) > 10_000:  # forget the ones long over
            self._next = {k: v for k, v in self._next.items() if v > now}
        if self._next.get((chat, user), 0.0) > now:
            return False
        self._next[(chat, user)] = now + self.seconds
        return True
