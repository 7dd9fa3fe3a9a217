"""When a reminder fires (issue 27): `when` read as an ISO 8601 date-time in the chat's time zone
(or a duration from now), `every` as an ISO 8601 duration or a five-field cron expression, each
next time worked out in that zone so that daylight saving time never moves "every day at 8:00",
and times put in words for the model. Every refusal is a `ScheduleError` whose text says what
to send instead. NoneBot-free; isodate and croniter are imported when a repeat is read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

MAX_AHEAD_DAYS = 3660
"""How far ahead a reminder may be set (about ten years)."""
MAX_STEPS = 64
"""Periods a calendar repeat's estimated count is corrected by at most (the estimate from the
mean length of a month or a year is off by one or two): the next time after a long stop is a
few date computations, never one per missed occurrence."""
CRON_SEARCH_YEARS = 50
"""Years croniter looks ahead for a cron expression's next time (its default): one that matches
no date within them (31 February) is refused."""
LAST_YEAR = 9999
"""The latest year a time can be in (Python's dates end there)."""
CRON_SAMPLES = 60
"""Consecutive times of a cron expression its shortest interval is measured over."""
DURATION = re.compile(r"^[+]?P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$")


class ScheduleError(ValueError):
    """A time or repeat that cannot be used; the message says why and what to send instead."""


def zone_named(name: str) -> tzinfo:
    """The time zone `name` (IANA), or the machine's own when `name` is empty."""
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return timezone.utc
    return machine_zone()


def machine_zone() -> tzinfo:
    """The machine's IANA zone (TZ, /etc/timezone, /etc/localtime), else its current offset."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        candidates.append(Path("/etc/timezone").read_text(encoding="utf-8").strip())
    except OSError:
        pass
    try:
        candidates.append(str(Path("/etc/localtime").resolve()).split("zoneinfo/", 1)[1])
    except (OSError, IndexError):
        pass
    for name in candidates:
        if name:
            try:
                return ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                continue
    return datetime.now().astimezone().tzinfo or timezone.utc


def zone_name(zone: tzinfo) -> str:
    """How a zone is stored and shown: its IANA key, else its name (`UTC+08:00`)."""
    return str(getattr(zone, "key", "") or zone.tzname(None) or "UTC")


def _exists(local: datetime, zone: tzinfo) -> tuple[bool, bool]:
    """(whether the wall time `local` exists in `zone`, whether it happens twice there)."""
    first, second = local.replace(tzinfo=zone, fold=0), local.replace(tzinfo=zone, fold=1)
    ambiguous = first.utcoffset() != second.utcoffset()
    back = first.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None)
    # a skipped time comes back moved by the gap; the first of a repeated hour comes back as is
    return back == local, ambiguous and back == local


def parse_when(when: str, zone: tzinfo, now: datetime) -> datetime:
    """The moment `when` names, in `zone`: an ISO 8601 date-time (with an offset, or without one
    meaning `zone`'s wall time) or a duration from `now` (`PT20M`). ScheduleError for a time
    that is past, too far, missing in `zone` (skipped by a clock change) or happening twice."""
    said = when.strip()
    if not said:
        raise ScheduleError("`when` is empty: give an ISO 8601 date-time such as "
                            f"{(now + timedelta(hours=1)).strftime('%Y-%m-%dT%H:%M')}.")
    if said.upper().startswith(("P", "+P")):
        ahead = _fixed(said, "when")
        if ahead > timedelta(days=MAX_AHEAD_DAYS):
            raise _too_far(said)
        moment = (now.astimezone(timezone.utc) + ahead).astimezone(zone)
    else:
        moment = _datetime(said, zone, now)
    # aware datetimes of one zone compare by wall time: timestamps compare moments
    if moment.timestamp() <= now.timestamp():
        raise _passed(said, zone, now)
    if moment.timestamp() - now.timestamp() > MAX_AHEAD_DAYS * 86400:
        raise _too_far(said)
    return moment


def _too_far(said: str) -> ScheduleError:
    return ScheduleError(f"{said} is too far ahead: a reminder may be set at most {MAX_AHEAD_DAYS} "
                         "days ahead.")


def _passed(said: str, zone: tzinfo, now: datetime) -> ScheduleError:
    return ScheduleError(f"{said} has already passed: it is now {words(now, zone)}. Give a time "
                         "in the future (today's if it is still to come, else tomorrow's).")


def _datetime(said: str, zone: tzinfo, now: datetime) -> datetime:
    """`said` read as a date-time in `zone`; one at the very ends of the calendar (years 1 and
    9999, where a zone's offset takes it out of range) is refused as passed or too far."""
    try:
        return _read_datetime(said, zone, now)
    except OverflowError:
        year = said.strip().lstrip("+-")[:4]
        if year.isdigit() and int(year) < now.year:
            raise _passed(said, zone, now) from None
        raise _too_far(said) from None


def _read_datetime(said: str, zone: tzinfo, now: datetime) -> datetime:
    example = (now + timedelta(hours=1)).astimezone(zone).strftime("%Y-%m-%dT%H:%M")
    try:
        moment = datetime.fromisoformat(said.replace(" ", "T", 1) if "T" not in said else said)
    except ValueError:
        raise ScheduleError(f"{said!r} is not an ISO 8601 date-time: write it like {example} (in "
                            f"{zone_name(zone)}), with an offset such as +08:00 if it is another "
                            "zone's, or a duration from now such as PT20M.") from None
    if len(said) <= 10:  # a date alone
        raise ScheduleError(f"{said!r} is a date without a time: give the time too, like "
                            f"{said[:10]}T09:00.")
    if moment.tzinfo is not None:
        return moment.astimezone(zone)
    exists, twice = _exists(moment, zone)
    if not exists:
        raise ScheduleError(f"{said} does not exist in {zone_name(zone)}: the clocks skip it (daylight "
                            "saving time starts). Give a time an hour later, or one with its offset.")
    if twice:
        early, late = moment.replace(tzinfo=zone, fold=0), moment.replace(tzinfo=zone, fold=1)
        raise ScheduleError(f"{said} happens twice in {zone_name(zone)} (the clocks go back): say which "
                            f"with its offset, {early.isoformat()} (the first) or {late.isoformat()} "
                            "(the second).")
    return moment.replace(tzinfo=zone)


def _fixed(said: str, what: str) -> timedelta:
    """An ISO 8601 duration of days and times only, as a timedelta (for `when`)."""
    duration = _duration(said, what)
    if not isinstance(duration, timedelta):
        raise ScheduleError(f"`{what}` {said!r}: give a duration in weeks, days, hours and minutes "
                            "(P1D, PT20M), or a date-time.")
    return duration


def _duration(said: str, what: str) -> Any:
    import isodate  # only when a duration is read

    if not DURATION.match(said.upper()):
        raise ScheduleError(f"`{what}` {said!r} is not an ISO 8601 duration: write P1D (a day), PT1H "
                            "(an hour), PT30M (30 minutes), P1W (a week), P1M (a month).")
    try:
        return isodate.parse_duration(said.upper().lstrip("+"))
    except OverflowError:
        bound = (f"`when` may be at most {MAX_AHEAD_DAYS} days ahead" if what == "when" else
                 f"a reminder's times end in the year {LAST_YEAR}")
        raise ScheduleError(f"`{what}` {said!r} is too long: {bound}. Give a shorter duration.") from None
    except (isodate.ISO8601Error, ValueError) as error:
        raise ScheduleError(f"`{what}` {said!r} is not an ISO 8601 duration ({error}).") from None


@dataclass(frozen=True)
class Repeat:
    """A reminder's `every`: an ISO 8601 duration (the date part counted in the zone's calendar,
    so P1D keeps the wall time across daylight saving time; the time part in elapsed time; each
    time counted from the first, so that a day clamped or a wall time skipped moves that one
    time only) or a five-field cron expression in the zone's wall time."""

    expression: str
    cron: bool
    interval: float
    """Its shortest gap, in seconds."""

    @classmethod
    def read(cls, expression: str) -> Repeat:
        """A stored repeat, read again without measuring its interval (0): the loop's next
        times. ScheduleError when it no longer reads."""
        said = " ".join(expression.split())
        if len(said.split(" ")) == 5:
            from croniter import croniter

            if not croniter.is_valid(said):
                raise ScheduleError(f"`every` {said!r} is not a valid cron expression.")
            return cls(said, cron=True, interval=0.0)
        years, months, days, elapsed = _parts(_duration(said, "every"))
        if not (years > 0 or months > 0 or days > 0 or elapsed > timedelta(0)):
            raise ScheduleError(f"`every` {said!r} is zero.")  # a row not written by parse_every
        return cls(said.upper(), cron=False, interval=0.0)

    def after(self, moment: datetime, zone: tzinfo) -> datetime:
        """The occurrence following `moment` (aware), in `zone`."""
        local = moment.astimezone(zone)
        if self.cron:
            from croniter import croniter

            times = croniter(self.expression, local)
            following = times.get_next(datetime).astimezone(zone)
            if following.replace(tzinfo=None) == local.replace(tzinfo=None):  # the hour that repeats
                following = times.get_next(datetime).astimezone(zone)  # fires once, as cron does
            return following
        return self.occurrence(local, 1, zone)

    def occurrence(self, anchor: datetime, count: int, zone: tzinfo) -> datetime:
        """A duration's `count`-th occurrence after `anchor`: the calendar part (years, months,
        days) added `count` times to the anchor's wall time in `zone` (a day of the month that
        month lacks clamped to its last day, a skipped wall time moved past the gap: this
        occurrence only), then the elapsed part (hours and less) `count` times, exactly.
        OverflowError past the year 9999."""
        years, months, days, elapsed = _parts(_duration(self.expression, "every"))
        local = anchor.astimezone(zone)
        if years or months or days:
            wall = _resolve(_add_calendar(local.replace(tzinfo=None), count * (12 * years + months),
                                          count * days), zone)
        else:
            wall = local
        return (wall.astimezone(timezone.utc) + count * elapsed).astimezone(zone)

    def next_after(self, moment: datetime, now: datetime, zone: tzinfo) -> datetime:
        """The first occurrence after `now` (and after `moment`), counting from `moment`:
        cron's next time after `now` directly; a duration's count of periods worked out by
        arithmetic (the missed ones skipped at once, never one by one). OverflowError past
        the year 9999."""
        after = max(moment.timestamp(), now.timestamp())
        if self.cron:
            return self.after(datetime.fromtimestamp(after, timezone.utc), zone)
        years, months, days, elapsed = _parts(_duration(self.expression, "every"))
        mean = (years * 365.2425 + months * 30.436875 + days) * 86400 + elapsed.total_seconds()
        count = max(1, int((after - moment.timestamp()) // mean))
        for _ in range(MAX_STEPS):
            if count > 1 and self.occurrence(moment, count - 1, zone).timestamp() > after:
                count -= 1
            elif self.occurrence(moment, count, zone).timestamp() <= after:
                count += 1
            else:
                return self.occurrence(moment, count, zone)
        raise ScheduleError(f"`every` {self.expression!r}: its next time was not found within "
                            f"{MAX_STEPS} steps.")


def _parts(duration: Any) -> tuple[int, int, int, timedelta]:
    """(years, months, days: the calendar part; the elapsed part: hours and less)."""
    import isodate

    base = duration.tdelta if isinstance(duration, isodate.Duration) else duration
    years, months = (duration.years, duration.months) if isinstance(duration, isodate.Duration) else (0, 0)
    return int(years), int(months), base.days, timedelta(seconds=base.seconds, microseconds=base.microseconds)


def _add_calendar(local: datetime, months: int, days: int) -> datetime:
    """A naive wall time `months` months (the day clamped to the month's last) and `days` days
    later. OverflowError past the year 9999."""
    import calendar

    total = local.month - 1 + months
    year, month = local.year + total // 12, total % 12 + 1
    if not 1 <= year <= 9999:
        raise OverflowError(f"year {year} is out of range")
    day = min(local.day, calendar.monthrange(year, month)[1])
    return local.replace(year=year, month=month, day=day) + timedelta(days=days)


def _resolve(local: datetime, zone: tzinfo) -> datetime:
    """A wall time in `zone`, a skipped one moved past the gap (as cron does), the first of two."""
    exists, _ = _exists(local, zone)
    aware = local.replace(tzinfo=zone, fold=0)
    if exists:
        return aware
    return datetime.fromtimestamp(aware.timestamp(), zone)


def parse_every(every: str, zone: tzinfo, start: datetime, *, min_interval: float) -> Repeat | None:
    """The repeat `every` names (None for "": once), or ScheduleError naming what is wrong:
    neither a duration nor a cron expression, or more often than `min_interval` seconds."""
    said = " ".join(every.split())
    if not said:
        return None
    try:
        repeat = _repeat(said, zone, start)
    except OverflowError:
        raise ScheduleError(f"`every` {said!r} puts its next time past the year {LAST_YEAR}, the latest "
                            "a reminder can be: give a shorter repeat.") from None
    if repeat.interval < min_interval:
        raise ScheduleError(f"`every` {said!r} repeats every {span(repeat.interval)}: reminders repeat at "
                            f"most every {span(min_interval)} (MARSHO_REMINDER_MIN_INTERVAL). Choose a "
                            "longer interval.")
    return repeat


def _repeat(said: str, zone: tzinfo, start: datetime) -> Repeat:
    fields = said.split(" ")
    if len(fields) == 5:
        repeat = _cron(said, zone, start)
    elif said.upper().startswith(("P", "+P")):
        years, months, days, elapsed = _parts(_duration(said, "every"))
        first = Repeat(said.upper(), cron=False, interval=0.0)
        interval = first.after(start, zone).timestamp() - start.timestamp()
        repeat = Repeat(said.upper(), cron=False, interval=interval)
        if interval <= 0 or not (years or months or days or elapsed):
            raise ScheduleError(f"`every` {said!r} is zero: give a positive duration such as P1D.")
    else:
        raise ScheduleError(f"`every` {said!r} is neither an ISO 8601 duration (P1D, PT1H, P1W) nor a "
                            "five-field cron expression (minute hour day month weekday, e.g. "
                            "\"0 8 * * 1-5\" for 8:00 on weekdays).")
    return repeat


def _cron(said: str, zone: tzinfo, start: datetime) -> Repeat:
    from croniter import croniter

    if not croniter.is_valid(said):
        raise ScheduleError(f"`every` {said!r} is not a valid cron expression: five fields, minute "
                            "(0-59) hour (0-23) day (1-31) month (1-12) weekday (0-6, 0 Sunday), such "
                            "as \"30 7 * * *\" for 7:30 every day.")
    from croniter import CroniterBadDateError

    repeat = Repeat(said, cron=True, interval=0.0)
    moments = [start.astimezone(zone)]
    try:
        for _ in range(CRON_SAMPLES):
            moments.append(repeat.after(moments[-1], zone))
    except CroniterBadDateError:
        if len(moments) > 2:  # it did come, but its next time is past the calendar's end
            raise OverflowError(said) from None
        raise ScheduleError(f"`every` {said!r} never comes: no date matches it within "
                            f"{CRON_SEARCH_YEARS} years (a day that month does not have, such as 31 "
                            "February?). Give a day and month that exist, such as \"0 0 28 2 *\" for "
                            "28 February.") from None
    stamps = [moment.timestamp() for moment in moments[1:]]
    gaps = [later - earlier for earlier, later in zip(stamps, stamps[1:], strict=False)]
    return Repeat(said, cron=True, interval=min(gaps) if gaps else 0.0)


def first_time(when: datetime, repeat: Repeat | None, zone: tzinfo) -> datetime:
    """The first time a reminder fires: `when`; for a cron repeat, its first time at or after
    `when` (a cron expression names its own times)."""
    if repeat is None or not repeat.cron:
        return when
    return repeat.after(when - timedelta(seconds=1), zone)


def span(seconds: float) -> str:
    """A length of time in words: "20 minutes", "2 hours 5 minutes", "3 days 4 hours"."""
    total = int(round(abs(seconds)))
    if total < 60:
        return f"{total} second{'s' if total != 1 else ''}"
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [(days, "day"), (hours, "hour"), (minutes, "minute")]
    named = [f"{count} {unit}{'s' if count != 1 else ''}" for count, unit in parts if count]
    return " ".join(named[:2])


def words(moment: datetime, zone: tzinfo, now: datetime | None = None) -> str:
    """A moment as the model reads it: "Thursday 3 December 2026 at 08:00 (Asia/Shanghai)", and
    ", in 20 minutes" when `now` is given."""
    local = moment.astimezone(zone)
    said = f"{local:%A} {local.day} {local:%B %Y} at {local:%H:%M} ({zone_name(zone)})"
    if now is not None:
        said += f", in {span(moment.timestamp() - now.timestamp())}"
    return said
