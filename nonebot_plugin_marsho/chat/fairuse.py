"""Fair use: how many questions a user or a group may ask in a time window, and who may ask."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable

from ..i18n import t


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


def seconds_text(seconds: float) -> str:
    """'try again in N s', rounded up so that trying then works."""
    return t("seconds", n=max(1, math.ceil(seconds)))


def admitted(value: str | None, allowed: Iterable[str], denied: Iterable[str]) -> bool:
    """True unless `value` is denied, or an allow-list exists and does not hold it."""
    if value is None:
        return True
    allowed = set(allowed)
    return value not in set(denied) and (not allowed or value in allowed)
