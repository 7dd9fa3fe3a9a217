"""No loops with other bots (issue 25), through bot.py on default settings: two marsho bots in
one simulated group whose answers start with the trigger word stop after a handful of
messages (with the marker, and on a platform that drops it), an echo account gets a handful of
answers, the marker survives CQ strings, and a person who answers quickly is still answered.
Counts frames and waits for quiet; no clock is read."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nonebot_plugin_marsho.chat.loops import MARKER
from tests.conftest import CHAT_TOOLSET
from tests.fake_openai import Answer, FakeOpenAI, text
from tests.onebot_sim import (
    SEND_ACTIONS,
    Action,
    BotProcess,
    Links,
    OneBotSim,
    echoed,
    output_if_failed,
    raw_message,
    relay,
    reply_segment,
    said_again,
    segments,
    text_segment,
    wait_for_quiet,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

BOT_A, BOT_B = 1001, 1002
PERSON, ECHO = 10001, 55555
MOST = 10
"""The issue's bound: at most this many messages (and answers) of a loop."""
SENTENCES = [
    "what do you think about the weather on the coast this weekend?",
    "could you tell me a short story about a lighthouse keeper?",
    "I wonder which of the old trains still runs through the mountains.",
    "please explain why the sky turns orange in the evening.",
    "have you ever tried baking bread with rye and caraway?",
    "which book would you take to a desert island, and why?",
]


_answers = itertools.count(1)


def calling_the_other(body: dict[str, Any]) -> Answer:
    """Each answer starts with the other bot's trigger word, each different (as a model's are)."""
    n = next(_answers)
    return text(f"Marsho, {SENTENCES[n % len(SENTENCES)]} ({n})")


@pytest.fixture(scope="module")
async def bots(endpoint: FakeOpenAI, request: pytest.FixtureRequest) -> AsyncIterator[tuple[OneBotSim, OneBotSim]]:
    """Two bot.py processes on default settings, each with its simulator."""
    endpoint.responder = calling_the_other
    first = BotProcess(base_url=endpoint.base_url, toolkit_dirs=[CHAT_TOOLSET])
    second = BotProcess(base_url=endpoint.base_url, toolkit_dirs=[CHAT_TOOLSET])
    async with first, second:
        with output_if_failed(first, request, "bot A"), output_if_failed(second, request, "bot B"):
            async with first.simulator(self_id=BOT_A) as a, second.simulator(self_id=BOT_B) as b:
                await a.ask("marsho warm up", group_id=50000)
                await b.ask("marsho warm up", group_id=50000)
                yield a, b


def sends(sim: OneBotSim, group_id: int) -> list[Action]:
    return [x for x in sim.actions if x.action in SEND_ACTIONS and int(x.params.get("group_id") or 0) == group_id]


async def two_bots_in(group_id: int, a: OneBotSim, b: OneBotSim, endpoint: FakeOpenAI, *,
                      strip_invisible: bool) -> tuple[int, int]:
    """A person's `marsho hi` in a group of two bots; the messages both sent and the requests
    they made, once the group is quiet."""
    requests = len(endpoint.requests)
    stop, links = asyncio.Event(), Links()
    says = said_again(strip_invisible=strip_invisible)
    relays = [asyncio.create_task(relay(a, b, group_id=group_id, says=says, stop=stop, links=links)),
              asyncio.create_task(relay(b, a, group_id=group_id, says=says, stop=stop, links=links))]
    hello = a.group_event("marsho hi", group_id=group_id, user_id=PERSON)
    await a.push(hello)
    await b.push({**hello, "self_id": BOT_B})
    await a.reply_to(hello)
    await b.reply_to(hello)
    await wait_for_quiet(lambda: (len(a.actions), len(b.actions), len(endpoint.requests)), quiet=3.0,
                         timeout=120)
    stop.set()
    await asyncio.gather(*relays)
    return len(sends(a, group_id)) + len(sends(b, group_id)), len(endpoint.requests) - requests


