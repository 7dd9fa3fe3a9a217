"""The owner's bill (issue 16, parts 2-4): every request's usage stored (OpenAI's and DeepSeek's
shapes, our estimate where the endpoint gives none), `marsho.usage` reports and its chart, daily
token quotas per user, group and everyone (overrides, midnight, a restart, two stores on
PostgreSQL), the refusal and the cheaper model, and who may use the commands."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from nonebug import App
from sqlalchemy import select

from nonebot_plugin_marsho.agent import metering
from nonebot_plugin_marsho.agent.llm import Fallback
from nonebot_plugin_marsho.agent.metering import Asker, Limits, Meter, charged_to, model_for_turn, usage_of
from nonebot_plugin_marsho.chat import bill as bill_module
from nonebot_plugin_marsho.chat.bill import quota_command, usage_report
from nonebot_plugin_marsho.chat.where import Where
from nonebot_plugin_marsho.config import Config
from nonebot_plugin_marsho.exceptions import EndpointError, StoreError
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.sql import SqlStore, usage_table
from nonebot_plugin_marsho.store.usage import UsageRow, UsageStore
from tests.conftest import SUPERUSER_ID, configured, llm_client
from tests.fake_openai import FakeOpenAI, error, text, tool_calls, with_usage
from tests.onebot import group_message, onebot_bot, private_message, reply_call

ZONE = ZoneInfo("Asia/Shanghai")
T = Texts("en")
OPENAI_USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
                "prompt_tokens_details": {"cached_tokens": 100},
                "completion_tokens_details": {"reasoning_tokens": 12}}
DEEPSEEK_USAGE = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                  "prompt_cache_hit_tokens": 80, "prompt_cache_miss_tokens": 20}
ALICE = Where(platform="OneBot V11", kind="group", chat_id="20001", user_id="10001")
BOB = Where(platform="OneBot V11", kind="group", chat_id="20001", user_id="10002")


class FakeClock:
    """Now in Asia/Shanghai, moved by the test."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at


def noon() -> FakeClock:
    return FakeClock(datetime(2026, 12, 1, 12, 0, tzinfo=ZONE))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlStore]:
    sql = SqlStore(f"sqlite:///{tmp_path / 'bill.db'}")
    yield sql
    await sql.close()


def meter_on(store: SqlStore, clock: FakeClock | None = None, **limits: int) -> Meter:
    return Meter(UsageStore(store), now=clock or noon(), limits=Limits(**limits), flush_delay=0.01)


async def stored_rows(store: SqlStore) -> list[Any]:
    async with store.engine.connect() as conn:
        return list((await conn.execute(select(usage_table).order_by(usage_table.c.id))).all())


async def ask(fake: FakeOpenAI, meter: Meter, who: Where, *answers: Any) -> None:
    """One question of `who` through a real LLMClient: one request per answer."""
    fake.push(*answers)
    llm = llm_client(fake)
    llm.meter = meter
    with charged_to(Asker(f"session-{who.user_id}", who.person, who.chat or "")):
        for _ in answers:
            await llm.complete([{"role": "user", "content": "how much is 2+2?"}])
    await meter.settled()


def spent(tokens: int, who: Where = ALICE, day: str = "2026-12-01") -> UsageRow:
    return UsageRow(created_at=0.0, day=day, session_key="s", user_key=who.person, group_key=who.chat or "",
                    model="fake-model", endpoint="127.0.0.1", prompt_tokens=tokens, completion_tokens=0,
                    questions=1)


# usage, recorded --------------------------------------------------------------------------------


