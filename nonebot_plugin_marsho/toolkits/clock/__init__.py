"""Built-in toolkit `clock`: the date and time, with the Chinese lunar calendar (农历), computed
locally (nothing is sent out).

The lunar calendar comes from lunar-python (pure Python, no data files). Without it installed,
`now` still tells the time and says the lunar date is unavailable.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from functools import lru_cache
from types import ModuleType
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from nonebot_plugin_marsho.tools import Toolbox

tools = Toolbox()

MIN_YEAR, MAX_YEAR = 1900, 2100
"""Years the lunar conversions accept: the range almanacs and calendar libraries agree on."""

WEEKDAYS_ZH = "一二三四五六日"

_OFFSET = re.compile(r"^(?:UTC|GMT)?\s*([+-])\s*(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)
_DATE = re.compile(r"^\s*(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})\s*日?\s*$")


# Places people name instead of an IANA zone; a city part alone ("Tokyo") is understood too.
PLACES = {
    "china": "Asia/Shanghai", "beijing": "Asia/Shanghai", "中国": "Asia/Shanghai",
    "北京": "Asia/Shanghai", "北京时间": "Asia/Shanghai", "上海": "Asia/Shanghai",
    "香港": "Asia/Hong_Kong", "澳门": "Asia/Macau", "台北": "Asia/Taipei", "台湾": "Asia/Taipei",
    "日本": "Asia/Tokyo", "东京": "Asia/Tokyo", "japan": "Asia/Tokyo", "韩国": "Asia/Seoul",
    "首尔": "Asia/Seoul", "新加坡": "Asia/Singapore", "英国": "Europe/London", "伦敦": "Europe/London",
    "法国": "Europe/Paris", "巴黎": "Europe/Paris", "德国": "Europe/Berlin", "柏林": "Europe/Berlin",
    "莫斯科": "Europe/Moscow", "纽约": "America/New_York", "洛杉矶": "America/Los_Angeles",
    "悉尼": "Australia/Sydney", "utc": "UTC", "gmt": "UTC",
}


@lru_cache(maxsize=1)
def _zone_names() -> tuple[str, ...]:
    return tuple(sorted(
        zone for zone in available_timezones() if zone not in ("localtime", "posixrules", "Factory")
    ))


def _zone_by_place(name: str) -> str | None:
    """The IANA name for a known place, a zone's city part ("tokyo") or a mis-cased full name."""
    wanted = name.strip().replace(" ", "_").lower()
    if wanted in PLACES:
        return PLACES[wanted]
    matches = [zone for zone in _zone_names()
               if zone.lower() == wanted or zone.rsplit("/", 1)[-1].lower() == wanted]
    return matches[0] if len(matches) == 1 else None


def _suggest_zones(name: str) -> list[str]:
    """IANA names close to what was asked, matching whole names or just the city part."""
    names = _zone_names()
    by_city = {zone.rsplit("/", 1)[-1].lower(): zone for zone in names}
    wanted = name.strip().replace(" ", "_").lower()
    close = difflib.get_close_matches(wanted, list(by_city), n=3, cutoff=0.75)
    found = [by_city[city] for city in close]
    found += difflib.get_close_matches(name, names, n=3, cutoff=0.75)
    return list(dict.fromkeys(found))[:3]


def resolve_zone(name: str) -> tuple[dt.tzinfo, str]:
    """The timezone for an IANA name or a UTC offset such as "UTC+8"; the bot's own if empty."""
    name = name.strip()
    if not name or name.lower() == "local":
        local = dt.datetime.now().astimezone().tzinfo
        assert local is not None
        return local, "the bot's local time"
    offset = _OFFSET.match(name)
    if offset:
        sign, hours, minutes = offset.group(1), int(offset.group(2)), int(offset.group(3) or 0)
        if hours > 14 or minutes >= 60:
            raise ValueError(f"{name!r} is not a valid UTC offset; offsets run from UTC-12 to UTC+14")
        delta = dt.timedelta(hours=hours, minutes=minutes) * (-1 if sign == "-" else 1)
        return dt.timezone(delta), name
    key = name if "/" in name else _zone_by_place(name) or name
    try:
        return ZoneInfo(key), key
    except (ZoneInfoNotFoundError, ValueError):
        place = _zone_by_place(name)
        if place:
            return ZoneInfo(place), place
        suggestions = _suggest_zones(name)
        hint = f" Did you mean {' or '.join(suggestions)}?" if suggestions else ""
        raise ValueError(
            f"unknown timezone {name!r}: use an IANA name such as Asia/Shanghai (all of China), "
            f"Asia/Tokyo, Europe/London or America/New_York, or an offset such as UTC+8.{hint}"
        ) from None


def _lunar_python() -> ModuleType | None:
    """lunar-python, or None when it is not installed. Imported at the first lunar date asked
    for (~5 ms, 28 modules), not when the bot loads its toolkits."""
    try:
        import lunar_python
    except ImportError:  # pragma: no cover - lunar-python is a dependency; be useful without it
        return None
    return lunar_python


def _lunar_available() -> ModuleType:
    calendar = _lunar_python()
    if calendar is None:
        raise ValueError("the lunar calendar is unavailable: the bot's owner needs to install "
                         "the Python package lunar-python")
    return calendar


