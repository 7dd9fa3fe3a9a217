"""The bound on requests to the endpoint in flight across all chats (MARSHO_MAX_CONCURRENT_REQUESTS),
taken fairly across chats.

Each HTTP request runs inside `async with gate.slot():`. While fewer than `max_in_flight` are in
flight a slot is taken at once; otherwise the request waits in its lane, and each freed slot goes
to the head of the next lane round-robin. A lane is a string naming where requests come from: the
chat layer sets it for the running turn with `lane(key)` (the key of the group, or of the private
chat, the question came from), and every request made in that turn (tasks it starts included: they
copy the context) waits in that lane. So a lane with 1,000 requests waiting delays another lane's
one request by at most one round (one request of each other waiting lane), never by its whole
backlog. Requests made outside any turn share the lane "".
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType

_lane: ContextVar[str] = ContextVar("marsho_request_lane", default="")


@contextmanager
def lane(key: str) -> Iterator[None]:
    """Requests made until the block ends (in this task, and in tasks it starts) wait in lane
    `key` (the chat the running turn came from)."""
    token = _lane.set(key)
    try:
        yield
    finally:
        _lane.reset(token)


def current_lane() -> str:
    """The lane requests made here wait in ("" outside any turn)."""
    return _lane.get()


class RequestGate:
    """At most `max_in_flight` slots held at once; waiting requests are admitted round-robin across
    lanes, in order within a lane. Memory is bounded by the requests waiting: an empty lane is
    forgotten."""

    def __init__(self, max_in_flight: int) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        """Slots held now."""
        self._lanes: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        """Waiting requests per lane; the first lane is served next."""
        self._slot = _Slot(self)

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot."""
        return sum(len(waiters) for waiters in self._lanes.values())

    def slot(self) -> _Slot:
        """`async with gate.slot():` holds one slot for the block, waiting its turn for it."""
        return self._slot

    async def acquire(self) -> None:
        """Take a slot, waiting (in the current lane) while all are held; `release` it after."""
        if self.in_flight < self.max_in_flight and not self._lanes:
            self.in_flight += 1
            return
        key = _lane.get()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._lanes.get(key)
        if waiters is None:
            waiters = self._lanes[key] = deque()  # a new lane joins the round at its end
        waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot came with the cancellation: hand it on
            else:
                self._forget(key, waiter)
            raise

    def release(self) -> None:
        """Give a slot back; the next waiting request (round-robin across lanes) takes it."""
        self.in_flight -= 1
        while self.in_flight < self.max_in_flight and self._lanes:
            key, waiters = self._lanes.popitem(last=False)
            waiter = waiters.popleft()
            if waiters:
                self._lanes[key] = waiters  # back of the round
            if not waiter.done():
                waiter.set_result(None)
                self.in_flight += 1

    def _forget(self, key: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._lanes.get(key)
        if waiters is None:
            return
        try:
            waiters.remove(waiter)
        except ValueError:
            pass
        if not waiters:
            del self._lanes[key]


class _Slot:
    """The async context manager of `RequestGate.slot()` (one per gate: it keeps no state)."""

    __slots__ = ("_gate",)

    def __init__(self, gate: RequestGate) -> None:
        self._gate = gate

    async def __aenter__(self) -> None:
        await self._gate.acquire()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._gate.release()
