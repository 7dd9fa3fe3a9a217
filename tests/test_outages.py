"""Outages end when the provider does (issue 25): a Retry-After is honoured up to
MARSHO_RETRY_AFTER_MAX, a key resting long and an endpoint its breaker skips are tried by one
real request at a time every PROBE_INTERVAL, and `marsho.status` says why and until when. The
parts run on a fake clock; waits are recorded, not taken."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.model.base import Completion, ModelRequest
from nonebot_plugin_marsho.agent.model.fallback import FallbackChain
from nonebot_plugin_marsho.agent.model.retry import Retrying
from nonebot_plugin_marsho.agent.providers import (
    BREAKER_FAILURES,
    PROBE_INTERVAL,
    RETRY_AFTER_MAX,
    Endpoint,
)
from nonebot_plugin_marsho.chat.render import status_text
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.exceptions import EndpointError
from nonebot_plugin_marsho.i18n import Texts
from tests.test_model_parts import Recorder, server_error, too_many

QUESTION = [{"role": "user", "content": "hi"}]
FOREVER = 999999.0


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Provider:
    """An endpoint client whose answers the test scripts: errors first, then "answered"; a
    request can be held until the test lets it go."""

    def __init__(self, *errors: EndpointError) -> None:
        self.errors = list(errors)
        self.keys: list[str | None] = []
        self.hold: asyncio.Event | None = None

    async def post(self, body: dict[str, Any], key: str | None, timeout: float) -> bytes:
        self.keys.append(key)
        if self.hold is not None:
            await self.hold.wait()
        if self.errors:
            raise self.errors.pop(0)
        return b"answered"

    def read(self, body: bytes) -> Completion:
        return Completion(body.decode())

    async def close(self) -> None:
        pass


def pooled(provider: Provider, clock: Clock, *, cap: float = RETRY_AFTER_MAX,
           retries: int = 0) -> tuple[Retrying, list[float]]:
    endpoint = Endpoint(0, "http://provider/v1", ["key-a", "key-b"], clock=clock)
    part = Retrying(endpoint, provider, timeout=5, retries=retries, retry_after_max=cap)  # type: ignore[arg-type]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.now += seconds

    part.sleep = sleep
    return part, waits


async def ask(part: Retrying) -> str:
    return (await part.request(ModelRequest(QUESTION, model="m"))).content


def rests(part: Retrying, clock: Clock) -> list[float]:
    return [key.resting_until - clock.now for key in part.endpoint.pool.keys]


# --- the cap ---------------------------------------------------------------------------------------


def test_the_default_cap_is_a_few_minutes_and_is_the_settings_default() -> None:
    assert 60 <= RETRY_AFTER_MAX <= 600
    assert Config().marsho_retry_after_max == RETRY_AFTER_MAX
    assert Config(marsho_retry_after_max=5).marsho_retry_after_max == 5


async def test_a_retry_after_of_a_day_rests_the_keys_only_as_long_as_the_cap() -> None:
    clock = Clock()
    part, waits = pooled(Provider(too_many(FOREVER), too_many(FOREVER)), clock)
    with pytest.raises(EndpointError) as caught:
        await ask(part)
    assert caught.value.status == 429 and waits == []
    assert rests(part, clock) == [RETRY_AFTER_MAX, RETRY_AFTER_MAX]
    clock.now += RETRY_AFTER_MAX
    assert await ask(part) == "answered"


async def test_a_capped_retry_after_within_the_wait_bound_is_waited_for() -> None:
    clock = Clock()
    provider = Provider(too_many(FOREVER), too_many(FOREVER))
    part, waits = pooled(provider, clock, cap=2, retries=2)
    assert await ask(part) == "answered"
    assert waits and max(waits) <= 2 and len(provider.keys) == 3


async def test_a_503_asking_for_a_day_is_waited_for_the_cap_only() -> None:
    failure = server_error(503)
    failure.retry_after = FOREVER
    clock = Clock()
    part, waits = pooled(Provider(failure), clock, cap=3, retries=1)
    assert await ask(part) == "answered"
    assert waits == [3]


# --- trials of a resting key -------------------------------------------------------------------


async def test_before_a_trial_is_due_nothing_is_sent() -> None:
    clock = Clock()
    provider = Provider(too_many(FOREVER), too_many(FOREVER))
    part, _ = pooled(provider, clock)
    with pytest.raises(EndpointError):
        await ask(part)
    clock.now += PROBE_INTERVAL - 1
    with pytest.raises(EndpointError) as caught:
        await ask(part)
    assert caught.value.status == 429 and len(provider.keys) == 2


async def test_a_provider_back_is_answering_again_within_a_trial_interval() -> None:
    clock = Clock()
    provider = Provider(too_many(FOREVER), too_many(FOREVER))
    part, _ = pooled(provider, clock)
    with pytest.raises(EndpointError):
        await ask(part)
    clock.now += PROBE_INTERVAL  # the provider came back meanwhile
    assert await ask(part) == "answered"
    assert len(provider.keys) == 3
    tried = part.endpoint.pool.keys[0]
    assert tried.state(clock.now) == ("ok", 0.0) and tried.rested_by is None
    assert await ask(part) == "answered"  # the key answered: it takes questions again


async def test_only_one_question_at_a_time_tries_a_resting_key() -> None:
    clock = Clock()
    provider = Provider(too_many(FOREVER), too_many(FOREVER))
    part, _ = pooled(provider, clock)
    with pytest.raises(EndpointError):
        await ask(part)
    clock.now += PROBE_INTERVAL
    provider.hold = asyncio.Event()
    trial = asyncio.ensure_future(ask(part))
    while len(provider.keys) < 3:  # the trial is in flight
        await asyncio.sleep(0)
    with pytest.raises(EndpointError) as caught:  # every key rests or is being tried
        await ask(part)
    assert caught.value.status == 429 and len(provider.keys) == 3
    provider.hold.set()
    assert await trial == "answered"


async def test_a_failed_trial_waits_another_interval_for_the_next() -> None:
    clock = Clock()
    provider = Provider(*(too_many(FOREVER) for _ in range(3)))
    part, _ = pooled(provider, clock)
    with pytest.raises(EndpointError):
        await ask(part)
    clock.now += PROBE_INTERVAL
    with pytest.raises(EndpointError):  # still down: the trial answered 429
        await ask(part)
    assert len(provider.keys) == 3
    clock.now += PROBE_INTERVAL - 1
    with pytest.raises(EndpointError):
        await ask(part)
    assert len(provider.keys) == 3
    clock.now += 1
    assert await ask(part) == "answered"


async def test_a_trial_cancelled_in_flight_leaves_the_key_to_the_next_question() -> None:
    clock = Clock()
    provider = Provider(too_many(FOREVER), too_many(FOREVER))
    part, _ = pooled(provider, clock)
    with pytest.raises(EndpointError):
        await ask(part)
    clock.now += PROBE_INTERVAL
    provider.hold = asyncio.Event()
    trial = asyncio.ensure_future(ask(part))
    while len(provider.keys) < 3:
        await asyncio.sleep(0)
    trial.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trial
    assert part.endpoint.pool.trying is None
    provider.hold.set()
    clock.now += PROBE_INTERVAL
    assert await ask(part) == "answered"


async def test_an_answer_sent_before_the_429_does_not_end_the_rest() -> None:
    clock = Clock()
    provider = Provider(too_many(FOREVER), too_many(FOREVER))
    part, _ = pooled(provider, clock)
    release = asyncio.Event()
    slow = Provider()
    slow.hold = release
    refuse = provider.post

    async def post(body: dict[str, Any], key: str | None, timeout: float) -> bytes:
        if not slow.keys:  # the first request: sent before the 429s, answered after them
            return await slow.post(body, key, timeout)
        return await refuse(body, key, timeout)

    part.client.post = post  # type: ignore[method-assign]
    early = asyncio.ensure_future(ask(part))
    while not slow.keys:
        await asyncio.sleep(0)
    with pytest.raises(EndpointError):
        await ask(part)  # both keys answered 429: they rest
    release.set()
    assert await early == "answered"
    assert rests(part, clock) == [RETRY_AFTER_MAX, RETRY_AFTER_MAX]


async def test_a_short_rest_is_waited_for_not_tried_early() -> None:
    clock = Clock()
    part, _ = pooled(Provider(too_many(5), too_many(5)), clock)
    with pytest.raises(EndpointError):
        await ask(part)
    assert part.endpoint.pool.trial_at is None


# --- trials of an endpoint its breaker skips ------------------------------------------------------


def chain_of(clock: Clock, primary: Recorder, backup: Recorder) -> FallbackChain:
    endpoints = [Endpoint(0, "http://a/v1", ["k"], clock=clock), Endpoint(1, "http://b/v1", ["k2"], "other",
                                                                          clock=clock)]
    return FallbackChain(endpoints, [primary, backup], model="main", timeout=5, retry_budget=10)


async def test_a_skipped_endpoint_is_tried_once_an_interval_when_the_others_fail() -> None:
    clock = Clock()
    primary = Recorder(*(server_error() for _ in range(BREAKER_FAILURES)))
    backup = Recorder(Completion("b1"), Completion("b2"), Completion("b3"), server_error(), server_error())
    chain = chain_of(clock, primary, backup)
    for _ in range(BREAKER_FAILURES):
        assert (await chain.request(ModelRequest(QUESTION))).content.startswith("b")
    breaker = chain.endpoints[0].breaker
    assert breaker.is_open and len(primary.requests) == BREAKER_FAILURES
    breaker.open_until = clock.now + 300  # as after failed trials: the cool-down doubled
    clock.now += PROBE_INTERVAL - 1
    with pytest.raises(EndpointError):  # the backup fails, the primary's trial is not due
        await chain.request(ModelRequest(QUESTION))
    assert len(primary.requests) == BREAKER_FAILURES
    clock.now += 1
    assert (await chain.request(ModelRequest(QUESTION))).content == "ok"  # the backup failed, the trial answered
    assert len(primary.requests) == BREAKER_FAILURES + 1
    assert not chain.endpoints[0].breaker.is_open


async def test_while_the_others_answer_a_skipped_endpoint_gets_no_trial() -> None:
    clock = Clock()
    primary = Recorder(*(server_error() for _ in range(BREAKER_FAILURES)))
    chain = chain_of(clock, primary, Recorder())
    for _ in range(BREAKER_FAILURES):
        await chain.request(ModelRequest(QUESTION))
    chain.endpoints[0].breaker.open_until = clock.now + 300
    clock.now += PROBE_INTERVAL
    assert (await chain.request(ModelRequest(QUESTION))).content == "ok"
    assert len(primary.requests) == BREAKER_FAILURES


# --- what marsho.status says ------------------------------------------------------------------------


async def test_status_says_why_a_pool_rests_until_when_and_when_it_is_tried() -> None:
    clock = Clock()
    part, _ = pooled(Provider(too_many(FOREVER), too_many(FOREVER)), clock)
    with pytest.raises(EndpointError):
        await ask(part)
    clock.now += PROBE_INTERVAL - 20
    [status] = part.status()
    assert status.state == "resting" and status.reason is not None and status.reason.status == 429
    lines = status_text(Texts("en"), [status]).splitlines()
    assert lines[1].startswith("primary:  at http://provider/v1: resting for 290 s, one question tries it "
                               "in 20 s; 2 requests, errors: rate limit 2")
    assert lines[1].endswith("; why: The endpoint is rate-limiting us (429: slow). It asked to wait 999999 s, "
                             "honoured up to MARSHO_RETRY_AFTER_MAX.")
    assert lines[2].startswith("  key …ey-a: resting for 290 s; 1 request, errors: rate limit 1")
    zh = status_text(Texts("zh-CN"), [status]).splitlines()[1]
    assert "休息中，还有 290 秒，20 秒后让一个问题试一次" in zh and "原因：接口正在限流（429：slow）" in zh


async def test_status_says_a_trial_is_in_flight() -> None:
    clock = Clock()
    provider = Provider(too_many(FOREVER), too_many(FOREVER))
    part, _ = pooled(provider, clock)
    with pytest.raises(EndpointError):
        await ask(part)
    clock.now += PROBE_INTERVAL
    provider.hold = asyncio.Event()
    trial = asyncio.ensure_future(ask(part))
    while len(provider.keys) < 3:
        await asyncio.sleep(0)
    assert "one question is trying it now" in status_text(Texts("en"), part.status())
    provider.hold.set()
    await trial


def test_status_says_why_an_endpoint_is_skipped() -> None:
    endpoint = Endpoint(0, "http://a/v1", ["k"], clock=Clock())
    for _ in range(BREAKER_FAILURES):
        endpoint.breaker.failed()
    endpoint.breaker.last = server_error()
    line = status_text(Texts("en"), [endpoint.status("m", skipped=True)]).splitlines()[1]
    assert line.startswith("primary: m at http://a/v1: skipped after repeated failures for 30 s, one question "
                           "tries it in 30 s; 0 requests")
    assert line.endswith("; why: The endpoint failed (503: down).")

