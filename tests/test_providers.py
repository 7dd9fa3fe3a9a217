"""Providers fail (issue 15): retries of what a retry may fix, Retry-After, a key pool, fallback
endpoints with a circuit breaker, a turn that changes endpoint mid-way, all endpoints down, and
`marsho.status`. Each test drives the real LLMClient over loopback against the fake endpoint;
waits are recorded instead of taken (`client.sleep`), so no test depends on the clock."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nonebug import App

from nonebot_plugin_marsho.agent import providers
from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.llm import Fallback, LLMClient
from nonebot_plugin_marsho.agent.providers import (
    BREAKER_FAILURES,
    CircuitBreaker,
    KeyPool,
    backoff,
    masked,
    retry_after_seconds,
)
from nonebot_plugin_marsho.chat.app import held_secrets
from nonebot_plugin_marsho.config import Config, describe_validation_error
from nonebot_plugin_marsho.exceptions import EndpointError
from nonebot_plugin_marsho.redaction import logger
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import ToolRunner
from tests.conftest import SUPERUSER_ID, llm_client
from tests.fake_openai import Answer, FakeOpenAI, dropped, error, raw, text, tool_calls
from tests.onebot import group_message, onebot_bot, reply_call
from tests.test_engine import make_toolset

QUESTION = [{"role": "user", "content": "hi"}]
KEY_A = "sk-pool-key-aaaa-1111"
KEY_B = "sk-pool-key-bbbb-2222"


@pytest.fixture(scope="module")
def backup() -> Iterator[FakeOpenAI]:
    """A second endpoint: the fallback."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def second(backup: FakeOpenAI) -> Iterator[FakeOpenAI]:
    backup.reset()
    yield backup
    backup.reset()


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}", level="DEBUG")
    yield lines
    logger.remove(sink)


def closed_port_url() -> str:
    """A base URL where nothing listens (the connection is refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def recording(client: LLMClient) -> list[float]:
    """The waits the client takes from now on, recorded instead of slept."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    client.sleep = sleep
    return waits


def keys_sent(fake: FakeOpenAI) -> list[str]:
    return [body["_headers"]["authorization"].removeprefix("Bearer ") for body in fake.requests]


# --- retries --------------------------------------------------------------------------------------


async def test_a_429_with_retry_after_is_waited_for_then_answered(fake: FakeOpenAI) -> None:
    fake.push(error(429, "slow down", headers={"Retry-After": "1"}), text("hello"))
    client = llm_client(fake, retries=2)
    waits = recording(client)
    assert (await client.complete(QUESTION)).content == "hello"
    assert waits == [1.0] and len(fake.requests) == 2


async def test_503_three_times_then_success_is_answered_with_growing_waits(fake: FakeOpenAI) -> None:
    fake.push(*(error(503, "overloaded") for _ in range(3)), text("finally"))
    client = llm_client(fake, retries=3)
    waits = recording(client)
    assert (await client.complete(QUESTION)).content == "finally"
    assert len(fake.requests) == 4 and len(waits) == 3
    # exponential backoff with jitter over its upper half: each range doubles
    for attempt, wait in enumerate(waits):
        ceiling = providers.BACKOFF_BASE * 2 ** attempt
        assert ceiling / 2 <= wait <= ceiling


async def test_retries_stop_at_marsho_retries_with_the_endpoints_error(fake: FakeOpenAI) -> None:
    fake.push(*(error(503, "overloaded") for _ in range(3)), text("too late"))
    client = llm_client(fake, retries=2)
    recording(client)
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    assert caught.value.code == "endpoint.5xx" and caught.value.status == 503
    assert len(fake.requests) == 3 and fake.pending == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 501])
async def test_failures_a_retry_cannot_fix_are_never_retried(
    fake: FakeOpenAI, status: int
) -> None:
    fake.push(error(status, "no"), text("never asked"))
    client = llm_client(fake, retries=5)
    waits = recording(client)
    with pytest.raises(EndpointError):
        await client.complete(QUESTION)
    assert len(fake.requests) == 1 and waits == []


