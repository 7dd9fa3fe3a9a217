"""Built-in toolkit `calculator`: arithmetic, computed locally (nothing is sent out).

The expression is parsed with `ast` and walked node by node: only numbers, arithmetic operators
and the functions and constants below are accepted, so nothing of Python beyond them can run
(no `eval`). Every step that could blow up (`9**9**9`, `factorial(10**6)`, `1 << 10**9`) is
checked *before* it is computed, so a bad expression answers with an error at once instead of
hanging the worker thread or eating memory.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable
from typing import Any

from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

tools = Toolbox()

MAX_LENGTH = 500
"""Characters of an expression."""
MAX_DEPTH = 200
"""Nesting of the expression tree: parentheses, operators applied to operators, calls."""
MAX_INT_BITS = 10_000
"""Size of an exact integer result or intermediate value (about 3000 decimal digits)."""
MAX_FACTORIAL = 1_000
"""Largest n for factorial(n), comb(n, k) and perm(n, k)."""
MAX_ROUND_DIGITS = 100
"""Largest number of digits round() may keep or drop."""

Number = int | float

# What people type → what Python's grammar means by it. `^` is taken as power, as on calculators.
_SPELLINGS = {
    "×": "*", "✕": "*", "·": "*", "÷": "/", "∕": "/", "−": "-", "–": "-", "^": "**",
    "（": "(", "）": ")", "，": ",", "π": "pi", "²": "**2", "³": "**3", "√": "sqrt",
}
_SPELLING_PATTERN = re.compile("|".join(map(re.escape, _SPELLINGS)))
_ROOT_OF_TERM = re.compile(r"√\s*([0-9.]+|pi|tau|π|e)(?![\w(])")
"""√2 → sqrt(2): a root sign before a plain number or name."""


class CalculationError(ValueError):
    """The expression cannot be evaluated; the message says what was wrong and where."""


def _segment(source: str, node: ast.AST) -> str:
    return ast.get_source_segment(source, node) or ast.unparse(node)


def _fits(value: Number, what: str) -> Number:
    """`value` if it is a finite number of bounded size, else a CalculationError."""
    if isinstance(value, complex):
        raise CalculationError(f"{what} is not a real number (it would be {value:.6g})")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError(f"{what} is too large (overflows to {value}) or undefined")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculationError(
            f"{what} is too large: it has more than {MAX_INT_BITS * 0.30103:.0f} digits"
        )
    return value


def _as_int(value: Number, what: str) -> int:
    """An integer argument (a float such as 5.0 counts) or a CalculationError."""
    if isinstance(value, float):
        if not value.is_integer():
            raise CalculationError(f"{what} must be a whole number, not {value:g}")
        return int(value)
    return value


def _power(base: Number, exponent: Number, where: str) -> Number:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        bits = exponent * math.log2(abs(base))
        if bits > MAX_INT_BITS:
            raise CalculationError(
                f"{where} is too large: the result would have about {bits * 0.30103:.3g} digits "
                f"(at most {MAX_INT_BITS * 0.30103:.0f} are allowed)"
            )
    if base == 0 and exponent < 0:
        raise CalculationError(f"division by zero in {where}: 0 to a negative power")
    return base**exponent  # floats overflow with OverflowError; caught by the caller


def _shift(value: Number, count: Number, where: str, left: bool) -> int:
    value, count = _as_int(value, f"the left side of {where}"), _as_int(count, f"the shift in {where}")
    if count < 0:
        raise CalculationError(f"negative shift count in {where}")
    if left:
        if value and value.bit_length() + count > MAX_INT_BITS:
            raise CalculationError(f"{where} is too large: more than {MAX_INT_BITS} bits")
        return value << count
    return value >> min(count, MAX_INT_BITS + 1)


def _divide(func: Callable[[Any, Any], Number]) -> Callable[[Number, Number, str], Number]:
    def divide(left: Number, right: Number, where: str) -> Number:
        if right == 0:
            raise CalculationError(f"division by zero in {where}")
        return func(left, right)
    return divide


_BINARY: dict[type[ast.operator], Callable[[Number, Number, str], Number]] = {
    ast.Add: lambda a, b, _: a + b,
    ast.Sub: lambda a, b, _: a - b,
    ast.Mult: lambda a, b, _: a * b,
    ast.Div: _divide(operator.truediv),
    ast.FloorDiv: _divide(operator.floordiv),
    ast.Mod: _divide(operator.mod),
    ast.Pow: _power,
    ast.LShift: lambda a, b, where: _shift(a, b, where, left=True),
    ast.RShift: lambda a, b, where: _shift(a, b, where, left=False),
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


# --- functions: each checks its own arguments, so none can run away ----------------------------

def _factorial(n: Number) -> int:
    n = _as_int(n, "the argument of factorial")
    if n < 0:
        raise CalculationError("factorial is only defined for whole numbers ≥ 0")
    if n > MAX_FACTORIAL:
        raise CalculationError(f"factorial({n}) is too large; the limit is factorial({MAX_FACTORIAL})")
    return math.factorial(n)


def _combinatoric(name: str, func: Callable[[int, int], int]) -> Callable[[Number, Number], int]:
    def count(n: Number, k: Number) -> int:
        n, k = _as_int(n, f"n in {name}(n, k)"), _as_int(k, f"k in {name}(n, k)")
        if n < 0 or k < 0:
            raise CalculationError(f"{name}(n, k) needs n and k ≥ 0")
        if n > MAX_FACTORIAL:
            raise CalculationError(f"{name}(n, k) allows n up to {MAX_FACTORIAL}")
        return func(n, k)
    return count


def _round(x: Number, digits: Number = 0) -> Number:
    digits = _as_int(digits, "the digits of round")
    if abs(digits) > MAX_ROUND_DIGITS:
        raise CalculationError(f"round() keeps at most {MAX_ROUND_DIGITS} digits")
    return round(x, digits) if digits else round(x)


def _log(x: Number, base: Number | None = None) -> float:
    if base is None:
        return math.log(x)
    return math.log(x, base)


def _cbrt(x: Number) -> float:
    return math.copysign(abs(x) ** (1 / 3), x)


def _lcm(*numbers: int) -> int:
    result = 1
    for number in numbers:  # step by step, so no intermediate value grows past the limit
        result = _fits(math.lcm(result, number), "the result of lcm")  # type: ignore[assignment]
    return result


def _integers(name: str, func: Callable[..., int]) -> Callable[..., int]:
    def call(*args: Number) -> int:
        return func(*(_as_int(a, f"each argument of {name}") for a in args))
    return call


FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt, "cbrt": _cbrt, "exp": math.exp,
    "log": _log, "ln": math.log, "log10": math.log10, "log2": math.log2,
    "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "asin": math.asin, "acos": math.acos, "atan": math.atan, "atan2": math.atan2,
    "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh,
    "degrees": math.degrees, "radians": math.radians, "hypot": math.hypot,
    "abs": abs, "round": _round, "floor": math.floor, "ceil": math.ceil, "trunc": math.trunc,
    "factorial": _factorial,
    "comb": _combinatoric("comb", math.comb), "perm": _combinatoric("perm", math.perm),
    "gcd": _integers("gcd", math.gcd), "lcm": _integers("lcm", _lcm),
    "min": min, "max": max,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


class _Evaluator:
    def __init__(self, source: str) -> None:
        self.source = source

    def eval(self, node: ast.AST) -> Number:
        where = _segment(self.source, node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise CalculationError(f"{where} is not a number")
            return _fits(node.value, where)
        if isinstance(node, ast.Name):
            if node.id in CONSTANTS:
                return CONSTANTS[node.id]
            raise CalculationError(
                f"unknown name {node.id!r}; constants are {', '.join(CONSTANTS)}, and functions "
                "are called with parentheses, e.g. sqrt(2)"
            )
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self.eval(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.eval(node.left), self.eval(node.right)
            try:
                value = _BINARY[type(node.op)](left, right, where)
            except OverflowError:
                raise CalculationError(f"{where} is too large to compute") from None
            except ZeroDivisionError:
                raise CalculationError(f"division by zero in {where}") from None
            return _fits(value, where)
        if isinstance(node, ast.Call):
            return self.call(node, where)
        raise CalculationError(f"{where} is not allowed: {self.unsupported(node)}")

    def call(self, node: ast.Call, where: str) -> Number:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if not isinstance(node.func, (ast.Name, ast.Attribute)):
            raise CalculationError(f"{where}: use * to multiply, e.g. 2*(3), not 2(3)")
        if name not in FUNCTIONS:
            raise CalculationError(
                f"unknown function {name or _segment(self.source, node.func)!r} in {where}; "
                f"available: {', '.join(FUNCTIONS)}"
            )
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculationError(f"{where}: pass the arguments of {name}() by position only")
        args = [self.eval(arg) for arg in node.args]
        try:
            value = FUNCTIONS[name](*args)
        except CalculationError:
            raise
        except OverflowError:
            raise CalculationError(f"{where} is too large to compute") from None
        except ZeroDivisionError:
            raise CalculationError(f"division by zero in {where}") from None
        except TypeError:
            raise CalculationError(
                f"{where}: wrong number of arguments for {name}() ({len(args)} given)"
            ) from None
        except ValueError:
            raise CalculationError(f"{where} is undefined: the argument is outside the domain "
                                   f"of {name}()") from None
        return _fits(value, where)

    @staticmethod
    def unsupported(node: ast.AST) -> str:
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            return "only + - * / // % ** << >> and unary + - are supported"
        if isinstance(node, ast.Compare):
            return "comparisons are not supported"
        if isinstance(node, ast.Tuple):
            return "commas only separate function arguments; write 1000, not 1,000"
        if isinstance(node, ast.Attribute):
            return "attributes are not supported; write sqrt(2), not math.sqrt(2)"
        return f"{type(node).__name__.lower()} is not arithmetic"


def _depth(tree: ast.AST) -> int:
    """How deeply the tree nests, measured without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def normalize(expression: str) -> str:
    """The expression in Python's spelling: × ÷ − ^ π √ ² and full-width brackets replaced."""
    text = _ROOT_OF_TERM.sub(r"sqrt(\1)", expression.strip().rstrip("=＝?？ \t"))
    return _SPELLING_PATTERN.sub(lambda m: _SPELLINGS[m.group()], text).strip()


