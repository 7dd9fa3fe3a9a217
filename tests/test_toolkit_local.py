"""The built-in local toolkits (clock, calculator, dice, units), called through the runner as the
model calls them: right answers, every bound answered quickly with an error, and clear errors for
bad input."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from nonebot_plugin_marsho.tools import (
    BUILTIN_TOOLSET,
    ToolCall,
    ToolResult,
    ToolRunner,
    Toolset,
    ToolsetSource,
    load_toolset,
)

LOCAL = {
    "clock": {"clock__now", "clock__to_lunar", "clock__from_lunar"},
    "calculator": {"calculator__calculate"},
    "dice": {"dice__roll", "dice__random_integer", "dice__choose"},
    "units": {"units__convert"},
}

QUICK = 0.5
"""Seconds within which a refused expression must be answered (it is in fact ~1 ms)."""


@pytest.fixture(scope="module")
def toolset() -> Toolset:
    return load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")], enabled=list(LOCAL))


@pytest.fixture(scope="module")
def runner(toolset: Toolset) -> Iterator[ToolRunner]:
    runner = ToolRunner(toolset, timeout=10)
    yield runner
    runner.close()


async def call(runner: ToolRunner, name: str, **arguments: Any) -> ToolResult:
    return await runner.run_one(ToolCall("call-1", name, json.dumps(arguments, ensure_ascii=False)))


async def ok(runner: ToolRunner, name: str, **arguments: Any) -> str:
    result = await call(runner, name, **arguments)
    assert result.status == "ok", result.content
    return result.content


async def error(runner: ToolRunner, name: str, **arguments: Any) -> str:
    result = await call(runner, name, **arguments)
    assert result.status == "error", result.content
    assert result.content.startswith("Error: ")
    return result.content


# --- loading ------------------------------------------------------------------------------------

def test_local_toolkits_load_from_the_builtin_folder_on_by_default() -> None:
    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")])  # nothing enabled
    loaded = {toolkit.name: toolkit for toolkit in toolset.toolkits}
    assert [p for p in toolset.problems if p.toolkit in LOCAL] == []
    for name, tools in LOCAL.items():
        assert name in loaded, f"{name} is not on by default"
        assert {tool.name for tool in loaded[name].tools} == tools
        assert loaded[name].sends == ""  # local: nothing leaves the bot
        assert name not in toolset.available
        for tool in loaded[name].tools:
            assert tool.permission == "everyone"
            # the docstring's first line is the whole summary: a sentence, not a broken line
            assert tool.summary.endswith("."), tool.summary
            assert "\n\n" not in tool.description.split("\n\n")[0]
            properties = tool.parameters["properties"]
            assert all(spec.get("description") for spec in properties.values()), tool.name


def test_toolkits_describe_themselves_without_tools_json() -> None:
    for name in LOCAL:
        folder = BUILTIN_TOOLSET / name
        assert (folder / "__init__.py").is_file()
        assert not (folder / "tools.json").exists()
        assert "Toolbox()" in (folder / "__init__.py").read_text(encoding="utf-8")


# --- clock --------------------------------------------------------------------------------------

LUNAR_LINE = re.compile(r"lunar date: year (\d+), (leap )?month (\d+), day (\d+)")


async def test_now_tells_date_time_and_lunar_date(runner: ToolRunner) -> None:
    before = datetime.now().astimezone()
    text = await ok(runner, "clock__now")
    after = datetime.now().astimezone()
    assert text.split(" ")[0] in {f"{before:%Y-%m-%d}", f"{after:%Y-%m-%d}"}
    assert "the bot's local time" in text
    assert "农历" in text and "年（" in text and LUNAR_LINE.search(text)
    assert "干支：" in text and "节气：" in text


async def test_now_in_a_timezone(runner: ToolRunner) -> None:
    shanghai = ZoneInfo("Asia/Shanghai")
    days = {f"{datetime.now(shanghai):%Y-%m-%d}"}
    text = await ok(runner, "clock__now", timezone="Asia/Shanghai")
    days.add(f"{datetime.now(shanghai):%Y-%m-%d}")
    assert text.split(" ")[0] in days
    assert "(Asia/Shanghai, UTC+08:00)" in text
    for spelling in ("Beijing", "北京时间", "shanghai", "asia/shanghai"):
        assert "(Asia/Shanghai, UTC+08:00)" in await ok(runner, "clock__now", timezone=spelling)
    assert "UTC+05:45)" in await ok(runner, "clock__now", timezone="UTC+5:45")
    assert "UTC-03:00)" in await ok(runner, "clock__now", timezone="GMT-3")


async def test_now_rejects_unknown_timezones_with_suggestions(runner: ToolRunner) -> None:
    text = await error(runner, "clock__now", timezone="Europe/Pariss")
    assert "unknown timezone 'Europe/Pariss'" in text and "Europe/Paris" in text
    assert "Asia/Shanghai" in await error(runner, "clock__now", timezone="Mars/Olympus_Mons")
    assert "UTC-12 to UTC+14" in await error(runner, "clock__now", timezone="UTC+15")
    assert "unknown timezone" in await error(runner, "clock__now", timezone="../../etc/passwd")


@pytest.mark.parametrize(("day", "expected"), [
    ("2024-02-10", ["甲辰年（龙年）正月初一", "year 2024, month 1, day 1", "春节", "Saturday"]),
    ("2023-03-22", ["癸卯年（兔年）闰二月初一", "year 2023, leap month 2, day 1"]),
    ("2025-01-28", ["甲辰年（龙年）腊月廿九", "除夕"]),  # a 29-day twelfth month: New Year's Eve on 29
    ("2024-09-17", ["八月十五", "中秋节"]),
    ("2024年6月10日", ["五月初五", "端午节"]),
    ("2024/4/4", ["今天是清明"]),
    ("2000-01-01", ["己卯年（兔年）冬月廿五", "干支：己卯年"]),
])
async def test_to_lunar(runner: ToolRunner, day: str, expected: list[str]) -> None:
    text = await ok(runner, "clock__to_lunar", date=day)
    for part in expected:
        assert part in text


@pytest.mark.parametrize(("day", "message"), [
    ("2024-02-30", "not a valid Gregorian date"),
    ("tomorrow", "write it as YYYY-MM-DD"),
    ("", "write it as YYYY-MM-DD"),
    ("1800-01-01", "out of range"),
])
async def test_to_lunar_refuses_bad_dates(runner: ToolRunner, day: str, message: str) -> None:
    assert message in await error(runner, "clock__to_lunar", date=day)


async def test_from_lunar(runner: ToolRunner) -> None:
    assert (await ok(runner, "clock__from_lunar", year=2024, month=8, day=15)).startswith("2024-09-17")
    assert (await ok(runner, "clock__from_lunar", year=2024, month=1, day=1)).startswith("2024-02-10")
    leap = await ok(runner, "clock__from_lunar", year=2023, month=2, day=1, leap_month=True)
    assert leap.startswith("2023-03-22") and "闰二月初一" in leap
    plain = await ok(runner, "clock__from_lunar", year=2023, month=2, day=1)
    assert plain.startswith("2023-02-20")


@pytest.mark.parametrize(("arguments", "message"), [
    ({"year": 2024, "month": 4, "day": 1, "leap_month": True}, "has no leap month 4: it has no leap month"),
    ({"year": 2023, "month": 3, "day": 1, "leap_month": True}, "its leap month is 2"),
    ({"year": 2024, "month": 13, "day": 1}, "months run from 1 (正月) to 12 (腊月)"),
    ({"year": 2024, "month": 1, "day": 30}, "month 1 of lunar year 2024 has 29 days"),
    ({"year": 2024, "month": 1, "day": 0}, "day 0 does not exist"),
    ({"year": 1000, "month": 1, "day": 1}, "out of range"),
])
async def test_from_lunar_refuses_dates_that_do_not_exist(
    runner: ToolRunner, arguments: dict[str, Any], message: str
) -> None:
    assert message in await error(runner, "clock__from_lunar", **arguments)


async def test_lunar_conversions_round_trip(runner: ToolRunner) -> None:
    day = date(2019, 12, 25)
    while day < date(2026, 1, 1):
        text = await ok(runner, "clock__to_lunar", date=day.isoformat())
        year, leap, month, lunar_day = LUNAR_LINE.search(text).groups()  # type: ignore[union-attr]
        back = await ok(runner, "clock__from_lunar", year=int(year), month=int(month),
                        day=int(lunar_day), leap_month=bool(leap))
        assert back.startswith(day.isoformat()), (day, text, back)
        day += timedelta(days=23)


# --- calculator ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("expression", "value"), [
    ("1 + 2", "3"),
    ("2^10", "1024"),
    ("(3 + 4) × 2 ÷ 7", "2"),
    ("7 − 10", "-3"),
    ("0.1 + 0.2", "0.3"),
    ("7 // 2", "3"),
    ("-7 // 2", "-4"),
    ("7 % 3", "1"),
    ("-2**2", "-4"),
    ("2**3**2", "512"),
    ("2**100", str(2**100)),
    ("2**-2", "0.25"),
    ("sqrt(16)", "4"),
    ("√16 + 3²", "13"),
    ("factorial(10)", "3628800"),
    ("log(8, 2)", "3"),
    ("ln(e)", "1"),
    ("log10(1000)", "3"),
    ("sin(pi/2)", "1"),
    ("cos(radians(60))", "0.5"),
    ("abs(-3) + floor(2.7) + ceil(2.1)", "8"),
    ("round(3.14159, 2)", "3.14"),
    ("exp(0)", "1"),
    ("comb(5, 2) + perm(5, 2) + gcd(12, 18) + lcm(4, 6)", "48"),
    ("max(1, 5, 3) - min(4, 2)", "3"),
    ("1 << 10", "1024"),
    ("（1 + 2）× 3 =", "9"),
])
async def test_calculate(runner: ToolRunner, expression: str, value: str) -> None:
    text = await ok(runner, "calculator__calculate", expression=expression)
    assert text.rsplit(" = ", 1)[1] == value, text


@pytest.mark.parametrize(("expression", "message"), [
    ("9**9**9", "too large"),
    ("9^9^9", "too large"),
    ("2**10**10", "too large"),
    ("99999**99999", "too large"),
    ("(2**5000)**3", "too large"),
    ("(2**5000) * (2**5001)", "too large"),
    ("factorial(100000)", "the limit is factorial(1000)"),
    ("factorial(10**100)", "the limit is factorial(1000)"),
    ("factorial(factorial(20))", "the limit is factorial(1000)"),
    ("comb(10**9, 5)", "allows n up to 1000"),
    ("1 << 10**9", "too large"),
    ("1 << 100000", "too large"),
    ("10.0**400", "too large"),
    ("exp(10**6)", "too large"),
    ("1e308 * 10", "too large"),
    ("1e999", "too large"),
    ("round(1, -10**9)", "at most 100 digits"),
    ("lcm(2**3000-1, 2**2999-1, 2**2998-1, 2**2997-1)", "too large"),
    ("-" * 300 + "1", "nested too deeply"),
    ("(" * 240 + "1" + ")" * 240, "nested"),
    ("1+" * 300 + "1", "at most 500 are allowed"),
    ("9" * 10_000, "at most 500 are allowed"),
])
async def test_calculate_refuses_huge_work_quickly(runner: ToolRunner, expression: str, message: str) -> None:
    started = time.perf_counter()
    text = await error(runner, "calculator__calculate", expression=expression)
    assert time.perf_counter() - started < QUICK
    assert message in text


@pytest.mark.parametrize(("expression", "message"), [
    ("1/0", "division by zero in 1/0"),
    ("5 % 0", "division by zero in 5 % 0"),
    ("1 // (2-2)", "division by zero in 1 // (2-2)"),
    ("0**-1", "division by zero"),
    ("2 +* 3", "bad syntax at character 4"),
    ("sqrt(2", "bad syntax"),
    ("2 pi", "write 2*pi"),
    ("2(3)", "use * to multiply"),
    ("", "the expression is empty"),
    ("sqrt(-1)", "outside the domain of sqrt()"),
    ("log(0)", "outside the domain of log()"),
    ("(-8)**(1/3)", "not a real number"),
    ("factorial(2.5)", "must be a whole number"),
    ("sin(1, 2)", "wrong number of arguments for sin()"),
    ("foo(1)", "unknown function 'foo'"),
    ("x + 1", "unknown name 'x'"),
    ("1,000", "write 1000, not 1,000"),
    ("1 < 2", "comparisons are not supported"),
    ("'a' * 3", "is not a number"),
    ("True + 1", "is not a number"),
    ("2j", "is not a number"),
    ("[1, 2]", "is not allowed"),
    ("lambda: 1", "is not allowed"),
    ("__import__('os').system('echo pwned')", "unknown function"),
    ("open('/etc/passwd')", "unknown function 'open'"),
    ("(1).__class__", "attributes are not supported"),
    ("math.sqrt(4)", "unknown function 'math.sqrt'"),
])
async def test_calculate_explains_bad_expressions(runner: ToolRunner, expression: str, message: str) -> None:
    assert message in await error(runner, "calculator__calculate", expression=expression)


async def test_calculator_needs_an_expression(runner: ToolRunner) -> None:
    result = await call(runner, "calculator__calculate")
    assert result.status == "bad_arguments" and "expression" in result.content


# --- dice ---------------------------------------------------------------------------------------

DICE = re.compile(r"(\d+)d(\d+)(?:k[hl]\d+)? \[([\d, ]+)\](?:, kept \[([\d, ]+)\])? = (\d+)")


def _numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(", ")]


async def test_roll(runner: ToolRunner) -> None:
    for _ in range(20):
        text = await ok(runner, "dice__roll", notation="3d6+2")
        count, sides, rolls, _, subtotal = DICE.search(text).groups()  # type: ignore[union-attr]
        dice = _numbers(rolls)
        assert (count, sides, len(dice)) == ("3", "6", 3)
        assert all(1 <= d <= 6 for d in dice) and sum(dice) == int(subtotal)
        assert text.endswith(f"→ total {sum(dice) + 2}")


async def test_roll_keep_highest_and_lowest(runner: ToolRunner) -> None:
    text = await ok(runner, "dice__roll", notation="2d20kh1")
    _, _, rolls, kept, subtotal = DICE.search(text).groups()  # type: ignore[union-attr]
    assert _numbers(kept) == [max(_numbers(rolls))] and int(subtotal) == max(_numbers(rolls))
    text = await ok(runner, "dice__roll", notation="4d6kl3")
    _, _, rolls, kept, _ = DICE.search(text).groups()  # type: ignore[union-attr]
    assert _numbers(kept) == sorted(_numbers(rolls))[:3]


async def test_roll_shorthands(runner: ToolRunner) -> None:
    for _ in range(10):
        total = int((await ok(runner, "dice__roll", notation="d%")).rsplit(" ", 1)[1])
        assert 1 <= total <= 100
    assert "1d6 [" in await ok(runner, "dice__roll")  # the default: one six-sided die
    text = await ok(runner, "dice__roll", notation="1d4 + 1d8 - 1")
    assert "1d4 [" in text and "+1d8 [" in text and "-1" in text


@pytest.mark.parametrize(("notation", "message"), [
    ("1000d6", "the number of dice must be between 1 and 100, not 1000"),
    ("99999999999999999999d6", "the number of dice must be between 1 and 100"),
    ("3d100000", "the number of sides must be between 2 and 1000"),
    ("3d1", "the number of sides must be between 2 and 1000"),
    ("50d6+51d6", "too many dice; at most 100"),
    ("+".join(["1d6"] * 11), "too many terms"),
    ("1d6+9999999", "between 0 and 1000000"),
    ("2d6kh3", "the number of dice kept (of 2) must be between 1 and 2"),
    ("", "the dice notation is empty"),
    ("5", "has no dice"),
    ("abc", "write dice as NdM"),
    ("3d6 2", "write dice as NdM"),
    ("d6" * 60, "too long"),
])
async def test_roll_refuses_bad_notation(runner: ToolRunner, notation: str, message: str) -> None:
    started = time.perf_counter()
    assert message in await error(runner, "dice__roll", notation=notation)
    assert time.perf_counter() - started < QUICK


async def test_random_integer(runner: ToolRunner) -> None:
    numbers = _numbers(await ok(runner, "dice__random_integer", minimum=1, maximum=6, count=100))
    assert len(numbers) == 100 and set(numbers) <= set(range(1, 7)) and len(set(numbers)) > 1
    lottery = _numbers(await ok(runner, "dice__random_integer", minimum=1, maximum=49, count=6,
                                unique=True))
    assert len(set(lottery)) == 6 and all(1 <= n <= 49 for n in lottery)
    assert 1 <= int(await ok(runner, "dice__random_integer")) <= 100
    assert int(await ok(runner, "dice__random_integer", minimum=-5, maximum=-5)) == -5


@pytest.mark.parametrize(("arguments", "message"), [
    ({"minimum": 6, "maximum": 1}, "minimum (6) is larger than maximum (1)"),
    ({"count": 0}, "count must be between 1 and 100"),
    ({"count": 101}, "count must be between 1 and 100"),
    ({"minimum": 1, "maximum": 3, "count": 4, "unique": True}, "cannot draw 4 different numbers"),
    ({"maximum": 10**30}, "maximum must be between"),
])
async def test_random_integer_refuses_bad_ranges(
    runner: ToolRunner, arguments: dict[str, Any], message: str
) -> None:
    assert message in await error(runner, "dice__random_integer", **arguments)


async def test_choose(runner: ToolRunner) -> None:
    options = ["noodles", "dumplings", "hot pot", "烧烤"]
    assert await ok(runner, "dice__choose", options=options) in options
    shuffled = (await ok(runner, "dice__choose", options=options, count=4)).split("\n")
    assert sorted(shuffled) == sorted(options)
    repeated = (await ok(runner, "dice__choose", options=["a"], count=3, unique=False)).split("\n")
    assert repeated == ["a", "a", "a"]
    assert "options is empty" in await error(runner, "dice__choose", options=[])
    assert "cannot pick 3 different options from 2" in await error(
        runner, "dice__choose", options=["a", "b"], count=3)
    assert "too many options" in await error(
        runner, "dice__choose", options=[str(i) for i in range(1001)])


def test_dice_use_the_system_random_source(toolset: Toolset) -> None:
    for name in LOCAL["dice"]:
        source = toolset.tools[name].func.__globals__["_random"]
        assert isinstance(source, random.SystemRandom)


# --- units --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "source", "target", "expected"), [
    (100, "°F", "°C", "37.77777778"),
    (0, "℃", "℉", "32"),
    (300, "K", "degC", "26.85"),
    (37, "C", "F", "98.6"),  # a bare C and F beside each other are temperatures
    (-40, "celsius", "fahrenheit", "-40"),
    (1, "mile", "km", "1.609344"),
    (5, "ft", "cm", "152.4"),
    (100, "斤", "kg", "50"),
    (1, "斤", "两", "10"),
    (1, "kg", "市斤", "2"),
    (1, "里", "km", "0.5"),
    (3, "尺", "m", "1"),
    (1, "公顷", "亩", "15"),
    (1, "亩", "平方米", "666.6666667"),
    (100, "km/h", "m/s", "27.77777778"),
    (60, "公里每小时", "米每秒", "16.66666667"),
    (1, "knot", "km/h", "1.852"),
    (1, "m³", "L", "1000"),
    (1, "cubic meter", "liter", "1000"),
    (1, "square mile", "km^2", "2.58998811"),
    (2, "h", "min", "120"),
    (1, "天", "小时", "24"),
    (1, "GiB", "B", "1073741824"),
    (1, "GB", "MiB", "953.6743164"),
    (100, "Mbps", "MB/s", "12.5"),
    (1, "Bps", "bps", "8"),
    (1, "KB", "B", "1000"),
    (1, "kWh", "kJ", "3600"),
    (180, "degree", "rad", "3.141592654"),
    (1, "kg*m/s^2", "N", "1"),
])
async def test_convert(runner: ToolRunner, value: float, source: str, target: str, expected: str) -> None:
    text = await ok(runner, "units__convert", value=value, from_unit=source, to_unit=target)
    first = text.split("\n")[0]
    assert first.rsplit(" = ", 1)[1] == f"{expected} {target}", text


async def test_convert_says_how_it_read_the_units(runner: ToolRunner) -> None:
    text = await ok(runner, "units__convert", value=1, from_unit="ton", to_unit="kg")
    assert "907.18474 kg" in text and "(units read as: ton → kilogram)" in text


@pytest.mark.parametrize(("source", "target", "message"), [
    ("kg", "m", "cannot convert 'kg' (mass) to 'm' (length): they measure different things; mass "
     "units: g, kg"),
    ("MB", "rad", "'MB' (data) to 'rad' (angle)"),
    ("MB", "Hz", "'MB' (data)"),
    ("°C", "km/h", "(temperature) to 'km/h' (speed)"),
    ("foo", "m", "unknown unit 'foo'. Did you mean foot"),
    ("m", "bananas", "unknown unit 'bananas'"),
    ("公里斤斤计较", "m", "unknown unit"),
    ("degC/min", "K/s", "delta_degC"),
    ("", "m", "the unit is empty"),
    ("km/", "m", "ends too early"),
    ("m" * 61, "m", "too long"),
    ("m**(9**9**9)", "km", "cannot read the unit"),
    ("m^9^9^9", "km", "has no unit before it"),
    ("m^99", "km^99", "at most 9"),
    ("1e999 m", "m", "cannot read the unit"),
])
async def test_convert_refuses_with_what_is_possible(
    runner: ToolRunner, source: str, target: str, message: str
) -> None:
    started = time.perf_counter()
    text = await error(runner, "units__convert", value=1, from_unit=source, to_unit=target)
    assert message in text
    assert time.perf_counter() - started < 10  # the first call may build pint's registry (~1 s)


async def test_unknown_units_list_the_kinds_there_are(runner: ToolRunner) -> None:
    text = await error(runner, "units__convert", value=1, from_unit="zorkmid", to_unit="m")
    for kind in ("length:", "mass:", "temperature:", "area:", "volume:", "speed:", "time:", "data:",
                 "斤", "亩"):
        assert kind in text


async def test_convert_refuses_numbers_it_cannot_give(runner: ToolRunner) -> None:
    assert "too large a number" in await error(
        runner, "units__convert", value=1e308, from_unit="km", to_unit="nm")
    result = await runner.run_one(ToolCall(
        "c", "units__convert", '{"value": NaN, "from_unit": "m", "to_unit": "km"}'))
    assert not result.ok and "finite" in result.content
