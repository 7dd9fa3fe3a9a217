"""History that survives: real `bot.py` processes restarted (or killed) on the same data folder,
driven through the OneBot v11 simulator, against the fake endpoint (issue 4, items 1, 2 and 7).

Each test keeps LOCALSTORE_DATA_DIR in its own tmp folder, so the default SQLite database
outlives the bot processes that use it; the last test runs two bots on one PostgreSQL database
at once and kills one of them mid-turn.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.store.sql import SqlStore
from tests.fake_openai import Answer, FakeOpenAI, text, tool_calls
from tests.onebot_sim import BotProcess, OneBotSim
from tests.postgres_server import PostgresServer
from tests.speakers import label
from tests.test_postgres import start_postgres

pytestmark = pytest.mark.e2e

SELF_ID = 2233445566
SUPERUSER = 10099
MEMBER = 10001
ASKER = label("user10001", MEMBER)
"""How the shared group conversation names the member."""
_groups = itertools.count(50001)


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def dialogue(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """The request's messages after the system prompt, as (role, content)."""
    return [(m["role"], m.get("content")) for m in body["messages"] if m["role"] != "system"]


def answer_last_question(body: dict[str, Any]) -> Answer:
    return text(f"answer to {user_texts(body)[-1]}")


@pytest.fixture(autouse=True)
def _clean(endpoint: FakeOpenAI) -> Iterator[None]:
    endpoint.reset()
    endpoint.responder = answer_last_question
    yield
    endpoint.reset()


def new_bot(endpoint: FakeOpenAI, data_dir: Path | None = None, **env: str) -> BotProcess:
    """A bot (not started) whose data folder, if given, outlives it; 10099 is a superuser."""
    settings = {"SUPERUSERS": json.dumps([str(SUPERUSER)]), "MARSHO_TIMEOUT": "30", **env}
    if data_dir is not None:
        settings["LOCALSTORE_DATA_DIR"] = str(data_dir)
    return BotProcess(base_url=endpoint.base_url, env=settings)


@asynccontextmanager
async def connected(bot: BotProcess, *, started: bool = False) -> AsyncIterator[OneBotSim]:
    """Start the bot (unless `started`), connect a simulator, stop both at the end; on failure
    the bot's log goes to the test's captured stderr."""
    try:
        if not started:
            await asyncio.to_thread(bot.start)
        async with bot.simulator(self_id=SELF_ID) as sim:
            yield sim
    except BaseException:
        print(f"---- bot.py output (port {bot.port}) ----\n{bot.output()[-6000:]}", file=sys.stderr)
        raise
    finally:
        await asyncio.to_thread(bot.stop)


async def test_history_and_the_model_survive_a_restart(endpoint: FakeOpenAI, tmp_path: Path) -> None:
    data = tmp_path / "data"
    group = next(_groups)
    async with connected(new_bot(endpoint, data)) as sim:
        _, reply = await sim.ask("marsho first question", group_id=group)
        assert reply.text == f"answer to {ASKER}: first question"
        _, reply = await sim.ask("marsho.model better-model", group_id=group, user_id=SUPERUSER)
        assert "better-model" in reply.text, reply.text
        _, reply = await sim.ask("marsho.model evil-model", group_id=group, user_id=MEMBER)
        assert "superusers" in reply.text, reply.text
    assert list(data.rglob("*.db")), f"no SQLite database in the data folder {data}"

    endpoint.requests.clear()
    async with connected(new_bot(endpoint, data)) as sim:  # a new process, the same folder
        _, reply = await sim.ask("marsho.model", group_id=group, user_id=SUPERUSER)
        assert "better-model" in reply.text and "evil-model" not in reply.text, reply.text
        _, reply = await sim.ask("marsho second question", group_id=group)
        assert reply.text == f"answer to {ASKER}: second question"
        _, reply = await sim.ask("marsho.history", group_id=group)
        assert "2 turns, 4 messages" in reply.text, reply.text

    [request] = endpoint.requests
    assert request["model"] == "better-model"
    assert dialogue(request) == [
        ("user", f"{ASKER}: first question"),
        ("assistant", f"answer to {ASKER}: first question"),
        ("user", f"{ASKER}: second question"),
    ]


SHARED_SQLITE = "marsho: another bot process is using the database"


async def test_a_second_bot_on_the_same_sqlite_file_is_told_and_a_restart_is_not(
        endpoint: FakeOpenAI, tmp_path: Path) -> None:
    data = tmp_path / "data"
    first, second, third = new_bot(endpoint, data), new_bot(endpoint, data), new_bot(endpoint, data)
    try:
        await asyncio.to_thread(first.start)
        await asyncio.to_thread(second.start)  # the owner started it twice
        assert SHARED_SQLITE in second.output(), second.output()[-3000:]
        assert "PostgreSQL database (MARSHO_DATABASE_URL)" in second.output()
        assert SHARED_SQLITE not in first.output()
        await asyncio.to_thread(first.stop)
        await asyncio.to_thread(third.start)  # the second still runs: a third is told too
        assert SHARED_SQLITE in third.output(), third.output()[-3000:]
    finally:
        for bot in (third, second, first):
            await asyncio.to_thread(bot.stop)
    again = new_bot(endpoint, data)
    async with connected(again) as sim:  # the others are gone: nothing to say
        _, reply = await sim.ask("marsho hello", group_id=next(_groups))
        assert reply.text == f"answer to {ASKER}: hello"
    assert SHARED_SQLITE not in again.output()