@pytest.mark.parametrize("failure", [
    dropped(), raw(b""), error(500, "boom"), error(502, "bad gateway"), error(504, "gateway timeout"),
], ids=["dropped-connection", "empty-body", "500", "502", "504"])
async def test_failures_a_retry_may_fix_are_retried(fake: FakeOpenAI, failure: Answer) -> None:
    fake.push(failure, text("second time lucky"))
    client = llm_client(fake, retries=1)
    recording(client)
    assert (await client.complete(QUESTION)).content == "second time lucky"
    assert len(fake.requests) == 2


async def test_a_timeout_is_retried(fake: FakeOpenAI) -> None:
    fake.push(text("too slow", delay=1.5), text("in time"))
    client = llm_client(fake, retries=1, timeout=0.5)
    recording(client)
    assert (await client.complete(QUESTION)).content == "in time"


async def test_a_retry_after_past_the_budget_is_not_waited_for(fake: FakeOpenAI) -> None:
    fake.push(error(429, "come back in an hour", headers={"Retry-After": "3600"}), text("no"))
    client = llm_client(fake, retries=3, retry_budget=5)
    waits = recording(client)
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    # capped at RETRY_AFTER_CAP (30 s), which is past MARSHO_TIMEOUT + the budget: no retry
    assert caught.value.code == "endpoint.429" and waits == [] and len(fake.requests) == 1


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412500.0) == 10.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412500.0) == 0.0  # past
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_backoff_grows_exponentially_up_to_its_cap() -> None:
    assert [backoff(n, rand=lambda: 1.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff(0, rand=lambda: 0.0) == 0.25  # the jitter never takes it to zero


# --- the key pool ---------------------------------------------------------------------------------


async def test_a_revoked_key_in_a_pool_of_two_is_set_aside_with_one_redacted_log_line(
    fake: FakeOpenAI, logged: list[str]
) -> None:
    def answer(body: dict[str, Any]) -> Answer:
        if body["_headers"]["authorization"] == f"Bearer {KEY_A}":
            return error(401, "Incorrect API key provided")
        return text("answered")

    fake.responder = answer
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B], retries=0)
    for _ in range(4):
        assert (await client.complete(QUESTION)).content == "answered"
    assert keys_sent(fake) == [KEY_A, KEY_B, KEY_B, KEY_B, KEY_B]  # A tried once, then set aside
    lines = [line for line in logged if "set aside" in line]
    assert len(lines) == 1 and "…1111" in lines[0]
    assert not any(KEY_A in line or KEY_B in line for line in logged)
    state = client.status()[0].keys
    assert [(key.masked, key.state) for key in state] == [("…1111", "set aside"), ("…2222", "ok")]


async def test_a_pool_whose_keys_are_all_refused_falls_back_with_its_error(
    fake: FakeOpenAI, second: FakeOpenAI
) -> None:
    fake.responder = lambda body: error(401, "Incorrect API key provided")
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B],
                        fallbacks=[Fallback(base_url=second.base_url, model="b")])
    for _ in range(BREAKER_FAILURES - 1):  # then the primary would be skipped altogether
        assert (await client.complete(QUESTION)).content == "ok"
    assert keys_sent(fake) == [KEY_A, KEY_B]  # both set aside: not asked again for a while
    assert len(second.requests) == BREAKER_FAILURES - 1
    second.responder = lambda body: error(503, "down too")
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    assert caught.value.code == "endpoint.401" and len(fake.requests) == 2  # the primary's refusal


async def test_a_rate_limited_key_rests_while_the_other_key_answers(fake: FakeOpenAI) -> None:
    fake.push(error(429, "quota", headers={"Retry-After": "20"}))
    client = llm_client(fake, api_keys=[KEY_A, KEY_B], api_key="", retries=2)
    waits = recording(client)
    for _ in range(3):
        assert (await client.complete(QUESTION)).content == "ok"
    assert keys_sent(fake) == [KEY_A, KEY_B, KEY_B, KEY_B]
    assert waits == []  # another key was ready: nobody waited
    assert client.status()[0].keys[0].state == "resting"


