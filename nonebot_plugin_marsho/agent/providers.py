"""When a provider fails: which failures are worth a retry, how long to wait, a pool of keys
that rest after 429 and are set aside after 401/403, a circuit breaker per endpoint, and the
figures `marsho.status` shows. Plain state, no HTTP: agent/model/ does the requests."""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import itertools
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from ..exceptions import EndpointError

if TYPE_CHECKING:
    from .model.base import ToolMode

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses a second try may fix; 400/401/403/404 never are."""

RETRY_AFTER_CAP = 30.0
"""Seconds of a Retry-After header honoured at most (a provider asking for an hour is not
waited for; the question falls back or fails)."""

RETRY_AFTER_MAX = 300.0
"""Seconds of any Retry-After honoured at most (MARSHO_RETRY_AFTER_MAX): a provider asking for
a day (`Retry-After: 999999`) is read as asking for this long, so one header cannot rest every
key of a pool for an hour after the provider is back. Beyond RETRY_AFTER_CAP it is not waited
for: the key rests, the other keys or the fallbacks take the questions meanwhile."""

PROBE_INTERVAL = 30.0
"""Seconds between trials of a key resting longer than this, and of an endpoint its breaker
skips: one real request at a time tries it before its rest ends (half-open), so the bot answers
again within a minute of the provider recovering. A trial that answers ends the rest."""

BACKOFF_BASE = 0.5
"""Seconds before the first retry when the endpoint gave no Retry-After; doubled each retry."""

BACKOFF_CAP = 8.0
"""Seconds one backoff wait may reach."""

RETRY_BUDGET = 30.0
"""Seconds of retries, waits and fallbacks one question may take (all its tool rounds
together), beyond MARSHO_TIMEOUT per request: the bound of a question, whatever the endpoints
do (MARSHO_RETRY_BUDGET)."""

AUTH_REST = 600.0
"""Seconds a key refused with 401/403 is set aside before it is tried once more."""

BREAKER_FAILURES = 3
"""Failed requests in a row after which an endpoint with others behind it is skipped."""

BREAKER_COOLDOWN = 30.0
"""Seconds an endpoint is skipped after BREAKER_FAILURES; doubled at each failed trial."""

BREAKER_COOLDOWN_CAP = 300.0

STATS_WINDOW = 3600.0
"""Seconds of requests the latency figures of `marsho.status` cover."""

STATS_SAMPLES = 10_000
"""Latencies kept per endpoint and per key at most (a busy hour is sampled by its latest)."""

Kind = Literal["ok", "rate", "server", "timeout", "dropped", "refused", "empty", "auth",
               "not_found", "request", "unreadable", "too_large", "no_key", "cut"]
"""What happened to one request, as `marsho.status` counts it."""

RETRYABLE: frozenset[Kind] = frozenset({"rate", "server", "timeout", "dropped", "empty"})

OWNER_KINDS: frozenset[Kind] = frozenset({"auth", "no_key"})
"""Failures only the owner can end (a key refused, no key set): an endpoint whose latest request
failed so is shown failing by `marsho.status`, with the reason, until one is answered."""


KINDS: dict[str, Kind] = {
    "endpoint.429": "rate", "endpoint.5xx": "server", "endpoint.401": "auth", "endpoint.403": "auth",
    "endpoint.404": "not_found", "endpoint.timeout": "timeout", "endpoint.empty_body": "empty",
    "endpoint.too_large": "too_large", "endpoint.no_key": "no_key", "endpoint.4xx": "request",
    # a stream that stopped half way: tried again unseen; once some of it was shown, it is the
    # answer (another try would show the start again)
    "endpoint.stream_cut": "dropped", "endpoint.stream_cut_shown": "cut",
}
"""The kind of each EndpointError code (endpoint.unreachable: refused or dropped, see kind_of)."""


KEY_PROBLEM_PHRASES: tuple[str, ...] = (
    "no connected db", "no_db_connection",  # LiteLLM without its database: no key can be checked
    "invalid api key", "invalid_api_key",  # OpenAI's code, LiteLLM, most proxies
    "incorrect api key",  # OpenAI: "Incorrect API key provided"
    "authentication error", "authentication_error",  # LiteLLM, Anthropic-style proxies
    "api key not valid", "api_key_invalid",  # Gemini: 400 INVALID_ARGUMENT, a list-shaped body
    "token is invalid", "令牌无效", "无效的令牌",  # OneAPI / NewAPI: their own keys ("tokens")
)
"""What an endpoint's error says when the key, or a proxy's own setup, is at fault, whatever
status it came with: proxies and some providers answer a wrong key with 400 (LiteLLM's "No
connected db.", Gemini's "API key not valid"). Matched case-insensitively in the error's
message, type and code (`key_problem`); such a 4xx is a key problem, as a 401 is: another key
of the pool is tried, then the fallbacks, and `marsho.status` shows it."""


def key_problem(*fields: object) -> bool:
    """Whether an error's message, type or code (strings or numbers) says the key or the
    proxy's setup is at fault (KEY_PROBLEM_PHRASES)."""
    said = " ".join(str(part) for part in fields if isinstance(part, (str, int))).lower()
    return any(phrase in said for phrase in KEY_PROBLEM_PHRASES)


LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa")
"""Names of hosts on this machine or a private network (mDNS, Docker's host.docker.internal...)."""


def is_local_host(host: str) -> bool:
    """Whether a base URL's host is this machine or on a private network: a loopback, private or
    link-local address, `localhost`, a name without a dot (a Docker service such as `ollama`),
    or one ending in LOCAL_SUFFIXES. Such endpoints (Ollama, vLLM) often need no key."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host or host.endswith(LOCAL_SUFFIXES)
    return address.is_loopback or address.is_private or address.is_link_local


def kind_of(error: EndpointError) -> Kind:
    """The kind of failure an EndpointError is."""
    if error.code == "endpoint.unreachable":
        return "refused" if error.refused else "dropped"
    return KINDS.get(error.code, "unreadable")


def named(error: EndpointError, settings: Mapping[str, str]) -> None:
    """Give `error` the settings its hint names (where the owner set the endpoint's model, keys
    and URL), unless it has them already."""
    for name, setting in settings.items():
        error.params.setdefault(name, setting)


def retryable(error: EndpointError) -> bool:
    """Whether a second try may fix it: 429, 500, 502, 503, 504, a dropped connection, a timeout,
    an empty body (another 5xx, such as 501 Not Implemented, says the same again)."""
    kind = kind_of(error)
    return kind in RETRYABLE and (kind != "server" or error.status in RETRY_STATUSES)


def falls_back(error: EndpointError) -> bool:
    """Whether another endpoint may do better: anything but a request the endpoint understood and
    refused (400, 413, 422: another one would refuse it too), an answer too large to read, or a
    stream that stopped after some of it was shown."""
    return kind_of(error) not in ("request", "too_large", "cut")


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header's seconds (a number or an HTTP date), or None when there is none or
    it cannot be read."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:  # pragma: no cover - older Pythons
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def backoff(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry number `attempt` (0 first): exponential, with full jitter over its
    upper half so that many waiting questions do not come back at the same instant."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** attempt)
    return ceiling * (0.5 + rand() / 2)


def masked(key: str) -> str:
    """A key as it may be shown: its last 4 characters."""
    return f"…{key[-4:]}" if len(key) > 4 else "…" if key else "(none)"


class Latencies:
    """Seconds of the requests of the last STATS_WINDOW, for p50/p95."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, float]] = deque(maxlen=STATS_SAMPLES)

    def add(self, seconds: float, now: float) -> None:
        self._samples.append((now, seconds))

    def percentiles(self, now: float) -> tuple[float, float] | None:
        """(p50, p95) over the window, or None when there was no request in it."""
        while self._samples and self._samples[0][0] < now - STATS_WINDOW:
            self._samples.popleft()
        if not self._samples:
            return None
        ordered = sorted(seconds for _, seconds in self._samples)
        return ordered[(len(ordered) - 1) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


@dataclass
class Usage:
    """Requests and errors by kind, counted since start, and latencies of the last hour."""

    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies: Latencies = field(default_factory=Latencies)

    def record(self, kind: Kind, seconds: float, now: float) -> None:
        self.requests += 1
        if kind != "ok":
            self.errors[kind] += 1
        self.latencies.add(seconds, now)


@dataclass
class Key:
    """One API key of a pool and its state."""

    value: str
    resting_until: float = 0.0
    set_aside_until: float = 0.0
    usage: Usage = field(default_factory=Usage)
    rested_by: EndpointError | None = None
    """The 429 that rested it, for `marsho.status`."""

    def state(self, now: float) -> tuple[str, float]:
        """("ok" | "resting" | "set aside", until when in seconds from now)."""
        if self.set_aside_until > now:
            return "set aside", self.set_aside_until - now
        if self.resting_until > now:
            return "resting", self.resting_until - now
        return "ok", 0.0


class NoKeyReady(Exception):
    """Every key of a pool rests past the deadline (and no trial is due), or is set aside."""


class Deadline:
    """When one request must be done, whatever its retries and fallbacks: `seconds` after its
    first attempt got going, or its first wait for a resting key of a pool (the wait for a slot
    in the request gate is not counted, as it is not part of MARSHO_TIMEOUT either)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.at: float | None = None
        self.began: float | None = None
        self.answered_at: float | None = None
        self._clock = clock

    def start(self) -> float:
        """Start it (once); the time now, when an attempt starts."""
        now = self._clock()
        if self.at is None:
            self.began, self.at = now, now + self.seconds
        return now

    def answered(self, attempt_started: float) -> None:
        """The attempt that started at `attempt_started` answered."""
        self.answered_at = attempt_started

    @property
    def spent(self) -> float:
        """Seconds from the first attempt to the one that answered: what failed attempts and
        waits took."""
        if self.began is None or self.answered_at is None:
            return 0.0
        return max(0.0, self.answered_at - self.began)

    def left(self) -> float:
        """Seconds left (all of them until the first attempt starts)."""
        return self.seconds if self.at is None else self.at - self._clock()


class KeyPool:
    """The keys of one endpoint, taken in turn. A key answered 429 rests (its Retry-After, or a
    backoff); one answered 401/403 is set aside for AUTH_REST. A pool of one key never rests and
    is never set aside: its retries wait instead, and a refusal is the endpoint's error. While
    every key rests longer than PROBE_INTERVAL, one request at a time tries the first to wake,
    every PROBE_INTERVAL (half-open): an answer ends that key's rest."""

    def __init__(self, keys: list[str], clock: Callable[[], float] = time.monotonic) -> None:
        self.keys = [Key(value) for value in dict.fromkeys(keys)] or [Key("")]
        self.last_refusal: EndpointError | None = None
        """The latest 429/401/403 of a key of the pool: the endpoint's error while no key is ready."""
        self._turn = itertools.count()
        self._clock = clock
        self.trial_at: float | None = None
        """When one request may try a resting key; None: no rest past PROBE_INTERVAL."""
        self.trying: Key | None = None
        """The key a trial request is in flight with: no other request takes it meanwhile."""

    @property
    def single(self) -> bool:
        return len(self.keys) == 1

    def ready(self) -> list[Key]:
        now = self._clock()
        return [key for key in self.keys if key.state(now)[0] == "ok"]

    async def take(
        self, deadline: Deadline, *, keep: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> Key:
        """The next ready key; when all rest, wait for the first to come back, or, when that is
        past the deadline (less the `keep` seconds left for other endpoints), take the first as
        a trial if one is due (the caller ends it with `tried`); NoKeyReady if none is, or
        every key is set aside. The wait is part of the deadline: it starts the deadline."""
        if self.single:
            return self.keys[0]
        while True:
            ready = self.ready()
            if ready:
                return ready[next(self._turn) % len(ready)]
            deadline.start()  # waiting for a key counts, so the attempt after it gets what is left
            now = self._clock()
            resting = [key for key in self.keys if key.set_aside_until <= now and key is not self.trying]
            if not resting:
                raise NoKeyReady
            first = min(resting, key=lambda key: key.resting_until)
            if first.resting_until - now < deadline.left() - keep:
                await (sleep or asyncio.sleep)(max(0.0, first.resting_until - now))
                continue
            if self.trying is not None or self.trial_at is None or now < self.trial_at:
                raise NoKeyReady
            self.trying = first
            return first

    def rest(self, key: Key, seconds: float, why: EndpointError | None = None) -> None:
        """`key` answered 429 (`why`): not used for `seconds`; past PROBE_INTERVAL, the pool's
        next trial is PROBE_INTERVAL from now."""
        if self.single:
            return
        now = self._clock()
        key.resting_until = max(key.resting_until, now + seconds)
        key.rested_by = why or key.rested_by
        if key.resting_until - now > PROBE_INTERVAL:
            self.trial_at = now + PROBE_INTERVAL

    def tried(self, key: Key, answered: bool) -> None:
        """A request with `key` ended: if it was a trial, the trial is over, and its answer
        ends the key's rest (else the next trial is PROBE_INTERVAL from now, unless its 429 said
        so already). An answer to a request sent before a 429 rested the key ends nothing."""
        if self.trying is not key:
            return
        self.trying = None
        now = self._clock()
        if answered:
            key.resting_until, key.rested_by = 0.0, None
        elif self.trial_at is not None and self.trial_at <= now:
            self.trial_at = now + PROBE_INTERVAL

    def trial_in(self) -> float | None:
        """While every key rests: seconds until one request tries one (0: the next request);
        None: no trial before a rest ends, or one is in flight."""
        if self.trying is not None or self.trial_at is None or self.ready():
            return None
        return max(0.0, self.trial_at - self._clock())

    def set_aside(self, key: Key) -> bool:
        """`key` was refused (401/403): not used for AUTH_REST; False for a pool of one, and for
        a key already set aside (another request in flight with it was refused first: its
        timer is not reset, and it is logged once)."""
        if self.single or key.set_aside_until > self._clock():
            return False
        key.set_aside_until = self._clock() + AUTH_REST
        return True


class CircuitBreaker:
    """Skips an endpoint that failed BREAKER_FAILURES requests in a row, for a cool-down that
    doubles at each failed trial; one success closes it. While it is open, one request at a time
    may try the endpoint every PROBE_INTERVAL, after the others failed (`take_trial`)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = 0
        self.open_until = 0.0
        self.cooldown = BREAKER_COOLDOWN
        self.trial_at = 0.0
        """When one request may try the endpoint while the breaker is open."""
        self.trying = False
        self.last: EndpointError | None = None
        """The failure that opened it, or the latest since, for `marsho.status`."""
        self._clock = clock

    def trial_due(self) -> bool:
        """Whether one request may try the endpoint now though the breaker is open: none is
        trying it, and PROBE_INTERVAL has passed since it opened or since the last trial."""
        return not self.trying and self._clock() >= self.trial_at

    def take_trial(self) -> bool:
        """`trial_due`, and if so the asking request is the trial until `tried`."""
        if not self.trial_due():
            return False
        self.trying = True
        return True

    def tried(self) -> None:
        """The trial ended (an answer closes the breaker through `succeeded`)."""
        if self.trying:
            self.trying, self.trial_at = False, self._clock() + PROBE_INTERVAL

    def trial_in(self) -> float | None:
        """Seconds until one request may try it while it is open (None: one is trying it)."""
        return None if self.trying else max(0.0, self.trial_at - self._clock())

    def now(self) -> float:
        """The breaker's clock: when a request starts, for `failed`."""
        return self._clock()

    @property
    def is_open(self) -> bool:
        return self.open_until > self._clock()

    def succeeded(self) -> None:
        self.failures, self.open_until, self.cooldown = 0, 0.0, BREAKER_COOLDOWN
        self.trying, self.last = False, None

    def failed(self, started: float | None = None) -> bool:
        """Count a failed request that started at `started` (now when not given); True when
        this one opened the breaker. The cool-down doubles only for a trial: a request started
        after the cool-down ended. Requests that were in flight when it opened (or that ran
        while it was open, every endpoint being skipped) neither double nor extend it."""
        now = self._clock()
        started = now if started is None else started
        self.failures += 1
        if self.failures < BREAKER_FAILURES:
            return False
        if self.open_until != 0.0:  # it had opened before
            if started < self.open_until:  # not a trial: in flight, or sent while skipped
                if self.open_until > now:
                    return False
            else:
                self.cooldown = min(BREAKER_COOLDOWN_CAP, self.cooldown * 2)
        self.open_until, self.trial_at = now + self.cooldown, now + PROBE_INTERVAL
        return True


@dataclass(frozen=True)
class KeyStatus:
    """One key as `marsho.status` shows it (masked)."""

    masked: str
    state: str
    seconds_left: float
    requests: int
    errors: dict[str, int]
    latency: tuple[float, float] | None


@dataclass(frozen=True)
class EndpointStatus:
    """One endpoint as `marsho.status` shows it."""

    name: str
    base_url: str
    model: str
    state: str
    seconds_left: float
    requests: int
    errors: dict[str, int]
    latency: tuple[float, float] | None
    keys: list[KeyStatus]
    problem: EndpointError | None = None
    """Why it is failing, when its latest request failed as only the owner can end (OWNER_KINDS)."""
    reason: EndpointError | None = None
    """Why it rests or is skipped: the 429 that rested its keys, the failure that opened its
    breaker."""
    trial_in: float | None = None
    """While it rests or is skipped: seconds until one request tries it (0: the next one); None:
    none before the rest ends, or one is trying it now (`trying`)."""
    trying: bool = False
    learned: tuple[tuple[str, str], ...] = ()
    """What was learned of its model from refusals (model.learned.Learned.facts): it takes only
    streams, it refused the reasoning effort."""


class Endpoint:
    """One endpoint of a model's chain, as plain state: where it is, its keys, its breaker and
    its figures (the parts that send to it share this record)."""

    def __init__(self, index: int, base_url: str, keys: list[str], model: str | None = None,
                 tool_mode: ToolMode | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.index = index
        self.name = "primary" if index == 0 else f"fallback {index}"
        self.base_url = base_url.rstrip("/")
        self.pool = KeyPool(keys, clock=clock)
        self.model = model
        """None for the primary: it follows the chain's model (`marsho.model` switches it)."""
        self.tool_mode = tool_mode
        self.breaker = CircuitBreaker(clock=clock)
        self._clock = clock
        """The rests' and the breaker's clock (tests move their own)."""
        self.usage = Usage()
        parts = urlsplit(self.base_url)
        host = parts.hostname or ""
        self.needs_key = not self.pool.keys[0].value and host.endswith("openai.com")
        """No key is set and the endpoint is one that always wants one (read once, not per request)."""
        self.key_missing = not self.pool.keys[0].value and not is_local_host(host)
        """No key is set and the endpoint is not on this machine or a private network: it most
        likely wants one (the start says so, once)."""
        self.host = host + (f":{port}" if (port := parts.port) else "")
        """Where usage says the request went: the base URL's host, never a key or a path."""
        self.problem: EndpointError | None = None
        """The latest failure only the owner can end (OWNER_KINDS), until a request is answered."""

    def record(self, key: Key, kind: Kind, started: float, error: EndpointError | None = None) -> None:
        """Count one request of `key` that started at `started` (monotonic) and ended now, and
        what it failed with (`error`), if it did."""
        now = time.monotonic()
        self.usage.record(kind, now - started, now)
        key.usage.record(kind, now - started, now)
        if kind == "ok":
            self.problem = None
        else:
            self.failed_so(error)

    def failed_so(self, error: EndpointError | None) -> None:
        """A request failed with `error`: kept for `marsho.status` when only the owner can end it."""
        if error is not None and kind_of(error) in OWNER_KINDS:
            self.problem = error

    def status(self, model: str, *, skipped: bool = False) -> EndpointStatus:
        """The endpoint and its keys as `marsho.status` shows them; `skipped`: its breaker is
        open and others are behind it."""
        now = self._clock()
        keys = [KeyStatus(masked(key.value), *key.state(now), key.usage.requests,
                          dict(key.usage.errors), key.usage.latencies.percentiles(now))
                for key in self.pool.keys]
        usable = [k for k in keys if k.state == "ok"]
        if skipped:
            return EndpointStatus(
                self.name, self.base_url, model, "skipped", self.breaker.open_until - now,
                self.usage.requests, dict(self.usage.errors), self.usage.latencies.percentiles(now),
                keys, self.problem, self.breaker.last, self.breaker.trial_in(), self.breaker.trying)
        state, left, reason, trial, trying = "ok", 0.0, None, None, False
        if not usable:
            index = min(range(len(keys)), key=lambda i: keys[i].seconds_left)
            first, key = keys[index], self.pool.keys[index]
            state, left = first.state, first.seconds_left
            reason = key.rested_by if state == "resting" else None
            trial, trying = self.pool.trial_in(), self.pool.trying is not None
        return EndpointStatus(self.name, self.base_url, model, state, left, self.usage.requests,
                              dict(self.usage.errors), self.usage.latencies.percentiles(now), keys,
                              self.problem, reason, trial, trying)
