"""End to end, a member of the group (issue 17): a real `bot.py`, the OneBot v11 simulator over
WebSocket, the fake endpoint. The recent chat reaches the model only where a group's admin
turned it on, never from a private chat, survives a restart (SQLite in the data folder); a
group's persona reaches only that group's requests.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, text
from tests.onebot_sim import BotProcess, OneBotSim, output_if_failed
from tests.speakers import label

pytestmark = pytest.mark.e2e

SELF_ID = 2233445566
ALICE, BOB, ADMIN = 10401, 10402, 10403
_groups = itertools.count(80001)


def new_group() -> int:
    return next(_groups)


def last_question(body: dict[str, Any]) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


def new_bot(endpoint: FakeOpenAI, data_dir: Path, **env: str) -> BotProcess:
    """bot.py keeping its data in `data_dir`, with `env`'s settings."""
    return BotProcess(base_url=endpoint.base_url, env={
        "LOCALSTORE_DATA_DIR": str(data_dir), "MARSHO_TIMEOUT": "15",
        "SUPERUSERS": json.dumps(["10099"]), **env,
    })


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("marsho-context") / "data"


@pytest.fixture(scope="module")
def bot(endpoint: FakeOpenAI, data_dir: Path, request: pytest.FixtureRequest) -> Iterator[BotProcess]:
    process = new_bot(endpoint, data_dir)
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


async def turn_on(sim: OneBotSim, group: int) -> None:
    _, reply = await sim.ask("marsho.context on", group_id=group, user_id=ADMIN, role="admin")
    assert reply.text.startswith("Done: from now on the last 20 messages"), reply.text


async def test_what_alice_just_said_reaches_the_model(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = new_group()
    await turn_on(sim, group)
    await sim.group_message("the password is swordfish", group_id=group, user_id=ALICE, card="Alice")
    endpoint.push(text("Alice said the password is swordfish."))
    _, reply = await sim.ask("marsho what did Alice just say?", group_id=group, user_id=BOB, card="Bob")
    assert reply.text == "Alice said the password is swordfish."
    question = last_question(endpoint.requests[-1])
    assert re.search(rf"\n\| {label('Alice', ALICE)} \(\d\d:\d\d\): the password is swordfish\n"
                     rf"\[End of recent messages\]\n{label('Bob', BOB)}: what did Alice just say\?$", question), \
        question


async def test_a_group_that_did_not_turn_it_on_sends_no_chat(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = new_group()
    await sim.group_message("between us", group_id=group, user_id=ALICE, card="Alice")
    endpoint.push(text("Hi."))
    _, reply = await sim.ask("marsho hi", group_id=group, user_id=BOB, card="Bob")
    assert last_question(endpoint.requests[-1]) == f"{label('Bob', BOB)}: hi"
    _, shown = await sim.ask("marsho.context", group_id=group, user_id=BOB)
    assert shown.text == "This group does not share its recent chat with me (the bot's default)."


async def test_private_chats_are_never_kept(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    await sim.private_message("my diary", user_id=ALICE)
    endpoint.push(text("I do not know."))
    await sim.ask("marsho what did I write?", private=True, user_id=ALICE)
    assert last_question(endpoint.requests[-1]) == "what did I write?"


async def test_a_member_cannot_turn_it_on(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    group = new_group()
    _, reply = await sim.ask("marsho.context on", group_id=group, user_id=BOB)
    assert reply.text == "Only group admins and superusers can turn the recent chat on or off."
    await sim.group_message("not kept", group_id=group, user_id=ALICE)
    endpoint.push(text("ok"))
    await sim.ask("marsho hi", group_id=group, user_id=BOB, card="Bob")
    assert last_question(endpoint.requests[-1]) == f"{label('Bob', BOB)}: hi"


async def test_a_groups_persona_reaches_only_its_requests(endpoint: FakeOpenAI, sim: OneBotSim) -> None:
    pirates, others = new_group(), new_group()
    _, reply = await sim.ask("marsho.persona a pirate who says arr", group_id=pirates, user_id=ADMIN, role="owner")
    assert reply.text == "Got it: in this group I am now: a pirate who says arr"
    endpoint.push(text("Arr!"))
    await sim.ask("marsho hi", group_id=pirates, user_id=BOB)
    endpoint.push(text("Hello."))
    await sim.ask("marsho hi", group_id=others, user_id=BOB)
    here, there = (body["messages"][0]["content"] for body in endpoint.requests)
    assert '"a pirate who says arr"' in here and "pirate" not in there


async def test_a_restart_keeps_the_recent_chat(endpoint: FakeOpenAI, tmp_path: Path,
                                               request: pytest.FixtureRequest) -> None:
    group, data_dir = new_group(), tmp_path / "data"
    process = new_bot(endpoint, data_dir)
    async with process:
        with output_if_failed(process, request):
            async with process.simulator(self_id=SELF_ID) as first:
                await turn_on(first, group)
                await first.group_message("see you at noon", group_id=group, user_id=ALICE, card="Alice")
                await first.group_message("bring the map", group_id=group, user_id=ALICE, card="Alice")
                _, shown = await first.ask("marsho.context", group_id=group, user_id=BOB)
                assert shown.text.endswith("(2 messages kept now)."), shown.text
    process = new_bot(endpoint, data_dir)
    async with process:
        with output_if_failed(process, request, "bot.py after the restart"):
            async with process.simulator(self_id=SELF_ID) as second:
                endpoint.push(text("Noon, with the map."))
                await second.ask("marsho what did Alice say?", group_id=group, user_id=BOB, card="Bob")
    question = last_question(endpoint.requests[-1])
    assert "| Alice" in question and "see you at noon" in question and "bring the map" in question, question