async def test_when_every_key_rests_the_question_waits_for_the_first_back() -> None:
    now = [100.0]
    pool = KeyPool([KEY_A, KEY_B], clock=lambda: now[0])
    pool.rest(pool.keys[0], 5)
    pool.rest(pool.keys[1], 2)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # the pool's own wait, with a clock we move
        slept.append(seconds)
        now[0] += seconds

    deadline = providers.Deadline(10, clock=lambda: now[0])
    deadline.start()
    providers.asyncio.sleep, saved = sleep, providers.asyncio.sleep  # type: ignore[assignment]
    try:
        key = await pool.take(deadline)
        assert key.value == KEY_B and slept == [2.0]
        pool.rest(pool.keys[0], 50)
        pool.rest(pool.keys[1], 50)
        with pytest.raises(providers.NoKeyReady):  # back only past the deadline: not waited for
            await pool.take(deadline)
    finally:
        providers.asyncio.sleep = saved  # type: ignore[assignment]


def test_a_pool_of_one_key_never_rests_nor_is_set_aside() -> None:
    pool = KeyPool([KEY_A])
    pool.rest(pool.keys[0], 30)
    assert not pool.set_aside(pool.keys[0]) and pool.ready() == pool.keys


def test_a_key_is_shown_as_its_last_four_characters() -> None:
    assert masked(KEY_A) == "…1111" and masked("") == "(none)"


# --- fallbacks ------------------------------------------------------------------------------------


async def test_a_dead_primary_falls_back_at_once_and_is_then_skipped(
    second: FakeOpenAI, logged: list[str]
) -> None:
    client = llm_client(closed_port_url(), retries=2, fallbacks=[
        Fallback(base_url=second.base_url, model="backup-model", api_keys=["sk-backup-9876"])])
    waits = recording(client)
    for _ in range(BREAKER_FAILURES + 2):
        assert (await client.complete(QUESTION)).content == "ok"
    assert waits == []  # a refused connection is not retried: the fallback answers at once
    assert {body["model"] for body in second.requests} == {"backup-model"}
    assert keys_sent(second) == ["sk-backup-9876"] * (BREAKER_FAILURES + 2)
    primary, backup = client.status()
    # the breaker opened after BREAKER_FAILURES failures: later questions did not try it
    assert primary.requests == BREAKER_FAILURES and primary.errors == {"refused": BREAKER_FAILURES}
    assert primary.state == "skipped" and backup.state == "ok" and backup.requests == BREAKER_FAILURES + 2
    assert any("answered by fallback 1" in line for line in logged)


