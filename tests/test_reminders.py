"""Reminders (issue 27) below the chat: `when` and `every` read in the chat's time zone (daylight
saving time included), refusals the model can act on, who sees and cancels what, the bounds, and
the store's claim: each due reminder fired once, by one of two schedulers on one database
(SQLite, PostgreSQL), never again after a process died sending it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from nonebot_plugin_marsho.agent.reminders import (
    LATE_AFTER,
    RETRY_AFTER,
    STALE_CLAIM,
    ReminderBook,
    fate,
    next_time,
    retry_at,
)
from nonebot_plugin_marsho.agent.schedule import ScheduleError, parse_every, parse_when
from nonebot_plugin_marsho.chat.app import Marsho
from nonebot_plugin_marsho.chat.reminders import Scheduler, Undeliverable
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.reminders import Reminder, ReminderStore
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.tools.model import ToolContext
from tests.postgres_server import PostgresServer
from tests.test_postgres import start_postgres

NEW_YORK = ZoneInfo("America/New_York")
SHANGHAI = ZoneInfo("Asia/Shanghai")
PLATFORM = "OneBot V11"
GROUP = f"{PLATFORM}:group:80001"
OTHER_GROUP = f"{PLATFORM}:group:80002"
ALICE, BOB, ADMIN = "10501", "10502", "10503"
_databases = itertools.count(1)


def at(zone: ZoneInfo, *parts: int) -> datetime:
    return datetime(*parts, tzinfo=zone)  # type: ignore[misc]


# when


def test_a_time_without_an_offset_is_the_chats_wall_time() -> None:
    now = at(SHANGHAI, 2026, 12, 2, 9, 0)
    assert parse_when("2026-12-02T18:30", SHANGHAI, now) == at(SHANGHAI, 2026, 12, 2, 18, 30)
    assert parse_when("2026-12-02 18:30", SHANGHAI, now) == at(SHANGHAI, 2026, 12, 2, 18, 30)


def test_a_time_with_an_offset_is_that_moment_shown_in_the_chats_zone() -> None:
    now = at(SHANGHAI, 2026, 12, 2, 9, 0)
    moment = parse_when("2026-12-02T12:00Z", SHANGHAI, now)
    assert moment.utcoffset() == timedelta(hours=8) and (moment.hour, moment.minute) == (20, 0)


def test_a_duration_counts_from_now() -> None:
    now = at(SHANGHAI, 2026, 12, 2, 9, 0)
    assert parse_when("PT20M", SHANGHAI, now) == at(SHANGHAI, 2026, 12, 2, 9, 20)


def test_a_past_time_is_refused_saying_what_time_it_is() -> None:
    now = at(SHANGHAI, 2026, 12, 2, 9, 0)
    with pytest.raises(ScheduleError, match="already passed: it is now Wednesday 2 December 2026 at 09:00"):
        parse_when("2026-12-02T08:00", SHANGHAI, now)


def test_a_time_that_happens_twice_is_refused_with_both_offsets_to_choose_from() -> None:
    now = at(NEW_YORK, 2026, 10, 30, 9, 0)
    with pytest.raises(ScheduleError) as refused:
        parse_when("2026-11-01T01:30", NEW_YORK, now)
    assert "happens twice" in str(refused.value)
    assert "2026-11-01T01:30:00-04:00" in str(refused.value) and "2026-11-01T01:30:00-05:00" in str(refused.value)
    assert parse_when("2026-11-01T01:30:00-05:00", NEW_YORK, now).utcoffset() == timedelta(hours=-5)


def test_a_time_the_clocks_skip_is_refused() -> None:
    with pytest.raises(ScheduleError, match="does not exist in America/New_York"):
        parse_when("2026-03-08T02:30", NEW_YORK, at(NEW_YORK, 2026, 3, 1, 9, 0))


@pytest.mark.parametrize(("said", "why"), [
    ("tomorrow", "not an ISO 8601 date-time"), ("2026-12-03", "without a time"), ("", "is empty"),
    ("2040-01-01T08:00", "too far ahead"), ("P1M", "weeks, days, hours and minutes"),
])
def test_a_when_that_cannot_be_used_says_what_to_give(said: str, why: str) -> None:
    with pytest.raises(ScheduleError, match=why):
        parse_when(said, SHANGHAI, at(SHANGHAI, 2026, 12, 2, 9, 0))


# every


def test_every_day_keeps_its_wall_time_across_daylight_saving_time() -> None:
    start = at(NEW_YORK, 2026, 10, 31, 8, 0)
    repeat = parse_every("P1D", NEW_YORK, start, min_interval=300)
    assert repeat is not None
    following = repeat.after(start, NEW_YORK)
    assert (following.day, following.hour, following.utcoffset()) == (1, 8, timedelta(hours=-5))
    assert following.timestamp() - start.timestamp() == 25 * 3600  # the day with an hour more


def test_every_hour_counts_elapsed_time_through_the_repeated_hour() -> None:
    start = at(NEW_YORK, 2026, 11, 1, 0, 30)
    repeat = parse_every("PT1H", NEW_YORK, start, min_interval=300)
    assert repeat is not None
    first = repeat.after(start, NEW_YORK)
    second = repeat.after(first, NEW_YORK)
    assert [moment.timestamp() - start.timestamp() for moment in (first, second)] == [3600, 7200]
    assert (second.hour, second.minute) == (1, 30)  # the second 01:30, standard time


def test_a_cron_repeat_fires_on_weekdays_in_the_chats_zone() -> None:
    friday = at(SHANGHAI, 2026, 12, 4, 8, 0)
    repeat = parse_every("0 8 * * 1-5", SHANGHAI, friday, min_interval=300)
    assert repeat is not None
    monday = repeat.after(friday, SHANGHAI)
    assert (monday.weekday(), monday.hour, monday.minute) == (0, 8, 0)


def test_a_cron_time_in_the_repeated_hour_fires_once() -> None:
    start = at(NEW_YORK, 2026, 10, 31, 12, 0)
    repeat = parse_every("30 1 * * *", NEW_YORK, start, min_interval=300)
    assert repeat is not None
    first = repeat.after(start, NEW_YORK)
    second = repeat.after(first, NEW_YORK)
    assert (first.day, second.day) == (1, 2)


@pytest.mark.parametrize("every", ["PT1M", "*/2 * * * *", "PT4M59S"])
def test_a_repeat_more_often_than_the_minimum_is_refused_naming_it(every: str) -> None:
    with pytest.raises(ScheduleError, match="at most every 5 minutes .MARSHO_REMINDER_MIN_INTERVAL"):
        parse_every(every, SHANGHAI, at(SHANGHAI, 2026, 12, 2, 9, 0), min_interval=300)


@pytest.mark.parametrize(("every", "why"), [
    ("daily", "neither an ISO 8601 duration"), ("61 * * * *", "not a valid cron expression"),
    ("P0D", "is zero"), ("P1X", "not an ISO 8601 duration"),
])
def test_a_repeat_that_cannot_be_read_says_what_to_give(every: str, why: str) -> None:
    with pytest.raises(ScheduleError, match=why):
        parse_every(every, SHANGHAI, at(SHANGHAI, 2026, 12, 2, 9, 0), min_interval=300)


def test_a_repeat_missed_while_the_bot_was_down_goes_on_from_the_next_time() -> None:
    due = at(SHANGHAI, 2026, 12, 1, 8, 0).timestamp()
    reminder = _reminder(due, every="P1D", zone="Asia/Shanghai")
    now = at(SHANGHAI, 2026, 12, 4, 9, 0).timestamp()
    assert next_time(reminder, now) == at(SHANGHAI, 2026, 12, 5, 8, 0).timestamp()
    assert next_time(_reminder(due), now) is None


# what a due reminder does


def test_a_reminder_late_within_the_grace_is_sent_saying_so_and_older_ones_are_dropped() -> None:
    reminder = _reminder(1000.0)
    assert fate(reminder, 1001.0, grace=3600) == "send"
    assert fate(reminder, 1000.0 + LATE_AFTER + 1, grace=3600) == "late"
    assert fate(reminder, 1000.0 + 3601, grace=3600) == "missed"


def test_a_failed_send_is_tried_a_bounded_number_of_times_then_paused() -> None:
    tries = [retry_at(_reminder(0.0, attempts=n), 100.0) for n in range(len(RETRY_AFTER) + 1)]
    assert tries == [100.0 + wait for wait in RETRY_AFTER] + [None]


# the tools


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ReminderStore]:
    sql = SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}")
    await sql.start()
    yield ReminderStore(sql)
    await sql.close()


NOW = at(SHANGHAI, 2026, 12, 2, 9, 0).timestamp()


@pytest.fixture
def book(store: ReminderStore) -> ReminderBook:
    return ReminderBook(store, zone=SHANGHAI, per_user=3, per_group=4, clock=lambda: NOW)


def asking(user: str, chat: str = GROUP, role: str = "member") -> ToolContext:
    private = ":private:" in chat
    return ToolContext(session_key=chat, user_id=user, group_id=None if private else chat.rsplit(":", 1)[1],
                       role=role, platform=PLATFORM, chat_key=chat)  # type: ignore[arg-type]


async def test_a_reminder_set_names_its_number_and_when_in_words(book: ReminderBook) -> None:
    result = await book.add(asking(ALICE), "2026-12-02T09:20", text="take the laundry out")
    assert result.status == "success"
    assert result.content.startswith("Reminder #1 set: first Wednesday 2 December 2026 at 09:20 (Asia/Shanghai), "
                                     "in 20 minutes.")
    assert "take the laundry out" in result.content
    repeat = await book.add(asking(ALICE), "2026-12-03T08:00", prompt="the weather today?", every="0 8 * * 1-5")
    assert "#2" in repeat.content and "repeats on cron 0 8 * * 1-5" in repeat.content


async def test_text_and_prompt_together_or_neither_are_refused(book: ReminderBook) -> None:
    both = await book.add(asking(ALICE), "PT1H", text="a", prompt="b")
    neither = await book.add(asking(ALICE), "PT1H")
    assert both.status == neither.status == "error"
    assert "only one of `text`" in both.content and "Nothing to remind" in neither.content


async def test_a_refused_time_reaches_the_model_as_an_error_to_act_on(book: ReminderBook) -> None:
    past = await book.add(asking(ALICE), "2026-12-02T08:00", text="too late")
    often = await book.add(asking(ALICE), "PT1H", text="drink water", every="PT1M")
    assert past.status == often.status == "error"
    assert "already passed" in past.content and "at most every 5 minutes" in often.content


async def test_a_member_sees_and_cancels_only_their_own_and_an_admin_the_groups(book: ReminderBook) -> None:
    await book.add(asking(ALICE), "PT1H", text="alice's")
    await book.add(asking(BOB), "PT2H", text="bob's")
    bobs = (await book.list_text(asking(BOB))).content
    assert "bob's" in bobs and "alice's" not in bobs
    refused = await book.cancel(asking(BOB), 1)
    assert refused.status == "error" and "alice's" not in refused.content
    admins = (await book.list_text(asking(ADMIN, role="admin"))).content
    assert "alice's" in admins and "bob's" in admins and "(set by user 10501)" in admins
    assert (await book.cancel(asking(ADMIN, role="admin"), 1)).status == "success"
    assert (await book.cancel(asking(BOB), 2)).content == "Cancelled #2: bob's"
    assert await book.store.count() == 0


async def test_a_private_reminder_is_never_listed_in_a_group(book: ReminderBook) -> None:
    await book.add(asking(ALICE, f"{PLATFORM}:private:{ALICE}"), "PT1H", text="my secret dentist")
    in_group = (await book.list_text(asking(ALICE))).content
    admins = (await book.list_text(asking(ADMIN, role="admin"))).content
    assert "dentist" not in in_group and "dentist" not in admins
    mine = await book.visible(_asker(ALICE, f"{PLATFORM}:private:{ALICE}"), "mine")
    assert [reminder.body for reminder in mine] == ["my secret dentist"]


async def test_the_list_is_not_kept_in_history_and_the_others_are(book: ReminderBook) -> None:
    kept = {tool.name: tool.keeps_result for tool in book.toolkit().tools}
    assert kept == {"reminders__add": True, "reminders__list": False, "reminders__cancel": True}


async def test_the_per_person_and_per_group_bounds_name_their_setting(book: ReminderBook) -> None:
    for n in range(3):
        assert (await book.add(asking(ALICE), f"PT{n + 1}H", text=f"alice {n}")).status == "success"
    over = await book.add(asking(ALICE), "PT9H", text="one more")
    assert over.status == "error" and "3 reminders already" in over.content
    assert "MARSHO_REMINDERS_PER_USER" in over.content
    assert (await book.add(asking(BOB), "PT1H", text="bob")).status == "success"
    group_full = await book.add(asking(ADMIN), "PT1H", text="admin")
    assert "MARSHO_REMINDERS_PER_GROUP" in group_full.content
    superuser = await book.add(asking("10099", role="superuser"), "PT1H", text="owner")
    assert superuser.status == "success"


async def test_outside_a_chat_and_for_an_unsolicited_reply_nothing_is_set(book: ReminderBook) -> None:
    outside = await book.add(ToolContext(), "PT1H", text="x")
    unasked = await book.add(ToolContext(**{**asking(ALICE).__dict__, "personal": False}), "PT1H", text="x")
    assert "only in chats" in outside.content and "not addressed to you" in unasked.content


# the store's claim


def _reminder(due: float, *, every: str = "", zone: str = "UTC", attempts: int = 0,
              chat: str = GROUP, user: str = ALICE) -> Reminder:
    return Reminder(id=0, chat_key=chat, platform=PLATFORM, kind="group", chat_id=chat.rsplit(":", 1)[1],
                    user_id=user, asker=f"{PLATFORM}:{user}", what="text", body=f"due {due}", due_at=due,
                    scheduled_at=due, every=every, zone=zone, attempts=attempts)


def _asker(user: str, chat: str = GROUP, role: str = "member"):  # noqa: ANN202
    from nonebot_plugin_marsho.agent.reminders import Asker

    return Asker(PLATFORM, user, chat, role)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database(f"marsho_rem_{os.getpid()}_{next(_databases)}")


async def test_two_schedulers_on_one_database_fire_each_due_reminder_once(url: str) -> None:
    first, second = SqlStore(url), SqlStore(url)
    fired: Counter[int] = Counter()
    try:
        await first.start()
        store = ReminderStore(first)
        ids = [(await store.add(_reminder(NOW - index % 7))).id for index in range(120)]

        async def fire(reminder: Reminder, what: str, now: float) -> None:
            await asyncio.sleep(0)  # both loops claim while the other sends
            fired[reminder.id] += 1

        schedulers = [Scheduler(ReminderStore(sql), fire, grace=1e9, texts=Texts("en"), clock=lambda: NOW)
                      for sql in (first, second)]
        await asyncio.gather(*(scheduler.round() for scheduler in schedulers for _ in range(5)))
        for scheduler in schedulers:
            await scheduler.settled()
        assert sorted(fired) == sorted(ids) and set(fired.values()) == {1}
        assert await store.count() == 0  # each sent once, then gone
    finally:
        await first.close()
        await second.close()


async def test_a_reminder_claimed_by_a_process_that_died_is_never_sent_again(url: str) -> None:
    sql = SqlStore(url)
    try:
        await sql.start()
        store = ReminderStore(sql)
        once = await store.add(_reminder(NOW - 5))
        daily = await store.add(_reminder(NOW - 5, every="P1D"))
        died = await store.claim(NOW, "a process that died")
        assert {reminder.id for reminder in died} == {once.id, daily.id}
        fired: list[int] = []

        async def fire(reminder: Reminder, what: str, now: float) -> None:
            fired.append(reminder.id)

        later = NOW + STALE_CLAIM + 1
        scheduler = Scheduler(store, fire, grace=1e9, texts=Texts("en"), clock=lambda: later)
        await scheduler.round()
        await scheduler.settled()
        assert fired == []  # neither is sent again
        paused = await store.get(once.id)
        assert paused is not None and paused.state == "paused" and "interrupted" in paused.problem
        again = await store.get(daily.id)
        assert again is not None and again.state == "active" and again.due_at == NOW - 5 + 86400
    finally:
        await sql.close()


async def test_a_chat_that_refuses_is_retried_then_the_reminder_is_paused(store: ReminderStore) -> None:
    added = await store.add(_reminder(NOW))
    clock = [NOW]

    async def refuse(reminder: Reminder, what: str, now: float) -> None:
        raise Undeliverable("the chat refused the message")

    scheduler = Scheduler(store, refuse, grace=1e9, texts=Texts("en"), clock=lambda: clock[0])
    for wait in (0.0, *RETRY_AFTER):
        clock[0] += wait
        await scheduler.round()
        await scheduler.settled()
    kept = await store.get(added.id)
    assert kept is not None and kept.state == "paused" and kept.problem == "the chat refused the message"
    assert kept.attempts == len(RETRY_AFTER) + 1
    clock[0] += 10 * 86400
    await scheduler.round()
    await scheduler.settled()
    assert (await store.get(added.id)) == kept  # a paused one waits to be cancelled


async def test_a_repeat_is_kept_for_its_next_time_after_it_fires(store: ReminderStore) -> None:
    added = await store.add(_reminder(NOW, every="PT1H"))
    seen: list[str] = []

    async def fire(reminder: Reminder, what: str, now: float) -> None:
        seen.append(what)

    scheduler = Scheduler(store, fire, grace=3600, texts=Texts("en"), clock=lambda: NOW + 2)
    await scheduler.round()
    await scheduler.settled()
    kept = await store.get(added.id)
    assert seen == ["send"] and kept is not None and kept.due_at == NOW + 3600 and kept.state == "active"


async def test_a_reminder_added_wakes_the_loop_at_once(store: ReminderStore) -> None:
    fired = asyncio.Event()

    async def fire(reminder: Reminder, what: str, now: float) -> None:
        fired.set()

    scheduler = Scheduler(store, fire, grace=3600, texts=Texts("en"))
    scheduler.start()
    try:
        await asyncio.sleep(0.2)  # asleep for POLL seconds: nothing is due
        await store.add(_reminder(datetime.now(timezone.utc).timestamp()))
        scheduler.wake()
        await asyncio.wait_for(fired.wait(), 10)
    finally:
        await scheduler.stop()


# the chat's side


def test_how_late_is_said_in_the_chats_language() -> None:
    from nonebot_plugin_marsho.chat.reminders import late_text

    assert late_text(Texts("en"), 2 * 3600 + 5 * 60) == "2 hours 5 minutes"
    assert late_text(Texts("en"), 61) == "1 minute"
    assert late_text(Texts("zh-CN"), 86400 + 3 * 3600 + 60) == "1 天 3 小时"


async def test_the_owners_tool_settings_apply_to_the_reminder_tools(marsho: Marsho, tmp_path: Path) -> None:
    from contextlib import AsyncExitStack

    from nonebot_plugin_marsho.chat.reminders import start_reminders
    from nonebot_plugin_marsho.tools.model import Toolset

    bot = marsho
    sql = SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}")
    try:
        changed = bot.with_config(marsho_disabled_tools=["reminders__cancel"],
                                  marsho_tool_permissions={"reminders__add": "admin"})
        async with AsyncExitStack() as stack:
            toolset = Toolset()
            start_reminders(changed, toolset, sql, stack)
            assert sorted(toolset.tools) == ["reminders__add", "reminders__list"]
            assert toolset.tools["reminders__add"].permission == "admin"
        async with AsyncExitStack() as stack:
            toolset = Toolset()
            reminders = start_reminders(bot.with_config(marsho_disabled_toolkits=["reminders"]), toolset, sql,
                                        stack)
            assert toolset.tools == {} and reminders.book is not None  # listed and cancelled all the same
    finally:
        await sql.close()
