"""End to end: a real `bot.py` process, the OneBot v11 simulator over WebSocket, the fake endpoint.

These cover what nonebug skips: the OneBot adapter's own event parsing and @-me detection, the
real `send_msg` frames with their quote, the driver's startup hooks reading the environment, and
the event loop staying free while a blocking tool runs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import Answer, FakeOpenAI, error, text, tool_calls
from tests.onebot_sim import BotProcess, OneBotSim, at, free_port, output_if_failed, text_segment
from tests.speakers import label

pytestmark = pytest.mark.e2e

TESTS = Path(__file__).resolve().parent
CHAT_TOOLSET = TESTS / "toolsets" / "chat"
E2E_TOOLSET = TESTS / "toolsets" / "e2e"
SELF_ID = 2233445566
ASKER = label("user10001", 10001)
"""How a shared conversation names the simulator's usual sender."""

_groups = itertools.count(30001)


def new_group() -> int:
    """A group never used before in this module, so each test starts with empty history."""
    return next(_groups)


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


OWNER_ID = "10099"
"""The bot processes' superuser: gets the detail of a failure that members get in one sentence."""

@pytest.fixture(scope="module")
def bot(endpoint: FakeOpenAI, request: pytest.FixtureRequest) -> Iterator[BotProcess]:
    process = BotProcess(
        base_url=endpoint.base_url,
        toolkit_dirs=[CHAT_TOOLSET, E2E_TOOLSET],
        env={"MARSHO_AT": "true", "MARSHO_TOOL_TIMEOUT": "15", "MARSHO_TIMEOUT": "15",
             "SUPERUSERS": f'["{OWNER_ID}"]'},
    )
    with process, output_if_failed(process, request):
        yield process


@pytest.fixture(scope="module")
async def sim(bot: BotProcess) -> AsyncIterator[OneBotSim]:
    async with bot.simulator(self_id=SELF_ID) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def _clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """Empty the fake and the simulator's records around each test; show the bot's log on failure."""
    if "sim" not in request.fixturenames:
        yield
        return
    fake: FakeOpenAI = request.getfixturevalue("endpoint")
    simulator: OneBotSim = request.getfixturevalue("sim")
    fake.reset()
    simulator.clear()
    yield
    fake.reset()


async def test_bot_starts_with_toolkits_from_the_environment(bot: BotProcess, sim: OneBotSim) -> None:
    event, reply = await sim.ask("marsho.tools", group_id=new_group())
    assert reply.reply_id == event["message_id"]
    for name in ("marshoai-example__get_weather", "sleepy__nap_sync", "clock__now"):
        assert name in reply.text
    assert "broken-kit" in reply.text  # the broken fixture toolkit is reported, not fatal