async def test_openai_usage_is_stored_with_cached_and_reasoning_tokens(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    await ask(fake, meter, ALICE, with_usage(text("4"), OPENAI_USAGE))
    [row] = await stored_rows(store)
    assert (row.prompt_tokens, row.completion_tokens, row.cached_tokens, row.reasoning_tokens) == (120, 30, 100, 12)
    assert (row.user_key, row.group_key, row.session_key) == ("OneBot V11:10001", "OneBot V11:20001", "session-10001")
    assert (row.model, row.endpoint, row.estimated, row.questions) == ("fake-model", f"127.0.0.1:{fake.port}", 0, 1)
    assert row.day == "2026-12-01"


async def test_deepseek_cache_hits_are_the_cached_tokens(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    await ask(fake, meter, ALICE, with_usage(text("4"), DEEPSEEK_USAGE))
    [row] = await stored_rows(store)
    assert (row.prompt_tokens, row.completion_tokens, row.cached_tokens, row.estimated) == (100, 10, 80, 0)


async def test_an_endpoint_without_usage_gets_our_estimate_marked_as_such(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    await ask(fake, meter, ALICE, with_usage(text("four, of course"), None))
    [row] = await stored_rows(store)
    assert row.estimated == 1
    assert row.prompt_tokens > 4 and row.completion_tokens >= 5  # the question and "four, of course"


async def test_each_request_of_a_question_is_a_row_and_the_question_counts_once(
    fake: FakeOpenAI, store: SqlStore,
) -> None:
    meter = meter_on(store)
    await ask(fake, meter, ALICE, with_usage(tool_calls(("calculator__add", {"a": 2, "b": 2})), OPENAI_USAGE),
              with_usage(text("4"), DEEPSEEK_USAGE))
    rows = await stored_rows(store)
    assert [row.prompt_tokens for row in rows] == [120, 100]
    assert sum(row.questions for row in rows) == 1


def test_usage_that_is_not_numbers_is_not_taken() -> None:
    assert usage_of({"usage": None}) is None
    assert usage_of({"usage": {"prompt_tokens": "many"}}) is None
    odd = usage_of({"usage": {"prompt_tokens": 10, "completion_tokens": 3,
                              "prompt_tokens_details": {"cached_tokens": 99}}})
    assert odd is not None and (odd.prompt, odd.completion, odd.cached) == (10, 3, 10)


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": 0, "completion_tokens": 0},
    {"prompt_tokens": 10, "completion_tokens": -3},
    {"prompt_tokens": -10, "completion_tokens": 3},
    {"prompt_tokens": True, "completion_tokens": 3},
    {"prompt_tokens": 10, "completion_tokens": False},
    {"prompt_tokens": "10", "completion_tokens": "3"},
    {"prompt_tokens": 10},
    {"completion_tokens": 3},
    {"prompt_tokens": 10.0, "completion_tokens": 3},
])
def test_usage_with_impossible_counts_is_not_taken(usage: dict[str, Any]) -> None:
    assert usage_of({"usage": usage}) is None  # our estimate is stored instead, marked


def test_a_completion_of_no_tokens_is_taken() -> None:
    zero = usage_of({"usage": {"prompt_tokens": 10, "completion_tokens": 0}})
    assert zero is not None and (zero.prompt, zero.completion, zero.estimated) == (10, 0, False)


async def test_zero_usage_from_the_endpoint_is_stored_as_our_estimate(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    await ask(fake, meter, ALICE, with_usage(text("four"), {"prompt_tokens": 0, "completion_tokens": 0}))
    [row] = await stored_rows(store)
    assert row.estimated == 1 and row.prompt_tokens > 0


class SlowStore(UsageStore):
    """Its writes wait until the test lets them through."""

    def __init__(self, store: SqlStore) -> None:
        super().__init__(store)
        self.started = asyncio.Event()
        self.go = asyncio.Event()

    async def write(self, rows: Any) -> None:
        self.started.set()
        await self.go.wait()
        await super().write(rows)


async def test_rows_being_written_still_count_for_the_quota(store: SqlStore) -> None:
    slow = SlowStore(store)
    meter = Meter(slow, now=noon(), limits=Limits(user=100), flush_delay=0.01)
    with charged_to(Asker("s", ALICE.person)):
        meter.record("fake-model", "127.0.0.1", usage_of({"usage": OPENAI_USAGE}), request={})
    flushing = asyncio.ensure_future(meter.flush())
    await slow.started.wait()  # taken from the pending rows, not committed yet
    assert not meter._pending
    over = await meter.over_quota(ALICE.person, "")
    assert over is not None and over.used == 150
    slow.go.set()
    await flushing
    over = await meter.over_quota(ALICE.person, "")  # committed now, and counted once
    assert over is not None and over.used == 150


async def test_rows_whose_write_failed_still_count_for_the_quota(store: SqlStore) -> None:
    meter = meter_on(store, user=100)
    meter.store = RefusingStore(store, refuse=lambda row: True)
    with charged_to(Asker("s", ALICE.person)):
        meter.record("fake-model", "127.0.0.1", usage_of({"usage": OPENAI_USAGE}), request={})
    await meter.settled()
    assert len(meter._pending) == 1
    over = await meter.over_quota(ALICE.person, "")
    assert over is not None and over.used == 150


class RefusingStore(UsageStore):
    """Refuses any write that holds a row `refuse` picks, as a database refuses bad data."""

    def __init__(self, store: SqlStore, refuse: Any) -> None:
        super().__init__(store)
        self.refuse = refuse

    async def write(self, rows: Any) -> None:
        if any(self.refuse(row) for row in rows):
            raise StoreError(code="store.save", url="test", detail="value too long")
        await super().write(rows)


async def test_a_row_the_database_refuses_is_dropped_and_the_others_are_written(store: SqlStore) -> None:
    meter = meter_on(store)
    meter.store = RefusingStore(store, refuse=lambda row: row.model == "bad-model")
    with charged_to(Asker("s", ALICE.person)):
        for model in ("fake-model", "bad-model", "fake-model"):
            meter.record(model, "127.0.0.1", usage_of({"usage": OPENAI_USAGE}), request={})
    await meter.settled()
    assert meter._pending == []
    assert [row.model for row in await stored_rows(store)] == ["fake-model", "fake-model"]
    with charged_to(Asker("s", ALICE.person)):  # later writes are not blocked by it
        meter.record("fake-model", "127.0.0.1", usage_of({"usage": OPENAI_USAGE}), request={})
    await meter.settled()
    assert len(await stored_rows(store)) == 3


async def test_when_nothing_is_taken_the_rows_wait_for_the_next_write(store: SqlStore) -> None:
    meter = meter_on(store)
    refusing = RefusingStore(store, refuse=lambda row: True)  # the database is down
    meter.store = refusing
    with charged_to(Asker("s", ALICE.person)):
        for _ in range(5):
            meter.record("fake-model", "127.0.0.1", usage_of({"usage": OPENAI_USAGE}), request={})
    await meter.settled()
    assert len(meter._pending) == 5
    refusing.refuse = lambda row: False  # back up
    await meter.settled()
    assert meter._pending == [] and len(await stored_rows(store)) == 5


async def test_too_long_names_are_cut_to_their_columns(store: SqlStore) -> None:
    meter = meter_on(store)
    with charged_to(Asker("s" * 300, "u" * 300, "g" * 300)):
        meter.record("m" * 200, "e" * 300, usage_of({"usage": OPENAI_USAGE}), request={})
    await meter.settled()
    [row] = await stored_rows(store)
    assert (len(row.model), len(row.endpoint), len(row.session_key), len(row.user_key), len(row.group_key)) == (
        128, 255, 255, 255, 255)


async def test_a_failed_write_is_logged_and_kept_for_the_next_one(tmp_path: Path) -> None:
    broken = SqlStore(f"sqlite:///{tmp_path / 'no-such-folder' / 'bill.db'}")
    meter = meter_on(broken)
    with charged_to(Asker("s", ALICE.person)):
        meter.record("fake-model", "127.0.0.1", usage_of({"usage": OPENAI_USAGE}), request={})
    await meter.settled()  # no exception: the question never fails for the bill
    assert len(meter._pending) == 1
    await broken.close()


async def test_old_rows_are_rolled_up_into_daily_totals_and_still_reported(store: SqlStore) -> None:
    clock = noon()
    meter = meter_on(store, clock)
    meter.retention_days = 3
    await meter.store.write([spent(40, day="2026-11-25"), spent(60, day="2026-11-25"), spent(5)])
    await meter.roll_up()
    assert [row.day for row in await stored_rows(store)] == ["2026-12-01"]
    days = await meter.store.daily("2026-11-01")
    assert [(d.day, d.tokens, d.requests, d.questions) for d in days] == [
        ("2026-11-25", 100, 2, 2), ("2026-12-01", 5, 1, 1)]


# quotas -------------------------------------------------------------------------------------------


async def test_a_user_over_the_quota_is_refused_and_another_is_not(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store, user=200)
    await ask(fake, meter, ALICE, with_usage(text("4"), OPENAI_USAGE))  # 150 tokens
    assert await meter.over_quota(ALICE.person, "") is None  # under the quota: asked, even if big
    await ask(fake, meter, ALICE, with_usage(text("4"), OPENAI_USAGE))  # 300 now
    over = await meter.over_quota(ALICE.person, "")
    assert over is not None and (over.scope, over.used, over.limit) == ("user", 300, 200)
    assert over.resets_at == datetime(2026, 12, 2, 0, 0, tzinfo=ZONE)
    assert await meter.over_quota(BOB.person, "") is None


async def test_a_group_quota_counts_all_its_members(store: SqlStore) -> None:
    meter = meter_on(store, group=100)
    await meter.store.write([spent(60, ALICE), spent(50, BOB)])
    over = await meter.over_quota(BOB.person, BOB.chat or "")
    assert over is not None and (over.scope, over.used) == ("group", 110)
    assert await meter.over_quota(BOB.person, "") is None  # in private, the group's quota is not his


async def test_everyones_quota(store: SqlStore) -> None:
    meter = meter_on(store, all=100)
    await meter.store.write([spent(60, ALICE), spent(50, BOB)])
    over = await meter.over_quota("Telegram:7", "")
    assert over is not None and over.scope == "all"


async def test_tokens_not_written_yet_count_too(store: SqlStore) -> None:
    meter = meter_on(store, user=100)
    meter.flush_delay = 60
    with charged_to(Asker("s", ALICE.person)):
        meter.record("fake-model", "127.0.0.1", usage_of({"usage": OPENAI_USAGE}), request={})
    assert await meter.over_quota(ALICE.person, "") is not None
    await meter.flush()


async def test_the_quota_resets_at_midnight_in_the_time_zone(store: SqlStore) -> None:
    clock = FakeClock(datetime(2026, 12, 1, 23, 59, tzinfo=ZONE))
    meter = meter_on(store, clock, user=100)
    await meter.store.write([spent(150)])
    assert await meter.over_quota(ALICE.person, "") is not None
    clock.at += timedelta(minutes=1)
    assert await meter.over_quota(ALICE.person, "") is None


async def test_a_superusers_quota_for_one_user_or_group_beats_the_default(store: SqlStore) -> None:
    meter = meter_on(store, user=100)
    await meter.store.write([spent(150)])
    await meter.store.set_quota("user", ALICE.person, 0, 0.0)  # none for her
    assert await meter.over_quota(ALICE.person, ALICE.chat or "") is None
    await meter.store.set_quota("group", ALICE.chat or "", 120, 0.0)
    over = await meter.over_quota(ALICE.person, ALICE.chat or "")
    assert over is not None and (over.scope, over.limit) == ("group", 120)
    await meter.store.set_quota("user", ALICE.person, None, 0.0)  # back to the default
    assert (await meter.store.quotas()) == {("group", ALICE.chat): 120}


async def test_without_default_quotas_one_set_here_applies_at_once_and_one_set_elsewhere_soon(
    store: SqlStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    meter, elsewhere = meter_on(store), meter_on(store)
    await meter.store.write([spent(150)])
    assert await meter.over_quota(ALICE.person, "") is None
    await meter.set_quota("user", ALICE.person, 100)
    assert await meter.over_quota(ALICE.person, "") is not None
    await meter.set_quota("user", ALICE.person, None)
    assert await elsewhere.over_quota(ALICE.person, "") is None  # it read: no quota set
    await meter.set_quota("user", ALICE.person, 100)
    monkeypatch.setattr(metering, "QUOTAS_FRESH", 0.0)  # its QUOTAS_FRESH seconds have passed
    assert await elsewhere.over_quota(ALICE.person, "") is not None


async def test_used_quota_survives_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bill.db'}"
    first = SqlStore(url)
    await meter_on(first).store.write([spent(150)])
    await first.close()
    again = SqlStore(url)
    try:
        assert await meter_on(again, user=100).over_quota(ALICE.person, "") is not None
    finally:
        await again.close()


async def test_two_stores_on_postgresql_share_the_quota() -> None:
    from tests.test_postgres import start_postgres

    server = start_postgres()
    try:
        url = server.create_database("marsho_bill")
        one, two = SqlStore(url), SqlStore(url)
        try:
            await meter_on(one).store.write([spent(60)])
            await meter_on(two).store.write([spent(60)])  # another bot process
            over = await meter_on(one, user=100).over_quota(ALICE.person, "")
            assert over is not None and over.used == 120
            await meter_on(two).store.set_quota("user", ALICE.person, 500, 0.0)
            assert await meter_on(one, user=100).over_quota(ALICE.person, "") is None
            await meter_on(two).roll_up()
            assert [d.tokens for d in await UsageStore(one).daily("2026-12-01")] == [120]
        finally:
            await one.close()
            await two.close()
    finally:
        server.stop()


async def test_two_stores_on_postgresql_rolling_up_at_once_count_each_row_once() -> None:
    from tests.test_postgres import start_postgres

    server = start_postgres()
    try:
        url = server.create_database("marsho_bill_roll")
        stores = [SqlStore(url) for _ in range(4)]
        try:
            old = [spent(10 + n, who, day=f"2026-11-{day:02d}")
                   for day in range(1, 11) for n, who in enumerate((ALICE, BOB))]
            await UsageStore(stores[0]).write(old)
            meters = [meter_on(store) for store in stores]  # bot processes starting together
            for meter in meters:
                meter.retention_days = 3
            await asyncio.gather(*(meter.roll_up() for meter in meters))
            days = await UsageStore(stores[0]).daily("2026-11-01")
            assert [(d.day, d.user_key, d.tokens, d.requests) for d in days] == [
                (f"2026-11-{day:02d}", who.person, 10 + n, 1)
                for day in range(1, 11) for n, who in enumerate((ALICE, BOB))]
        finally:
            for store in stores:
                await store.close()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def backup() -> Iterator[FakeOpenAI]:
    """A second endpoint, for MARSHO_FALLBACKS."""
    with FakeOpenAI() as second:
        yield second


async def test_over_the_quota_a_fallback_with_a_model_of_its_own_is_not_asked(
    fake: FakeOpenAI, backup: FakeOpenAI,
) -> None:
    backup.reset()
    full_price = Fallback(base_url=backup.base_url, model="full-price-model")
    cheap = Fallback(base_url=backup.base_url, model="cheap-model")
    llm = llm_client(fake, retries=0, fallbacks=[full_price, cheap])
    fake.push(error(503, "down"))
    backup.push(text("4"))
    with model_for_turn("cheap-model"):
        assert (await llm.complete([{"role": "user", "content": "2+2?"}])).content == "4"
    assert fake.requests[-1]["model"] == "cheap-model"
    assert [request["model"] for request in backup.requests] == ["cheap-model"]  # not full-price-model

    alone = llm_client(fake, retries=0, fallbacks=[full_price])
    fake.push(error(503, "down"))
    with model_for_turn("cheap-model"), pytest.raises(EndpointError):
        await alone.complete([{"role": "user", "content": "2+2?"}])
    assert len(backup.requests) == 1  # the full-price fallback was not asked

    fake.push(error(503, "down"))
    backup.push(text("4"))
    assert (await alone.complete([{"role": "user", "content": "2+2?"}])).content == "4"  # within the quota
    assert backup.requests[-1]["model"] == "full-price-model"
    backup.reset()


# marsho.usage -------------------------------------------------------------------------------------


PRICES = {"fake-*": {"input": 2.0, "cached_input": 0.5, "output": 8.0, "currency": "USD"}}


async def test_the_report_shows_the_tokens_the_endpoint_reported_and_a_png_chart(
    fake: FakeOpenAI, store: SqlStore,
) -> None:
    meter = meter_on(store)
    await ask(fake, meter, ALICE, with_usage(text("4"), OPENAI_USAGE))
    await ask(fake, meter, ALICE, with_usage(text("4"), DEEPSEEK_USAGE))
    await ask(fake, meter, BOB, with_usage(text("4"), OPENAI_USAGE))
    config = Config(marsho_prices=PRICES)
    report, pictures = await usage_report(meter, T, config, ALICE, "member", "")
    # 150 + 110 tokens; 180 of 220 prompt tokens cached (82%); (40 × 2 + 180 × 0.5 + 40 × 8) / 1e6 USD
    # (Bob: 150 tokens, (20 × 2 + 100 × 0.5 + 30 × 8) / 1e6 USD)
    assert report.splitlines() == [
        "Your use:",
        "Today: 2 questions, 260 tokens (82% from the provider's cache), 2 requests, cost ≈ 0.00049 USD",
        "7 days: 2 questions, 260 tokens (82% from the provider's cache), 2 requests, cost ≈ 0.00049 USD",
        "30 days: 2 questions, 260 tokens (82% from the provider's cache), 2 requests, cost ≈ 0.00049 USD",
    ]
    assert len(pictures) == 1 and pictures[0].startswith(b"\x89PNG\r\n\x1a\n")
    admin_report, _ = await usage_report(meter, T, config, ALICE, "admin", "")
    assert admin_report.splitlines()[4:] == [
        "This group:",
        "Today: 3 questions, 410 tokens (82% from the provider's cache), 3 requests, cost ≈ 0.00082 USD",
        "7 days: 3 questions, 410 tokens (82% from the provider's cache), 3 requests, cost ≈ 0.00082 USD",
        "30 days: 3 questions, 410 tokens (82% from the provider's cache), 3 requests, cost ≈ 0.00082 USD",
        "Top users (30 days):",
        "  10001: 2 questions, 260 tokens (82% from the provider's cache), 2 requests, cost ≈ 0.00049 USD",
        "  10002: 1 questions, 150 tokens (83% from the provider's cache), 1 requests, cost ≈ 0.00033 USD",
    ]


async def test_everything_by_model_group_and_user_is_for_superusers(fake: FakeOpenAI, store: SqlStore) -> None:
    meter = meter_on(store)
    await ask(fake, meter, ALICE, with_usage(text("4"), OPENAI_USAGE))
    refused, pictures = await usage_report(meter, T, Config(), ALICE, "admin", "all")
    assert (refused, pictures) == ("Only the bot's superusers may use marsho.usage all.", [])
    report, pictures = await usage_report(meter, T, Config(), ALICE, "superuser", "all")
    lines = report.splitlines()
    assert lines[0] == "Everyone:"
    for title, name in (("By model (30 days):", "fake-model"), ("By group (30 days):", "20001"),
                        ("By user (30 days):", "10001")):
        assert lines[lines.index(title) + 1].startswith(f"  {name}: 1 questions, 150 tokens")
    assert pictures[0].startswith(b"\x89PNG")


async def test_nothing_used_is_said_without_a_chart(store: SqlStore) -> None:
    report, pictures = await usage_report(meter_on(store), T, Config(), ALICE, "member", "")
    assert report.endswith("Nothing used in the last 30 days.") and pictures == []


async def test_an_admin_without_use_of_their_own_sees_the_groups_with_its_chart(
    fake: FakeOpenAI, store: SqlStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    meter = meter_on(store)
    await ask(fake, meter, BOB, with_usage(text("4"), OPENAI_USAGE))
    drawn: list[Any] = []
    real = bill_module.render_chart
    monkeypatch.setattr(bill_module, "render_chart", lambda *args: drawn.append(args) or real(*args))
    report, pictures = await usage_report(meter, T, Config(), ALICE, "admin", "")
    lines = report.splitlines()
    assert lines[:5] == ["Your use:", *(f"{period}: 0 questions, 0 tokens (0% from the provider's cache), 0 requests"
                                        for period in ("Today", "7 days", "30 days")),
                         "Nothing used in the last 30 days."]
    assert lines[5] == "This group:" and lines[-1].startswith("  10002: 1 questions, 150 tokens")
    assert len(pictures) == 1 and pictures[0].startswith(b"\x89PNG")
    [(_, table, headers, _, _)] = drawn
    assert headers == ["Day", "Your use", "This group"]
    assert table[-1] == ["12-01", 0, 150]  # today: none of hers, the group's 150


async def test_an_admin_of_a_group_without_use_is_told_so_under_the_group(store: SqlStore) -> None:
    report, pictures = await usage_report(meter_on(store), T, Config(), ALICE, "admin", "")
    lines = report.splitlines()
    assert lines.count("Nothing used in the last 30 days.") == 2 and lines[-1] == lines[4]
    assert pictures == []


async def test_a_quota_of_digits_that_are_not_ascii_is_refused_as_bad(store: SqlStore) -> None:
    meter = meter_on(store)
    for value in ("²", "1²", "١٢"):
        answer = await quota_command(meter, T, Config(), ALICE, "superuser", f"user 10001 {value}")
        assert answer.startswith(T("quota.bad", name="marsho")[:20]), answer
    assert await meter.store.quotas() == {}
    assert await quota_command(meter, T, Config(), ALICE, "superuser", "user 10001 1_000") == (
        "User 10001's daily token quota is now 1,000.")


# in chat ------------------------------------------------------------------------------------------


@pytest.fixture
async def bill(marsho: Any, tmp_path: Path) -> AsyncIterator[Meter]:
    """The running bot's bill on a database of this test's own, at noon in Asia/Shanghai."""
    engine = marsho.require_engine()
    saved = marsho.meter, engine.llm.meter
    store = SqlStore(f"sqlite:///{tmp_path / 'chat-bill.db'}")
    marsho.meter = engine.llm.meter = meter_on(store)
    yield marsho.meter
    await marsho.meter.close()
    marsho.meter, engine.llm.meter = saved
    await store.close()


async def said(app: App, event: Any, reply: str) -> None:
    async with app.test_matcher() as ctx:
        bot = onebot_bot(ctx)
        ctx.receive_event(bot, event)
        ctx.should_call_api(*reply_call(event, reply), result={"message_id": 1})


async def unanswered(app: App, event: Any) -> None:
    async with app.test_matcher() as ctx:
        ctx.receive_event(onebot_bot(ctx), event)  # any reply would be an unexpected call


async def test_members_may_not_see_everything_nor_set_quotas(app: App, bill: Meter) -> None:
    await said(app, group_message("marsho.usage all"), "Only the bot's superusers may use marsho.usage all.")
    await said(app, group_message("marsho.quota user 10001 5", role="admin"),
               "Only the bot's superusers may use marsho.quota.")


async def test_a_question_over_the_quota_is_answered_with_the_reset_and_asks_nothing(
    app: App, fake: FakeOpenAI, bill: Meter, plugin_engine: Any,
) -> None:
    owner = private_message("marsho.quota user 10001 100", user_id=int(SUPERUSER_ID))
    await said(app, owner, "User 10001's daily token quota is now 100.")
    fake.push(with_usage(text("4"), OPENAI_USAGE))
    with configured(marsho_user_rate_limit=2, marsho_rate_window=3600):
        await said(app, private_message("marsho 2+2?"), "4")
        await bill.settled()
        asked = len(fake.requests)
        refusal = "You have used your tokens for today (150 of 100); it resets at 2026-12-02 00:00 CST."
        await said(app, private_message("marsho 3+3?"), refusal)
        await unanswered(app, private_message("marsho 3+3?"))  # told once a window, then silence
        assert len(fake.requests) == asked
        await said(app, private_message("marsho.quota user 10001 default", user_id=int(SUPERUSER_ID)),
                   "User 10001 has the default daily token quota again (none).")
        # the refusals did not use up the rate limit's second question
        fake.push(text("6"))
        await said(app, private_message("marsho 3+3?"), "6")
        await said(app, private_message("marsho.quota", user_id=int(SUPERUSER_ID)),
                   "Daily token quotas: per user none, per group none, everyone none (used today: 152).")


async def test_over_the_quota_the_cheaper_model_answers_and_says_so(
    app: App, fake: FakeOpenAI, bill: Meter, plugin_engine: Any,
) -> None:
    await bill.store.write([spent(150, Where("OneBot V11", "private", "10001", "10001"))])
    fake.push(text("4"))
    with configured(marsho_user_daily_tokens=100, marsho_quota_fallback_model="cheap-model"):
        await said(app, private_message("marsho 2+2?"), (
            "4\n\n(Answered by cheap-model, a cheaper model: You have used your tokens for today "
            "(150 of 100); it resets at 2026-12-02 00:00 CST.)"))
    assert fake.requests[-1]["model"] == "cheap-model"
    await bill.settled()
    assert (await stored_rows(bill.store.store))[-1].model == "cheap-model"


async def test_superusers_are_exempt(app: App, fake: FakeOpenAI, bill: Meter, plugin_engine: Any) -> None:
    owner = Where("OneBot V11", "private", SUPERUSER_ID, SUPERUSER_ID)
    await bill.store.write([spent(10_000, owner)])
    fake.push(text("4"))
    with configured(marsho_user_daily_tokens=100):
        await said(app, private_message("marsho 2+2?", user_id=int(SUPERUSER_ID)), "4")


async def test_a_sqlite_file_and_sqlalchemys_path_store_the_same_rows_and_totals(tmp_path: Path) -> None:
    # (a SQLite file's writes go through store/sqlite_direct.py, an in-memory database's through
    # SQLAlchemy: the same bill either way)
    from nonebot_plugin_marsho.store.sql import usage_totals_table

    rows = [UsageRow(1.5, "2026-12-01", "s", "u1", "g1", "m", "e", 10, 5, cached_tokens=2, questions=1),
            UsageRow(2.5, "2026-12-01", "s", "", "g1", "m", "", 7, 0, estimated=1)]
    seen = []
    for url in (f"sqlite:///{tmp_path / 'direct.db'}", "sqlite+aiosqlite://"):
        sql = SqlStore(url)
        try:
            usage = UsageStore(sql)
            assert (sql._direct is not None) == url.startswith("sqlite:///")
            await usage.write(rows)
            await usage.write(rows[:1])
            async with sql.engine.connect() as conn:
                kept = [tuple(r[1:]) for r in (await conn.execute(select(usage_table).order_by("id"))).all()]
                totals = sorted((await conn.execute(select(usage_totals_table))).all())
            seen.append((kept, totals))
        finally:
            await sql.close()
    assert seen[0] == seen[1]
    assert seen[0][1] == [("2026-12-01", "all", "*", 37), ("2026-12-01", "group", "g1", 37),
                          ("2026-12-01", "user", "u1", 30)]
