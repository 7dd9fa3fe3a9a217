"""Quotas that hold within a turn, and fair billing in a group (issue 25, part 3): every request of
a turn is checked against the quotas of whom it is billed to, requests in flight hold an estimate,
a quota used up between tool rounds ends the turn with each call answered; in a group what others
wrote is billed to the group, an unsolicited reply and the judge wholly so."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.agent.engine import QUOTA_STOP
from nonebot_plugin_marsho.agent.judge import judge
from nonebot_plugin_marsho.agent.metering import (
    Asker,
    Limits,
    Meter,
    Metered,
    QuotaReached,
    billed_to_conversation,
    billed_to_group,
    charged_to,
    held_to_quota,
    split_with_group,
)
from nonebot_plugin_marsho.agent.model.base import Completion, ModelRequest
from nonebot_plugin_marsho.agent.summary import Summarizer
from nonebot_plugin_marsho.chat.bill import usage_report
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.session import Turn
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.store.usage import ALL, SHARE_ENDPOINT
from tests import test_usage
from tests.conftest import SUPERUSER_ID, configured, llm_client
from tests.fake_openai import FakeOpenAI, text, tool_calls, with_usage
from tests.onebot import group_message, private_message
from tests.test_engine import KEY, make_engine, roles, stored_turns
from tests.test_usage import ALICE, BOB, meter_on, said, spent, stored_rows

bill = test_usage.bill  # a fixture: the running bot's bill on a database of the test's own
T = Texts("en")
QUESTION = [{"role": "user", "content": "how much is 2+2? Think it over, step by step, and say why."}]
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlStore]:
    sql = SqlStore(f"sqlite:///{tmp_path / 'bill.db'}")
    yield sql
    await sql.close()


def alice() -> Asker:
    return Asker("session", ALICE.person, ALICE.chat or "")


class Waiting:
    """A model whose answers wait until the test lets them go; it counts the requests it got."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.go = asyncio.Event()
        self.requests = 0

    async def request(self, request: ModelRequest) -> Completion:
        self.requests += 1
        self.arrived.set()
        await self.go.wait()
        from nonebot_plugin_marsho.agent.metering import TokenUsage

        return Completion("4", usage=TokenUsage(10, 2))

    def status(self) -> list[Any]:
        return []

    async def close(self) -> None:
        pass


def counted(answer: Any) -> Any:
    """A responder whose answers report the request's prompt tokens as we count them (a real
    provider's count is close), noted in the request as `_counted`."""
    from nonebot_plugin_marsho.agent.tokens import TokenCounter

    counter = TokenCounter()

    def respond(body: dict[str, Any]) -> Any:
        body["_counted"] = sum(counter.count_message(m) for m in body["messages"]) + counter.count_tools(
            body.get("tools") or [])
        return with_usage(answer, {"prompt_tokens": body["_counted"], "completion_tokens": 2})
    return respond


# the guard ---------------------------------------------------------------------------------------


async def test_a_request_over_the_quota_is_refused_before_it_is_sent(store: SqlStore) -> None:
    meter = meter_on(store, user=100)
    await meter.store.write([spent(150)])
    inner = Waiting()
    inner.go.set()
    metered = Metered(inner, "host", meter)  # type: ignore[arg-type]
    with charged_to(alice()), held_to_quota(), pytest.raises(QuotaReached) as refused:
        await metered.request(ModelRequest(QUESTION))
    assert inner.requests == 0
    assert (refused.value.over.scope, refused.value.over.used, refused.value.over.limit) == ("user", 150, 100)
    assert str(refused.value).startswith("You have used your tokens for today (150 of 100)")


async def test_outside_held_to_quota_a_request_is_not_checked(store: SqlStore) -> None:
    meter = meter_on(store, user=100)
    await meter.store.write([spent(150)])
    inner = Waiting()
    inner.go.set()
    with charged_to(alice()):  # a superuser's turn, or one the cheaper model answers
        await Metered(inner, "host", meter).request(ModelRequest(QUESTION))  # type: ignore[arg-type]
    assert inner.requests == 1


