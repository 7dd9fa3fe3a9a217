"""Built-in toolkit `units`: unit conversion, computed locally (nothing is sent out).

Conversions come from pint's unit registry, loaded once on first use (about half a second), with
the traditional Chinese units (市制: 斤, 两, 里, 亩...) added and Chinese unit names understood.
Unit strings are read by the small tokenizer below, never by pint's expression parser, so a unit
such as `m**(9**9**9)` is refused instead of computed.
"""

from __future__ import annotations

import difflib
import math
import re
import threading
from dataclasses import dataclass
from typing import Any

from nonebot_plugin_marsho.tools import Toolbox

tools = Toolbox()

MAX_UNIT_LENGTH = 60
MAX_EXPONENT = 9

# Traditional Chinese units (市制), as fixed in 1959: 1 斤 = 500 g = 10 两, 1 里 = 500 m,
# 1 尺 = 1/3 m, 1 亩 = 10000/15 m².
DEFINITIONS = [
    "shi_jin = 500 * gram",
    "shi_liang = shi_jin / 10",
    "shi_qian = shi_liang / 10",
    "shi_dan = 100 * shi_jin",
    "shi_li = 500 * meter",
    "shi_chi = meter / 3",
    "shi_cun = shi_chi / 10",
    "shi_zhang = 10 * shi_chi",
    "shi_mu = 10000 / 15 * meter ** 2",
    "shi_qing = 100 * shi_mu",
]

# Names people write that pint does not know, → pint's names. Longest match wins for Chinese.
ALIASES = {
    # Chinese: length
    "米": "meter", "公尺": "meter", "千米": "kilometer", "公里": "kilometer", "分米": "decimeter",
    "厘米": "centimeter", "公分": "centimeter", "毫米": "millimeter", "微米": "micrometer",
    "纳米": "nanometer", "英里": "mile", "英尺": "foot", "呎": "foot", "英寸": "inch", "吋": "inch",
    "码": "yard", "海里": "nautical_mile", "光年": "light_year",
    "里": "shi_li", "市里": "shi_li", "丈": "shi_zhang", "尺": "shi_chi", "市尺": "shi_chi",
    "寸": "shi_cun", "市寸": "shi_cun",
    # Chinese: mass
    "克": "gram", "千克": "kilogram", "公斤": "kilogram", "毫克": "milligram", "吨": "metric_ton",
    "公吨": "metric_ton", "磅": "pound", "盎司": "ounce", "克拉": "carat",
    "斤": "shi_jin", "市斤": "shi_jin", "两": "shi_liang", "市两": "shi_liang", "钱": "shi_qian",
    "担": "shi_dan",
    # Chinese: area and volume
    "亩": "shi_mu", "市亩": "shi_mu", "顷": "shi_qing", "公顷": "hectare", "英亩": "acre",
    "升": "liter", "公升": "liter", "毫升": "milliliter", "加仑": "gallon",
    # Chinese: temperature, time, data, energy, power, pressure
    "摄氏度": "degree_Celsius", "华氏度": "degree_Fahrenheit", "开尔文": "kelvin",
    "秒": "second", "毫秒": "millisecond", "分钟": "minute", "小时": "hour", "钟头": "hour",
    "天": "day", "日": "day", "周": "week", "星期": "week", "月": "month", "年": "year",
    "字节": "byte", "比特": "bit", "千字节": "kilobyte", "兆字节": "megabyte", "吉字节": "gigabyte",
    "焦耳": "joule", "千焦": "kilojoule", "卡": "calorie", "千卡": "kilocalorie", "大卡": "kilocalorie",
    "千瓦时": "kilowatt_hour", "瓦": "watt", "千瓦": "kilowatt", "马力": "horsepower",
    "帕": "pascal", "千帕": "kilopascal", "兆帕": "megapascal", "大气压": "standard_atmosphere",
    "节": "knot",
    # symbols and spellings
    "℃": "degree_Celsius", "°C": "degree_Celsius", "℉": "degree_Fahrenheit", "°F": "degree_Fahrenheit",
    "°K": "kelvin", "°": "degree", "Ω": "ohm", "KB": "kilobyte", "Kb": "kilobit", "kmh": "kilometer_per_hour",
    "Bps": "byte / second", "bps": "bit / second", "kbps": "kilobit / second",
    "Kbps": "kilobit / second", "Mbps": "megabit / second", "Gbps": "gigabit / second",
    "Tbps": "terabit / second", "jin": "shi_jin", "liang": "shi_liang", "mu": "shi_mu",
}
# Words that are not units but say how to combine them.
PER_WORDS = {"per", "每", "/"}
POWER_WORDS = {"square": 2, "sq": 2, "平方": 2, "cubic": 3, "cu": 3, "立方": 3}
TIMES_WORDS = {"*", "·", "⋅", "×"}
SUPERSCRIPTS = {"²": 2, "³": 3, "¹": 1}

