"""Tools that take a while: to check that slow tools never block the bot and run in parallel."""

import asyncio
import time


def nap_sync(seconds: float):
    started = time.time()
    time.sleep(seconds)  # a blocking call, as careless toolkit authors write them
    return {"slept": seconds, "started": started, "ended": time.time(), "kind": "sync"}


async def nap_async(seconds: float):
    started = time.time()
    await asyncio.sleep(seconds)
    return {"slept": seconds, "started": started, "ended": time.time(), "kind": "async"}