async def test_a_request_in_flight_holds_its_estimate_against_the_quota(store: SqlStore) -> None:
    meter = meter_on(store, user=20)
    inner = Waiting()
    metered = Metered(inner, "host", meter)  # type: ignore[arg-type]
    with charged_to(alice()), held_to_quota():
        first = asyncio.ensure_future(metered.request(ModelRequest(QUESTION)))
        await inner.arrived.wait()
        # nothing used yet, but the first request holds more than the 20 tokens left
        assert (await meter.over_quota(ALICE.person, ALICE.chat or "")) is not None
        with pytest.raises(QuotaReached):
            await metered.request(ModelRequest(QUESTION))
        inner.go.set()
        await first
    assert inner.requests == 1
    # its usage is known now (12 tokens): what it held counts no more, what it used does
    over = await meter.over_quota(ALICE.person, ALICE.chat or "")
    assert over is None
    with charged_to(alice()), held_to_quota():
        await metered.request(ModelRequest(QUESTION))
        with pytest.raises(QuotaReached) as refused:
            await metered.request(ModelRequest(QUESTION))
    assert refused.value.over.used == 24 and inner.requests == 2


def test_a_picture_holds_what_a_picture_costs_not_the_size_of_its_base64() -> None:
    from nonebot_plugin_marsho.agent.metering import IMAGE_TOKENS, prompt_estimate

    picture = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 4_000_000}}
    asked = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, picture]}]
    assert IMAGE_TOKENS < prompt_estimate(ModelRequest(asked)) < IMAGE_TOKENS + 50
    assert 0 < prompt_estimate(ModelRequest(QUESTION)) < 50


async def test_a_failed_request_holds_nothing_afterwards(store: SqlStore) -> None:
    meter = meter_on(store, user=20)

    class Failing(Waiting):
        async def request(self, request: ModelRequest) -> Completion:
            raise RuntimeError("down")

    with charged_to(alice()), held_to_quota(), pytest.raises(RuntimeError):
        await Metered(Failing(), "host", meter).request(ModelRequest(QUESTION))  # type: ignore[arg-type]
    assert await meter.over_quota(ALICE.person, ALICE.chat or "") is None


async def test_without_any_quota_nothing_is_read_or_held(store: SqlStore) -> None:
    meter = meter_on(store)
    reads: list[Any] = []
    real = meter.store.quota_view

    async def counted(*args: Any) -> Any:
        reads.append(args)
        return await real(*args)

    meter.store.quota_view = counted  # type: ignore[method-assign]
    inner = Waiting()
    inner.go.set()
    with charged_to(alice()), held_to_quota():
        for _ in range(3):
            await Metered(inner, "host", meter).request(ModelRequest(QUESTION))  # type: ignore[arg-type]
    assert reads == [] and inner.requests == 3


