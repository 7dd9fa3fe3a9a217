"""Reminders' times (issue 27) after the attacks on them: the next time after a long stop found
directly (never one missed occurrence after another), repeats counted from their first time so
that no clamped day or skipped wall time sticks, and refusals of times and repeats out of range
that name the value and the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from nonebot_plugin_marsho.agent.reminders import next_time
from nonebot_plugin_marsho.store.reminders import Reminder

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