async def test_a_bot_killed_mid_turn_loses_nothing_committed_and_stores_no_half_turn(
    endpoint: FakeOpenAI, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    group = next(_groups)
    held, release = threading.Event(), threading.Event()

    def respond(body: dict[str, Any]) -> Answer:
        question = user_texts(body)[-1]
        if "slow" not in question:
            return answer_last_question(body)
        if body["messages"][-1]["role"] == "user":
            return tool_calls(("clock__now", {}))
        held.set()  # the tool ran: its call and result exist only in the bot's memory
        release.wait(30)
        return text("too late")

    endpoint.responder = respond
    try:
        bot = new_bot(endpoint, data)
        async with connected(bot) as sim:
            _, reply = await sim.ask("marsho first question", group_id=group)
            assert reply.text == f"answer to {ASKER}: first question"
            _, reply = await sim.ask("marsho second question", group_id=group)
            await sim.group_message("marsho slow question", group_id=group)
            assert await asyncio.to_thread(held.wait, 15), "the turn never reached its second request"
            assert bot.process is not None
            bot.process.kill()  # SIGKILL: no shutdown hook, no rollback by the bot
            await asyncio.to_thread(bot.process.wait, 10)
    finally:
        release.set()

    endpoint.responder = answer_last_question
    endpoint.requests.clear()
    async with connected(new_bot(endpoint, data)) as sim:
        _, reply = await sim.ask("marsho after the crash", group_id=group)
        assert reply.text == f"answer to {ASKER}: after the crash"
        _, reply = await sim.ask("marsho.history", group_id=group)
        assert "3 turns, 6 messages" in reply.text, reply.text

    [request] = endpoint.requests
    assert dialogue(request) == [
        ("user", f"{ASKER}: first question"),
        ("assistant", f"answer to {ASKER}: first question"),
        ("user", f"{ASKER}: second question"),
        ("assistant", f"answer to {ASKER}: second question"),
        ("user", f"{ASKER}: after the crash"),
    ]


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = start_postgres()
    yield server
    server.stop()


async def test_two_bots_on_postgres_take_turns_and_a_killed_one_leaves_no_half_turn(
    endpoint: FakeOpenAI, postgres: PostgresServer
) -> None:
    """Two bot processes on one PostgreSQL database, one group asking both: turns run one after
    the other and each bot sees the other's; bot a killed mid-turn frees the session at once,
    and bot b then sees exactly the turns committed before."""
    url = postgres.create_database(f"marsho_e2e_{os.getpid()}")
    store = SqlStore(url)  # a database that exists already, as after a restart (and the tables:
    await store.start()  # two bots creating them at once is test_postgres's business)
    await store.close()
    group = next(_groups)
    held, release = threading.Event(), threading.Event()

    def respond(body: dict[str, Any]) -> Answer:
        if "slow" not in user_texts(body)[-1]:
            return answer_last_question(body)
        if body["messages"][-1]["role"] == "user":
            return tool_calls(("clock__now", {}))
        held.set()
        release.wait(30)
        return text("too late")

    endpoint.responder = respond
    bot_a, bot_b = (new_bot(endpoint, MARSHO_DATABASE_URL=url) for _ in range(2))
    await asyncio.gather(asyncio.to_thread(bot_a.start), asyncio.to_thread(bot_b.start))
    try:
        async with connected(bot_a, started=True) as sim_a, connected(bot_b, started=True) as sim_b:
            _, reply = await sim_a.ask("marsho first question", group_id=group)
            assert reply.text == f"answer to {ASKER}: first question"

            # the group asks both bots at once: the turns run one after the other
            endpoint.requests.clear()
            endpoint.latency = 0.2
            events = await asyncio.gather(
                sim_a.group_message("marsho to bot a", group_id=group, user_id=10002),
                sim_b.group_message("marsho to bot b", group_id=group, user_id=10003),
            )
            await asyncio.gather(sim_a.reply_to(events[0]), sim_b.reply_to(events[1]))
            earlier, later = endpoint.requests
            assert dialogue(earlier)[:2] == [
                ("user", f"{ASKER}: first question"),
                ("assistant", f"answer to {ASKER}: first question"),
            ]
            assert dialogue(later)[:-1] == [
                *dialogue(earlier), ("assistant", f"answer to {user_texts(earlier)[-1]}"),
            ], "the second turn did not wait for the first (or did not see it)"
            endpoint.latency = 0

            # bot a dies mid-turn, holding the session's lock
            await sim_a.group_message("marsho slow question", group_id=group)
            assert await asyncio.to_thread(held.wait, 15), "the turn never reached its second request"
            assert bot_a.process is not None
            bot_a.process.kill()
            await asyncio.to_thread(bot_a.process.wait, 10)
            endpoint.requests.clear()
            _, reply = await sim_b.ask("marsho after the crash", group_id=group)
            assert reply.text == f"answer to {ASKER}: after the crash"
    finally:
        release.set()

    [request] = endpoint.requests
    assert dialogue(request) == [
        *dialogue(later), ("assistant", f"answer to {user_texts(later)[-1]}"),
        ("user", f"{ASKER}: after the crash"),
    ]