async def test_the_fallback_is_asked_when_the_primarys_retries_are_spent(
    fake: FakeOpenAI, second: FakeOpenAI
) -> None:
    fake.push(*(error(503, "overloaded") for _ in range(2)))
    second.push(text("from the backup"))
    client = llm_client(fake, retries=1, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    recording(client)
    assert (await client.complete(QUESTION)).content == "from the backup"
    assert len(fake.requests) == 2 and len(second.requests) == 1


async def test_a_fallbacks_refusal_names_its_own_entry_not_the_primarys_settings(
    fake: FakeOpenAI, second: FakeOpenAI, logged: list[str]
) -> None:
    fake.push(error(503, "overloaded"))
    second.push(error(404, "no model b"))
    client = llm_client(fake, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    with pytest.raises(EndpointError):
        await client.complete(QUESTION)
    fake.push(error(401, "bad key"))
    second.push(error(403, "forbidden"))
    with pytest.raises(EndpointError):
        await client.complete(QUESTION)
    hints = [line.rstrip().split(") failed: ", 1)[1] for line in logged if ") failed: " in line]
    assert hints == [
        "The endpoint failed (503: overloaded). Try again later.",
        f"Not found (404: no model b). Check MARSHO_FALLBACKS #1 model (b) and MARSHO_FALLBACKS "
        f"#1 base_url ({second.base_url}).",
        "The endpoint rejected the API key (401: bad key). Check MARSHO_API_KEY / MARSHO_API_KEYS.",
        "The endpoint refused access (403: forbidden). Check MARSHO_FALLBACKS #1 api_key / api_keys "
        "and the account's permissions.",
    ]


async def test_a_fallback_without_a_key_on_openai_is_told_to_set_its_own(
    fake: FakeOpenAI, logged: list[str]
) -> None:
    fake.push(error(503, "overloaded"))
    client = llm_client(fake, fallbacks=[Fallback(base_url="https://api.openai.com/v1", model="gpt-x")])
    with pytest.raises(EndpointError):
        await client.complete(QUESTION)  # nothing is sent there: no key
    assert any(line.rstrip().endswith("No API key is set for https://api.openai.com/v1. Set MARSHO_FALLBACKS "
                                      "#1 api_key / api_keys in .env.") for line in logged), logged


async def test_the_judge_models_refusal_names_marsho_active_judge_model(fake: FakeOpenAI, tmp_path: Path) -> None:
    from nonebot_plugin_marsho.chat.app import Marsho
    from nonebot_plugin_marsho.config import Config

    bot = Marsho(Config(marsho_base_url=fake.base_url, marsho_api_key="k", marsho_model="fake-model",
                        marsho_active_judge_model="judge-typo", marsho_lang="en",
                        marsho_database_url=f"sqlite:///{tmp_path / 'marsho.db'}"), tmp_path)
    await bot.start()
    try:
        assert bot.judge is not None
        fake.push(error(404, "no such model"))
        with pytest.raises(EndpointError) as raised:
            await bot.judge.complete(QUESTION)
        assert str(raised.value).endswith(
            f"Check MARSHO_ACTIVE_JUDGE_MODEL (judge-typo) and MARSHO_BASE_URL ({fake.base_url}).")
    finally:
        await bot.stop()


async def test_the_summary_models_refusal_names_marsho_summary_model(fake: FakeOpenAI) -> None:
    fake.push(error(404, "no such model"))
    client = llm_client(fake, model="summary-x", model_setting="MARSHO_SUMMARY_MODEL")
    with pytest.raises(EndpointError) as raised:
        await client.complete(QUESTION)
    assert str(raised.value).endswith(f"Check MARSHO_SUMMARY_MODEL (summary-x) and MARSHO_BASE_URL ({fake.base_url}).")


async def test_a_request_the_primary_refused_as_invalid_does_not_fall_back(
    fake: FakeOpenAI, second: FakeOpenAI
) -> None:
    fake.push(error(400, "context too long"))
    client = llm_client(fake, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    with pytest.raises(EndpointError):
        await client.complete(QUESTION)
    assert second.requests == []  # another endpoint would refuse the same request


def test_a_breaker_opens_after_repeated_failures_and_its_cooldown_doubles() -> None:
    now = [0.0]
    breaker = CircuitBreaker(clock=lambda: now[0])
    assert [breaker.failed() for _ in range(BREAKER_FAILURES)] == [False] * (BREAKER_FAILURES - 1) + [True]
    assert breaker.is_open
    now[0] += providers.BREAKER_COOLDOWN + 1
    assert not breaker.is_open  # one trial
    assert breaker.failed() and breaker.cooldown == providers.BREAKER_COOLDOWN * 2
    breaker.succeeded()
    assert not breaker.is_open and breaker.failures == 0


def engine_on(client: LLMClient) -> Engine:
    toolset = make_toolset()
    return Engine(client, toolset, SqlStore("sqlite://"), ToolRunner(toolset, timeout=5))


async def test_a_turn_falls_back_mid_way_and_the_tool_results_carry_over(
    fake: FakeOpenAI, second: FakeOpenAI
) -> None:
    fake.push(tool_calls(("wx__get_weather", {"location": "Paris"}, "call_1"),
                         ("wx__get_weather", {"location": "Rome"}, "call_2")),
              error(500, "died mid-turn"))
    second.push(tool_calls(("wx__get_weather", {"location": "Oslo"}, "call_1")), text("All sunny."))
    client = llm_client(fake, retries=0, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    engine = engine_on(client)
    reply = await engine.chat("k", "weather?")
    assert reply.text == "All sunny." and reply.rounds == 2
    # the fallback got the same messages the primary failed on: both results of round one
    continued = second.requests[0]["messages"]
    assert [m["tool_call_id"] for m in continued if m["role"] == "tool"] == ["call_1", "call_2"]
    assert "Paris: 21°C" in continued[-2]["content"] and "Rome: 21°C" in continued[-1]["content"]
    assert len(second.requests) == 2 and len(fake.requests) == 2  # the rest of the turn stayed there
    stored = (await engine.history.recent_turns("k", max_messages=100, max_tokens=10**6))[0].messages
    asked = [call["id"] for m in stored if m["role"] == "assistant" for call in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in stored if m["role"] == "tool"]
    assert sorted(asked) == sorted(answered) and len(set(answered)) == len(answered) == 3


async def test_a_turn_stays_on_the_endpoint_that_answered_it_first(
    fake: FakeOpenAI, second: FakeOpenAI
) -> None:
    fake.push(error(502, "bad gateway"))  # then healthy again
    second.push(tool_calls(("wx__get_weather", {"location": "Oslo"})), text("Oslo is sunny."))
    client = llm_client(fake, retries=0, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    reply = await engine_on(client).chat("k", "weather?")
    assert reply.text == "Oslo is sunny."
    assert len(fake.requests) == 1 and len(second.requests) == 2


async def test_all_endpoints_down_is_one_clear_error_within_the_bound_and_history_is_unchanged(
    second: FakeOpenAI,
) -> None:
    second.responder = lambda body: error(503, "overloaded")
    client = llm_client(closed_port_url(), retries=2, retry_budget=3, fallbacks=[
        Fallback(base_url=closed_port_url(), model="b"), Fallback(base_url=second.base_url, model="c")])
    waits = recording(client)
    engine = engine_on(client)
    with pytest.raises(EndpointError) as caught:
        await engine.chat("k", "anyone there?")
    assert caught.value.code == "endpoint.unreachable"  # the primary's failure is the one told
    assert len(second.requests) == 3 and sum(waits) < 3  # its retries, within the budget
    assert await engine.history.recent_turns("k", max_messages=100, max_tokens=10**6) == []


async def test_the_tool_rounds_of_one_turn_share_one_retry_budget(fake: FakeOpenAI) -> None:
    # round one waits 1 s of a 1.2 s budget (for real: the budget counts time that passed), so
    # round two may not wait another second, although its own request alone could have
    fake.push(error(429, "slow down", headers={"Retry-After": "1"}),
              tool_calls(("wx__get_weather", {"location": "Oslo"})),
              error(429, "slow down", headers={"Retry-After": "1"}), text("never asked"))
    client = llm_client(fake, retries=3, timeout=0.5, retry_budget=1.2)
    with pytest.raises(EndpointError) as caught:
        await engine_on(client).chat("k", "weather?")
    assert caught.value.code == "endpoint.429" and fake.pending == 1


async def test_all_endpoints_down_gets_a_clear_reply_in_chat(
    app: App, plugin_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = llm_client(closed_port_url(), retries=2, fallbacks=[
        Fallback(base_url=closed_port_url(), model="b")])
    monkeypatch.setattr(plugin_engine, "llm", dead)
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho hello")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, (
            "Sorry, I could not answer: the model's service cannot be reached. The bot's owner has "
            "the details in the log.")), result={"message_id": 1})
    assert await plugin_engine.history.recent_turns(
        "anything", max_messages=10, max_tokens=10**6) == []


LATENCY = "0.25 s"


class FixedLatencies(providers.Latencies):
    """The same requests, each taking 0.25 s."""

    def __init__(self, measured: providers.Latencies) -> None:
        super().__init__()
        self._samples = measured._samples

    def percentiles(self, now: float) -> tuple[float, float] | None:
        return (0.25, 0.25) if super().percentiles(now) else None


# --- marsho.status --------------------------------------------------------------------------------


async def test_status_shows_each_endpoint_and_masked_key_to_superusers_only(
    app: App, fake: FakeOpenAI, second: FakeOpenAI, plugin_engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B], retries=0, fallbacks=[
        Fallback(base_url=second.base_url, model="backup-model", api_keys=["sk-backup-9876"])])
    fake.push(error(429, "quota", headers={"Retry-After": "30"}))
    await client.complete(QUESTION)  # A rests, B answers
    for figures in (client.endpoints[0].usage, *(key.usage for key in client.endpoints[0].pool.keys)):
        figures.latencies = FixedLatencies(figures.latencies)  # shown as they are; not timed here
    monkeypatch.setattr(plugin_engine, "llm", client)
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        asked = group_message("marsho.status", user_id=int(SUPERUSER_ID))
        ctx.receive_event(bot, asked)
        port, backup_port = fake.port, second.port
        ctx.should_call_api(*reply_call(asked, "\n".join([
            "Model endpoints (requests since start; latency over the last hour):",
            f"primary: fake-model at http://127.0.0.1:{port}/v1: ok; 2 requests, errors: rate limit 1, "
            f"p50 {LATENCY}, p95 {LATENCY}",
            f"  key …1111: resting for 30 s; 1 request, errors: rate limit 1, p50 {LATENCY}, p95 {LATENCY}",
            f"  key …2222: ok; 1 request, p50 {LATENCY}, p95 {LATENCY}",
            f"fallback 1: backup-model at http://127.0.0.1:{backup_port}/v1: ok; 0 requests",
            "Summaries of trimmed history (the chat model): requests since start: 0 answered, 0 failed",
        ])), result={"message_id": 1})
        member = group_message("marsho.status")
        ctx.receive_event(bot, member)
        ctx.should_call_api(*reply_call(member, "Only the bot's superusers may use marsho.status."),
                            result={"message_id": 2})


def test_status_text_names_states_errors_and_latency(fake: FakeOpenAI) -> None:
    from nonebot_plugin_marsho.agent.providers import EndpointStatus, KeyStatus
    from nonebot_plugin_marsho.chat.render import status_text
    from nonebot_plugin_marsho.i18n import Texts

    shown = status_text(Texts("en"), [
        EndpointStatus("primary", "http://a/v1", "m", "ok", 0, 10, {"rate": 2}, (0.5, 1.25), [
            KeyStatus("…1111", "resting", 12.2, 6, {"rate": 2}, (0.5, 1.0)),
            KeyStatus("…2222", "set aside", 590, 4, {"auth": 1}, None)]),
        EndpointStatus("fallback 1", "http://b/v1", "b", "skipped", 25, 3, {"refused": 3}, None, [
            KeyStatus("(none)", "ok", 0, 3, {"refused": 3}, None)]),
    ])
    assert shown.splitlines() == [
        "Model endpoints (requests since start; latency over the last hour):",
        "primary: m at http://a/v1: ok; 10 requests, errors: rate limit 2, p50 0.50 s, p95 1.25 s",
        "  key …1111: resting for 12 s; 6 requests, errors: rate limit 2, p50 0.50 s, p95 1.00 s",
        "  key …2222: set aside (refused) for 590 s; 4 requests, errors: key refused 1",
        "fallback 1: b at http://b/v1: skipped after repeated failures for 25 s; 3 requests, "
        "errors: refused connection 3",
    ]
    assert "1 request," in status_text(Texts("en"), [
        EndpointStatus("primary", "http://a/v1", "m", "ok", 0, 1, {}, None, [])]) + ","
    assert status_text(Texts("zh-CN"), [
        EndpointStatus("primary", "http://a/v1", "m", "resting", 3, 1, {"rate": 1}, None, [])
    ]).splitlines()[1] == "主服务：m（http://a/v1）：休息中，还有 3 秒；1 次请求，错误：限流 1"
    assert [
        "fallback 1: b at http://b/v1: skipped after repeated failures for 25 s; 3 requests, "
        "errors: refused connection 3",
    ]


# --- settings -------------------------------------------------------------------------------------


def test_fallbacks_and_key_pools_are_read_from_env_values() -> None:
    config = Config(
        marsho_api_keys="sk-a-1111, sk-b-2222",
        marsho_fallbacks=[{"base_url": "https://api.deepseek.com/v1/", "api_key": "sk-ds-3333",
                           "model": "deepseek-chat"},
                          {"base_url": "http://127.0.0.1:11434/v1", "model": "qwen3:8b",
                           "tool_mode": "prompt", "api_keys": ["x-4444", "y-5555"]}],
    )
    assert config.marsho_api_keys == ["sk-a-1111", "sk-b-2222"]
    assert config.marsho_fallbacks[0].base_url == "https://api.deepseek.com/v1"
    assert config.marsho_fallbacks[1].keys == ["x-4444", "y-5555"]
    assert config.marsho_retries == 2
    held = held_secrets(config)
    assert {"sk-a-1111", "sk-b-2222", "sk-ds-3333", "x-4444", "y-5555"} <= set(held)


def test_a_bad_fallback_is_named_without_showing_its_key() -> None:
    with pytest.raises(Exception) as caught:
        Config(marsho_fallbacks=[{"base_url": "api.example.com", "api_key": "sk-never-shown-77",
                                  "modell": "x"}])
    message = describe_validation_error(caught.value)  # type: ignore[arg-type]
    assert "MARSHO_FALLBACKS[0].base_url" in message and "MARSHO_FALLBACKS[0].model" in message
    assert "sk-never-shown-77" not in message


# --- review of issue 15: bounds under pressure ----------------------------------------------------


def clocked(client: LLMClient) -> tuple[list[float], list[float]]:
    """(waits, now): the waits the client takes, recorded, moving the clock of its primary's key
    pool instead of taking time (so keys come back from their rest without anyone sleeping)."""
    now = [1000.0]
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    client.sleep = sleep
    client.endpoints[0].pool._clock = lambda: now[0]
    return waits, now


async def test_a_pool_answered_429_with_retry_after_0_makes_a_bounded_number_of_requests(
    fake: FakeOpenAI,
) -> None:
    fake.responder = lambda body: error(429, "slow down", headers={"Retry-After": "0"})
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B], retries=2, timeout=2, retry_budget=1)
    waits, _ = clocked(client)
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    assert caught.value.code == "endpoint.429"
    # each key passes the request on once; then every 429 is one of MARSHO_RETRIES
    assert len(fake.requests) <= 2 + 2 + 1
    assert sum(waits) >= providers.BACKOFF_BASE / 2  # the keys rested at least a backoff


