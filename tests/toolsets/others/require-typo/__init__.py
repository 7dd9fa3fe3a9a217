from . import helpers


# Spinner
async def spin(upper: int, lower: int = 0):
    return str(await helpers.spin(upper, lower))


# Combine
async def combine(a: str, b: str, op: str):
    return str(helpers.combine(a, b, op))


async def shout(msg: str):
    return msg.upper()


async def whisper(msg: str):
    return msg.lower()


async def mirror(msg: str):
    return msg[::-1]


async def count(msg: str):
    return str(len(msg))
