"""The first five minutes of a new owner (issue 24): no key at all, a proxy's 400 that is really a
key or setup problem, and the retry log line. Each test drives the real LLMClient over loopback
against the fake endpoint; waits are recorded instead of taken, so no test depends on the clock."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from nonebug import App

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.llm import Fallback, LLMClient
from nonebot_plugin_marsho.agent.model.endpoint import NO_KEY_PLACEHOLDER
from nonebot_plugin_marsho.agent.providers import kind_of
from nonebot_plugin_marsho.chat.app import Marsho
from nonebot_plugin_marsho.chat.models import chat_model
from nonebot_plugin_marsho.chat.render import brief_reason, error_text
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.exceptions import EndpointError
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.redaction import logger
from tests.conftest import SUPERUSER_ID, llm_client
from tests.fake_openai import Answer, FakeOpenAI, dropped, error, raw, text
from tests.onebot import group_message, onebot_bot, reply_call
from tests.test_cli import make_project
from tests.test_cli import marsho as marsho_cli
from tests.test_providers import LATENCY, FixedLatencies, keys_sent, recording

QUESTION = [{"role": "user", "content": "hi"}]


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
    sink = logger.add(lambda message: lines.append(message.rstrip("\n")), format="{message}", level="DEBUG")
    yield lines
    logger.remove(sink)


# --- the retry log line ----------------------------------------------------------------------------


async def test_the_retry_log_line_names_the_setting_to_check(fake: FakeOpenAI, logged: list[str]) -> None:
    fake.push(dropped(), text("answered"))
    client = llm_client(fake, retries=1)
    waits = recording(client)
    assert (await client.complete(QUESTION)).content == "answered"
    [line] = [line for line in logged if "retry 1 of 1" in line]
    assert len(waits) == 1
    assert line.rstrip().endswith("Check MARSHO_BASE_URL and that the endpoint is up."), line
    assert "{" not in line


async def test_a_fallbacks_retry_log_line_names_its_own_entry(
    fake: FakeOpenAI, second: FakeOpenAI, logged: list[str]
) -> None:
    fake.push(error(401, "bad key"))
    second.push(dropped(), text("from the backup"))
    client = llm_client(fake, retries=1, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    recording(client)
    assert (await client.complete(QUESTION)).content == "from the backup"
    [line] = [line for line in logged if "retry 1 of 1" in line]
    assert line.rstrip().endswith("Check MARSHO_FALLBACKS #1 base_url and that the endpoint is up."), line


# --- a 400 that is really a key or setup problem ---------------------------------------------------

KEY_A = "sk-pool-key-aaaa-1111"
KEY_B = "sk-pool-key-bbbb-2222"


def body_of(message: str, type_: str | None = "invalid_request_error", code: object = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}},
                      ensure_ascii=False).encode()


LITELLM_NO_DB = body_of("No connected db.", "no_db_connection", "400")
GEMINI_BAD_KEY = json.dumps([{"error": {
    "code": 400, "message": "API key not valid. Please pass a valid API key.", "status": "INVALID_ARGUMENT",
    "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                 "domain": "googleapis.com"}]}}]).encode()

KEY_400S = {
    "litellm-no-db": (LITELLM_NO_DB, "No connected db."),
    "invalid-api-key": (body_of("invalid api key"), "invalid api key"),
    "Invalid-API-Key": (body_of("Invalid API Key", None), "Invalid API Key"),
    "authentication-error": (body_of("Authentication Error, no api key passed in.", "auth_error"),
                             "Authentication Error, no api key passed in."),
    "oneapi-token": (body_of("token is invalid", "one_api_error"), "token is invalid"),
    "oneapi-token-zh": (body_of("令牌无效 (request id: 2026)", "new_api_error"), "令牌无效 (request id: 2026)"),
    "only-the-code": (body_of("Unauthorized.", "invalid_request_error", "invalid_api_key"), "Unauthorized."),
    "gemini": (GEMINI_BAD_KEY, "API key not valid. Please pass a valid API key."),
    "openai-style": (body_of("Incorrect API key provided: sk-wr***ong."), "Incorrect API key provided: sk-wr***ong."),
}


@pytest.mark.parametrize("body,message", KEY_400S.values(), ids=KEY_400S.keys())
async def test_a_400_saying_the_key_is_wrong_is_a_key_problem(fake: FakeOpenAI, body: bytes, message: str) -> None:
    fake.push(raw(body, status=400))
    client = llm_client(fake, retries=3)
    waits = recording(client)
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    failure = caught.value
    assert failure.code == "endpoint.401" and failure.status == 400 and kind_of(failure) == "auth"
    assert brief_reason(failure) == "brief.key"  # members: "the model's service refused the bot's key"
    assert str(failure) == (
        f"The endpoint rejected the API key (400: {message}). Check MARSHO_API_KEY / MARSHO_API_KEYS; "
        "behind a proxy (LiteLLM, OneAPI, NewAPI), check the key it expects and its own setup (its "
        "database, its log): a 400 like this one is how it says so.")
    assert error_text(Texts("zh-CN"), failure).startswith(f"接口拒绝了 API 密钥（400：{message}）。请检查 MARSHO_API_KEY")
    assert len(fake.requests) == 1 and waits == []  # not retried, as a 401 is not


async def test_a_genuine_400_is_still_the_requests_fault(fake: FakeOpenAI, second: FakeOpenAI) -> None:
    fake.push(error(400, "This model's maximum context length is 8192 tokens."))
    client = llm_client(fake, retries=3, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    assert caught.value.code == "endpoint.4xx" and kind_of(caught.value) == "request"
    assert brief_reason(caught.value) == "brief.refused"  # members: the service refused the request
    assert second.requests == []  # another endpoint would refuse it too
    assert client.status()[0].problem is None


async def test_a_proxys_key_400_falls_back(fake: FakeOpenAI, second: FakeOpenAI) -> None:
    fake.push(raw(LITELLM_NO_DB, status=400))
    second.push(text("from the backup"))
    client = llm_client(fake, fallbacks=[Fallback(base_url=second.base_url, model="b", api_keys=["sk-backup-9876"])])
    assert (await client.complete(QUESTION)).content == "from the backup"
    primary, backup = client.status()
    assert primary.errors == {"auth": 1} and backup.problem is None
    assert primary.problem is not None and primary.problem.params["detail"] == "No connected db."


async def test_a_proxys_key_400_hands_the_request_to_the_pools_next_key(
    fake: FakeOpenAI, logged: list[str]
) -> None:
    def answer(body: dict[str, Any]) -> Answer:
        if body["_headers"]["authorization"] == f"Bearer {KEY_A}":
            return raw(GEMINI_BAD_KEY, status=400)
        return text("answered")

    fake.responder = answer
    client = llm_client(fake, api_key=KEY_A, api_keys=[KEY_B], retries=0)
    assert [(await client.complete(QUESTION)).content for _ in range(3)] == ["answered"] * 3
    assert keys_sent(fake).count(KEY_A) == 1  # set aside after the first
    [aside] = [line for line in logged if "set aside" in line]
    assert "…1111 (400)" in aside
    assert client.status()[0].problem is None  # the pool's other key answers


async def test_the_providers_echo_of_the_key_is_redacted(fake: FakeOpenAI) -> None:
    fake.push(raw(body_of(f"Authentication Error, Invalid proxy server token passed. Received API Key = {KEY_A}"),
                  status=400))
    client = llm_client(fake, api_key=KEY_A)
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    assert KEY_A not in str(caught.value) and "[redacted]" in str(caught.value)


def status_reply(client: LLMClient, failing: str = "") -> str:
    """What `marsho.status` answers for `client` alone (requests shown, latencies fixed), the
    primary `failing` for that reason, when given, on its own line."""
    endpoint = client.endpoints[0]
    for figures in (endpoint.usage, *(key.usage for key in endpoint.pool.keys)):
        figures.latencies = FixedLatencies(figures.latencies)  # shown as they are; not timed here
    errors = ", errors: key refused 1" if endpoint.usage.errors else ""
    requests = f"{endpoint.usage.requests} request" + ("s" if endpoint.usage.requests != 1 else "")
    state, why = ("failing", f"; why: {failing}") if failing else ("ok", "")
    return "\n".join([
        "Model endpoints (requests since start; latency over the last hour):",
        f"primary: fake-model at {endpoint.base_url}: {state}; {requests}{errors}, p50 {LATENCY}, "
        f"p95 {LATENCY}{why}",
        "Summaries of trimmed history (the chat model): requests since start: 0 answered, 0 failed",
    ])


async def ask_status(app: App, number: int, expected: str) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        asked = group_message("marsho.status", user_id=int(SUPERUSER_ID))
        ctx.receive_event(bot, asked)
        ctx.should_call_api(*reply_call(asked, expected), result={"message_id": number})


async def test_status_shows_an_endpoint_failing_on_its_key_until_it_answers(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = llm_client(fake)
    monkeypatch.setattr(plugin_engine, "llm", client)
    fake.push(raw(LITELLM_NO_DB, status=400))
    with pytest.raises(EndpointError):
        await client.complete(QUESTION)
    await ask_status(app, 1, status_reply(client, (
        "The endpoint rejected the API key (400: No connected db.). Check MARSHO_API_KEY "
        "/ MARSHO_API_KEYS; behind a proxy (LiteLLM, OneAPI, NewAPI), check the key it expects and its own "
        "setup (its database, its log): a 400 like this one is how it says so.")))
    await client.complete(QUESTION)  # the proxy's setup mended: answered
    await ask_status(app, 2, status_reply(client))


# --- no key at all ---------------------------------------------------------------------------------


def wants_a_key(refusal: Answer) -> Callable[[dict[str, Any]], Answer]:
    """An endpoint that answers `refusal` to a request sent without a key, "ok" to one with."""
    def answer(body: dict[str, Any]) -> Answer:
        if body["_headers"]["authorization"] == f"Bearer {NO_KEY_PLACEHOLDER}":
            return refusal
        return text("ok")
    return answer


NO_KEY_REFUSALS = {
    "401": error(401, "You didn't provide an API key."),
    "litellm-400": raw(LITELLM_NO_DB, status=400),
    "403-saying-so": error(403, "Invalid API key"),
}


@pytest.mark.parametrize("refusal", NO_KEY_REFUSALS.values(), ids=NO_KEY_REFUSALS.keys())
async def test_no_key_at_all_tells_the_owner_to_set_marsho_api_key(fake: FakeOpenAI, refusal: Answer) -> None:
    fake.responder = wants_a_key(refusal)
    client = llm_client(fake, api_key="", retries=2)
    waits = recording(client)
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    failure = caught.value
    assert failure.code == "endpoint.no_key" and kind_of(failure) == "no_key"
    assert str(failure) == f"No API key is set for {fake.base_url}. Set MARSHO_API_KEY / MARSHO_API_KEYS in .env."
    assert error_text(Texts("zh-CN"), failure) == (
        f"没有为 {fake.base_url} 设置 API 密钥。请在 .env 中设置 MARSHO_API_KEY / MARSHO_API_KEYS。")
    assert brief_reason(failure) == "brief.key"  # members: the short reason, as before
    assert len(fake.requests) == 1 and waits == []
    assert client.status()[0].problem is not None and client.status()[0].errors == {"no_key": 1}


async def test_a_bare_403_without_a_key_still_names_the_accounts_permissions(fake: FakeOpenAI) -> None:
    fake.responder = wants_a_key(error(403, "This model is not available in your region."))
    client = llm_client(fake, api_key="")
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    assert caught.value.code == "endpoint.403"


async def test_no_key_for_the_primary_falls_back(fake: FakeOpenAI, second: FakeOpenAI) -> None:
    fake.responder = wants_a_key(error(401, "Missing bearer token"))
    second.push(text("from the backup"))
    client = llm_client(fake, api_key="", fallbacks=[Fallback(base_url=second.base_url, model="b",
                                                               api_keys=["sk-backup-9876"])])
    assert (await client.complete(QUESTION)).content == "from the backup"


async def test_no_key_for_a_fallback_names_its_own_entry(fake: FakeOpenAI, second: FakeOpenAI) -> None:
    fake.push(error(503, "overloaded"))
    second.responder = wants_a_key(error(401, "Missing bearer token"))
    client = llm_client(fake, fallbacks=[Fallback(base_url=second.base_url, model="b")])
    with pytest.raises(EndpointError):
        await client.complete(QUESTION)
    problem = client.status()[1].problem
    assert problem is not None and str(problem) == (
        f"No API key is set for {second.base_url}. Set MARSHO_FALLBACKS #1 api_key / api_keys in .env.")


async def test_an_endpoint_that_needs_no_key_is_asked_with_an_empty_one(fake: FakeOpenAI) -> None:
    # Ollama, vLLM: the SDK insists on a key, the placeholder is sent and accepted
    client = llm_client(fake, api_key="")
    assert (await client.complete(QUESTION)).content == "ok"
    assert keys_sent(fake) == [NO_KEY_PLACEHOLDER]
    assert client.status()[0].problem is None and not client.needs_key


async def test_no_key_on_openai_sends_nothing_and_status_says_why(fake: FakeOpenAI) -> None:
    client = llm_client("https://api.openai.com/v1", api_key="")
    with pytest.raises(EndpointError) as caught:
        await client.complete(QUESTION)
    assert caught.value.code == "endpoint.no_key"
    [status] = client.status()
    assert status.requests == 0 and status.problem is not None
    assert str(status.problem) == ("No API key is set for https://api.openai.com/v1. Set MARSHO_API_KEY "
                                   "/ MARSHO_API_KEYS in .env.")


async def test_status_shows_the_endpoint_failing_for_want_of_a_key(
    app: App, fake: FakeOpenAI, plugin_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.responder = wants_a_key(error(401, "Missing bearer token"))
    client = llm_client(fake, api_key="")
    monkeypatch.setattr(plugin_engine, "llm", client)
    with pytest.raises(EndpointError):
        await client.complete(QUESTION)
    endpoint = client.endpoints[0]
    endpoint.usage.latencies = FixedLatencies(endpoint.usage.latencies)
    await ask_status(app, 1, "\n".join([
        "Model endpoints (requests since start; latency over the last hour):",
        f"primary: fake-model at {fake.base_url}: failing; 1 request, errors: no key 1, p50 {LATENCY}, "
        f"p95 {LATENCY}; why: No API key is set for {fake.base_url}. Set MARSHO_API_KEY / MARSHO_API_KEYS "
        "in .env.",
        "Summaries of trimmed history (the chat model): requests since start: 0 answered, 0 failed",
    ]))


PUBLIC = ["https://api.deepseek.com/v1", "https://litellm.example.com/v1", "http://8.8.8.8:4000/v1"]
LOCAL = ["http://127.0.0.1:11434/v1", "http://localhost:8000/v1", "http://192.168.1.20:8000/v1",
         "http://10.0.0.5/v1", "http://[::1]:8000/v1", "http://ollama:11434/v1",
         "http://host.docker.internal:11434/v1", "http://gpu-box.local:8000/v1"]


@pytest.mark.parametrize("base_url", PUBLIC + LOCAL)
async def test_the_start_warns_of_a_missing_key_only_off_this_machine_and_network(
    base_url: str, logged: list[str]
) -> None:
    llm = chat_model(Config(marsho_base_url=base_url, marsho_api_key="", marsho_model="m"))
    await llm.close()
    warned = [line for line in logged if "no API key is set" in line]
    if base_url in PUBLIC:
        assert warned == [f"marsho: no API key is set for {base_url}: set MARSHO_API_KEY / MARSHO_API_KEYS "
                          "in .env, unless that endpoint needs none"]
    else:
        assert warned == []


async def test_a_fallback_without_a_key_is_warned_about_with_its_own_entry(logged: list[str]) -> None:
    llm = chat_model(Config(marsho_base_url="http://127.0.0.1:11434/v1", marsho_model="m", marsho_fallbacks=[
        {"base_url": "https://api.deepseek.com/v1", "model": "deepseek-chat"}]))
    await llm.close()
    assert [line for line in logged if "no API key is set" in line] == [
        "marsho: no API key is set for https://api.deepseek.com/v1: set MARSHO_FALLBACKS #1 api_key / "
        "api_keys in .env, unless that endpoint needs none"]


@pytest.mark.parametrize("base_url", ["https://llm.example.com/v1", "https://api.openai.com/v1"])
async def test_the_bot_warns_once_as_it_starts_without_a_key(
    base_url: str, tmp_path: Path, logged: list[str]
) -> None:
    bot = Marsho(Config(marsho_base_url=base_url, marsho_api_key="", marsho_model="m", marsho_lang="en",
                        marsho_database_url=f"sqlite:///{tmp_path / 'marsho.db'}"), tmp_path)
    await bot.start()
    await bot.stop()
    assert len([line for line in logged if "MARSHO_API_KEY" in line]) == 1, logged


def test_ask_without_a_key_tells_the_owner_to_set_marsho_api_key(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.responder = wants_a_key(error(401, "Missing bearer token"))
    folder = make_project(tmp_path / "bot", [], MARSHO_BASE_URL=fake.base_url, MARSHO_API_KEY="")
    done = marsho_cli(folder, "ask", "hi")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip().endswith(
        f"error: No API key is set for {fake.base_url}. Set MARSHO_API_KEY / MARSHO_API_KEYS in .env."), done.stderr
