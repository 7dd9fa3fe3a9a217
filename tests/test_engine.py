"""The chat turn without NoneBot: engine + real LLM client + fake endpoint over loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.budget import fit_history
from nonebot_plugin_marsho.agent.engine import Engine
from nonebot_plugin_marsho.agent.llm import LLMClient
from nonebot_plugin_marsho.exceptions import BudgetError, EndpointError
from nonebot_plugin_marsho.store.session import Turn
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools import Tool, Toolkit, ToolRunner, Toolset
from tests.conftest import llm_client
from tests.fake_openai import FakeOpenAI, error, raw, text, tool_calls

KEY = "test:group:1"


async def get_weather(location: str) -> str:
    return f"{location}: 21°C, sunny"


def explode() -> str:
    raise RuntimeError("sensor offline")


def make_toolset() -> Toolset:
    toolset = Toolset()
    schema = {"type": "object", "properties": {"location": {"type": "string"}},
              "required": ["location"]}
    toolset.add(Toolkit("wx", path=None, tools=[  # type: ignore[arg-type]
        Tool("wx__get_weather", "Weather now", schema, get_weather, toolkit="wx"),
        Tool("wx__explode", "Always fails", {"type": "object", "properties": {}}, explode,
             toolkit="wx"),
    ]))
    return toolset


def make_engine(fake: FakeOpenAI, **options: Any) -> Engine:
    llm = llm_client(fake, timeout=options.pop("timeout", 5))
    toolset = options.pop("toolset", None) or make_toolset()
    runner = ToolRunner(toolset, timeout=options.pop("tool_timeout", 5))
    max_history = options.pop("max_history", 40)
    return Engine(llm, toolset, SqlStore("sqlite://"), runner, max_history=max_history,
                  **options)


async def stored_turns(engine: Engine, key: str = KEY) -> list[list[dict[str, Any]]]:
    """Every stored turn of the session, as lists of messages."""
    turns = await engine.history.recent_turns(key, max_messages=10**6, max_tokens=10**9)
    return [turn.messages for turn in turns]


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


async def test_a_text_answer_is_returned_and_stored_as_one_turn(fake: FakeOpenAI) -> None:
    fake.push(text("Hello!"))
    engine = make_engine(fake, system_prompt="Be kind.")
    reply = await engine.chat(KEY, "hi")
    assert reply.text == "Hello!"
    assert fake.requests[0]["messages"] == [
        {"role": "system", "content": "Be kind."}, {"role": "user", "content": "hi"},
    ]
    assert fake.requests[0]["model"] == "fake-model"
    assert [t for t in await stored_turns(engine)] == [
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]
    ]


async def test_every_tool_schema_is_sent_with_the_request(fake: FakeOpenAI) -> None:
    fake.push(text("ok"))
    await make_engine(fake).chat(KEY, "hi")
    names = [tool["function"]["name"] for tool in fake.requests[0]["tools"]]
    assert names == ["wx__explode", "wx__get_weather"]  # by name: the same list on every turn


def test_the_tools_list_is_the_same_whatever_order_the_toolkits_came_in() -> None:
    def toolset(*kits: str) -> Toolset:
        made = Toolset()
        for kit in kits:  # as MCP servers connecting in any order would add theirs
            made.add(Toolkit(kit, path=None, tools=[  # type: ignore[arg-type]
                Tool(f"{kit}__b", "B", {"type": "object", "properties": {}}, explode, toolkit=kit),
                Tool(f"{kit}__a", "A", {"type": "object", "properties": {}}, explode, toolkit=kit),
            ]))
        return made
    first, second = toolset("zeta", "alpha").schemas(), toolset("alpha", "zeta").schemas()
    assert json.dumps(first) == json.dumps(second)
    assert [s["function"]["name"] for s in first] == ["alpha__a", "alpha__b", "zeta__a", "zeta__b"]


async def test_tool_results_go_back_to_the_model_and_the_answer_uses_them(fake: FakeOpenAI) -> None:
    fake.push(tool_calls(("wx__get_weather", {"location": "Paris"}, "call_1")), text("Sunny in Paris"))
    engine = make_engine(fake)
    reply = await engine.chat(KEY, "weather in Paris?")
    assert reply.text == "Sunny in Paris"
    second = fake.requests[1]["messages"]
    assert roles(second) == ["user", "assistant", "tool"]
    assert second[1]["tool_calls"][0]["id"] == "call_1"
    assert second[2] == {"role": "tool", "tool_call_id": "call_1", "content": "Paris: 21°C, sunny"}
    assert [(call.name, result.status) for call, result in reply.calls] == [
        ("wx__get_weather", "ok")
    ]


async def test_results_of_earlier_rounds_stay_in_the_conversation(fake: FakeOpenAI) -> None:
    fake.push(
        tool_calls(("wx__get_weather", {"location": "Oslo"}, "a")),
        tool_calls(("wx__get_weather", {"location": "Rome"}, "b")),
        text("Oslo is colder than Rome"),
    )
    engine = make_engine(fake)
    reply = await engine.chat(KEY, "compare")
    third = fake.requests[2]["messages"]
    assert roles(third) == ["user", "assistant", "tool", "assistant", "tool"]
    assert [m["content"] for m in third if m["role"] == "tool"] == [
        "Oslo: 21°C, sunny", "Rome: 21°C, sunny"
    ]
    assert reply.rounds == 2
    # the next turn still sees the whole tool exchange of this one
    fake.push(text("yes"))
    await engine.chat(KEY, "sure?")
    assert roles(fake.requests[3]["messages"]) == [
        "user", "assistant", "tool", "assistant", "tool", "assistant", "user"
    ]


async def test_every_call_id_gets_exactly_one_tool_message_whatever_happens(fake: FakeOpenAI) -> None:
    fake.push(
        tool_calls(
            ("wx__get_weather", {"location": "Oslo"}, "ok"),
            ("wx__nope", {}, "unknown"),
            ("wx__get_weather", "{not json", "badjson"),
            ("wx__get_weather", {"location": 5}, "invalid"),
            ("wx__explode", {}, "raised"),
        ),
        text("done"),
    )
    reply = await make_engine(fake).chat(KEY, "go")
    tool_messages = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["ok", "unknown", "badjson", "invalid", "raised"]
    statuses = [result.status for _, result in reply.calls]
    assert statuses == ["ok", "unknown_tool", "bad_arguments", "bad_arguments", "error"]
    assert "RuntimeError: sensor offline" in tool_messages[4]["content"]


async def test_duplicate_call_ids_from_the_endpoint_are_made_unique(fake: FakeOpenAI) -> None:
    fake.push(
        tool_calls(("wx__get_weather", {"location": "A"}, "same"),
                   ("wx__get_weather", {"location": "B"}, "same")),
        text("done"),
    )
    await make_engine(fake).chat(KEY, "go")
    messages = fake.requests[1]["messages"]
    ids = [c["id"] for c in messages[1]["tool_calls"]]
    assert len(set(ids)) == 2
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == ids


async def test_round_limit_ends_with_one_request_without_tools(fake: FakeOpenAI) -> None:
    loop_call = tool_calls(("wx__get_weather", {"location": "X"}))
    fake.responder = lambda body: loop_call if "tools" in body else text("Here is what I found")
    engine = make_engine(fake, max_tool_rounds=3)
    reply = await engine.chat(KEY, "loop forever")
    assert len(fake.requests) == 4
    assert all("tools" in body for body in fake.requests[:3])
    assert "tools" not in fake.requests[3]
    assert reply.text == "Here is what I found"
    assert reply.hit_round_limit and reply.rounds == 3


async def test_tool_calls_sent_when_no_tools_were_offered_are_not_stored(fake: FakeOpenAI) -> None:
    fake.responder = lambda body: tool_calls(("wx__get_weather", {"location": "X"}))
    engine = make_engine(fake, max_tool_rounds=1)
    reply = await engine.chat(KEY, "loop")
    assert reply.hit_round_limit
    stored = (await stored_turns(engine))[0]
    calls = [c["id"] for m in stored if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in stored if m["role"] == "tool"]
    assert calls == answered  # history stays a valid request


async def test_zero_tool_rounds_sends_no_tools(fake: FakeOpenAI) -> None:
    fake.push(text("plain"))
    await make_engine(fake, max_tool_rounds=0).chat(KEY, "hi")
    assert "tools" not in fake.requests[0]


async def test_a_failed_turn_leaves_history_exactly_as_it_was(fake: FakeOpenAI) -> None:
    engine = make_engine(fake)
    fake.push(text("first answer"))
    await engine.chat(KEY, "first")
    before = await stored_turns(engine)
    fake.push(tool_calls(("wx__get_weather", {"location": "Oslo"})), error(500, "upstream broke"))
    with pytest.raises(EndpointError, match="upstream broke"):
        await engine.chat(KEY, "second")
    assert await stored_turns(engine) == before
    fake.push(text("third answer"))
    await engine.chat(KEY, "third")
    assert fake.requests[-1]["messages"] == [
        {"role": "user", "content": "first"}, {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "third"},
    ]


async def test_two_messages_in_one_session_run_one_after_the_other(fake: FakeOpenAI) -> None:
    fake.push(text("answer one", delay=0.3), text("answer two"))
    engine = make_engine(fake)
    await asyncio.gather(engine.chat(KEY, "one"), engine.chat(KEY, "two"))
    # the second request was only sent after the first turn was stored
    assert fake.requests[1]["messages"] == [
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "answer one"},
        {"role": "user", "content": "two"},
    ]


async def test_different_sessions_do_not_wait_for_each_other(fake: FakeOpenAI) -> None:
    fake.together = 5  # nothing is answered before the five requests are in at once
    engine = make_engine(fake)
    await asyncio.gather(*(engine.chat(f"test:group:{i}", "hi") for i in range(5)))
    assert fake.most_in_flight == 5  # one after another, the first would have timed out alone


async def test_history_sent_is_bounded_and_never_splits_a_tool_exchange(fake: FakeOpenAI) -> None:
    engine = make_engine(fake, max_history=4)
    fake.push(text("a1"))
    await engine.chat(KEY, "q1")
    fake.push(tool_calls(("wx__get_weather", {"location": "Oslo"})), text("a2"))
    await engine.chat(KEY, "q2")  # 4 messages: user, assistant+call, tool, answer
    fake.push(text("a3"))
    await engine.chat(KEY, "q3")
    sent = fake.requests[-1]["messages"]
    assert roles(sent) == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[0]["content"] == "q2"


def test_fit_history_shrinks_a_newest_turn_that_alone_is_too_big() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    big = Turn([{"role": "user", "content": "q"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c", "content": "r"},
                {"role": "assistant", "content": "a"}], [10, 10, 10, 10])
    def fit(messages: int, tokens: int = 10**6) -> list[dict[str, Any]]:
        return fit_history([big], max_messages=messages, max_tokens=tokens)
    assert fit(2) == [big.messages[0], big.messages[3]]
    assert fit(4, 25) == [big.messages[0], big.messages[3]]
    assert fit(1) == [] and fit(0) == [] and fit(4, 19) == []


async def test_last_calls_give_seed_001s_array_with_results(fake: FakeOpenAI) -> None:
    fake.push(tool_calls(("wx__get_weather", {"location": "Oslo"}, "call_9")), text("cold"))
    engine = make_engine(fake)
    await engine.chat(KEY, "weather?")
    assert await engine.last_calls(KEY) == [{
        "id": "call_9", "type": "function",
        "function": {"name": "wx__get_weather", "arguments": json.dumps({"location": "Oslo"})},
        "result": "Oslo: 21°C, sunny",
    }]
    fake.push(text("no tools this time"))
    await engine.chat(KEY, "thanks")
    assert await engine.last_calls(KEY) == []


async def test_reset_forgets_the_session(fake: FakeOpenAI) -> None:
    engine = make_engine(fake)
    await engine.chat(KEY, "hi")
    assert await engine.reset(KEY) == 1
    assert await stored_turns(engine) == []
    assert await engine.reset(KEY) == 0


# --- the endpoint misbehaving: each failure is an EndpointError that says what to do ---

@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (error(401, "Incorrect API key provided"), "MARSHO_API_KEY"),
        (error(404, "The model `nope` does not exist"), "MARSHO_MODEL"),
        (error(429, "Rate limit reached"), "429"),
        (error(400, "messages: too long"), "messages: too long"),
        (error(503, "overloaded"), "503"),
        (raw(b"<html>gateway</html>", content_type="text/html"), "cannot be read"),
        (raw(b'{"id": "x", "choices": []}'), "no choices"),
    ],
)
async def test_endpoint_failures_become_clear_errors(fake: FakeOpenAI, answer, expected) -> None:
    fake.push(answer)
    with pytest.raises(EndpointError) as caught:
        await make_engine(fake).chat(KEY, "hi")
    assert expected in str(caught.value)


async def test_an_endpoint_slower_than_the_timeout_is_given_up_on(fake: FakeOpenAI) -> None:
    fake.push(text("too late", delay=60))
    started = time.perf_counter()
    with pytest.raises(EndpointError, match="did not answer within 0.5 s"):
        await make_engine(fake, timeout=0.5).chat(KEY, "hi")
    assert time.perf_counter() - started < 30  # at the timeout, not when the answer comes


async def test_an_unreachable_endpoint_says_so() -> None:
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = llm_client(f"http://127.0.0.1:{port}/v1", timeout=3)
    with pytest.raises(EndpointError, match="Cannot reach .*MARSHO_BASE_URL"):
        await llm.complete([{"role": "user", "content": "hi"}])


async def test_no_request_is_sent_to_openai_without_a_key() -> None:
    llm = LLMClient(base_url="https://api.openai.com/v1", api_key="", model="m", timeout=3)
    with pytest.raises(EndpointError, match="MARSHO_API_KEY"):
        await llm.complete([{"role": "user", "content": "hi"}])


async def test_reasoning_content_is_kept_out_of_the_answer(fake: FakeOpenAI) -> None:
    fake.push(text("42", reasoning="let me think very hard"))
    engine = make_engine(fake)
    reply = await engine.chat(KEY, "answer?")
    assert reply.text == "42"
    assert "think" not in json.dumps(await stored_turns(engine))


async def test_a_budget_the_system_prompt_alone_fills_is_refused_with_what_to_change(
    fake: FakeOpenAI,
) -> None:
    engine = make_engine(fake, system_prompt="Be kind. " * 400, max_tokens=600)
    with pytest.raises(BudgetError, match="MARSHO_HISTORY_TOKENS=600"):
        await engine.chat(KEY, "hi")
    assert fake.requests == []
    assert await stored_turns(engine) == []


async def test_a_slow_announcement_does_not_hold_up_the_tools_or_the_turn(fake: FakeOpenAI) -> None:
    from nonebot_plugin_marsho.agent import engine as engine_module

    fake.push(tool_calls(("wx__get_weather", {"location": "A"})), text("done"))
    engine = make_engine(fake)
    told = []

    async def announce(calls: list) -> None:
        told.append([call.name for call in calls])
        await asyncio.sleep(120)  # a chat send stuck until its API timeout

    started = time.monotonic()
    reply = await engine.chat(KEY, "weather?", announce=announce)
    assert reply.text == "done" and told == [["wx__get_weather"]]
    # the tools ran at once; the turn waited ANNOUNCE_GRACE at most for the announcement
    assert time.monotonic() - started < engine_module.ANNOUNCE_GRACE + 30


async def test_an_announcement_does_not_outlive_a_failed_turn(fake: FakeOpenAI) -> None:
    fake.push(tool_calls(("wx__get_weather", {"location": "A"})), text("done"))
    engine = make_engine(fake)
    announced = []

    async def announce(calls: list) -> None:
        await asyncio.sleep(0.3)
        announced.append("late")

    async def broken_runner(*args: object, **kwargs: object) -> None:
        raise RuntimeError("runner bug")

    engine.runner.run = broken_runner  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        await engine.chat(KEY, "weather?", announce=announce)
    await asyncio.sleep(0.6)
    assert announced == []  # cancelled with the turn: no "using ..." after the error reply