_CJK = "\u3400-\u9fff"
_SUPERSCRIPT_DIGITS = "\u00b9\u00b2\u00b3\u2070\u2074-\u2079\u207b"
_TOKEN = re.compile(
    r"\s*(?:"
    rf"(?P<cjk>[{_CJK}]+)"  # Chinese names, split by _split_cjk
    rf"|(?P<word>°[A-Za-z]?|[℃℉]|[^\W\d{_SUPERSCRIPT_DIGITS}{_CJK}]+)(?P<digit>[23](?![\d.]))?"
    r"|(?P<power>\*\*|\^)\s*(?P<exponent>[+-]?\d+)"  # m^2, s**-1
    r"|(?P<sup>[²³¹])"
    r"|(?P<op>[*/·⋅×])"
    r")"
)


@dataclass(frozen=True)
class Kind:
    """A family of units that convert into each other, for messages."""

    name: str
    reference: str
    examples: str


KINDS = [
    Kind("length", "meter", "m, km, cm, mm, µm, nm, mile (mi), yard (yd), foot (ft), inch (in), "
         "nautical_mile (nmi), light_year, 里, 丈, 尺, 寸, 公里"),
    Kind("mass", "gram", "g, kg, mg, t (metric ton), lb, oz, ton (US short ton), long_ton, carat, "
         "斤, 两, 钱, 担, 公斤"),
    Kind("temperature", "kelvin", "°C (degC), °F (degF), K, degR; a temperature difference: "
         "delta_degC, delta_degF"),
    Kind("area", "meter ** 2", "m², km², cm², ha, acre, ft², mi², 亩, 顷, 公顷, 平方米"),
    Kind("volume", "liter", "L, mL, m³, cm³ (cc), gallon (US), imperial_gallon, quart, pint, cup, "
         "fluid_ounce, tablespoon, teaspoon, 升, 毫升"),
    Kind("speed", "meter / second", "m/s, km/h, mph, knot, ft/s, any length per time"),
    Kind("time", "second", "s, ms, µs, min, h, day, week, month, year, 秒, 分钟, 小时, 天, 周, 年"),
    Kind("data", "byte", "bit, byte (B), kB, MB, GB, TB (powers of 1000), KiB, MiB, GiB, TiB "
         "(powers of 1024)"),
    Kind("data rate", "byte / second", "bps, kbps, Mbps, Gbps, B/s, MB/s"),
    Kind("energy", "joule", "J, kJ, cal, kcal, Wh, kWh, eV, BTU"),
    Kind("power", "watt", "W, kW, hp"),
    Kind("pressure", "pascal", "Pa, kPa, bar, atm, psi, mmHg"),
    Kind("angle", "radian", "degree (deg), radian (rad), turn, arcminute, arcsecond"),
]

INFORMATION_UNITS = {"bit", "byte", "baud"}
"""pint counts data as dimensionless; these roots tell data apart from angles and plain numbers."""

_registry: Any = None
_lock = threading.RLock()
"""Guards building the registry, and conversions (pint caches as it parses)."""


def registry() -> Any:
    """pint's unit registry with the Chinese units, built once (pint is imported only here)."""
    global _registry
    with _lock:
        if _registry is None:
            import pint

            ureg: Any = pint.UnitRegistry()
            for line in DEFINITIONS:
                ureg.define(line)
            _registry = ureg
    return _registry


class UnitError(ValueError):
    """A unit cannot be read or the conversion makes no sense; the message says what is possible."""


def _known_names() -> list[str]:
    return [*ALIASES, *registry()._units]