async def test_a_quota_used_up_between_tool_rounds_ends_the_turn_with_every_call_answered(
    fake: FakeOpenAI, store: SqlStore,
) -> None:
    engine = make_engine(fake)
    meter = meter_on(store, user=250)
    engine.llm.meter = meter
    call = with_usage(tool_calls(("wx__get_weather", {"location": "Paris"}), content="Looking it up."), USAGE)
    fake.push(call, call, call, call, with_usage(text("Sunny."), USAGE))
    with charged_to(alice()), held_to_quota():
        reply = await engine.chat(KEY, "weather in Paris?")
    # 120 tokens a request: the third is asked at 240 of 250, the fourth refused at 360
    assert len(fake.requests) == 3
    assert reply.over_quota is not None and reply.over_quota.used == 360
    assert reply.rounds == 3 and len(reply.calls) == 3
    assert reply.text == "Looking it up.\n\nLooking it up.\n\nLooking it up."
    [turn] = await stored_turns(engine)
    assert roles(turn) == ["user", *["assistant", "tool"] * 3, "assistant"]
    calls = [c["id"] for m in turn if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert sorted(calls) == sorted(m["tool_call_id"] for m in turn if m["role"] == "tool")
    # the history is a valid request: a provider that checks it takes the next question
    fake.reset()
    fake.strict = True
    fake.push(with_usage(text("Still sunny."), USAGE))
    with charged_to(alice()), held_to_quota(Limits(user=10**6)):
        assert (await engine.chat(KEY, "and tomorrow?")).text == "Still sunny."
    assert roles(fake.requests[-1]["messages"])[:-1] == ["user", *["assistant", "tool"] * 3, "assistant"]
    await meter.close()


async def test_a_turn_refused_at_its_first_request_stores_nothing(fake: FakeOpenAI, store: SqlStore) -> None:
    engine = make_engine(fake)
    meter = meter_on(store, user=100)
    await meter.store.write([spent(150)])
    engine.llm.meter = meter
    with charged_to(alice()), held_to_quota(), pytest.raises(QuotaReached):
        await engine.chat(KEY, "weather in Paris?")
    assert fake.requests == [] and await stored_turns(engine) == []


async def test_a_turn_stopped_before_it_said_anything_keeps_a_marker_as_its_answer(
    fake: FakeOpenAI, store: SqlStore,
) -> None:
    engine = make_engine(fake)
    meter = meter_on(store, user=100)
    engine.llm.meter = meter
    fake.push(with_usage(tool_calls(("wx__get_weather", {"location": "Oslo"})), USAGE))
    with charged_to(alice()), held_to_quota():
        reply = await engine.chat(KEY, "weather in Oslo?")
    assert reply.text == "" and reply.over_quota is not None and len(fake.requests) == 1
    [turn] = await stored_turns(engine)
    assert turn[-1] == {"role": "assistant", "content": QUOTA_STOP}


# who pays in a group -----------------------------------------------------------------------------


async def test_in_a_shared_conversation_the_earlier_turns_are_the_groups(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    llm = llm_client(fake)
    llm.meter = meter
    fake.push(with_usage(text("4"), {**USAGE, "prompt_tokens_details": {"cached_tokens": 50}}))
    with charged_to(alice()), split_with_group(True, recent=10) as share:
        share.history = 60  # the engine sets it before each request
        await llm.complete(QUESTION)
    await meter.settled()
    own, group = await stored_rows(store)
    assert (own.user_key, own.prompt_tokens, own.completion_tokens, own.cached_tokens, own.questions) == (
        ALICE.person, 30, 20, 15, 1)
    assert (group.user_key, group.group_key, group.endpoint) == ("", ALICE.chat, SHARE_ENDPOINT)
    assert (group.prompt_tokens, group.completion_tokens, group.cached_tokens, group.questions) == (70, 0, 35, 0)
    used, _ = await meter.store.quota_view("2026-12-01", [("user", ALICE.person), ("group", ALICE.chat or ""),
                                                          ("all", ALL)])
    assert used == {("user", ALICE.person): 50, ("group", ALICE.chat): 120, ("all", ALL): 120}
    days = await meter.store.daily("2026-12-01", group_key=ALICE.chat)
    assert [(day.user_key, day.requests, day.tokens) for day in days] == [("", 0, 70), (ALICE.person, 1, 50)]


async def test_a_conversation_of_ones_own_is_the_askers_but_the_recent_chat_of_others(
    fake: FakeOpenAI, store: SqlStore,
) -> None:
    meter = meter_on(store)
    llm = llm_client(fake)
    llm.meter = meter
    fake.push(with_usage(text("4"), USAGE))
    with charged_to(alice()), split_with_group(False, recent=10) as share:
        share.history = 60  # her own conversation (MARSHO_SESSION_SCOPE member): hers
        await llm.complete(QUESTION)
    await meter.settled()
    own, group = await stored_rows(store)
    assert (own.prompt_tokens, group.prompt_tokens, group.user_key) == (90, 10, "")


async def test_the_groups_part_is_never_more_than_the_prompt(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    llm = llm_client(fake)
    llm.meter = meter
    fake.push(with_usage(text("4"), USAGE))
    with charged_to(alice()), split_with_group(True) as share:
        share.history = 5000  # our count may be above the endpoint's
        await llm.complete(QUESTION)
    await meter.settled()
    own, group = await stored_rows(store)
    assert (own.prompt_tokens, own.completion_tokens, group.prompt_tokens) == (0, 20, 100)


async def test_an_unsolicited_turn_is_wholly_the_groups_and_counts_as_its_question(
    fake: FakeOpenAI, store: SqlStore,
) -> None:
    meter = meter_on(store)
    llm = llm_client(fake)
    llm.meter = meter
    fake.push(with_usage(text("Sunny!"), USAGE), with_usage(text("Still sunny."), USAGE))
    with charged_to(alice()), split_with_group(True) as share, billed_to_group(turn=True):
        share.history = 60
        await llm.complete(QUESTION)
        await llm.complete(QUESTION)
    await meter.settled()
    rows = await stored_rows(store)
    assert [(r.user_key, r.prompt_tokens, r.questions) for r in rows] == [("", 100, 1), ("", 100, 0)]
    used, _ = await meter.store.quota_view("2026-12-01", [("user", ALICE.person), ("group", ALICE.chat or "")])
    assert used == {("group", ALICE.chat): 240}


async def test_a_summary_is_the_groups_only_in_a_shared_conversation(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    llm = llm_client(fake)
    llm.meter = meter
    fake.push(with_usage(text("a summary"), USAGE), with_usage(text("a summary"), USAGE))
    for shared in (True, False):
        with charged_to(alice()), split_with_group(shared), billed_to_conversation():
            await llm.complete(QUESTION)
    await meter.settled()
    assert [(r.user_key, r.questions) for r in await stored_rows(store)] == [("", 0), (ALICE.person, 1)]


async def test_the_summarizer_bills_a_shared_conversations_summary_to_the_group(
    fake: FakeOpenAI, store: SqlStore,
) -> None:
    meter = meter_on(store)
    llm = llm_client(fake)
    llm.meter = meter
    from nonebot_plugin_marsho.agent.tokens import TokenCounter

    summarizer = Summarizer(llm, max_tokens=200, counter=TokenCounter)
    fake.push(with_usage(text("Alice likes tea."), USAGE))
    turn = Turn([{"role": "user", "content": "Alice: I like tea"}, {"role": "assistant", "content": "Noted."}],
                [5, 2], "t1")
    with charged_to(alice()), split_with_group(True):
        assert await summarizer.fold("", [turn]) == "Alice likes tea."
    await meter.settled()
    [row] = await stored_rows(store)
    assert (row.user_key, row.group_key, row.questions) == ("", ALICE.chat, 0)


async def test_a_summary_over_the_quota_refuses_the_question_and_is_no_failure(
    fake: FakeOpenAI, store: SqlStore,
) -> None:
    meter = meter_on(store, group=100)
    await meter.store.write([spent(150)])
    llm = llm_client(fake)
    llm.meter = meter
    from nonebot_plugin_marsho.agent.tokens import TokenCounter

    summarizer = Summarizer(llm, max_tokens=200, counter=TokenCounter)
    turn = Turn([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], [1, 1], "t1")
    with charged_to(Asker("s", BOB.person, BOB.chat or "")), split_with_group(True), held_to_quota():
        with pytest.raises(QuotaReached):
            await summarizer.fold("", [turn])
    assert fake.requests == [] and summarizer.failed == 0


async def test_the_judge_is_the_groups_and_held_to_its_quota(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store, group=100)
    llm = llm_client(fake, model="judge-model")
    llm.meter = meter
    fake.push(with_usage(text("yes"), USAGE))
    with charged_to(Asker("", ALICE.person, ALICE.chat or "", question=False)):
        assert await judge(llm, "marsho", "marsho, will it rain?") is True
        await meter.settled()
        [row] = await stored_rows(store)
        assert (row.user_key, row.group_key, row.model) == ("", ALICE.chat, "judge-model")
        # 120 of the group's 100 used: the judge is not asked again, and says no
        assert await judge(llm, "marsho", "marsho, and tomorrow?") is False
    assert len(fake.requests) == 1


async def test_rolled_up_days_keep_the_requests_and_the_groups_part_apart(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    llm = llm_client(fake)
    llm.meter = meter
    fake.push(with_usage(text("4"), USAGE))
    with charged_to(alice()), split_with_group(True) as share:
        share.history = 70
        await llm.complete(QUESTION)
    await meter.settled()
    assert await meter.store.roll_up("2026-12-02") == 2  # both rows of the one request
    days = await meter.store.daily("2026-11-01", group_key=ALICE.chat)
    assert [(day.user_key, day.requests, day.tokens) for day in days] == [("", 0, 70), (ALICE.person, 1, 50)]


async def test_the_usage_report_names_the_groups_part_among_its_users(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    llm = llm_client(fake)
    llm.meter = meter
    fake.push(with_usage(text("4"), USAGE))
    with charged_to(alice()), split_with_group(True) as share:
        share.history = 70
        await llm.complete(QUESTION)
    await meter.settled()
    report, _ = await usage_report(meter, T, Config(), ALICE, "admin", "")
    lines = report.splitlines()
    assert lines[1].startswith("Today: 1 questions, 50 tokens") and lines[1].endswith(", 1 requests")
    assert lines[5].startswith("Today: 1 questions, 120 tokens") and lines[5].endswith(", 1 requests")
    assert "  (the group: its earlier conversation, unsolicited replies): 0 questions, 70 tokens" in report


# in chat -----------------------------------------------------------------------------------------


async def test_in_chat_a_turn_the_quota_ends_answers_with_the_quota_message(
    app: Any, fake: FakeOpenAI, bill: Meter, plugin_engine: Any,
) -> None:
    call = with_usage(tool_calls(("wx__get_weather", {"location": "Paris"})), USAGE)
    fake.push(call, call, call, call, with_usage(text("Sunny."), USAGE))
    with configured(marsho_user_daily_tokens=250):
        await said(app, private_message("marsho weather in Paris?"),
                   "You have used your tokens for today (360 of 250); it resets at 2026-12-02 00:00 CST.")
    assert len(fake.requests) == 3


async def test_in_chat_what_was_said_before_the_quota_ended_the_turn_is_sent_with_why(
    app: Any, fake: FakeOpenAI, bill: Meter, plugin_engine: Any,
) -> None:
    fake.push(with_usage(tool_calls(("wx__get_weather", {"location": "Paris"}), content="Let me look."), USAGE))
    with configured(marsho_user_daily_tokens=100):
        await said(app, private_message("marsho weather in Paris?"), (
            "Let me look.\n\nYou have used your tokens for today (120 of 100); it resets at 2026-12-02 00:00 CST."))
    assert len(fake.requests) == 1


async def test_in_chat_superusers_turns_are_not_held_to_a_quota(
    app: Any, fake: FakeOpenAI, bill: Meter, plugin_engine: Any,
) -> None:
    call = with_usage(tool_calls(("wx__get_weather", {"location": "Paris"})), USAGE)
    fake.push(call, call, with_usage(text("Sunny."), USAGE))
    with configured(marsho_user_daily_tokens=100):
        await said(app, private_message("marsho weather in Paris?", user_id=int(SUPERUSER_ID)), "Sunny.")
    assert len(fake.requests) == 3


async def test_in_a_shared_group_conversation_a_members_question_does_not_pay_for_anothers_turns(
    app: Any, fake: FakeOpenAI, bill: Meter, plugin_engine: Any,
) -> None:
    long = "tell me everything about the history of tea in China, " * 40
    for _ in range(3):
        fake.push(text("Tea is old."))
        await said(app, group_message(f"marsho {long}", user_id=10001), "Tea is old.")
    fake.responder = counted(text("Hi!"))
    await said(app, group_message("marsho hi", user_id=10002), "Hi!")
    await bill.settled()
    rows = await stored_rows(bill.store.store)
    [bob] = [row for row in rows if row.user_key == BOB.person]
    [shared] = [row for row in rows if row.user_key == "" and row.created_at == bob.created_at]
    # the three long turns of Alice's (about 500 tokens each) are the group's; Bob pays for the
    # rest: the system prompt, the tools, his word
    from nonebot_plugin_marsho.agent.tokens import TokenCounter

    request = fake.requests[-1]
    earlier = sum(TokenCounter().count_message(m) for m in request["messages"][1:-1])
    assert [m["role"] for m in request["messages"][1:-1]] == ["user", "assistant"] * 3
    assert earlier > 1400 and abs(shared.prompt_tokens - earlier) < earlier * 0.05
    assert bob.prompt_tokens + shared.prompt_tokens == request["_counted"]
