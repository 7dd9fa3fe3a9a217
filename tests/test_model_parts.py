"""The model as composable parts (agent/model/): each part does its one thing around another
model, the factory composes them from settings, and importing them loads no OpenAI SDK."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.llm import Fallback, LLMClient, ModelSettings, build_model
from nonebot_plugin_marsho.agent.metering import Metered
from nonebot_plugin_marsho.agent.model.base import Completion, ModelRequest
from nonebot_plugin_marsho.agent.model.fallback import FallbackChain, Route
from nonebot_plugin_marsho.agent.model.retry import Retrying
from nonebot_plugin_marsho.agent.prompt_mode import PromptTools, ToolModes
from nonebot_plugin_marsho.agent.providers import RETRY_AFTER_CAP, Endpoint, EndpointStatus
from nonebot_plugin_marsho.agent.quirks import Quirked
from nonebot_plugin_marsho.chat.models import judge_model, settings_of, summary_model
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.exceptions import EndpointError
from nonebot_plugin_marsho.tools.model import ToolCall
from tests.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent
QUESTION = [{"role": "user", "content": "hi"}]
WEATHER = [{"type": "function", "function": {"name": "weather", "description": "The weather.",
                                              "parameters": {"type": "object", "properties": {}}}}]


class Recorder:
    """A model that records each request it is asked and answers from a script (a Completion,
    or an exception to raise)."""

    def __init__(self, *answers: Completion | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[ModelRequest] = []
        self.closed = False

    async def request(self, request: ModelRequest) -> Completion:
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else Completion("ok")
        if isinstance(answer, Exception):
            raise answer
        return answer

    def status(self) -> list[EndpointStatus]:
        return []

    async def close(self) -> None:
        self.closed = True


def server_error(status: int = 503) -> EndpointError:
    return EndpointError(code="endpoint.5xx", hint="endpoint.5xx.hint", status=status, detail="down")


def too_many(retry_after: float | None) -> EndpointError:
    failure = EndpointError(code="endpoint.429", hint="endpoint.429.hint", status=429, detail="slow",
                            model="m", url="http://x")
    failure.retry_after = retry_after
    return failure


def test_importing_the_model_layer_and_the_config_loads_no_openai_sdk() -> None:
    code = ("import sys, nonebot_plugin_marsho.agent.llm, nonebot_plugin_marsho.chat.models; "
            "print(sorted(m for m in ('openai', 'httpx2') if m in sys.modules))")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                            cwd=ROOT, check=True).stdout.strip()
    assert loaded == "[]"


async def test_the_http_client_is_made_by_the_first_request_and_closed_with_the_model(
    fake: FakeOpenAI,
) -> None:
    client = build_model(ModelSettings(base_url=fake.base_url, api_key="k", model="m", timeout=5))
    endpoint = client._parts.retrying[0].client
    assert endpoint.client is None
    try:
        assert (await client.complete(QUESTION)).content == "ok"
        assert endpoint.client is not None
    finally:
        await client.close()
    assert endpoint.client is None


async def test_quirks_shape_the_wire_and_send_the_token_field_the_family_takes() -> None:
    inner = Recorder()
    quirked = Quirked(inner, {"o1-mini*": {"merge_same_role": True}}, max_answer_tokens=100)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    await quirked.request(ModelRequest(messages, model="o1-mini"))
    sent = inner.requests[0]
    assert sent.body() == {"model": "o1-mini", "messages": [{"role": "user", "content": "Be brief.\n\nhi"}],
                           "max_completion_tokens": 100}
    assert messages[0] == {"role": "system", "content": "Be brief."}  # the conversation stays plain


async def test_a_model_refusing_tools_is_asked_in_prompt_mode_on_every_endpoint_from_then_on() -> None:
    refusal = EndpointError(code="endpoint.4xx", status=400, detail="tools are not supported by this model")
    first = Recorder(refusal, Completion('[{"name": "weather", "arguments": {}}]'))
    second = Recorder(Completion("sunny"))
    modes = ToolModes()
    primary, fallback = PromptTools(first, modes), PromptTools(second, modes)
    completion = await primary.request(ModelRequest(QUESTION, WEATHER, model="m"))
    assert [call.name for call in completion.tool_calls] == ["weather"]
    assert first.requests[0].tools == WEATHER and first.requests[1].tools is None
    assert "weather" in first.requests[1].messages[0]["content"]  # the tools in the system prompt
    await fallback.request(ModelRequest(QUESTION, WEATHER, model="m"))
    assert second.requests[0].tools is None and modes.of("m") == "prompt"


async def test_calls_written_when_no_tools_were_offered_are_not_run() -> None:
    inner = Recorder(Completion('[{"name": "weather", "arguments": {}}]'))
    completion = await PromptTools(inner, ToolModes("prompt")).request(ModelRequest(QUESTION, model="m"))
    assert completion.tool_calls == [] and completion.content == ""


class NoQuota:
    """A meter's quota side that holds nothing (Metered asks it before each request)."""

    async def hold(self, request: Any) -> None:
        return None

    def release(self, number: Any) -> None:
        pass