def _unknown(name: str, text: str) -> UnitError:
    close = difflib.get_close_matches(name, _known_names(), n=3, cutoff=0.7)
    if not close:
        close = [n for n in _known_names() if n.lower() == name.lower()][:3]
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    kinds = "; ".join(f"{kind.name}: {kind.examples}" for kind in KINDS)
    where = f" in {text!r}" if text.strip() != name else ""
    return UnitError(f"unknown unit {name!r}{where}.{hint} Units I know include — {kinds}")


def _unit_of_name(name: str, text: str) -> Any:
    ureg = registry()
    import pint

    for candidate in (ALIASES.get(name, name), ALIASES.get(name.lower(), name.lower())):
        try:
            return ureg.Unit(candidate)
        except (pint.UndefinedUnitError, AttributeError, AssertionError, ValueError, TypeError):
            continue
    raise _unknown(name, text)


def _split_cjk(run: str, text: str) -> list[str]:
    """A run of Chinese characters as unit names and words (平方, 每), longest match first."""
    vocabulary = {*ALIASES, *PER_WORDS, *POWER_WORDS}
    pieces: list[str] = []
    position = 0
    while position < len(run):
        for end in range(len(run), position, -1):
            if run[position:end] in vocabulary:
                pieces.append(run[position:end])
                position = end
                break
        else:
            raise _unknown(run[position:], text)
    return pieces


def parse_unit(text: str) -> Any:
    """A pint Unit from text such as "km/h", "m²", "kg*m/s^2", "平方米" or "公里每小时".

    Only unit names, * / per 每, and small integer exponents are read; numbers anywhere else are
    refused, so the text can never make pint compute something huge.
    """
    source = text.strip()
    if not source:
        raise UnitError("the unit is empty; give a unit such as km, °C or MB")
    if len(source) > MAX_UNIT_LENGTH:
        raise UnitError(f"the unit {source[:20]!r}… is too long; at most {MAX_UNIT_LENGTH} characters")
    if source in ALIASES:  # °C, ℃, KB... as a whole
        return _unit_of_name(source, source)
    ureg = registry()
    result = ureg.Unit("")  # dimensionless one
    last: Any = None  # the unit the next exponent applies to, with its sign
    divide = False
    pending_power = 1
    position = 0

    def apply(unit: Any, power: int) -> None:
        nonlocal result, last, divide, pending_power
        power *= pending_power
        factor = unit ** (-power if divide else power)
        result = result * factor
        last = (unit, -1 if divide else 1, power)
        divide, pending_power = False, 1

    def raise_last(exponent: int) -> None:
        nonlocal result, last
        if last is None:
            raise UnitError(f"an exponent in {source!r} has no unit before it")
        if abs(exponent) > MAX_EXPONENT:
            raise UnitError(f"the exponent {exponent} in {source!r} is too large; at most {MAX_EXPONENT}")
        unit, sign, power = last
        result = result / unit ** (sign * power) * unit ** (sign * power * exponent)
        last = None

    while position < len(source):
        match = _TOKEN.match(source, position)
        if not match or match.end() == position:
            rest = source[position:].strip()
            raise UnitError(
                f"cannot read the unit {source!r} at {rest[:10]!r}: write unit names joined by * "
                "and / with small exponents, e.g. km/h, m^2, kg*m/s², 平方米, 公里每小时"
            )
        position = match.end()
        if match.group("cjk"):
            for piece in _split_cjk(match.group("cjk"), source):
                if piece in PER_WORDS:
                    divide = True
                elif piece in POWER_WORDS:
                    pending_power = POWER_WORDS[piece]
                else:
                    apply(_unit_of_name(piece, source), 1)
        elif match.group("word"):
            word = match.group("word")
            if word.lower() in PER_WORDS:
                divide = True
            elif word.lower() in POWER_WORDS:
                pending_power = POWER_WORDS[word.lower()]
            else:
                apply(_unit_of_name(word, source), int(match.group("digit") or 1))
        elif match.group("power"):
            raise_last(int(match.group("exponent")))
        elif match.group("sup"):
            raise_last(SUPERSCRIPTS[match.group("sup")])
        elif match.group("op") == "/":
            divide = True
    if divide or pending_power != 1:
        raise UnitError(f"the unit {source!r} ends too early: a unit must follow '/', per or square")
    return result