def describe_lunar(day: dt.date) -> str:
    """The lunar date of a Gregorian day, with year name, zodiac, ganzhi, festivals and solar term."""
    solar = _lunar_available().Solar.fromYmd(day.year, day.month, day.day)
    lunar = solar.getLunar()
    month = lunar.getMonth()
    leap = month < 0
    lines = [
        f"农历 {lunar.getYearInGanZhi()}年（{lunar.getYearShengXiao()}年）"
        f"{lunar.getMonthInChinese()}月{lunar.getDayInChinese()}",
        f"lunar date: year {lunar.getYear()}, {'leap ' if leap else ''}month {abs(month)}, "
        f"day {lunar.getDay()}",
        f"干支：{lunar.getYearInGanZhi()}年 {lunar.getMonthInGanZhi()}月 {lunar.getDayInGanZhi()}日",
    ]
    festivals = [*lunar.getFestivals(), *solar.getFestivals()]
    if festivals:
        lines.append(f"节日：{'、'.join(festivals)}")
    term = lunar.getJieQi()
    if term:
        lines.append(f"节气：今天是{term}")
    else:
        before, after = lunar.getPrevJieQi(), lunar.getNextJieQi()
        lines.append(f"节气：上一个{before.getName()}（{before.getSolar().toYmd()}），"
                     f"下一个{after.getName()}（{after.getSolar().toYmd()}）")
    return "\n".join(lines)


def _check_year(year: int, calendar: str) -> None:
    if not MIN_YEAR <= year <= MAX_YEAR:
        raise ValueError(f"{calendar} year {year} is out of range: conversions cover "
                         f"{MIN_YEAR} to {MAX_YEAR}")


@tools.tool
def now(timezone: str = "") -> str:
    """Get the current date, weekday and time, with the Chinese lunar date (农历).

    Use it whenever the answer depends on today's date or the time. The lunar date comes with
    the zodiac animal, ganzhi, festivals and solar term (节气).

    Args:
        timezone: IANA timezone (Asia/Shanghai, America/New_York), a UTC offset (UTC+8), or empty.
    """
    zone, label = resolve_zone(timezone)
    moment = dt.datetime.now(zone)
    offset = moment.strftime("%z")
    text = moment.strftime(f"%Y-%m-%d %H:%M:%S %A ({label}, UTC{offset[:3]}:{offset[3:]})")
    text += f"\n星期{WEEKDAYS_ZH[moment.weekday()]}"
    if _lunar_python() is None:
        return text + "\n(lunar date unavailable: lunar-python is not installed)"
    return f"{text}\n{describe_lunar(moment.date())}"


def _parse_date(text: str) -> dt.date:
    match = _DATE.match(text)
    if not match:
        raise ValueError(f"cannot read the date {text!r}: write it as YYYY-MM-DD, e.g. 2024-02-10")
    year, month, day = map(int, match.groups())
    try:
        return dt.date(year, month, day)
    except ValueError as error:
        raise ValueError(f"{text!r} is not a valid Gregorian date: {error}") from None


@tools.tool
def to_lunar(date: str) -> str:
    """Convert a Gregorian (solar) date to the Chinese lunar date (农历).

    Also gives the zodiac animal, ganzhi, festivals and solar term (节气).

    Args:
        date: The Gregorian date as YYYY-MM-DD, e.g. 2024-02-10.
    """
    _lunar_available()
    day = _parse_date(date)
    _check_year(day.year, "Gregorian")
    weekday = f"{day:%A}，星期{WEEKDAYS_ZH[day.weekday()]}"
    return f"{day.isoformat()} ({weekday})\n{describe_lunar(day)}"


@tools.tool
def from_lunar(year: int, month: int, day: int, leap_month: bool = False) -> str:
    """Convert a Chinese lunar date (农历) to the Gregorian (solar) date.

    E.g. to find when the Mid-Autumn Festival (lunar 8/15) or a lunar birthday falls in a year.

    Args:
        year: Lunar year, e.g. 2024 (the lunar year starting at that year's Spring Festival).
        month: Lunar month, 1 (正月) to 12 (腊月).
        day: Day of the lunar month, 1 to 30.
        leap_month: True for the leap month (闰月) that follows `month`.
    """
    calendar = _lunar_available()
    _check_year(year, "lunar")
    if not 1 <= month <= 12:
        raise ValueError(f"lunar month {month} does not exist: months run from 1 (正月) to 12 (腊月)")
    if leap_month:
        leap = calendar.LunarYear.fromYear(year).getLeapMonth()
        if leap != month:
            has = f"its leap month is {leap} (闰{leap}月)" if leap else "it has no leap month"
            raise ValueError(f"lunar year {year} has no leap month {month}: {has}")
    length = calendar.LunarMonth.fromYm(year, -month if leap_month else month).getDayCount()
    if not 1 <= day <= length:
        which = f"{'leap ' if leap_month else ''}month {month} of lunar year {year}"
        raise ValueError(f"day {day} does not exist: {which} has {length} days")
    solar = calendar.Lunar.fromYmd(year, -month if leap_month else month, day).getSolar()
    result = dt.date(solar.getYear(), solar.getMonth(), solar.getDay())
    weekday = f"{result:%A}，星期{WEEKDAYS_ZH[result.weekday()]}"
    return f"{result.isoformat()} ({weekday})\n{describe_lunar(result)}"