async def test_two_marsho_bots_whose_answers_call_each_other_stop_after_a_handful(
    bots: tuple[OneBotSim, OneBotSim], endpoint: FakeOpenAI
) -> None:
    a, b = bots
    messages, requests = await two_bots_in(50001, a, b, endpoint, strip_invisible=False)
    # each answered the person; each answer carries the marker, so the other does not answer it
    assert messages == 2 and requests == 2, (messages, requests)
    assert all(x.text.endswith(MARKER) for x in sends(a, 50001) + sends(b, 50001))


async def test_two_bots_on_a_platform_that_drops_the_marker_stop_by_their_behaviour(
    bots: tuple[OneBotSim, OneBotSim], endpoint: FakeOpenAI
) -> None:
    a, b = bots
    messages, requests = await two_bots_in(50002, a, b, endpoint, strip_invisible=True)
    assert 2 < messages <= MOST and requests <= MOST, (messages, requests)


async def echo_in(group_id: int, sim: OneBotSim, *, strip_invisible: bool) -> int:
    """An echo account's `marsho hi`, then every answer said back; the answers, once quiet."""
    stop = asyncio.Event()
    echo = asyncio.create_task(relay(sim, sim, group_id=group_id, user_id=ECHO, stop=stop,
                                     says=echoed(strip_invisible=strip_invisible)))
    await sim.ask("marsho hi", group_id=group_id, user_id=ECHO)
    await wait_for_quiet(lambda: len(sim.actions), quiet=3.0, timeout=120)
    stop.set()
    await echo
    return len(sends(sim, group_id))


async def test_an_echo_account_gets_one_answer(bots: tuple[OneBotSim, OneBotSim]) -> None:
    answers = await echo_in(50003, bots[0], strip_invisible=False)
    assert answers == 1, answers  # the echo carries the marker of the answer it repeats


async def test_an_echo_account_that_drops_the_marker_gets_a_handful(bots: tuple[OneBotSim, OneBotSim]) -> None:
    answers = await echo_in(50004, bots[0], strip_invisible=True)
    assert 1 <= answers <= MOST, answers


async def test_the_marker_in_a_cq_string_message_is_read(bots: tuple[OneBotSim, OneBotSim]) -> None:
    sim = bots[0]
    marked = sim.group_event("x", group_id=50005, user_id=PERSON + 1)
    marked["message"] = raw_message(segments([text_segment(f"Marsho, [what] & more?{MARKER}")]))
    await sim.push(marked)
    await sim.ask("marsho hi", group_id=50005, user_id=PERSON + 2)  # read in order: after it
    assert sim.sends_quoting(marked) == []


async def test_a_person_who_answers_quickly_once_or_twice_is_still_answered(
    bots: tuple[OneBotSim, OneBotSim]
) -> None:
    sim = bots[0]
    _, answer = await sim.ask("marsho hi", group_id=50006, user_id=PERSON)
    for question in ("marsho why?", "marsho really?"):  # quoting the answer the moment it comes
        quoted = answer.response["data"]["message_id"]
        _, answer = await sim.ask([reply_segment(quoted), text_segment(question)], group_id=50006,
                                  user_id=PERSON)
        assert answer.text.startswith("Marsho,")


async def test_two_bots_telling_each_other_of_an_unknown_command_stop(
    bots: tuple[OneBotSim, OneBotSim], endpoint: FakeOpenAI
) -> None:
    """"marsho.xyz is not one of my commands" starts with the other's trigger and names a command
    again: no answer of the model, so no marker; their behaviour stops them."""
    a, b = bots
    group_id, requests = 50007, len(endpoint.requests)
    stop, links = asyncio.Event(), Links()
    relays = [asyncio.create_task(relay(a, b, group_id=group_id, stop=stop, links=links)),
              asyncio.create_task(relay(b, a, group_id=group_id, stop=stop, links=links))]
    hello = a.group_event("marsho.xyz", group_id=group_id, user_id=PERSON)
    await a.push(hello)
    await b.push({**hello, "self_id": BOT_B})
    await a.reply_to(hello)
    await wait_for_quiet(lambda: (len(a.actions), len(b.actions)), quiet=3.0, timeout=120)
    stop.set()
    await asyncio.gather(*relays)
    messages = len(sends(a, group_id)) + len(sends(b, group_id))
    assert 2 < messages <= MOST and len(endpoint.requests) == requests, messages
