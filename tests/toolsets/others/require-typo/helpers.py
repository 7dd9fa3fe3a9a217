import random


async def spin(upper: int, lower: int = 0):
    return random.randint(lower, upper)


def combine(a: str, b: str, op: str):
    x, y = float(a), float(b)
    return {"+": x + y, "-": x - y, "*": x * y}.get(op, "unknown operator")
