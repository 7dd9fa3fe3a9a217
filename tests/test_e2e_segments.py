"""Through bot.py and the OneBot simulator (issue 26, segmented replies): with
MARSHO_SEGMENTED_REPLY on, a streamed three-paragraph answer reaches the group paragraph by
paragraph, the first while the endpoint still holds the rest, in at most MARSHO_SEGMENTS (3)
messages, the first quoting the question; a code block with blank lines inside is never cut;
the stored turn is the whole answer, once; and NapCat's set_input_status is called in private
chats, never in groups."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, held, streamed_text, text
from tests.onebot_sim import Action, BotProcess, OneBotSim, output_if_failed, wait_for_quiet

GROUP = 32701
HOLD = 60.0
"""Seconds the fake holds the rest of a stream at most (a test that never releases it fails)."""


@pytest.fixture(scope="module")
async def bot(endpoint: FakeOpenAI, request: pytest.FixtureRequest) -> AsyncIterator[OneBotSim]:
    process = BotProcess(base_url=endpoint.base_url, env={"MARSHO_SEGMENTED_REPLY": "true"})
    async with process:
        with output_if_failed(process, request):
            async with process.simulator(self_id=2233445599) as sim:
                yield sim


@pytest.fixture(autouse=True)
def _fresh(endpoint: FakeOpenAI, bot: OneBotSim) -> None:
    endpoint.reset()
    bot.clear()


def held_after(count: int, go: threading.Event) -> Any:
    """A gap (tests/fake_openai.sse_events) that holds the stream before its event `count`
    until `go` is set."""
    calls = iter(range(1_000_000))

    def gap() -> None:
        if next(calls) == count:
            go.wait(HOLD)
    return gap


async def answer_messages(sim: OneBotSim, first: Action, expected: int) -> list[Action]:
    """Every message of the answer that starts with `first`, once `expected` of them came and
    the bot is quiet (any more would be counted too)."""
    def sent() -> list[Action]:
        sends = [a for a in sim.actions if a.action.startswith("send_") and a.params.get("group_id") == GROUP]
        return sends[sends.index(first):]

    await wait_for_quiet(lambda: len(sim.actions), until=lambda: len(sent()) >= expected)
    return sent()


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_a_three_paragraph_answer_arrives_as_it_is_written_in_at_most_three_messages(
    endpoint: FakeOpenAI, bot: OneBotSim
) -> None:
    go = threading.Event()
    endpoint.push(streamed_text("First paragraph.", "\n\n", "Second paragraph.\n\nThird", " paragraph.",
                                gap=held_after(2, go)))
    event = await bot.group_message("marsho tell me three things", group_id=GROUP, user_id=10001)
    try:
        first = await bot.reply_to(event)  # while the endpoint still holds the rest
        assert first.text == "First paragraph."
    finally:
        go.set()
    messages = await answer_messages(bot, first, 3)
    assert len(messages) <= 3
    assert [m.text for m in messages] == ["First paragraph.", "Second paragraph.", "Third paragraph."]
    assert [m.reply_id for m in messages[1:]] == [None, None]  # only the first quotes the question
    # the stored turn is the whole answer, once: the next request carries it so
    endpoint.push(text("Noted."))
    await bot.ask("marsho thanks", group_id=GROUP, user_id=10001)
    said = [m["content"] for m in endpoint.requests[-1]["messages"] if m["role"] == "assistant"]
    assert said == ["First paragraph.\n\nSecond paragraph.\n\nThird paragraph."]


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_a_line_sent_once_the_answer_shows_does_not_ask_again(endpoint: FakeOpenAI, bot: OneBotSim) -> None:
    # (within MARSHO_DEBOUNCE_SECONDS a second line joins the question and asks it again: not
    # once part of its answer is in the chat, which would then read two answers to one question)
    go = threading.Event()
    endpoint.push(streamed_text("First paragraph.", "\n\n", "Second paragraph.", gap=held_after(2, go)),
                  text("Asked again."))
    event = await bot.group_message("marsho tell me two things", group_id=GROUP, user_id=10006)
    try:
        first = await bot.reply_to(event)
        assert first.text == "First paragraph."
        await bot.group_message("and quickly", group_id=GROUP, user_id=10006)
        # (asked again, the held request would be dropped and another made: wait for that)
        await wait_for_quiet(lambda: (len(endpoint.requests), len(bot.actions)))
    finally:
        go.set()
    messages = await answer_messages(bot, first, 2)
    assert [m.text for m in messages] == ["First paragraph.", "Second paragraph."]
    assert len(endpoint.requests) == 1


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_a_code_block_with_blank_lines_inside_arrives_whole(endpoint: FakeOpenAI, bot: OneBotSim) -> None:
    code = "```python\ndef f():\n\n    return 1\n```"
    endpoint.push(streamed_text("Here is code:\n\n", "```python\ndef f():\n", "\n    return 1\n",
                                "```\n\nThat is all."))
    event, first = await bot.ask("marsho some code", group_id=GROUP, user_id=10002)
    messages = await answer_messages(bot, first, 3)
    assert [m.text for m in messages] == ["Here is code:", code, "That is all."]


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_each_paragraph_is_a_message_of_its_own_however_short(endpoint: FakeOpenAI, bot: OneBotSim) -> None:
    # (shorter than MARSHO_SPLIT_CHARS: unstreamed, it would be one message)
    endpoint.push(text("One.\n\nTwo."))  # the fake answers a stream request with a stream of it
    event, first = await bot.ask("marsho hi", group_id=GROUP, user_id=10003)
    messages = await answer_messages(bot, first, 2)
    assert [m.text for m in messages] == ["One.", "Two."]
    assert endpoint.requests[-1]["stream"] is True


@pytest.mark.e2e
@pytest.mark.timeout(180)
async def test_set_input_status_is_called_in_a_private_chat_and_not_in_a_group(
    endpoint: FakeOpenAI, bot: OneBotSim
) -> None:
    # both answers held: the group's question waits longer than the private one, so a typing
    # indicator of the group's would come first (the indicator shows after SHOW_AFTER s)
    endpoint.push(held(text("In the group.")), held(text("In private.")))
    in_group = await bot.group_message("marsho hi", group_id=GROUP, user_id=10004)
    while endpoint.in_flight < 1:
        await asyncio.sleep(0.02)
    in_private = await bot.private_message("marsho hi", user_id=10005)
    status = await bot.wait_action("set_input_status")
    endpoint.release()
    assert (await bot.reply_to(in_group)).text == "In the group."
    assert (await bot.reply_to(in_private)).text == "In private."
    assert status.params == {"user_id": 10005, "event_type": 1}
    assert {a.params["user_id"] for a in bot.actions if a.action == "set_input_status"} == {10005}