async def test_a_hung_primary_is_not_retried_while_a_fallback_is_left(
    fake: FakeOpenAI, second: FakeOpenAI
) -> None:
    fake.responder = lambda body: text("far too late", delay=1.5)
    second.push(text("from the backup"))
    client = llm_client(fake, retries=2, timeout=0.5, retry_budget=0.5,
                        fallbacks=[Fallback(base_url=second.base_url, model="b")])
    recording(client)
    assert (await client.complete(QUESTION)).content == "from the backup"
    assert len(fake.requests) == 1 and len(second.requests) == 1


async def test_a_primary_alone_still_retries_its_timeouts(fake: FakeOpenAI) -> None:
    fake.push(text("too slow", delay=1.5), text("in time"))
    client = llm_client(fake, retries=1, timeout=0.5, retry_budget=1)
    recording(client)
    assert (await client.complete(QUESTION)).content == "in time" and len(fake.requests) == 2


async def test_the_wait_for_a_resting_key_counts_against_the_deadline() -> None:
    now = [100.0]
    pool = KeyPool([KEY_A, KEY_B], clock=lambda: now[0])
    pool.rest(pool.keys[0], 2.5)
    pool.rest(pool.keys[1], 2.5)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    deadline = providers.Deadline(3, clock=lambda: now[0])  # not started: no attempt yet
    providers.asyncio.sleep, saved = sleep, providers.asyncio.sleep  # type: ignore[assignment]
    try:
        await pool.take(deadline)
        # the attempt after the wait gets what is left of the bound, not a fresh one
        assert slept == [2.5] and deadline.left() == pytest.approx(0.5)
        pool.rest(pool.keys[0], 2.5)
        pool.rest(pool.keys[1], 2.5)
        with pytest.raises(providers.NoKeyReady):  # past what is left: not waited for
            await pool.take(deadline)
        assert slept == [2.5] and sum(slept) <= deadline.seconds
    finally:
        providers.asyncio.sleep = saved  # type: ignore[assignment]


