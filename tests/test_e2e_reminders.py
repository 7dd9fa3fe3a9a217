"""End to end, reminders (issue 27): a real `bot.py`, the OneBot v11 simulator over WebSocket, the
fake endpoint scripted to call the reminder tools. A reminder reaches its group mentioning its
asker; one due while the bot was stopped arrives once after it starts; a scheduled question's
answer is posted; a private one stays private; a member can neither list nor cancel another's;
`marsho.reminders` lists and cancels; a repeat below the minimum is refused to the model.

No assertion is about wall-clock time: each test waits for the frame it expects, with a deadline.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI, held, text, tool_calls
from tests.onebot_sim import Action, OneBotSim
from tests.speakers import label
from tests.test_e2e_group_context import (  # noqa: F401 - fixtures: one bot.py for the module
    SELF_ID,
    _clean,
    bot,
    data_dir,
    new_bot,
    sim,
)

pytestmark = pytest.mark.e2e

ALICE, BOB, ADMIN = 10601, 10602, 10603
_groups = itertools.count(82001)
_calls = itertools.count(1)
DEADLINE = 60.0
"""Seconds a test waits for a reminder's frame (a loaded machine is slow; a test never waits
for the deadline when the frame comes)."""


def add(**arguments: Any) -> Any:
    return tool_calls(("reminders__add", arguments, f"r{next(_calls)}"))


def mentions(action: Action, user: int) -> bool:
    return any(segment.get("type") == "at" and str(segment["data"].get("qq")) == str(user)
               for segment in action.message)


def in_group(group: int) -> Any:
    return lambda action: action.params.get("group_id") == group and action.reply_id is None


def tool_results(endpoint: FakeOpenAI, *call_ids: str) -> list[str]:
    """The tool results the model was sent (of these calls only, when named), once each."""
    found = {message["tool_call_id"]: str(message["content"]) for body in endpoint.requests
             for message in body["messages"] if message["role"] == "tool"}
    return [result for call_id, result in found.items() if not call_ids or call_id in call_ids]


def reminder_number(endpoint: FakeOpenAI) -> int:
    found = re.search(r"Reminder #(\d+) set", "\n".join(tool_results(endpoint)))
    assert found, tool_results(endpoint)
    return int(found.group(1))


async def test_a_text_reminder_reaches_the_group_mentioning_its_asker(endpoint: FakeOpenAI, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    group = next(_groups)
    endpoint.push(add(when="PT3S", text="take the laundry out"), text("I will remind you."))
    _, reply = await sim.ask("marsho remind me in 3 seconds to take the laundry out", group_id=group, user_id=ALICE)
    assert reply.text == "I will remind you."
    assert "in 3 seconds" in tool_results(endpoint)[0]
    reminder = await sim.wait_send(timeout=DEADLINE, where=in_group(group))
    assert mentions(reminder, ALICE) and reminder.text == " ⏰ take the laundry out"
    await sim.expect_no_send(2.0, where=in_group(group))  # once


async def test_a_scheduled_questions_answer_is_posted_in_its_chat(endpoint: FakeOpenAI, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    group = next(_groups)
    endpoint.push(add(when="PT3S", prompt="What is the weather in Hangzhou?"), text("I will ask then."),
                  text("It is sunny in Hangzhou."))
    await sim.ask("marsho in 3 seconds tell me the weather in Hangzhou", group_id=group, user_id=ALICE, card="Alice")
    number = reminder_number(endpoint)
    # who the asker is then, as the implementation tells it
    sim.handlers["get_group_member_info"] = lambda params: {
        "group_id": params["group_id"], "user_id": params["user_id"], "card": "Alice", "role": "member"}
    try:
        heading = await sim.wait_send(timeout=DEADLINE, where=in_group(group))
        answer = await sim.wait_send(timeout=DEADLINE, where=in_group(group))
    finally:
        del sim.handlers["get_group_member_info"]
    assert mentions(heading, ALICE) and f"Your scheduled question (#{number}): What is the weather" in heading.text
    assert answer.text == "It is sunny in Hangzhou."
    asked = [m["content"] for m in endpoint.requests[-1]["messages"] if m["role"] == "user"][-1]
    # as the asker, labelled with their short id as a question of theirs is
    assert asked.endswith(f"{label('Alice', ALICE)}: What is the weather in Hangzhou?")


async def test_a_private_reminder_stays_private(endpoint: FakeOpenAI, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    person = 10611
    endpoint.push(add(when="PT3S", text="call the dentist"), text("Noted."))
    await sim.ask("marsho remind me in 3 seconds to call the dentist", private=True, user_id=person)
    sent = await sim.wait_send(timeout=DEADLINE, where=lambda action: "dentist" in action.text)
    assert sent.params.get("message_type") == "private" or sent.action == "send_private_msg"
    assert sent.params.get("user_id") == person and "group_id" not in sent.params
    assert not mentions(sent, person)
    endpoint.push(tool_calls(("reminders__list", {}, "l1")), text("Nothing."))
    await sim.ask("marsho what are my reminders?", group_id=next(_groups), user_id=person)
    assert tool_results(endpoint, "l1") == ["No reminders: the person asking has none here."]


async def test_a_member_can_neither_list_nor_cancel_anothers(endpoint: FakeOpenAI, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    group = next(_groups)
    endpoint.push(add(when="PT2H", text="alice's surprise party"), text("Set."))
    await sim.ask("marsho remind me in two hours of the party", group_id=group, user_id=ALICE)
    number = reminder_number(endpoint)
    _, listed = await sim.ask("marsho.reminders", group_id=group, user_id=BOB)
    assert listed.text.startswith("You have no reminders here.")
    _, refused = await sim.ask(f"marsho.reminders cancel {number}", group_id=group, user_id=BOB)
    assert refused.text == f"There is no reminder #{number} here (marsho.reminders lists yours)."
    endpoint.reset()
    endpoint.push(tool_calls(("reminders__list", {}, "l2")), tool_calls(("reminders__cancel", {"id": number}, "c2")),
                  text("I cannot."))
    await sim.ask("marsho list and cancel the reminders here", group_id=group, user_id=BOB)
    listed_for_bob, cancel_for_bob = tool_results(endpoint, "l2", "c2")
    assert listed_for_bob == "No reminders: the person asking has none here."
    assert f"There is no reminder #{number} here" in cancel_for_bob
    _, group_list = await sim.ask("marsho.reminders group", group_id=group, user_id=ADMIN, role="admin")
    assert f"#{number}" in group_list.text and "alice's surprise party" in group_list.text
    _, still = await sim.ask("marsho.reminders", group_id=group, user_id=ALICE)
    assert f"#{number}" in still.text


async def test_the_command_lists_and_cancels_ones_own(endpoint: FakeOpenAI, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    group = next(_groups)
    endpoint.push(add(when="PT3H", text="water the plants", every="P1D"), text("Every day, then."))
    await sim.ask("marsho every day remind me to water the plants", group_id=group, user_id=ALICE)
    number = reminder_number(endpoint)
    _, listed = await sim.ask("marsho.reminders", group_id=group, user_id=ALICE)
    lines = listed.text.splitlines()
    assert lines[0] == "Your reminders here (1):"
    assert lines[1].startswith(f"#{number} ") and "(repeats: P1D)" in lines[1] and "says: water the plants" in lines[1]
    _, cancelled = await sim.ask(f"marsho.reminders cancel {number}", group_id=group, user_id=ALICE)
    assert cancelled.text == f"Cancelled #{number}: water the plants"
    _, empty = await sim.ask("marsho.reminders", group_id=group, user_id=ALICE)
    assert empty.text.startswith("You have no reminders here.")


async def test_a_repeat_below_the_minimum_is_refused_naming_it(endpoint: FakeOpenAI, sim: OneBotSim) -> None:  # noqa: F811 - the fixtures
    group = next(_groups)
    endpoint.push(add(when="PT1M", text="drink water", every="PT1M"), text("That is too often."))
    await sim.ask("marsho remind me every minute to drink water", group_id=group, user_id=ALICE)
    [result] = tool_results(endpoint)
    assert "reminders repeat at most every 5 minutes (MARSHO_REMINDER_MIN_INTERVAL)" in result
    _, listed = await sim.ask("marsho.reminders", group_id=group, user_id=ALICE)
    assert listed.text.startswith("You have no reminders here.")


async def test_one_due_while_the_bot_was_stopped_arrives_once_after_it_starts(
        endpoint: FakeOpenAI, tmp_path: Path) -> None:
    group = next(_groups)
    data = tmp_path / "data"
    endpoint.push(add(when="PT4S", text="the oven is ready"), text("Set."))
    with new_bot(endpoint, data) as first:
        async with first.simulator(self_id=SELF_ID) as chat:
            await chat.ask("marsho in 4 seconds tell me the oven is ready", group_id=group, user_id=ALICE)
    await asyncio.sleep(5)  # it falls due while no bot runs
    with new_bot(endpoint, data) as second:
        async with second.simulator(self_id=SELF_ID) as chat:
            sent = await chat.wait_send(timeout=DEADLINE, where=in_group(group))
            assert mentions(sent, ALICE) and "the oven is ready" in sent.text
            await chat.expect_no_send(3.0, where=in_group(group))


async def test_one_missed_past_the_grace_is_dropped_and_its_asker_told_once(
        endpoint: FakeOpenAI, tmp_path: Path) -> None:
    group = next(_groups)
    data = tmp_path / "data"
    endpoint.push(add(when="PT2S", text="feed the cat"), text("Set."))
    with new_bot(endpoint, data) as first:
        async with first.simulator(self_id=SELF_ID) as chat:
            await chat.ask("marsho in 2 seconds remind me to feed the cat", group_id=group, user_id=ALICE)
    await asyncio.sleep(3)
    with new_bot(endpoint, data, MARSHO_REMINDER_GRACE="0") as second:
        async with second.simulator(self_id=SELF_ID) as chat:
            told = await chat.wait_send(timeout=DEADLINE, where=in_group(group))
            assert mentions(told, ALICE)
            assert "while I was offline, so it was not sent: feed the cat" in told.text
            await chat.expect_no_send(3.0, where=in_group(group))


async def test_a_scheduled_question_the_bot_stopped_answering_is_not_asked_again_after_it_starts(
        endpoint: FakeOpenAI, tmp_path: Path) -> None:
    group = next(_groups)
    data = tmp_path / "data"
    endpoint.push(add(when="PT3S", prompt="a slow question"), text("Set."))
    with new_bot(endpoint, data) as first:
        async with first.simulator(self_id=SELF_ID) as chat:
            await chat.ask("marsho in 3 seconds ask a slow question", group_id=group, user_id=ALICE)
            endpoint.push(held(text("a slow answer")))
            heading = await chat.wait_send(timeout=DEADLINE, where=in_group(group))
            assert "a slow question" in heading.text
            while len(endpoint.requests) < 2:  # the model is asked, and answers only when released
                await asyncio.sleep(0.1)
    endpoint.release()
    endpoint.reset()
    endpoint.push(text("asked again"))
    with new_bot(endpoint, data) as second:
        async with second.simulator(self_id=SELF_ID) as chat:
            await chat.expect_no_send(8.0, where=in_group(group))
    assert endpoint.requests == []


async def test_two_bot_processes_on_one_postgresql_database_fire_each_reminder_once(
        endpoint: FakeOpenAI, tmp_path: Path) -> None:
    from nonebot_plugin_marsho.store.reminders import Reminder, ReminderStore
    from nonebot_plugin_marsho.store.sql import SqlStore
    from tests.test_postgres import start_postgres

    server = start_postgres()
    try:
        url = server.create_database("marsho_two_bots")
        group, count = next(_groups), 40
        bots = [new_bot(endpoint, tmp_path / f"data{n}", MARSHO_DATABASE_URL=url) for n in (1, 2)]
        with bots[0], bots[1]:
            async with bots[0].simulator(self_id=SELF_ID) as one, bots[1].simulator(self_id=SELF_ID) as two:
                endpoint.push(text("hi"), text("hi"))
                for chat in (one, two):  # the group's target is saved, and each process knows the bot
                    await chat.ask("marsho hi", group_id=group, user_id=ALICE)
                sql = SqlStore(url)
                try:
                    # written from outside, as a third process would: both loops find them on their
                    # own and wake for the same due times
                    store, chat_key = ReminderStore(sql), f"OneBot V11:group:{group}"
                    due = time.time() + 40
                    for n in range(count):
                        await store.add(Reminder(
                            id=0, chat_key=chat_key, platform="OneBot V11", kind="group", chat_id=str(group),
                            user_id=str(ALICE), asker=f"OneBot V11:{ALICE}", what="text", body=f"twin {n}",
                            due_at=due + n % 3, session_key=chat_key, zone="UTC"))
                finally:
                    await sql.close()
                said: list[str] = []

                async def collect(chat: OneBotSim) -> None:
                    while True:
                        action = await chat.wait_send(timeout=DEADLINE + 40, where=in_group(group))
                        said.append(action.text.strip())

                tasks = [asyncio.ensure_future(collect(chat)) for chat in (one, two)]
                try:
                    deadline = asyncio.get_running_loop().time() + DEADLINE + 40
                    while len(said) < count and asyncio.get_running_loop().time() < deadline:
                        await asyncio.sleep(0.2)
                    await asyncio.sleep(3)  # any second copy would come by now
                finally:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
        assert sorted(said) == sorted(f"⏰ twin {n}" for n in range(count))
    finally:
        server.stop()
