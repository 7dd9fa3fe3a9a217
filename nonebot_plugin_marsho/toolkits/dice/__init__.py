"""Built-in toolkit `dice`: random numbers, picks from a list and dice rolls, computed locally
(nothing is sent out).

Randomness comes from the operating system (`random.SystemRandom`, the source behind `secrets`),
so results cannot be predicted from earlier ones. Every count is bounded, so no call can run long.
"""

from __future__ import annotations

import random
import re

from nonebot_plugin_marsho.tools import Toolbox

tools = Toolbox()

_random = random.SystemRandom()

MAX_COUNT = 100
"""Numbers, picks or dice per call."""
MAX_SIDES = 1000
MAX_TERMS = 10
"""Dice groups and numbers in one dice expression, e.g. 2d6+1d4+3 has three."""
MAX_MODIFIER = 1_000_000
MAX_OPTIONS = 1000
MAX_MAGNITUDE = 10**18
"""Largest absolute value of random_integer's bounds."""
MAX_NOTATION = 100

_TERM = re.compile(
    r"(?P<sign>[+-])?\s*(?:(?P<count>\d*)\s*[dD]\s*(?P<sides>\d+|%)"
    r"(?:\s*(?P<keep>k[hl]?)\s*(?P<kept>\d+))?|(?P<number>\d+))\s*"
)


def _bounded(value: int, low: int, high: int, what: str) -> int:
    if not low <= value <= high:
        raise ValueError(f"{what} must be between {low} and {high}, not {value}")
    return value


@tools.tool
def random_integer(minimum: int = 1, maximum: int = 100, count: int = 1, unique: bool = False) -> str:
    """Draw random whole numbers between minimum and maximum, both included.

    Args:
        minimum: Smallest possible number.
        maximum: Largest possible number.
        count: How many numbers to draw, 1 to 100.
        unique: True to draw without repeats, like lottery numbers.
    """
    _bounded(count, 1, MAX_COUNT, "count")
    _bounded(minimum, -MAX_MAGNITUDE, MAX_MAGNITUDE, "minimum")
    _bounded(maximum, -MAX_MAGNITUDE, MAX_MAGNITUDE, "maximum")
    if minimum > maximum:
        raise ValueError(f"minimum ({minimum}) is larger than maximum ({maximum}); swap them")
    size = maximum - minimum + 1
    if unique and count > size:
        raise ValueError(f"cannot draw {count} different numbers from only {size} "
                         f"({minimum} to {maximum}); lower count or set unique to false")
    if unique:
        numbers = _random.sample(range(minimum, maximum + 1), count)
    else:
        numbers = [_random.randint(minimum, maximum) for _ in range(count)]
    return ", ".join(map(str, numbers))


@tools.tool
def choose(options: list[str], count: int = 1, unique: bool = True) -> str:
    """Pick at random from a list of options, e.g. what to eat or who goes first.

    With count equal to the number of options and unique true, it shuffles the list.

    Args:
        options: The options to pick from.
        count: How many to pick, 1 to 100.
        unique: True to never pick the same option twice.
    """
    _bounded(count, 1, MAX_COUNT, "count")
    if not options:
        raise ValueError("options is empty: give at least one option to choose from")
    if len(options) > MAX_OPTIONS:
        raise ValueError(f"too many options ({len(options)}); at most {MAX_OPTIONS}")
    if unique and count > len(options):
        raise ValueError(f"cannot pick {count} different options from {len(options)}; lower "
                         "count or set unique to false")
    picked = _random.sample(options, count) if unique else _random.choices(options, k=count)
    return "\n".join(picked)


_Term = tuple[int, int, int, str, int]
"""(sign, count, sides, keep, kept); a plain number is sides 0 and count = value."""


def _parse_dice(notation: str) -> list[_Term]:
    """[(sign, count, sides, keep, kept)] per term; a plain number is sides 0 and count = value."""
    text = notation.strip().replace("％", "%")
    if not text:
        raise ValueError("the dice notation is empty; write e.g. 3d6+2")
    if len(text) > MAX_NOTATION:
        raise ValueError(f"the dice notation is too long; at most {MAX_NOTATION} characters")
    terms: list[_Term] = []
    position = 0
    while position < len(text):
        match = _TERM.match(text, position)
        if not match or match.end() == position or (terms and not match.group("sign")):
            raise ValueError(
                f"cannot read {notation!r} at {text[position:position + 10]!r}: write dice as NdM "
                "(N dice of M sides) joined by + or -, e.g. 3d6+2, d20, 2d20kh1 (keep highest), "
                "4d6kl3 (keep lowest), d% (percentile)"
            )
        position = match.end()
        term = _read_term(match)
        terms.append(term)
        if term[2] and len(terms) > MAX_TERMS:  # counted when dice are added
            raise ValueError(f"too many terms; at most {MAX_TERMS}")
    if sum(count for _, count, sides, _, _ in terms if sides) > MAX_COUNT:
        raise ValueError(f"too many dice; at most {MAX_COUNT} in one roll")
    if not any(sides for _, _, sides, _, _ in terms):
        raise ValueError(f"{notation!r} has no dice; write e.g. 1d6 or 3d6+2")
    return terms


def _read_term(match: re.Match[str]) -> _Term:
    """One term of the notation, a number or dice, each part within its bounds."""
    sign = -1 if match.group("sign") == "-" else 1
    if match.group("number") is not None:
        return (sign, _bounded(int(match.group("number")), 0, MAX_MODIFIER, "a number added "
                               "to the roll"), 0, "", 0)
    count = _bounded(int(match.group("count") or 1), 1, MAX_COUNT, "the number of dice")
    sides = 100 if match.group("sides") == "%" else int(match.group("sides"))
    _bounded(sides, 2, MAX_SIDES, "the number of sides")
    keep = {"": "", "k": "kh", "kh": "kh", "kl": "kl"}[(match.group("keep") or "").lower()]
    kept = int(match.group("kept") or 0)
    if keep:
        _bounded(kept, 1, count, f"the number of dice kept (of {count})")
    return (sign, count, sides, keep, kept)


@tools.tool
def roll(notation: str = "1d6") -> str:
    """Roll dice written in dice notation and show each die and the total.

    Args:
        notation: NdM is N dice of M sides, joined by + or - to dice or numbers: "3d6+2", "d20",
            "2d20kh1" (keep highest 1), "4d6kl3" (keep lowest 3), "d%" (1-100). At most 100 dice.
    """
    total = 0
    shown: list[str] = []
    for sign, count, sides, keep, kept in _parse_dice(notation):
        prefix = "-" if sign < 0 else ("+" if shown else "")
        if not sides:
            total += sign * count
            shown.append(f"{prefix}{count}")
            continue
        rolls = [_random.randint(1, sides) for _ in range(count)]
        counted = rolls
        if keep:
            counted = sorted(rolls, reverse=keep == "kh")[:kept]
        subtotal = sum(counted)
        total += sign * subtotal
        name = f"{count}d{sides}{keep}{kept if keep else ''}"
        dropped = f", kept {counted}" if keep else ""
        shown.append(f"{prefix}{name} {rolls}{dropped} = {subtotal}")
    return f"{notation.strip()}: {' '.join(shown)} → total {total}"