async def test_each_question_refused_by_a_set_aside_pool_gets_its_own_error(fake: FakeOpenAI) -> None:
    fake.responder = lambda body: error(401, "Incorrect API key provided")
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B], retries=0)
    raised: list[EndpointError] = []
    for _ in range(4):
        with pytest.raises(EndpointError) as caught:
            await client.complete(QUESTION)
        raised.append(caught.value)
    assert len(fake.requests) == 2  # both keys set aside after the first question
    assert len({id(error) for error in raised}) == len(raised)
    assert all(error.code == "endpoint.401" and str(error) == str(raised[0]) for error in raised)

    def frames(error: BaseException) -> int:
        count, tb = 0, error.__traceback__
        while tb is not None:
            count, tb = count + 1, tb.tb_next
        return count

    assert frames(raised[1]) == frames(raised[3])  # the traceback does not grow question by question


async def test_concurrent_failures_double_the_breakers_cooldown_not_once_each(
    fake: FakeOpenAI, second: FakeOpenAI
) -> None:
    import asyncio

    fake.responder = lambda body: error(503, "overloaded", delay=0.2)
    client = llm_client(fake, retries=0, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    answers = await asyncio.gather(*(client.complete(QUESTION) for _ in range(8)))
    assert [a.content for a in answers] == ["ok"] * 8 and len(fake.requests) == 8
    breaker = client.endpoints[0].breaker
    assert breaker.is_open and breaker.cooldown == providers.BREAKER_COOLDOWN


def test_a_breakers_cooldown_doubles_only_for_a_trial() -> None:
    now = [0.0]
    breaker = CircuitBreaker(clock=lambda: now[0])
    in_flight = now[0]
    for _ in range(BREAKER_FAILURES):
        breaker.failed(in_flight)
    opened = breaker.open_until
    assert not breaker.failed(in_flight)  # started before it opened: neither doubles nor extends
    assert breaker.cooldown == providers.BREAKER_COOLDOWN and breaker.open_until == opened
    now[0] = opened + 1
    trial = now[0]
    assert breaker.failed(trial) and breaker.cooldown == providers.BREAKER_COOLDOWN * 2


async def test_a_retry_after_past_the_cap_is_not_waited_for_and_the_fallback_answers(
    fake: FakeOpenAI, second: FakeOpenAI
) -> None:
    fake.responder = lambda body: error(429, "come back in an hour", headers={"Retry-After": "3600"})
    second.push(text("from the backup"))
    client = llm_client(fake, retries=2, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    waits = recording(client)
    assert (await client.complete(QUESTION)).content == "from the backup"
    assert waits == [] and len(fake.requests) == 1


async def test_a_key_asked_to_wait_past_the_cap_rests_that_long_while_the_other_answers(
    fake: FakeOpenAI,
) -> None:
    fake.push(error(429, "come back in an hour", headers={"Retry-After": "3600"}))
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B], retries=2)
    waits = recording(client)
    assert (await client.complete(QUESTION)).content == "ok"
    assert waits == [] and keys_sent(fake) == [KEY_A, KEY_B]
    state, left = client.endpoints[0].pool.keys[0].state(providers.time.monotonic())
    assert state == "resting" and left > providers.RETRY_AFTER_CAP


