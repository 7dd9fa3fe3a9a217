"""Through bot.py and the OneBot simulator (issue 26, the model layer), against the strict fake
providers: a Gemini 3 turn with one and with two parallel tool calls is answered (each
signature back exactly); DashScope's `qwq-plus` answers with default settings and goes straight
to streaming the second time; a streamed tool call runs; usage from a stream shows in
`marsho.usage`; DeepSeek's reasoning goes back within its turn and never into the next; and
`MARSHO_REASONING_EFFORT=low` reaches the request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import CHAT_TOOLSET
from tests.fake_openai import FakeOpenAI, text, tool_calls, with_usage
from tests.onebot_sim import BotProcess, OneBotSim, output_if_failed

OWNER_ID = 10099
GROUP = 32601
WEATHER = "marshoai-example__get_weather"
RESULT = "The temperature of Shenzhen is 114514℃。"


@pytest.fixture(scope="module")
async def bot(endpoint: FakeOpenAI, request: pytest.FixtureRequest) -> AsyncIterator[OneBotSim]:
    """A bot.py with default streaming settings, MARSHO_REASONING_EFFORT=low, and its simulator."""
    process = BotProcess(base_url=endpoint.base_url, toolkit_dirs=[CHAT_TOOLSET], env={
        "MARSHO_REASONING_EFFORT": "low", "SUPERUSERS": f'["{OWNER_ID}"]'})
    async with process:
        with output_if_failed(process, request):
            async with process.simulator(self_id=2233445588) as sim:
                yield sim


async def use_model(sim: OneBotSim, endpoint: FakeOpenAI, model: str) -> None:
    _, said = await sim.ask(f"marsho.model {model}", group_id=GROUP, user_id=OWNER_ID)
    assert model in said.text, said.text
    _, said = await sim.ask("marsho.reset", group_id=GROUP, user_id=OWNER_ID)
    endpoint.reset()
    endpoint.strict = True


def calls_in(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [call for message in body["messages"] if message.get("tool_calls")
            for call in message["tool_calls"]]


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_a_gemini_3_turn_with_one_and_with_two_parallel_calls_is_answered(
    endpoint: FakeOpenAI, bot: OneBotSim
) -> None:
    await use_model(bot, endpoint, "gemini-3-pro-preview")
    endpoint.push(tool_calls((WEATHER, {"location": "Shenzhen"}, "g1")), text("Hot in Shenzhen."))
    _, answer = await bot.ask("marsho weather in Shenzhen?", group_id=GROUP, user_id=10001)
    assert answer.text == "Hot in Shenzhen."
    [sent] = calls_in(endpoint.requests[1])
    assert sent["extra_content"] == {"google": {"thought_signature": endpoint.signatures["g1"]}}
    assert endpoint.requests[0]["reasoning_effort"] == "low"  # Gemini takes OpenAI's field
    endpoint.push(tool_calls((WEATHER, {"location": "Shenzhen"}, "g2"), (WEATHER, {"location": "Rome"}, "g3")),
                  text("Hot in both."))
    _, answer = await bot.ask("marsho and Shenzhen and Rome?", group_id=GROUP, user_id=10001)
    assert answer.text == "Hot in both."
    earlier, first, second = calls_in(endpoint.requests[3])
    assert "extra_content" not in earlier and "extra_content" not in second
    assert first["extra_content"] == {"google": {"thought_signature": endpoint.signatures["g2"]}}


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_qwq_answers_with_default_settings_and_is_streamed_at_once_the_second_time(
    endpoint: FakeOpenAI, bot: OneBotSim
) -> None:
    await use_model(bot, endpoint, "qwq-plus")
    endpoint.push(text("Hello from qwq."), text("Again."))
    _, answer = await bot.ask("marsho hi", group_id=GROUP, user_id=10002)
    assert answer.text == "Hello from qwq."
    assert [body.get("stream") for body in endpoint.requests] == [None, True]
    assert endpoint.requests[1]["stream_options"] == {"include_usage": True}
    assert (endpoint.requests[1]["enable_thinking"], endpoint.requests[1]["thinking_budget"]) == (True, 2048)
    _, answer = await bot.ask("marsho hi again", group_id=GROUP, user_id=10002)
    assert answer.text == "Again."
    assert [body.get("stream") for body in endpoint.requests] == [None, True, True]
    _, status = await bot.ask("marsho.status", group_id=GROUP, user_id=OWNER_ID)
    assert "qwq-plus takes only streamed requests" in status.text, status.text


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_a_streamed_tool_call_runs_and_its_usage_shows_in_marsho_usage(
    endpoint: FakeOpenAI, bot: OneBotSim
) -> None:
    await use_model(bot, endpoint, "qwq-plus")
    usage = {"prompt_tokens": 40000, "completion_tokens": 3210, "total_tokens": 43210}
    endpoint.push(with_usage(tool_calls((WEATHER, {"location": "Shenzhen"}, "q1")), usage),
                  with_usage(text("114514 degrees, stay inside."), usage))
    _, answer = await bot.ask("marsho weather in Shenzhen?", group_id=GROUP, user_id=10003)
    assert answer.text == "114514 degrees, stay inside."
    assert [body.get("stream") for body in endpoint.requests][-2:] == [True, True]
    tool = endpoint.requests[-1]["messages"][-1]
    assert (tool["role"], tool["tool_call_id"], tool["content"]) == ("tool", "q1", RESULT)
    report = ""
    for _ in range(40):  # the bill is written a moment after the answer
        _, said = await bot.ask("marsho.usage", group_id=GROUP, user_id=10003)
        report = said.text
        if "86,420" in report or "86420" in report:
            break
        await asyncio.sleep(0.25)
    assert "86,420" in report or "86420" in report, report  # two requests of 43,210 tokens


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_deepseek_reasoning_goes_back_within_its_turn_and_never_into_the_next(
    endpoint: FakeOpenAI, bot: OneBotSim
) -> None:
    await use_model(bot, endpoint, "deepseek-reasoner")
    endpoint.push(tool_calls((WEATHER, {"location": "Shenzhen"}), reasoning="I should look it up"),
                  text("Hot.", reasoning="done"), text("You are welcome."))
    _, answer = await bot.ask("marsho weather in Shenzhen?", group_id=GROUP, user_id=10004)
    assert answer.text == "Hot."
    assert [m.get("reasoning_content") for m in endpoint.requests[1]["messages"] if m.get("tool_calls")] == [
        "I should look it up"]
    assert endpoint.requests[0]["thinking"] == {"type": "enabled"}  # DeepSeek's switch for the effort
    _, answer = await bot.ask("marsho thanks", group_id=GROUP, user_id=10004)
    assert answer.text == "You are welcome."
    assert not any("reasoning_content" in m for m in endpoint.requests[2]["messages"])


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_reasoning_effort_low_reaches_an_openai_request(endpoint: FakeOpenAI, bot: OneBotSim) -> None:
    await use_model(bot, endpoint, "gpt-5-mini")
    endpoint.push(text("Thought a little."))
    _, answer = await bot.ask("marsho think", group_id=GROUP, user_id=10005)
    assert answer.text == "Thought a little."
    [body] = endpoint.requests
    assert body["reasoning_effort"] == "low" and "stream" not in body
