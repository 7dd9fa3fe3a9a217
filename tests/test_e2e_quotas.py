"""End to end, issue 25 part 3: a real `bot.py`, the OneBot v11 simulator, the fake endpoint.
A member with a 20-token quota and six questions at once, each answer asking for four tool
rounds, causes at most 3 requests and gets the quota's message; another member's quota is not
spent by the first member's long messages; an unsolicited reply is billed to the group, not to
the member it answers."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.tokens import TokenCounter
from tests.fake_openai import Answer, FakeOpenAI, text, tool_calls, with_usage
from tests.onebot_sim import SEND_ACTIONS, BotProcess, OneBotSim, output_if_failed, wait_for_quiet

pytestmark = pytest.mark.e2e

SELF_ID = 2233445588
OWNER, ADMIN = 10899, 10898
MEMBER, ALICE, BOB, CAROL, DAVE = 10801, 10802, 10803, 10804, 10805
USED_UP = "You have used your tokens for today"
_groups = itertools.count(86001)
_calls = itertools.count(1)
COUNTER = TokenCounter()


@pytest.fixture(scope="module")
def bot(endpoint: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest) -> Iterator[BotProcess]:
    process = BotProcess(base_url=endpoint.base_url, env={
        "LOCALSTORE_DATA_DIR": str(tmp_path_factory.mktemp("marsho-quotas") / "data"), "MARSHO_TIMEOUT": "15",
        "SUPERUSERS": json.dumps([str(OWNER)]), "MARSHO_ACTIVE_COOLDOWN": "0",
        # six questions at once, each its own (no debounce joining them, a queue that takes them all)
        "MARSHO_DEBOUNCE_SECONDS": "0", "MARSHO_USER_QUEUE": "6",
    })
    with process, output_if_failed(process, request):
        yield process


@pytest.fixture(scope="module")
async def sim(bot: BotProcess) -> AsyncIterator[OneBotSim]:
    async with bot.simulator(self_id=SELF_ID) as simulator:
        yield simulator


@pytest.fixture(autouse=True)
def _clean(endpoint: FakeOpenAI, sim: OneBotSim) -> Iterator[None]:
    endpoint.reset()
    sim.clear()
    yield
    endpoint.reset()


async def owner_says(sim: OneBotSim, command: str) -> str:
    _, reply = await sim.ask(command, user_id=OWNER, private=True)
    return reply.text


def counted(answer: Callable[[dict[str, Any]], Answer], completion: int = 2) -> Callable[[dict[str, Any]], Answer]:
    """A responder that reports the request's prompt tokens as we count them (a real provider's
    count is close), noted in the request as `_counted`."""
    def respond(body: dict[str, Any]) -> Answer:
        body["_counted"] = sum(COUNTER.count_message(m) for m in body["messages"]) + COUNTER.count_tools(
            body.get("tools") or [])
        return with_usage(answer(body), {"prompt_tokens": body["_counted"], "completion_tokens": completion})
    return respond


def rounds_of_this_turn(body: dict[str, Any]) -> int:
    """Tool results in the request after its last question: the rounds its turn has had."""
    messages = body["messages"]
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return sum(1 for m in messages[last:] if m["role"] == "tool")


def used_today(shown: str, user: int) -> int:
    """What `marsho.quota` says `user` used today."""
    found = re.search(rf"User {user}: [\d,]+ \(used today: ([\d,]+)\)", shown)
    assert found is not None, shown
    return int(found.group(1).replace(",", ""))


async def quiet(endpoint: FakeOpenAI, sim: OneBotSim, until: Callable[[], bool] = lambda: True) -> None:
    """Until `until()` holds and no request or frame came for a while."""
    assert await wait_for_quiet(lambda: (len(endpoint.requests), len(sim.actions)), until=until, quiet=2.0)


async def test_six_questions_at_once_on_a_20_token_quota_cause_at_most_3_requests(
    endpoint: FakeOpenAI, sim: OneBotSim,
) -> None:
    group = next(_groups)
    assert await owner_says(sim, f"marsho.quota user {MEMBER} 20") == f"User {MEMBER}'s daily token quota is now 20."

    def four_rounds(body: dict[str, Any]) -> Answer:
        if rounds_of_this_turn(body) < 4:
            return tool_calls(("calculator__calculate", {"expression": "6*7"}, f"q{next(_calls)}"))
        return text("42")

    # 7 tokens of answer each: whatever the split with the group, the member pays 7 a request
    endpoint.responder = lambda body: with_usage(four_rounds(body), {"prompt_tokens": 1, "completion_tokens": 7})
    sent = len(sim.actions)
    events = await asyncio.gather(*(sim.group_message(f"marsho what is 6*7, take {n}?", group_id=group,
                                                      user_id=MEMBER, card="Mallory") for n in range(6)))

    def replies() -> list[str]:
        return [action.text for action in sim.actions[sent:] if action.action in SEND_ACTIONS]

    # the quota's message arrives; then nothing more comes, and nothing more is asked
    await quiet(endpoint, sim, until=lambda: any(USED_UP in reply for reply in replies()))
    assert len(endpoint.requests) <= 3
    assert not any(reply == "42" for reply in replies())  # no question got all its rounds
    assert len(events) == 6


async def test_another_members_quota_is_not_spent_by_the_first_members_long_messages(
    endpoint: FakeOpenAI, sim: OneBotSim,
) -> None:
    endpoint.responder = counted(lambda body: text("Noted."))
    # what a one-word question costs without any history before it
    await sim.ask("marsho hi", group_id=next(_groups), user_id=CAROL, card="Carol")
    alone = endpoint.requests[-1]["_counted"] + 2
    group = next(_groups)
    long = "Here is the long story of my morning, every detail of it, in order. " * 30
    for n in range(8):
        _, reply = await sim.ask(f"marsho {n}: {long}", group_id=group, user_id=ALICE, card="Alice")
        assert reply.text == "Noted."
    quota = alone * 3 // 2  # room for Bob's question and a second one, not for Alice's turns
    assert await owner_says(sim, f"marsho.quota user {BOB} {quota}") == (
        f"User {BOB}'s daily token quota is now {quota:,}.")
    endpoint.responder = counted(lambda body: text("Hello Bob!"))
    for _ in range(2):
        _, reply = await sim.ask("marsho hi", group_id=group, user_id=BOB, card="Bob")
        assert reply.text == "Hello Bob!"
        # it carried Alice's long turns: billed to him, they would have used his quota up at once
        assert endpoint.requests[-1]["_counted"] - alone > quota - alone
    # his own words (and the summary's label), none of Alice's turns
    assert used_today(await owner_says(sim, "marsho.quota"), BOB) <= 2 * (alone + 50)


async def test_an_unsolicited_reply_is_billed_to_the_group_not_to_the_member(
    endpoint: FakeOpenAI, sim: OneBotSim,
) -> None:
    group = next(_groups)
    _, reply = await sim.ask("marsho.active 1", group_id=group, user_id=ADMIN, role="admin")
    assert reply.text.startswith("Done: I answer a message here"), reply.text
    assert await owner_says(sim, f"marsho.quota user {DAVE} 30") == f"User {DAVE}'s daily token quota is now 30."
    endpoint.responder = lambda body: with_usage(text("Bring an umbrella!"),
                                                  {"prompt_tokens": 40, "completion_tokens": 10})
    await sim.group_message("will it rain today?", group_id=group, user_id=DAVE, card="Dave")
    unasked = await sim.wait_send(where=lambda action: action.reply_id is None)
    assert unasked.text == "Bring an umbrella!"
    await quiet(endpoint, sim)
    endpoint.responder = lambda body: with_usage(text("Hi Dave!"), {"prompt_tokens": 4, "completion_tokens": 2})
    _, reply = await sim.ask("marsho hi", group_id=group, user_id=DAVE, card="Dave")
    assert reply.text == "Hi Dave!"  # the 50 tokens of the reply he did not ask for are not his
    assert used_today(await owner_says(sim, "marsho.quota"), DAVE) <= 6  # his question's alone


async def test_a_member_over_their_own_quota_still_gets_the_groups_unsolicited_replies(
    endpoint: FakeOpenAI, sim: OneBotSim,
) -> None:
    frank, group = 10807, next(_groups)
    _, reply = await sim.ask("marsho.active 1", group_id=group, user_id=ADMIN, role="admin")
    assert reply.text.startswith("Done: I answer a message here"), reply.text
    assert await owner_says(sim, f"marsho.quota user {frank} 1") == f"User {frank}'s daily token quota is now 1."
    endpoint.responder = lambda body: with_usage(text("Hello Frank."), {"prompt_tokens": 4, "completion_tokens": 2})
    _, reply = await sim.ask("marsho hi", group_id=group, user_id=frank, card="Frank")
    assert reply.text == "Hello Frank."  # his quota is used up by this answer
    await quiet(endpoint, sim)
    endpoint.responder = lambda body: with_usage(text("Bring an umbrella!"),
                                                  {"prompt_tokens": 40, "completion_tokens": 10})
    await sim.group_message("will it rain today?", group_id=group, user_id=frank, card="Frank")
    # the unsolicited reply is the group's bill: his own used-up quota does not stop it
    unasked = await sim.wait_send(where=lambda action: action.reply_id is None)
    assert unasked.text == "Bring an umbrella!"


async def test_a_scheduled_question_stops_when_its_askers_quota_runs_out_within_the_turn(
    endpoint: FakeOpenAI, sim: OneBotSim,
) -> None:
    erin, group = 10806, next(_groups)
    assert await owner_says(sim, f"marsho.quota user {erin} 20") == f"User {erin}'s daily token quota is now 20."
    endpoint.push(with_usage(tool_calls(("reminders__add", {"when": "PT3S", "prompt": "what is 6*7?"}, "r1")),
                             {"prompt_tokens": 1, "completion_tokens": 1}),
                  with_usage(text("I will ask then."), {"prompt_tokens": 1, "completion_tokens": 1}))
    _, reply = await sim.ask("marsho in 3 seconds ask what 6*7 is", group_id=group, user_id=erin, card="Erin")
    assert reply.text == "I will ask then."
    asked = len(endpoint.requests)

    def four_rounds(body: dict[str, Any]) -> Answer:
        if rounds_of_this_turn(body) < 4:
            return tool_calls(("calculator__calculate", {"expression": "6*7"}, f"s{next(_calls)}"))
        return text("42")

    endpoint.responder = lambda body: with_usage(four_rounds(body), {"prompt_tokens": 1, "completion_tokens": 7})
    sent = len(sim.actions)

    def replies() -> list[str]:
        return [action.text for action in sim.actions[sent:] if action.action in SEND_ACTIONS]

    # the reminder's turn runs on the asker's quota request by request, as a question's does
    await quiet(endpoint, sim, until=lambda: any(USED_UP in reply for reply in replies()))
    assert len(endpoint.requests) - asked <= 3
    assert not any(reply == "42" for reply in replies())
