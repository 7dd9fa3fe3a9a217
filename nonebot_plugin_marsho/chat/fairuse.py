"""Fair use: who may ask, how many questions a user or a group may ask in a time window, how many
one user may have running or waiting, how often they are told so, and how often a poke is
answered."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

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

    def take(self, key: str) -> float | None:
        """Count one event for `key`; its time, for `give_back` (None: no limit, nothing counted)."""
        if self.limit <= 0:
            return None
        now = self._clock()
        self._recent(key).append(now)
        return now

    def give_back(self, key: str, taken: float | None) -> None:
        """Uncount the event `take` counted at `taken` (nothing if it already left the window)."""
        events = self._events.get(key)
        if taken is None or not events:
            return
        try:
            events.remove(taken)
        except ValueError:
            pass

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


def admitted(value: str | Iterable[str] | None, allowed: Iterable[str], denied: Iterable[str]) -> bool:
    """True unless `value` is denied, or an allow-list exists and does not hold it; `value` may
    be several names of one place (a channel's id, its guild's, "<guild>/<channel>"): any of
    them denied denies, any of them allowed allows."""
    values = (value,) if isinstance(value, str) else tuple(value or ())
    if not values:
        return True
    allowed, denied = set(allowed), set(denied)
    if any(v in denied for v in values):
        return False
    return not allowed or any(v in allowed for v in values)


class Notices:
    """At most one notice per key in any `every` seconds: the first is given, the rest are silence."""

    def __init__(self, every: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self._clock = clock
        self._last: dict[str, float] = {}

    def first(self, key: str) -> bool:
        """True (and the notice is counted) if `key` was not told anything in the last `every` s."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every:
            return False
        if len(self._last) >= 10_000:  # forget the ones whose silence is over
            self._last = {k: v for k, v in self._last.items() if now - v < self.every}
        self._last[key] = now
        return True


class UserQueue:
    """At most `size` questions per user running or waiting at once. A user's burst lasts while
    they have any: the first question refused in a burst gets a notice, the rest silence. Only
    users with a question in hand are remembered."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: dict[str, int] = {}
        self._told: set[str] = set()

    def held(self, user: str) -> int:
        """Questions `user` has running or waiting."""
        return self._held.get(user, 0)

    def enter(self, user: str) -> bool:
        """True (and counted until `leave`) if `user` has room for one more question."""
        held = self._held.get(user, 0)
        if held >= self.size:
            return False
        self._held[user] = held + 1
        return True

    def leave(self, user: str) -> None:
        """One of `user`'s questions is over; when it was the last, their burst is over too."""
        held = self._held.get(user, 0) - 1
        if held > 0:
            self._held[user] = held
        else:
            self._held.pop(user, None)
            self._told.discard(user)

    def silenced(self, user: str) -> bool:
        """True while `user`'s queue is full and they were told: more questions are dropped
        unseen (checked before anything else is done with a message)."""
        return user in self._told and self._held.get(user, 0) >= self.size

    def tell(self, user: str) -> bool:
        """Whether a refused question gets the notice: the first one of the burst does."""
        if user in self._told or user not in self._held:
            return False
        self._told.add(user)
        return True


@dataclass
class Admission:
    """What fair use decided for one question: go on (then `done()` when it is answered), or not,
    with at most one notice to send."""

    go: bool
    notice: Literal["", "rate", "queue"] = ""
    """"rate": tell the asker to wait `wait` s; "queue": tell them their earlier questions come
    first; "": silence."""
    wait: float = 0.0
    _done: Callable[[], None] | None = field(default=None, repr=False)
    _refund: Callable[[], None] | None = field(default=None, repr=False)

    def done(self) -> None:
        """The question is over: it no longer counts in the asker's queue (once; idempotent)."""
        done, self._done = self._done, None
        if done is not None:
            done()

    def refund(self) -> None:
        """The question got no answer (it failed): it does not count against the asker's and the
        group's rate limits after all (once; idempotent)."""
        refund, self._refund = self._refund, None
        if refund is not None:
            refund()