async def test_a_key_refused_under_several_requests_in_flight_is_set_aside_and_logged_once(
    fake: FakeOpenAI, logged: list[str]
) -> None:
    import asyncio

    def answer(body: dict[str, Any]) -> Answer:
        if body["_headers"]["authorization"] == f"Bearer {KEY_A}":
            return error(401, "Incorrect API key provided", delay=0.2)
        return text("answered")

    fake.responder = answer
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B], retries=0)
    answers = await asyncio.gather(*(client.complete(QUESTION) for _ in range(3)))
    assert [a.content for a in answers] == ["answered"] * 3
    assert keys_sent(fake).count(KEY_A) == 2  # two questions were in flight with it
    assert len([line for line in logged if "set aside" in line]) == 1


async def test_whether_an_endpoint_needs_a_key_is_read_once(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = llm_client(fake, api_key="")
    calls: list[str] = []
    real = providers.urlsplit

    def counting(url: str) -> Any:
        calls.append(url)
        return real(url)

    monkeypatch.setattr(providers, "urlsplit", counting)
    for _ in range(3):
        assert (await client.complete(QUESTION)).content == "ok"
    assert calls == [] and not client.needs_key


async def test_no_other_key_is_tried_once_the_deadline_has_run_out(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nonebot_plugin_marsho.agent.model import fallback

    now = [0.0]

    class ClockedDeadline(providers.Deadline):
        def __init__(self, seconds: float) -> None:
            super().__init__(seconds, clock=lambda: now[0])

    def refused_late(body: dict[str, Any]) -> Answer:
        now[0] += 1000  # the refusal came as the bound ran out
        return error(401, "Incorrect API key provided")

    monkeypatch.setattr(fallback, "Deadline", ClockedDeadline)
    fake.responder = refused_late
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B], retries=2)
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    assert caught.value.code == "endpoint.401" and keys_sent(fake) == [KEY_A]
