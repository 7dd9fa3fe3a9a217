"""End to end, memory (issue 18): a real `bot.py`, the OneBot v11 simulator over WebSocket, the
fake endpoint scripted to call the memory tools. What a person tells marsho in a group comes back
to them in another group and in private, never to someone else; what they tell it in private never
reaches a group; they list and delete it with `marsho.memory`; it survives a restart. A long
conversation keeps a fact told early through its summary.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.summary import SUMMARY_PROMPT
from tests.fake_openai import FakeOpenAI, text, tool_calls
from tests.onebot_sim import BotProcess, OneBotSim
from tests.test_e2e_group_context import (  # noqa: F401 - fixtures: one bot.py for the module
    SELF_ID,
    _clean,
    bot,
    data_dir,
    last_question,
    new_bot,
    sim,
)

pytestmark = pytest.mark.e2e

ALICE, BOB = 10501, 10502
_groups = itertools.count(81001)
_calls = itertools.count(1)
LABEL = "[What you remember that may bear on this message"


def remember(fact: str, about: str = "me") -> Any:
    return tool_calls(("memory__remember", {"text": fact, "about": about}, f"m{next(_calls)}"))


def everything(endpoint: FakeOpenAI) -> str:
    return json.dumps(endpoint.requests, ensure_ascii=False)


async def test_a_fact_follows_its_teller_and_nobody_else(endpoint: FakeOpenAI, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    group, other = next(_groups), next(_groups)
    endpoint.push(remember("Their cat is called Mochi"), text("Noted!"))
    _, reply = await sim.ask("marsho my cat is called Mochi, remember it", group_id=group, user_id=ALICE)
    assert reply.text == "Noted!"

    endpoint.reset()
    endpoint.push(text("Mochi!"))
    _, reply = await sim.ask("marsho what is my cat called?", group_id=other, user_id=ALICE)
    assert LABEL in last_question(endpoint.requests[0]) and "Their cat is called Mochi" in last_question(endpoint.requests[0])

    endpoint.reset()
    endpoint.push(text("Mochi!"))
    await sim.ask("marsho what is my cat called?", private=True, user_id=ALICE)
    assert "Their cat is called Mochi" in last_question(endpoint.requests[0])

    endpoint.reset()
    endpoint.push(text("I don't know."))
    await sim.ask("marsho what is my cat called?", group_id=other, user_id=BOB)  # Alice asked here
    assert "Their cat is called Mochi" not in everything(endpoint) and LABEL not in everything(endpoint)
    endpoint.reset()
    endpoint.push(text("I don't know."))
    await sim.ask("marsho what is my cat called?", group_id=next(_groups), user_id=BOB)
    assert "Mochi" not in everything(endpoint)


async def test_what_is_told_in_private_never_reaches_a_group(endpoint: FakeOpenAI, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    group = next(_groups)
    endpoint.push(remember("They are job hunting, secretly"), text("Your secret is safe."))
    await sim.ask("marsho I am job hunting, keep it secret", private=True, user_id=ALICE)
    endpoint.reset()
    endpoint.push(tool_calls(("memory__recall", {"query": "job hunting"}, "r1")), text("Nothing."))
    _, reply = await sim.ask("marsho am I job hunting?", group_id=group, user_id=ALICE)
    assert reply.text == "Nothing."
    assert "secretly" not in everything(endpoint)
    _, reply = await sim.ask("marsho.memory", group_id=group, user_id=ALICE)
    assert "job hunting" not in reply.text and "more are not listed here" in reply.text


async def test_a_person_lists_and_deletes_what_is_kept_and_it_survives_a_restart(
        endpoint: FakeOpenAI, data_dir: Path, bot: BotProcess, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    person = 10577
    endpoint.push(remember("Plays the cello"), text("Lovely."))
    await sim.ask("marsho I play the cello", private=True, user_id=person)
    endpoint.push(remember("Lives in Hangzhou"), text("Nice."))
    await sim.ask("marsho I live in Hangzhou", private=True, user_id=person)
    _, reply = await sim.ask("marsho.memory", private=True, user_id=person)
    lines = reply.text.splitlines()
    assert lines[0] == "What I remember about you (2):"
    cello = next(line for line in lines if "Plays the cello" in line).split()[0]
    _, reply = await sim.ask(f"marsho.memory forget {cello[1:]}", private=True, user_id=person)
    assert reply.text == f"Forgotten: {cello} Plays the cello"

    restarted = new_bot(endpoint, data_dir)
    bot.stop()
    with restarted:
        async with restarted.simulator(self_id=SELF_ID) as again:
            _, reply = await again.ask("marsho.memory", private=True, user_id=person)
            assert "Lives in Hangzhou" in reply.text and "cello" not in reply.text
            _, reply = await again.ask("marsho.memory forget all", private=True, user_id=person)
            assert reply.text == "Forgotten: 1 memory."
            _, reply = await again.ask("marsho.memory", private=True, user_id=person)
            assert reply.text.startswith("I remember nothing about you here.")


async def test_a_fact_told_early_in_a_long_conversation_is_kept_by_its_summary(
        endpoint: FakeOpenAI, tmp_path: Path) -> None:
    def respond(body: dict[str, Any]) -> Any:
        if str(body["messages"][0]["content"]).startswith(SUMMARY_PROMPT[:40]):
            said = body["messages"][-1]["content"]
            return text("Alice's cat is called Mochi." if "Mochi" in said else "Small talk.")
        return text("ok")

    endpoint.responder = respond
    group = next(_groups)
    with new_bot(endpoint, tmp_path / "data", MARSHO_MAX_HISTORY="8", MARSHO_MEMORY="false") as process:
        async with process.simulator(self_id=SELF_ID) as chat:
            await chat.ask("marsho my cat is called Mochi", group_id=group, user_id=ALICE)
            for number in range(12):
                await chat.ask(f"marsho question {number}", group_id=group, user_id=BOB)
            _, reply = await chat.ask("marsho.history", group_id=group, user_id=BOB)
    last = [body for body in endpoint.requests
            if not str(body["messages"][0]["content"]).startswith(SUMMARY_PROMPT[:40])][-1]
    assert "my cat is called Mochi" not in json.dumps(last["messages"][1:], ensure_ascii=False)
    assert "Alice's cat is called Mochi." in last["messages"][0]["content"]
    assert "Alice's cat is called Mochi." in reply.text