async def test_the_meter_is_told_the_body_as_sent_and_the_endpoint_host() -> None:
    told: list[tuple[Any, ...]] = []

    class Bill(NoQuota):
        def record(self, model: str, endpoint: str, usage: Any, *, request: dict[str, Any],
                   content: str = "", calls: list[Any] | None = None) -> None:
            told.append((model, endpoint, request, content, calls))

    call = ToolCall(id="c1", name="weather", arguments="{}")
    metered = Metered(Recorder(Completion("", [call])), "api.example:8443", Bill())  # type: ignore[arg-type]
    await metered.request(ModelRequest(QUESTION, WEATHER, model="m", options={"max_tokens": 5}))
    assert told == [("m", "api.example:8443",
                     {"model": "m", "messages": QUESTION, "tools": WEATHER, "max_tokens": 5}, "", [call])]


async def test_a_meter_given_to_the_factory_bills_without_being_set_afterwards(fake: FakeOpenAI) -> None:
    told: list[str] = []

    class Bill(NoQuota):
        def record(self, model: str, endpoint: str, usage: Any, **_: Any) -> None:
            told.append(f"{model}@{endpoint}")

    client = build_model(ModelSettings(base_url=fake.base_url, api_key="k", model="m", timeout=5),
                         meter=Bill())  # type: ignore[arg-type]
    try:
        await client.complete(QUESTION)
    finally:
        await client.close()
    assert told == [f"m@{fake.base_url.split('/')[2]}"]


async def test_the_chain_moves_on_and_keeps_the_turn_on_the_endpoint_that_answered() -> None:
    down, up = Recorder(server_error()), Recorder(Completion("from the fallback"), Completion("again"))
    endpoints = [Endpoint(0, "http://a/v1", ["k"]), Endpoint(1, "http://b/v1", ["k2"], "other")]
    chain = FallbackChain(endpoints, [down, up], model="main", timeout=5, retry_budget=10)
    route = Route()
    assert (await chain.request(ModelRequest(QUESTION, route=route))).content == "from the fallback"
    assert [r.model for r in down.requests + up.requests] == ["main", "other"]
    assert down.requests[0].more and not up.requests[0].more
    assert route.endpoint == 1
    await chain.request(ModelRequest(QUESTION, route=route))
    assert len(down.requests) == 1  # the turn stays where it was answered


async def test_a_failure_of_the_chain_names_where_each_endpoint_was_set() -> None:
    endpoints = [Endpoint(0, "http://a/v1", ["k"]), Endpoint(1, "http://b/v1", ["k2"], "other")]
    chain = FallbackChain(endpoints, [Recorder(server_error()), Recorder(server_error(502))],
                          model="main", timeout=5, retry_budget=10)
    with pytest.raises(EndpointError) as caught:
        await chain.request(ModelRequest(QUESTION))
    assert caught.value.params["url_setting"] == "MARSHO_BASE_URL"  # the first failure is the answer
    assert caught.value.status == 503


class Script:
    """An endpoint client that answers from a script of raw bodies and errors."""

    def __init__(self, *answers: bytes | EndpointError) -> None:
        self.answers = list(answers)
        self.keys: list[str | None] = []

    async def post(self, body: dict[str, Any], key: str | None, timeout: float) -> bytes:
        self.keys.append(key)
        answer = self.answers.pop(0)
        if isinstance(answer, EndpointError):
            raise answer
        return answer

    def read(self, body: bytes) -> Completion:
        return Completion(body.decode())

    async def close(self) -> None:
        pass


def retrying(script: Script, keys: list[str], retries: int) -> tuple[Retrying, list[float]]:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    part = Retrying(Endpoint(0, "http://a/v1", keys), script, timeout=5, retries=retries)  # type: ignore[arg-type]
    part.sleep = sleep
    return part, waits


async def test_a_retry_after_within_the_cap_is_waited_for() -> None:
    part, waits = retrying(Script(too_many(2.0), b"answered"), ["k"], retries=1)
    assert (await part.request(ModelRequest(QUESTION, model="m"))).content == "answered"
    assert waits == [2.0]


async def test_a_retry_after_past_the_cap_is_not_waited_for() -> None:
    part, waits = retrying(Script(too_many(RETRY_AFTER_CAP + 1), b"never"), ["k"], retries=3)
    with pytest.raises(EndpointError) as caught:
        await part.request(ModelRequest(QUESTION, model="m"))
    assert caught.value.status == 429 and waits == []


async def test_another_key_takes_a_429_at_once_and_that_is_not_a_retry() -> None:
    script = Script(too_many(5.0), b"answered")
    part, waits = retrying(script, ["key-a", "key-b"], retries=0)
    assert (await part.request(ModelRequest(QUESTION, model="m"))).content == "answered"
    assert waits == [] and script.keys == ["key-a", "key-b"]


def test_the_three_models_come_from_the_config_through_one_factory() -> None:
    config = Config(marsho_base_url="http://a/v1", marsho_api_key="k", marsho_model="big",
                    marsho_summary_model="small", marsho_active_judge_model="judge", marsho_retries=2,
                    marsho_fallbacks=[{"base_url": "http://b/v1", "model": "other"}])
    settings = settings_of(config)
    assert settings.fallbacks == [Fallback(base_url="http://b/v1", model="other")]
    assert settings.retries == 2
    gate = object()
    judge = judge_model(config, gate)  # type: ignore[arg-type]
    summary = summary_model(config, gate)  # type: ignore[arg-type]
    assert isinstance(judge, LLMClient) and judge.gate is gate and summary.gate is gate
    assert (judge.model, judge.model_setting, len(judge.endpoints)) == ("judge", "MARSHO_ACTIVE_JUDGE_MODEL", 1)
    assert (summary.model, summary.model_setting) == ("small", "MARSHO_SUMMARY_MODEL")
    assert summary._parts.retrying[0].retries == 2 and judge._parts.retrying[0].retries == 0