async def test_seed_000_weather_in_a_group(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    endpoint.push(
        tool_calls(("marshoai-example__get_weather", {"location": "Shenzhen"}, "call_weather")),
        text("It is 114514℃ in Shenzhen. Stay inside!"),
    )
    group = new_group()
    event = await sim.group_message("marsho What's the weather like in Shenzhen?", group_id=group)
    reply = await sim.reply_to(event)

    assert reply.action == "send_msg"
    assert reply.params["message_type"] == "group"
    assert reply.params["group_id"] == group
    assert reply.message[0] == {"type": "reply", "data": {"id": str(event["message_id"])}}
    assert reply.text == "It is 114514℃ in Shenzhen. Stay inside!"

    assert len(endpoint.requests) == 2
    first, second = endpoint.requests
    # a group shares one conversation (MARSHO_SESSION_SCOPE=group): the speaker is named
    assert user_texts(first) == [f"{ASKER}: What's the weather like in Shenzhen?"]
    assert "marshoai-example__get_weather" in {t["function"]["name"] for t in first["tools"]}
    assert first["_headers"]["authorization"] == "Bearer test-key"
    assert first["model"] == "fake-model"
    assistant, tool = second["messages"][-2:]
    assert assistant["tool_calls"][0]["id"] == "call_weather"
    assert (tool["role"], tool["tool_call_id"], tool["content"]) == (
        "tool", "call_weather", "The temperature of Shenzhen is 114514℃。"
    )


@pytest.mark.parametrize("message", ["/marsho hi", "Marsho hi", "marsho hi"])
async def test_trigger_word_with_and_without_command_start(
    endpoint: FakeOpenAI, sim: OneBotSim, message: str
) -> None:
    endpoint.responder = lambda body: text(f"hello, you said {user_texts(body)[-1]!r}")
    group = new_group()
    ignored = await sim.group_message("just chatting, not for the bot", group_id=group)
    event, reply = await sim.ask(message, group_id=group)
    assert reply.message[0]["type"] == "reply"
    assert reply.text == f"hello, you said '{ASKER}: hi'"
    assert sim.sends_quoting(ignored) == []
    assert len(endpoint.requests) == 1


async def test_private_chat(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    endpoint.push(text("hi in private"))
    event, reply = await sim.ask("marsho hello", private=True, user_id=10777)
    assert reply.params["message_type"] == "private"
    assert reply.params["user_id"] == 10777
    assert reply.reply_id == event["message_id"]
    assert reply.text == "hi in private"


async def test_at_the_bot_is_answered_when_marsho_at_is_on(
    endpoint: FakeOpenAI, sim: OneBotSim
) -> None:
    endpoint.push(text("you called?"))
    event, reply = await sim.ask([at(SELF_ID), text_segment(" hello")], group_id=new_group())
    assert reply.reply_id == event["message_id"]
    assert reply.text == "you called?"
    assert user_texts(endpoint.requests[0]) == [f"{ASKER}: hello"]


async def test_at_someone_else_is_not_for_marsho(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = new_group()
    other = await sim.group_message([at(SELF_ID + 1), text_segment(" hello")], group_id=group)
    endpoint.push(text("answered"))
    event, reply = await sim.ask("marsho ping", group_id=group)
    assert reply.text == "answered"
    assert sim.sends_quoting(other) == []
    assert len(endpoint.requests) == 1


async def test_endpoint_error_is_explained_and_the_next_message_works(
    endpoint: FakeOpenAI, sim: OneBotSim
) -> None:
    group = new_group()
    tries = 3  # the first request and MARSHO_RETRIES=2 retries (the default)
    endpoint.push(*(error(500, "upstream exploded") for _ in range(tries)))
    event, reply = await sim.ask("marsho first question", group_id=group)
    assert endpoint.pending == 0  # every try was made before giving up
    assert reply.reply_id == event["message_id"]
    # a member: one sentence, without the upstream text; the owner: the detail
    assert reply.text == ("Sorry, I could not answer: the model's service failed. "
                          "The bot's owner has the details in the log.")
    endpoint.push(*(error(500, "upstream exploded") for _ in range(tries)))
    event, reply = await sim.ask("marsho first question", group_id=group, user_id=int(OWNER_ID))
    assert "500" in reply.text and "upstream exploded" in reply.text

    endpoint.push(text("all good again"))
    event, reply = await sim.ask("marsho second question", group_id=group)
    assert reply.text == "all good again"
    # the failed turn left no trace: the history sent is just the new question
    assert user_texts(endpoint.requests[-1]) == [f"{ASKER}: second question"]


async def test_unreachable_endpoint_is_explained_and_the_bot_keeps_answering() -> None:
    """A second bot, pointed where nothing listens; it also checks ONEBOT_ACCESS_TOKEN."""
    dead_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    process = BotProcess(base_url=dead_url, env={"MARSHO_TIMEOUT": "10", "SUPERUSERS": f'["{OWNER_ID}"]'},
                         access_token="s3cret")
    async with process:
        with pytest.raises(ConnectionError, match="403"):
            await OneBotSim(process.ws_url, self_id=SELF_ID).connect(timeout=1)
        async with process.simulator(self_id=SELF_ID) as simulator:  # with the Bearer token
            for question in ("marsho are you there?", "marsho still nothing?"):
                event, reply = await simulator.ask(question, group_id=40001)
                assert reply.reply_id == event["message_id"]
                assert "the model's service cannot be reached" in reply.text, reply.text
                assert "127.0.0.1" not in reply.text, reply.text  # no address for members
            event, reply = await simulator.ask("marsho owner here", group_id=40001, user_id=int(OWNER_ID))
            assert "Cannot reach the endpoint" in reply.text and "MARSHO_BASE_URL" in reply.text, reply.text


async def test_a_blocking_sync_tool_does_not_block_other_chats(
    endpoint: FakeOpenAI, sim: OneBotSim, tmp_path: Path
) -> None:
    wake = tmp_path / "wake"  # the nap (time.sleep in the bot's process) lasts until this exists
    arguments = {"seconds": 12.0, "until_file": str(wake)}  # 12 s at most: MARSHO_TOOL_TIMEOUT is 15

    def respond(body: dict[str, Any]) -> Answer:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text("I had a nap: " + last["content"])
        if "nap" in last["content"]:
            return tool_calls(("sleepy__nap_sync", arguments))
        return text("quick answer")

    endpoint.responder = respond
    napping = await sim.group_message("marsho take a nap", group_id=new_group())
    started = Path(f"{wake}.started")
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline, "the bot never started the tool"
        await asyncio.sleep(0.02)

    other, quick = await sim.ask("marsho are you there?", group_id=new_group())
    wake.touch()
    assert quick.text == "quick answer"
    slow = await sim.reply_to(napping)
    assert slow.text.startswith("I had a nap: ")
    nap = json.loads(slow.text.removeprefix("I had a nap: "))
    assert nap["kind"] == "sync"
    # the other group was answered while time.sleep was still running in the bot process
    assert nap["started"] < quick.wall < nap["ended"], (
        f"tool ran {nap['started']:.3f}..{nap['ended']:.3f}, other chat answered at {quick.wall:.3f}"
    )
    assert quick.received < slow.received
