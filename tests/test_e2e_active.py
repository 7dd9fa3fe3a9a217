"""End to end, issue 17 parts 2 and 3: a real `bot.py`, the OneBot v11 simulator over WebSocket,
the fake endpoint. A group at chance 1 gets an unquoted answer to a message nobody addressed to
marsho, one at chance 0 only what the judge model allows; a second line during an answer
restarts it and one answer comes."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.fake_openai import Answer, FakeOpenAI, held, text
from tests.onebot_sim import BotProcess, OneBotSim, output_if_failed
from tests.speakers import label

pytestmark = pytest.mark.e2e

SELF_ID = 2233445577
ALICE, ADMIN = 10701, 10703
_groups = itertools.count(85001)


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


@pytest.fixture(scope="module")
def bot(endpoint: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest) -> Iterator[BotProcess]:
    process = BotProcess(base_url=endpoint.base_url, env={
        "LOCALSTORE_DATA_DIR": str(tmp_path_factory.mktemp("marsho-active") / "data"), "MARSHO_TIMEOUT": "15",
        "SUPERUSERS": json.dumps(["10099"]), "MARSHO_ACTIVE_COOLDOWN": "0",
        "MARSHO_ACTIVE_JUDGE_MODEL": "judge-model", "MARSHO_DEBOUNCE_SECONDS": "20",
    })
    with process, output_if_failed(process, request):
        yield process


@pytest.fixture(scope="module")
async def sim(bot: BotProcess) -> AsyncIterator[OneBotSim]:
    async with bot.simulator(self_id=SELF_ID) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def _clean(endpoint: FakeOpenAI) -> Iterator[None]:
    endpoint.reset()
    yield
    endpoint.reset()


async def set_chance(sim: OneBotSim, group: int, chance: str) -> None:
    _, reply = await sim.ask(f"marsho.active {chance}", group_id=group, user_id=ADMIN, role="admin")
    assert reply.text.startswith("Done: I answer a message here"), reply.text


def unquoted(action: Any) -> bool:
    return action.reply_id is None


async def test_at_chance_one_marsho_joins_in_and_at_zero_it_does_not(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = next(_groups)
    await set_chance(sim, group, "1")
    endpoint.push(text("Bring an umbrella!"))
    await sim.group_message("will it rain today?", group_id=group, user_id=ALICE, card="Alice")
    reply = await sim.wait_send(where=unquoted)
    assert reply.text == "Bring an umbrella!"
    assert user_texts(endpoint.requests[-1])[-1] == f"{label('Alice', ALICE)}: will it rain today?"

    quiet = next(_groups)
    await set_chance(sim, quiet, "0")
    endpoint.responder = lambda body: text("no")
    await sim.group_message("will it rain today?", group_id=quiet, user_id=ALICE, card="Alice")
    await sim.expect_no_send(2.0, where=unquoted)
    assert [body["model"] for body in endpoint.requests[1:]] == ["judge-model"]


async def test_the_judge_model_decides_without_tools(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = next(_groups)
    await set_chance(sim, group, "0")

    def answer(body: dict[str, Any]) -> Answer:
        return text("yes") if body["model"] == "judge-model" else text("I can help with that.")
    endpoint.responder = answer
    await sim.group_message("how do I convert 5 miles to km?", group_id=group, user_id=ALICE, card="Alice")
    reply = await sim.wait_send(where=unquoted)
    assert reply.text == "I can help with that."
    judged, asked = endpoint.requests
    assert judged["model"] == "judge-model" and "tools" not in judged
    assert asked["model"] == "fake-model" and asked.get("tools")


async def test_a_second_line_during_an_answer_gives_one_answer_to_both(
    endpoint: FakeOpenAI, sim: OneBotSim
) -> None:
    group = next(_groups)
    # the first answer is held until the second line is in, however slow the machine
    endpoint.push(held(text("abandoned")), text("Hello, world."))
    first = await sim.group_message("marsho translate:", group_id=group, user_id=ALICE, card="Alice")
    while not endpoint.requests:
        await asyncio.sleep(0.02)
    await sim.group_message("bonjour le monde", group_id=group, user_id=ALICE, card="Alice")
    reply = await sim.reply_to(first)
    endpoint.release()  # the abandoned request is answered now, too late to be sent
    assert reply.text == "Hello, world."
    assert user_texts(endpoint.requests[-1])[-1] == f"{label('Alice', ALICE)}: translate:\n┆ bonjour le monde"
    await sim.expect_no_send(1.0)  # and nothing else: the abandoned answer is never sent
    endpoint.push(text("You asked me to translate."))
    await sim.ask("marsho what did I ask?", group_id=group, user_id=ALICE, card="Alice")
    history = user_texts(endpoint.requests[-1])
    assert history == [f"{label('Alice', ALICE)}: translate:\n┆ bonjour le monde", f"{label('Alice', ALICE)}: what did I ask?"]
    assert "abandoned" not in json.dumps(endpoint.requests[-1]["messages"])


