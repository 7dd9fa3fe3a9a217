"""Tools that take a while: to check that slow tools never block the bot and run in parallel."""

import asyncio
import time
from pathlib import Path


def nap_sync(seconds: float, until_file: str = ""):
    started = time.time()
    if until_file:  # a test's signal: say the nap began, then nap until the file is there
        Path(until_file + ".started").touch()
        while not Path(until_file).exists() and time.time() < started + seconds:
            time.sleep(0.01)  # blocking all the same
    else:
        time.sleep(seconds)  # a blocking call, as careless toolkit authors write them
    return {"slept": seconds, "started": started, "ended": time.time(), "kind": "sync"}


async def nap_async(seconds: float):
    started = time.time()
    await asyncio.sleep(seconds)
    return {"slept": seconds, "started": started, "ended": time.time(), "kind": "async"}
