"""Retries on one endpoint over its key pool: a failure a retry may fix is tried again
(MARSHO_RETRIES) after its Retry-After, up to RETRY_AFTER_CAP, or a jittered backoff, all within
the request's deadline; a 429 rests its key (for its Retry-After, read as at most
MARSHO_RETRY_AFTER_MAX) and a 401/403 sets it aside while another key of the pool takes the
request at once; a key resting long is tried by one request at a time meanwhile.

Our own loop rather than tenacity's: a key handing the request to another key is not a retry
(tenacity counts every attempt), a wait is checked against the deadline less the seconds kept for
the fallbacks before it is taken, and a Retry-After past the cap is not waited for at all but
rests the key and moves on; each would be a callback reading this state, the loop in disguise."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ...exceptions import EndpointError
from ...redaction import logger
from ..providers import (
    AUTH_REST,
    RETRY_AFTER_CAP,
    RETRY_AFTER_MAX,
    RETRY_BUDGET,
    Deadline,
    Endpoint,
    EndpointStatus,
    Key,
    NoKeyReady,
    backoff,
    kind_of,
    masked,
    named,
    retryable,
)

if TYPE_CHECKING:
    from .base import Completion, Gate, ModelRequest
    from .endpoint import EndpointClient


def _fresh(error: EndpointError) -> EndpointError:
    """A new EndpointError saying what a stored one says: raised instead of the stored one, so
    each question gets its own object and traceback (one raised again and again would gather
    every raise's frames, and be shared by every task raising it)."""
    copied = copy.copy(error)
    copied.__traceback__ = copied.__cause__ = copied.__context__ = None
    return copied


class _Tries:
    """One request's attempts on one endpoint."""

    def __init__(self) -> None:
        self.retries = 0
        self.rotated: set[int] = set()
        """Keys (by id) that passed this request on to another key after a 429."""
        self.last: EndpointError | None = None
        self.started = 0.0
        """When the latest attempt got its slot and started (monotonic)."""


class Retrying:
    """The model of one endpoint: its client, asked with the keys of its pool, retried."""

    def __init__(self, endpoint: Endpoint, client: EndpointClient, *, timeout: float, retries: int = 0,
                 retry_budget: float = RETRY_BUDGET, gate: Gate | None = None,
                 retry_after_max: float = RETRY_AFTER_MAX) -> None:
        self.endpoint = endpoint
        self.client = client
        self.timeout = timeout
        """Seconds one HTTP request may take once it has its slot in the gate."""
        self.retries = retries
        """Retries of one request (429, 5xx, dropped connections, timeouts, empty bodies)."""
        self.retry_budget = retry_budget
        """Seconds beyond `timeout` a request asked here alone may take (a chain gives its own
        deadline)."""
        self.gate = gate
        self.retry_after_max = retry_after_max
        """Seconds of a Retry-After honoured at most (MARSHO_RETRY_AFTER_MAX)."""
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        """How a retry waits (tests record the waits instead of taking them)."""

    async def request(self, request: ModelRequest) -> Completion:
        """Send the request and read its answer, retrying what a retry may fix within the
        deadline, and leaving `request.keep` seconds of it to the endpoints after this one
        (to which a timeout goes at once when there are `more`)."""
        ep = self.endpoint
        if ep.needs_key:
            error = EndpointError(code="endpoint.no_key", hint="endpoint.no_key.hint", url=ep.base_url)
            named(error, request.settings)
            ep.failed_so(_fresh(error))  # nothing was sent: not a request, but marsho.status says why
            raise error
        deadline = request.deadline or Deadline(self.timeout + self.retry_budget)
        body = request.body()
        tries = _Tries()
        while True:
            key = await self._key(deadline, request.keep, tries.last)
            try:
                completion = await self._attempt(key, body, deadline, request, tries)
            except EndpointError as error:
                ep.pool.tried(key, answered=False)
                named(error, request.settings)  # before the retry's log line shows its hint
                ep.record(key, kind_of(error), tries.started, _fresh(error))
                wait = self._wait_after(error, key, tries, deadline, request)
                if wait:
                    await self.sleep(wait)
                continue
            except BaseException:  # cancelled: a trial with the key must not stay in flight
                ep.pool.tried(key, answered=False)
                raise
            ep.pool.tried(key, answered=True)
            ep.record(key, "ok", tries.started)
            deadline.answered(tries.started)
            return completion

    async def _key(self, deadline: Deadline, keep: float, last: EndpointError | None) -> Key:
        """The key of the next attempt, or the error that ends the request here: the last one
        when the time is up, or the pool's latest refusal when every key rests or is set aside
        after an earlier question's."""
        if last is not None and deadline.left() <= keep:
            raise last  # nothing left for another try here (the rest is the fallbacks')
        pool = self.endpoint.pool
        try:
            return await pool.take(deadline, keep=keep, sleep=self.sleep)
        except NoKeyReady:
            if last is not None:
                raise last from None
            assert pool.last_refusal is not None
            raise _fresh(pool.last_refusal) from None

    async def _attempt(self, key: Key, body: dict[str, object], deadline: Deadline, request: ModelRequest,
                       tries: _Tries) -> Completion:
        """One exchange: the first gets MARSHO_TIMEOUT, later ones leave `keep` to the fallbacks;
        the wait for a slot in the gate is not part of MARSHO_TIMEOUT. A streamed one holds its
        slot until its last chunk."""
        reserve = request.keep if tries.last is not None else 0.0
        header = None if self.endpoint.pool.single else key.value
        if self.gate is None:
            timeout = min(self.timeout, deadline.left() - reserve)
            tries.started = deadline.start()
            if request.stream:
                return await self.client.stream(body, header, timeout, request.on_text)
            raw = await self.client.post(body, header, timeout)
        else:
            async with self.gate.slot():
                tries.started = deadline.start()
                timeout = min(self.timeout, deadline.left() - reserve)
                if request.stream:
                    return await self.client.stream(body, header, timeout, request.on_text)
                raw = await self.client.post(body, header, timeout)
        return self.client.read(raw)

    def _wait_after(self, error: EndpointError, key: Key, tries: _Tries, deadline: Deadline,
                    request: ModelRequest) -> float:
        """Seconds to wait before the next attempt after `error` (0: at once), or `error` raised
        when it is the answer here."""
        kind = kind_of(error)
        tries.last = error
        pool = self.endpoint.pool
        if kind in ("auth", "rate"):
            pool.last_refusal = error
        if kind == "auth" and not pool.single:
            self._set_aside(key, error)
            return 0.0  # another key, at once: not a retry
        if kind == "rate":
            wait = self._after_429(error, key, tries)
            if wait is None:
                return 0.0  # another key, at once: not a retry (each key once)
        else:
            asked = self._asked(error)
            wait = backoff(tries.retries) if asked is None else asked
        if (not retryable(error) or tries.retries >= self.retries
                or (kind == "timeout" and request.more)  # a hung endpoint: the next one now
                or wait >= deadline.left() - request.keep):
            raise error
        logger.info(f"marsho: endpoint {self.endpoint.name} ({self.endpoint.base_url}), retry "
                    f"{tries.retries + 1} of {self.retries} in {wait:.1f} s: {error}")
        tries.retries += 1
        return wait

    def _asked(self, error: EndpointError) -> float | None:
        """The error's Retry-After as honoured: at most MARSHO_RETRY_AFTER_MAX."""
        return None if error.retry_after is None else min(error.retry_after, self.retry_after_max)

    def _after_429(self, error: EndpointError, key: Key, tries: _Tries) -> float | None:
        """A 429: None when another key takes the request at once, else the wait before a retry;
        raised when its Retry-After is past RETRY_AFTER_CAP and no other key is ready (it is not
        waited for: the key rests as asked, up to MARSHO_RETRY_AFTER_MAX, and the next endpoint
        takes it, or it is the answer)."""
        pool, asked = self.endpoint.pool, self._asked(error)
        if asked is not None and asked > RETRY_AFTER_CAP:
            pool.rest(key, asked, error)
            if not pool.single and pool.ready():
                return None
            raise error
        wait = backoff(tries.retries) if asked is None else asked
        if pool.single:
            return wait
        # at least a backoff: a Retry-After of 0 would let the keys take turns at the speed of
        # the endpoint's answers
        pool.rest(key, max(wait, backoff(tries.retries)), error)
        if id(key) not in tries.rotated and pool.ready():
            tries.rotated.add(id(key))
            return None
        return 0.0  # the pool waits for the first rested key itself, within the bound

    def _set_aside(self, key: Key, error: EndpointError) -> None:
        """A key refused with 401/403: set aside once, logged once (other requests in flight with
        it may be refused after this one)."""
        ep = self.endpoint
        if ep.pool.set_aside(key):
            logger.warning(f"marsho: endpoint {ep.name} ({ep.base_url}) refused key "
                           f"{masked(key.value)} ({error.status}); it is set aside for "
                           f"{AUTH_REST:g} s and the pool's other keys are used")

    def status(self) -> list[EndpointStatus]:
        return [self.endpoint.status(self.endpoint.model or "")]

    async def close(self) -> None:
        await self.client.close()