def _information(unit: Any) -> int:
    """How many times data (bits, bytes) appears in the unit: MB → 1, MB/s → 1, m → 0."""
    ureg = registry()
    count = 0
    for name, power in unit._units.items():
        roots = {root for _, root, _ in ureg.parse_unit_name(name)}
        if roots & INFORMATION_UNITS:
            count += power
    return count


def kind_of(unit: Any) -> str:
    """The name of the unit's family ("length", "data rate"...), or its dimensions."""
    ureg = registry()
    for kind in KINDS:
        reference = ureg.Unit(kind.reference)
        if reference.dimensionality == unit.dimensionality and _information(reference) == _information(unit):
            return kind.name
    dimensions = str(unit.dimensionality)
    return "a plain number" if dimensions == "dimensionless" else dimensions


def _examples(kind: str) -> str:
    return next((f"; {k.name} units: {k.examples}" for k in KINDS if k.name == kind), "")


def format_number(value: float) -> str:
    """Up to 10 significant digits, without float noise."""
    if value == 0:
        return "0"
    return f"{value:.10g}"


def _same_kind(source: Any, target: Any) -> bool:
    return source.dimensionality == target.dimensionality and _information(source) == _information(target)


TEMPERATURE_LETTERS = {"C": "degree_Celsius", "F": "degree_Fahrenheit"}
"""A bare C or F is coulomb or farad to pint, but beside a temperature it means °C or °F."""


def _parse_pair(from_unit: str, to_unit: str) -> tuple[Any, Any]:
    first, second = from_unit.strip(), to_unit.strip()
    if first in TEMPERATURE_LETTERS and second in TEMPERATURE_LETTERS:
        return parse_unit(TEMPERATURE_LETTERS[first]), parse_unit(TEMPERATURE_LETTERS[second])
    source = parse_unit(TEMPERATURE_LETTERS.get(first, first))
    target = parse_unit(TEMPERATURE_LETTERS.get(second, second))
    if first in TEMPERATURE_LETTERS and kind_of(target) != "temperature":
        source = parse_unit(first)
    if second in TEMPERATURE_LETTERS and kind_of(source) != "temperature":
        target = parse_unit(second)
    return source, target


@tools.tool
def convert(value: float, from_unit: str, to_unit: str) -> str:
    """Convert an amount from one unit to another.

    Length, mass, temperature (°C, °F, K), area, volume, speed, time, data sizes (MB, GiB...),
    energy, power, pressure, angles, and Chinese units (斤, 两, 钱, 里, 丈, 尺, 寸, 亩, 公里,
    公斤...). Compound units work too: km/h, kg*m/s², 平方米, 公里每小时.

    Args:
        value: The amount to convert, e.g. 100.
        from_unit: The unit of the amount, e.g. "°F", "mile", "斤", "km/h", "MB".
        to_unit: The unit wanted, e.g. "°C", "km", "kg", "m/s", "MiB".
    """
    import pint

    if not math.isfinite(value):
        raise UnitError(f"the value {value} is not a finite number")
    with _lock:
        source, target = _parse_pair(from_unit, to_unit)
        if not _same_kind(source, target):
            source_kind, target_kind = kind_of(source), kind_of(target)
            raise UnitError(
                f"cannot convert {from_unit!r} ({source_kind}) to {to_unit!r} ({target_kind}): "
                f"they measure different things{_examples(source_kind)}"
            )
        try:
            result = float(registry().Quantity(value, source).to(target).magnitude)
        except (pint.OffsetUnitCalculusError, pint.DimensionalityError):
            raise UnitError(
                "°C and °F can only be converted on their own, not inside a compound unit "
                "(their zero is offset); for a change of temperature use delta_degC or delta_degF"
            ) from None
        except (OverflowError, ZeroDivisionError):
            result = math.inf
    if not math.isfinite(result):
        raise UnitError(f"{format_number(value)} {from_unit} in {to_unit} is too large a number")
    text = f"{format_number(value)} {from_unit.strip()} = {format_number(result)} {to_unit.strip()}"
    read_as = f"{source} → {target}"
    if read_as != f"{from_unit.strip()} → {to_unit.strip()}":
        text += f"\n(units read as: {read_as})"
    return text