class FairUse:
    """Who may ask, and how often: the allow- and deny-lists, the per-user and per-group rate
    limits with at most one 'too fast' notice per user per window, and the per-user queue with
    one notice per burst; superusers are exempt from the limits and the queue."""

    def __init__(
        self,
        *,
        user_limit: int = 0,
        group_limit: int = 0,
        window: float = 60.0,
        user_queue: int = 2,
        allowed_groups: Iterable[str] = (),
        denied_groups: Iterable[str] = (),
        allowed_users: Iterable[str] = (),
        denied_users: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.users = RateLimiter(user_limit, window, clock=clock)
        self.groups = RateLimiter(group_limit, window, clock=clock)
        self.notices = Notices(window, clock=clock)
        self.queue = UserQueue(user_queue)
        self.allowed_groups, self.denied_groups = frozenset(allowed_groups), frozenset(denied_groups)
        self.allowed_users, self.denied_users = frozenset(allowed_users), frozenset(denied_users)

    @classmethod
    def from_config(cls, config: Config) -> FairUse:
        """The limits and lists of MARSHO_*_RATE_LIMIT, MARSHO_RATE_WINDOW, MARSHO_USER_QUEUE,
        MARSHO_ALLOWED_* and MARSHO_DENIED_*."""
        return cls(
            user_limit=config.marsho_user_rate_limit, group_limit=config.marsho_group_rate_limit,
            window=config.marsho_rate_window, user_queue=config.marsho_user_queue,
            allowed_groups=config.marsho_allowed_groups, denied_groups=config.marsho_denied_groups,
            allowed_users=config.marsho_allowed_users, denied_users=config.marsho_denied_users,
        )

    def admits(self, group_id: str | Iterable[str] | None, user_id: str, *, superuser: bool) -> bool:
        """Whether marsho answers this person here at all (`group_id`: the chat's names, see
        `admitted`; None in a private chat)."""
        if not admitted(group_id, self.allowed_groups, self.denied_groups):
            return False
        return superuser or admitted(user_id, self.allowed_users, self.denied_users)

    def charge(self, user_id: str, group_id: str | None, *, superuser: bool) -> float:
        """Seconds to wait before this person may ask here (0: go on, and it is counted)."""
        if superuser:
            return 0.0
        wait = self._wait(user_id, group_id)
        if not wait:
            self._take(user_id, group_id)
        return wait

    def _wait(self, user_id: str, group_id: str | None) -> float:
        wait = self.users.wait(user_id)
        if group_id:
            wait = max(wait, self.groups.wait(group_id))
        return wait

    def _take(self, user_id: str, group_id: str | None) -> Callable[[], None]:
        """Count one question against the user's and the group's limits; the callable uncounts it."""
        user_taken = self.users.take(user_id)
        group_taken = self.groups.take(group_id) if group_id else None

        def give_back() -> None:
            self.users.give_back(user_id, user_taken)
            if group_id:
                self.groups.give_back(group_id, group_taken)
        return give_back

    def admit(self, user_id: str, group_id: str | None, *, superuser: bool) -> Admission:
        """A question: refused while the asker's queue is full (not counted against the rate
        limits: it costs nothing), or over a rate limit; else it goes on and holds a place in
        the queue until `done()`; one that gets no answer is given back with `refund()`. A
        refusal carries a notice only the first time: once per burst for the queue, once per
        window for the rate limits."""
        if superuser:
            return Admission(go=True)
        if not self.queue.enter(user_id):
            return Admission(go=False, notice="queue" if self.queue.tell(user_id) else "")
        wait = self._wait(user_id, group_id)
        if wait:
            self.queue.leave(user_id)
            return Admission(go=False, notice="rate" if self.notices.first(user_id) else "", wait=wait)
        return Admission(go=True, _done=lambda: self.queue.leave(user_id),
                         _refund=self._take(user_id, group_id))


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