def format_number(value: Number) -> str:
    """Integers exactly; floats to 15 significant digits (0.1 + 0.2 → 0.3)."""
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    return f"{value:.15g}"


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression, or a CalculationError saying what is wrong."""
    if len(expression) > MAX_LENGTH:
        raise CalculationError(
            f"the expression is {len(expression)} characters long; at most {MAX_LENGTH} are allowed"
        )
    source = normalize(expression)
    if not source:
        raise CalculationError("the expression is empty")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as error:
        column = (error.offset or 1) - 1
        pointer = f"\n{source}\n{' ' * column}^" if len(source) <= 80 else ""
        hint = ""
        if error.msg == "invalid syntax":
            hint = " (a missing operator or number? write 2*pi, not 2 pi)"
        raise CalculationError(
            f"bad syntax at character {column + 1}: {error.msg}{hint}{pointer}"
        ) from None
    except (RecursionError, MemoryError, ValueError):
        raise CalculationError("the expression is nested too deeply or is not valid text") from None
    if _depth(tree) > MAX_DEPTH:
        raise CalculationError(
            f"the expression is nested too deeply (more than {MAX_DEPTH} levels); split it up"
        )
    return _Evaluator(source).eval(tree.body)


@tools.tool
def calculate(expression: str) -> ToolResponse:
    """Evaluate an arithmetic expression exactly; use it for any arithmetic instead of mental math.

    Supports numbers, + - * / (also × ÷), // (floor division), % (remainder, not percent),
    ** or ^ (power), << >>, parentheses, the constants pi, e, tau and the functions sqrt, cbrt,
    exp, log(x) (natural) or log(x, base), ln, log10, log2, sin, cos, tan, asin, acos, atan,
    atan2, sinh, cosh, tanh (angles in radians; use radians(30)), degrees, radians, hypot, abs,
    round(x, digits), floor, ceil, trunc, factorial, comb, perm, gcd, lcm, min, max.
    Integers are exact; results too large to compute are refused.

    Args:
        expression: The expression, e.g. "(3 + 4) × 2^10 / sqrt(2)".
    """
    try:
        value = evaluate(expression)
    except CalculationError as error:
        shown = expression if len(expression) <= 60 else expression[:60] + "…"
        return ToolResponse.error(f"cannot calculate {shown!r}: {error}")
    return ToolResponse.success(f"{normalize(expression)} = {format_number(value)}")
