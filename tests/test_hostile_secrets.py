"""Secrets never leave the process: the endpoint's key echoed in its errors, a web service that
reflects its request headers, and what the chat, the log, the model, exports and the CLI see."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from nonebot.log import logger
from nonebug import App

from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.chat.app import held_secrets
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.redaction import REDACTED, SECRETS, Secrets
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import ToolRunner, Toolset
from nonebot_plugin_marsho.tools.webservices import load_webservices
from tests.conftest import SECRET, SUPERUSER_ID, llm_client
from tests.fake_openai import FakeOpenAI, error, raw, text, tool_calls
from tests.fake_webservice import FakeWebService
from tests.fake_webservice import raw as service_raw
from tests.onebot import group_message, onebot_bot, reply_call

KEY = "test-key"
"""The API key of the test bot (tests/conftest.py): registered as a secret when it started."""
LONG_KEY = "sk-proj-Zq4Wf8YtR2pLm6Nv0Xc3Bh7Jk1Ds9AeG"


# --- the redactor itself ----------------------------------------------------------------------


def test_a_secret_is_hidden_in_every_spelling_it_travels_in() -> None:
    secrets = Secrets(["p@ss/word+1 \"quoted\""])
    value = "p@ss/word+1 \"quoted\""
    for spelling in (value, "p%40ss%2Fword%2B1%20%22quoted%22", "p%40ss%2Fword%2B1+%22quoted%22",
                     json.dumps(value)[1:-1], repr(value)[1:-1]):
        assert secrets(f"before {spelling} after") == f"before {REDACTED} after", spelling


def test_a_key_the_provider_echoes_with_its_middle_masked_is_hidden() -> None:
    secrets = Secrets([LONG_KEY])
    for shown in (f"sk-proj-{'*' * 36}{LONG_KEY[-4:]}", f"{LONG_KEY[:5]}...{LONG_KEY[-4:]}",
                  f"sk-proj-Zq4W••••••{LONG_KEY[-4:]}"):
        assert secrets(f"Incorrect API key provided: {shown}.") == f"Incorrect API key provided: {REDACTED}.", shown
    assert secrets("sk-proj-something-else-entirely") == "sk-proj-something-else-entirely"


def test_short_values_are_not_secrets_and_everything_else_is_left_alone() -> None:
    secrets = Secrets(["1234", "", "admin"])
    assert secrets("admin 1234") == "admin 1234"
    assert Secrets()("nothing to hide") == "nothing to hide"


def test_the_bot_holds_its_key_its_token_its_secret_presets_and_its_env_values(tmp_path: Path) -> None:
    path = tmp_path / "webservices.json"
    path.write_text(json.dumps({"toolkit": "svc", "tools": [{
        "name": "ask", "description": "Ask", "url": "http://127.0.0.1:9/",
        "headers": {"Authorization": "Bearer ${SVC_TOKEN}"},
        "parameters": {"type": "object", "properties": {}}}]}), encoding="utf-8")
    services, problems = load_webservices(path, environ={"SVC_TOKEN": "svc-token-0815"})
    assert services is not None, problems
    toolset = Toolset()
    toolset.add(services)
    config = Config(marsho_api_key=LONG_KEY, marsho_toolkit_settings={
        "weather": {"api_key": "weather-secret-1", "units": "metric-units"}})
    held = held_secrets(config, toolset)
    assert {LONG_KEY, "weather-secret-1", "Bearer svc-token-0815", "svc-token-0815"} <= set(held)
    assert "metric-units" not in held  # not a secret-named preset


# --- the endpoint echoes the key ----------------------------------------------------------------


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}", level="DEBUG")
    yield lines
    logger.remove(sink)


@pytest.mark.parametrize("answer", [
    error(401, f"Incorrect API key provided: {KEY}. You can find your API key at ..."),
    error(400, f"bad request for key {KEY}"),
    raw(json.dumps({"error": {"message": f"quota exceeded for {KEY}"}}).encode()),
], ids=["401", "400", "error-in-200"])
async def test_an_endpoint_echoing_the_key_never_shows_it(
    app: App, fake: FakeOpenAI, plugin_engine, logged: list[str], answer
) -> None:
    assert KEY in SECRETS
    for user in (10001, int(SUPERUSER_ID)):  # neither a member nor the owner sees it
        fake.push(answer)
        async with app.test_matcher() as ctx:
            bot = onebot_bot(ctx)
            event = group_message("marsho hi", user_id=user)
            ctx.receive_event(bot, event)
            sent = _Captured()
            api, data = reply_call(event, "")
            data["message"] = sent
            ctx.should_call_api(api, data, result={"message_id": 1})
        assert KEY not in sent.text, sent.text
    assert logged and not any(KEY in line for line in logged), logged


class _Captured:
    text = ""

    def __eq__(self, other: object) -> bool:
        from nonebot.adapters.onebot.v11 import Message

        self.text = Message(other).extract_plain_text()  # type: ignore[arg-type]
        return True


async def test_the_owner_kits_secret_preset_echoed_by_a_tool_reaches_neither_model_nor_chat(
    app: App, fake: FakeOpenAI, plugin_engine
) -> None:
    # owner-kit__lookup returns "result for {query} (key {api_key})" with api_key = SECRET
    fake.push(tool_calls(("owner-kit__lookup", {"query": "cats"}, "l1")), text(f"The key is {SECRET}"))
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        event = group_message("marsho look up cats")
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, f"The key is {REDACTED}"), result={"message_id": 1})
    assert SECRET not in json.dumps(fake.requests, ensure_ascii=False)
    stored = json.dumps(await plugin_engine.history.export(
        "OneBot V11:group:20001"), ensure_ascii=False)
    assert SECRET not in stored


# --- a web service reflecting its headers with 200 -------------------------------------------


async def test_a_web_service_reflecting_its_env_header_in_a_good_answer_is_redacted(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    token = "svc-token-4711-abcdef"
    path = tmp_path / "webservices.json"
    with FakeWebService() as service:
        path.write_text(json.dumps({"toolkit": "svc", "tools": [{
            "name": "echo", "description": "Echo", "url": service.url(),
            "headers": {"Authorization": "Bearer ${SVC_TOKEN}"},
            "parameters": {"type": "object", "properties": {}}}]}), encoding="utf-8")
        services, problems = load_webservices(path, environ={"SVC_TOKEN": token})
        assert services is not None, problems
        toolset = Toolset()
        toolset.add(services)
        SECRETS.add(*held_secrets(Config(), toolset))
        store = SqlStore("sqlite://")
        runner = ToolRunner(toolset, timeout=5)
        engine = Engine(llm_client(fake), toolset, store, runner)
        try:
            service.push(service_raw(f"# Echo\n\nauthorization: Bearer {token}", status=200,
                                     content_type="text/markdown"))
            fake.push(tool_calls(("svc__echo", {}, "e1")), text("done"))
            reply = await engine.chat("k", "echo please")
            assert service.requests[0].headers["authorization"] == f"Bearer {token}"
            assert token not in json.dumps(fake.requests[-1], ensure_ascii=False)
            assert all(token not in result.content for _, result in reply.calls)
            assert token not in json.dumps(await store.export("k"), ensure_ascii=False)
        finally:
            SECRETS.discard(token, f"Bearer {token}")
            runner.close()
            await store.close()


def test_an_exception_holding_a_secret_is_logged_without_its_traceback(logged: list[str]) -> None:
    from nonebot_plugin_marsho.redaction import logger as plugin_logger

    SECRETS.add("sk-supersecret-123456")
    try:
        try:
            raise RuntimeError("upstream said: key sk-supersecret-123456 invalid")
        except RuntimeError as error:
            plugin_logger.opt(exception=error).error("marsho: failed")
    finally:
        SECRETS.discard("sk-supersecret-123456")
    assert logged and not any("sk-supersecret" in line for line in logged), logged
    assert any("RuntimeError: upstream said: key [redacted] invalid" in line for line in logged), logged
