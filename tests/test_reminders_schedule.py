"""Reminders' times (issue 27) after the attacks on them: the next time after a long stop found
directly (never one missed occurrence after another), repeats counted from their first time so
that no clamped day or skipped wall time sticks, and refusals of times and repeats out of range
that name the value and the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from nonebot_plugin_marsho.agent.reminders import next_time
from nonebot_plugin_marsho.agent.schedule import ScheduleError, parse_every, parse_when
from nonebot_plugin_marsho.chat.reminders import Scheduler
from nonebot_plugin_marsho.i18n import Texts
from nonebot_plugin_marsho.store.reminders import Reminder, ReminderStore
from nonebot_plugin_marsho.store.sql import SqlStore

NEW_YORK = ZoneInfo("America/New_York")
PLATFORM = "OneBot V11"
GROUP = f"{PLATFORM}:group:80001"


def at(*parts: int, zone: ZoneInfo = NEW_YORK) -> datetime:
    return datetime(*parts, tzinfo=zone)  # type: ignore[misc]


def repeating(every: str, scheduled: datetime, **fields: Any) -> Reminder:
    due = scheduled.timestamp()
    return Reminder(id=1, chat_key=GROUP, platform=PLATFORM, kind="group", chat_id="80001", user_id="10501",
                    asker=f"{PLATFORM}:10501", what="text", body="stand up", due_at=due, scheduled_at=due,
                    every=every, zone="America/New_York", **fields)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], dict[str, int]]]:
    """How often croniter's next time and isodate's duration reading are worked out."""
    import croniter
    import isodate

    calls = {"cron": 0, "duration": 0}
    get_next, parse_duration = croniter.croniter.get_next, isodate.parse_duration

    def next_counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["cron"] += 1
        return get_next(self, *args, **kwargs)

    def duration_counted(*args: Any, **kwargs: Any) -> Any:
        calls["duration"] += 1
        return parse_duration(*args, **kwargs)

    monkeypatch.setattr(croniter.croniter, "get_next", next_counted)
    monkeypatch.setattr(isodate, "parse_duration", duration_counted)
    yield lambda: calls


# the next time after a long stop


def test_a_cron_repeat_a_month_behind_finds_its_next_time_without_the_missed_ones(
        counted: Callable[[], dict[str, int]]) -> None:
    month_ago = at(2026, 1, 1, 8, 0)
    now = month_ago + timedelta(days=30, minutes=2)
    following = next_time(repeating("*/5 * * * *", month_ago), now.timestamp())
    assert following == (month_ago + timedelta(days=30, minutes=5)).timestamp()
    assert counted()["cron"] <= 3  # 8,640 occurrences were missed: none is worked out


def test_a_duration_repeat_a_month_behind_skips_whole_periods_at_once(counted: Callable[[], dict[str, int]]) -> None:
    month_ago = at(2026, 1, 1, 8, 0)
    now = month_ago + timedelta(days=30, minutes=2)
    assert next_time(repeating("PT5M", month_ago), now.timestamp()) == (
        month_ago + timedelta(days=30, minutes=5)).timestamp()
    assert counted()["duration"] <= 8


def test_a_monthly_repeat_ten_years_behind_is_a_few_date_computations(counted: Callable[[], dict[str, int]]) -> None:
    start = at(2016, 5, 15, 9, 0)
    following = next_time(repeating("P1M", start), at(2026, 5, 20, 12, 0).timestamp())
    assert following == at(2026, 6, 15, 9, 0).timestamp()
    assert counted()["duration"] <= 8  # 120 months were missed


def test_a_repeat_never_goes_back_to_a_time_before_the_one_it_just_fired() -> None:
    fired = at(2026, 3, 2, 8, 0)
    clock_behind = (fired - timedelta(minutes=3)).timestamp()  # another process's clock
    assert next_time(repeating("P1D", fired), clock_behind) == at(2026, 3, 3, 8, 0).timestamp()
    assert next_time(repeating("0 8 * * *", fired), clock_behind) == at(2026, 3, 3, 8, 0).timestamp()


# repeats counted from their first time


def fired_times(every: str, first: datetime, count: int) -> list[str]:
    """The times a repeat fires, as the loop marks them: each next time worked out just after
    the one before fired."""
    reminder = repeating(every, first, first_at=first.timestamp())
    said = [first.strftime("%m-%d %H:%M")]
    for _ in range(count - 1):
        following = next_time(reminder, reminder.scheduled_at + 1)
        assert following is not None
        reminder = replace(reminder, scheduled_at=following, due_at=following)
        said.append(datetime.fromtimestamp(following, NEW_YORK).strftime("%m-%d %H:%M"))
    return said


def test_every_day_at_2_30_comes_back_to_2_30_after_the_night_that_skips_it() -> None:
    said = fired_times("P1D", at(2027, 3, 13, 2, 30), 4)
    assert said == ["03-13 02:30", "03-14 03:30", "03-15 02:30", "03-16 02:30"]


def test_every_month_from_the_31st_comes_back_to_the_31st() -> None:
    said = fired_times("P1M", at(2027, 1, 31, 9, 0), 4)
    assert said == ["01-31 09:00", "02-28 09:00", "03-31 09:00", "04-30 09:00"]


def test_every_year_from_the_29th_of_february_comes_back_to_it() -> None:
    said = fired_times("P1Y", at(2028, 2, 29, 9, 0), 5)
    assert [time[:5] for time in said] == ["02-29", "02-28", "02-28", "02-28", "02-29"]


def test_hours_count_elapsed_time_from_the_first_time_across_the_clock_change() -> None:
    said = fired_times("PT12H", at(2027, 3, 13, 20, 0), 3)
    assert said == ["03-13 20:00", "03-14 09:00", "03-14 21:00"]  # 12 hours each, one skipped


async def test_the_store_keeps_a_repeats_first_time_as_it_fires(tmp_path: Path) -> None:
    sql = SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}")
    try:
        await sql.start()
        store = ReminderStore(sql)
        first = at(2027, 1, 31, 9, 0).timestamp()
        added = await store.add(replace(repeating("P1M", at(2027, 1, 31, 9, 0)), id=0))
        assert added.first_at == first
        clock = [first]

        async def fire(reminder: Reminder, what: str, now: float) -> None:
            pass

        scheduler = Scheduler(store, fire, grace=1e9, texts=Texts("en"), clock=lambda: clock[0])
        seen = []
        for _ in range(2):
            await scheduler.round()
            await scheduler.settled()
            kept = await store.get(added.id)
            assert kept is not None and kept.first_at == first
            seen.append(datetime.fromtimestamp(kept.due_at, NEW_YORK).strftime("%m-%d"))
            clock[0] = kept.due_at
        assert seen == ["02-28", "03-31"]
    finally:
        await sql.close()


# refusals that name the value and the bound


@pytest.mark.parametrize(("when", "why"), [
    ("9999-12-31T23:59", "9999-12-31T23:59 is too far ahead: a reminder may be set at most 3660 days ahead"),
    ("9999-12-31T23:59-14:00", "is too far ahead: a reminder may be set at most 3660 days ahead"),
    ("0001-01-01T00:00+14:00", "0001-01-01T00:00+14:00 has already passed: it is now Wednesday 2 December 2026"),
    ("P99999999D", "P99999999D is too far ahead: a reminder may be set at most 3660 days ahead"),
    ("PT99999999999H", "'PT99999999999H' is too long: `when` may be at most 3660 days ahead"),
])
def test_a_when_beyond_the_calendar_is_refused_naming_it_and_the_bound(when: str, why: str) -> None:
    with pytest.raises(ScheduleError) as refused:
        parse_when(when, NEW_YORK, at(2026, 12, 2, 9, 0))
    assert why in str(refused.value)


@pytest.mark.parametrize(("every", "why"), [
    ("0 0 31 2 *", "'0 0 31 2 *' never comes: no date matches it within 50 years"),
    ("P9999Y", "'P9999Y' puts its next time past the year 9999"),
    ("P99999999D", "'P99999999D' puts its next time past the year 9999"),
    ("PT99999999999H", "'PT99999999999H' is too long: a reminder's times end in the year 9999"),
])
def test_an_every_beyond_the_calendar_is_refused_naming_it_and_the_bound(every: str, why: str) -> None:
    with pytest.raises(ScheduleError) as refused:
        parse_every(every, NEW_YORK, at(2026, 12, 2, 9, 0), min_interval=300)
    assert why in str(refused.value)


async def test_the_model_reads_a_refusal_not_an_exceptions_name(tmp_path: Path) -> None:
    from nonebot_plugin_marsho.agent.reminders import ReminderBook
    from nonebot_plugin_marsho.tools.model import ToolContext

    sql = SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}")
    try:
        book = ReminderBook(ReminderStore(sql), zone=NEW_YORK, clock=lambda: at(2026, 12, 2, 9, 0).timestamp())
        context = ToolContext(session_key=GROUP, user_id="10501", group_id="80001", platform=PLATFORM,
                              chat_key=GROUP)
        for when, every in (("9999-12-31T23:59", ""), ("PT1H", "0 0 31 2 *"), ("PT1H", "P9999Y")):
            result = await book.add(context, when, text="x", every=every)
            assert result.status == "error" and "Error" not in result.content.split(":")[0], result.content
            assert (when if not every else every) in result.content
        assert await book.store.count() == 0
    finally:
        await sql.close()


async def test_reminders_kept_before_the_first_time_was_take_their_current_time_as_it(tmp_path: Path) -> None:
    from alembic import command
    from sqlalchemy import Connection, text
    from sqlalchemy.ext.asyncio import create_async_engine

    from nonebot_plugin_marsho.store import migrations

    url = f"sqlite+aiosqlite:///{tmp_path / 'marsho.db'}"
    sql = SqlStore(url)
    await sql.start()
    await sql.close()
    due = at(2027, 1, 31, 9, 0).timestamp()

    def back_to_0007_with_a_reminder(conn: Connection) -> None:
        command.downgrade(migrations.config(connection=conn), "0007")
        fields = {column: "" for column in ("chat_key", "platform", "kind", "chat_id", "guild_id", "channel_id",
                                            "user_id", "asker", "name", "session_key", "what", "body",
                                            "claimed_by", "problem")}
        fields.update(every="P1M", zone="America/New_York", state="active", scheduled_at=due, due_at=due,
                      attempts=0, claimed_at=0.0, created_at=0.0)
        conn.execute(text(f"INSERT INTO marsho_reminders ({', '.join(fields)}) "
                          f"VALUES ({', '.join(':' + name for name in fields)})"), fields)

    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(back_to_0007_with_a_reminder)
    finally:
        await engine.dispose()
    again = SqlStore(url)
    try:
        await again.start()
        [kept] = await ReminderStore(again).listed("all")
        assert kept.first_at == due
    finally:
        await again.close()


def test_a_stored_repeat_of_zero_length_stops_instead_of_failing_the_loop() -> None:
    assert next_time(repeating("PT0S", at(2026, 1, 1, 8, 0)), at(2026, 1, 2, 8, 0).timestamp()) is None
