"""Loops with other bots (issue 25): messages and paid requests per 20 s, on default settings.

Through real `bot.py` processes and the OneBot v11 simulator:

1. **Two marsho bots in one group.** Two bot.py processes, each with its own simulator, wired
   into one group (`tests/onebot_sim.py`'s `relay`: what one bot sends, the other receives from
   its account). Every answer of the fake endpoint starts with the other's trigger word
   ("Marsho, ..."), as a persona speaking of herself in the third person would. A person says
   `marsho hi` once; then the bots are left alone.
2. The same, on a platform that drops zero-width characters (the relay strips them), so only
   behaviour tells a bot.
3. **An echo account**: it says every answer back ("Marsho said: <answer>") as soon as it comes;
   then the same where zero-width characters are dropped.
4. **A busy human group**, for the circuit breaker's threshold: the answers per minute that the
   existing flood scenario (tests/test_hostile_floods.py: one member sending 2,000 `marsho
   flood N` at 350 a second, here then five a second; the endpoint taking 1.5 s) causes, and a
   lively group of 8
   members each asking again 10–30 s after their answer came (seeded), the endpoint taking
   1.5 s.

Prints, for each, the messages the bots sent and the requests the endpoint was paid for in each
20 s window. Knobs: `BENCH_WINDOWS` (windows per loop scenario, 2), `BENCH_WINDOW` (20 s),
`BENCH_MINUTE` (the human scenarios' length, 60 s), `BENCH_ENV` (extra settings for the bots, as
JSON, e.g. '{"MARSHO_BOT_DETECTION": "false", "MARSHO_CHAT_ANSWERS_PER_MINUTE": "0"}').
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import CHAT_TOOLSET, run  # noqa: E402
from tests.fake_openai import Answer, FakeOpenAI, text  # noqa: E402
from tests.onebot_sim import (  # noqa: E402
    SEND_ACTIONS,
    Action,
    BotProcess,
    Links,
    OneBotSim,
    echoed,
    relay,
    said_again,
    wait_for_quiet,
)

WINDOWS = int(os.environ.get("BENCH_WINDOWS", "2"))
WINDOW = float(os.environ.get("BENCH_WINDOW", "20"))
MINUTE = float(os.environ.get("BENCH_MINUTE", "60"))
ENV: dict[str, str] = json.loads(os.environ.get("BENCH_ENV", "{}"))
GROUP = 40001
PERSON = 10001
ECHO = 55555
BOT_A, BOT_B = 1001, 1002
SENTENCES = [
    "what do you think about the weather on the coast this weekend?",
    "could you tell me a short story about a lighthouse keeper?",
    "I wonder which of the old trains still runs through the mountains.",
    "please explain why the sky turns orange in the evening.",
    "have you ever tried baking bread with rye and caraway?",
    "let us count the stars over the harbour tonight.",
    "which book would you take to a desert island, and why?",
    "the garden needs water, the cat needs food, and I need tea.",
    "tell me how a violin differs from a viola in sound.",
    "my neighbour plays chess in the park every Sunday morning.",
    "do you know a good game for a rainy afternoon indoors?",
    "the museum opens a new hall of ancient maps next month.",
]


def answering_with_the_trigger(seed: int = 7) -> Callable[[dict[str, Any]], Answer]:
    """Answers that start with the other bot's trigger word, each different (as a model's are)."""
    rng, count = random.Random(seed), [0]

    def respond(body: dict[str, Any]) -> Answer:
        count[0] += 1
        return text(f"Marsho, {rng.choice(SENTENCES)} ({count[0]})")
    return respond


def sends(sim: OneBotSim, group_id: int = GROUP) -> list[Action]:
    return [a for a in sim.actions if a.action in SEND_ACTIONS
            and int(a.params.get("group_id") or 0) == group_id]


def per_window(times: Sequence[float], start: float, windows: int, window: float) -> list[int]:
    """How many of `times` fall in each window after `start` (later ones in the last)."""
    counts = [0] * windows
    for moment in times:
        if moment >= start:
            counts[min(windows - 1, int((moment - start) // window))] += 1
    return counts


def windows_line(label: str, messages: list[int], requests: list[int]) -> str:
    cells = ", ".join(f"{m} messages / {r} requests" for m, r in zip(messages, requests, strict=True))
    return f"{label}: per {WINDOW:g} s: {cells}"


def recording(fake: FakeOpenAI) -> list[float]:
    """When each request reached the fake (wall clock), kept as they come."""
    arrived: list[float] = []
    respond = fake.responder

    def timed(body: dict[str, Any]) -> Answer:
        arrived.append(time.time())
        assert respond is not None
        return respond(body)
    fake.responder = timed
    return arrived


async def two_bots(*, strip_invisible: bool) -> str:
    """Scenario 1 (or 2): two bots in one group, one person's `marsho hi`, then WINDOWS windows."""
    with FakeOpenAI() as fake:
        fake.responder = answering_with_the_trigger()
        arrived = recording(fake)
        env = {**ENV, "MARSHO_SUMMARY": "false"}
        first = BotProcess(base_url=fake.base_url, toolkit_dirs=[CHAT_TOOLSET], env=env)
        second = BotProcess(base_url=fake.base_url, toolkit_dirs=[CHAT_TOOLSET], env=env)
        async with first, second:
            async with first.simulator(self_id=BOT_A) as a, second.simulator(self_id=BOT_B) as b:
                stop, links = asyncio.Event(), Links()
                says = said_again(strip_invisible=strip_invisible)
                relays = [asyncio.create_task(relay(a, b, group_id=GROUP, says=says, stop=stop, links=links)),
                          asyncio.create_task(relay(b, a, group_id=GROUP, says=says, stop=stop, links=links))]
                start = time.time()
                hello = a.group_event("marsho hi", group_id=GROUP, user_id=PERSON)
                await a.push(hello)
                await b.push({**hello, "self_id": BOT_B})
                await asyncio.sleep(WINDOWS * WINDOW)
                stop.set()
                await asyncio.gather(*relays)
                messages = per_window([x.wall for x in [*sends(a), *sends(b)]], start, WINDOWS, WINDOW)
                requests = per_window(list(arrived), start, WINDOWS, WINDOW)
    label = "two bots, zero-width characters dropped" if strip_invisible else "two bots"
    return windows_line(label, messages, requests)


async def echo_account(*, strip_invisible: bool = False) -> str:
    """Scenario 3: an account that says every answer back, after a first question of its own
    (with `strip_invisible`, on a platform that drops the marker)."""
    with FakeOpenAI() as fake:
        fake.responder = answering_with_the_trigger(11)
        arrived = recording(fake)
        process = BotProcess(base_url=fake.base_url, toolkit_dirs=[CHAT_TOOLSET],
                             env={**ENV, "MARSHO_SUMMARY": "false"})
        async with process, process.simulator(self_id=BOT_A) as sim:
            stop = asyncio.Event()
            echo = asyncio.create_task(
                relay(sim, sim, group_id=GROUP, user_id=ECHO, says=echoed(strip_invisible=strip_invisible),
                      stop=stop))
            start = time.time()
            await sim.group_message("marsho hi", group_id=GROUP, user_id=ECHO)
            await asyncio.sleep(WINDOWS * WINDOW)
            stop.set()
            pushed = await echo
            messages = per_window([x.wall for x in sends(sim)], start, WINDOWS, WINDOW)
            requests = per_window(list(arrived), start, WINDOWS, WINDOW)
    label = "echo account, zero-width characters dropped" if strip_invisible else "echo account"
    return windows_line(f"{label} ({pushed} echoes)", messages, requests)


async def member(sim: OneBotSim, user_id: int, rng: random.Random, until: float) -> None:
    """A lively member: asks, reads the answer, asks again 10–30 s later."""
    await asyncio.sleep(rng.uniform(0, 10))
    number = 0
    while time.time() < until:
        number += 1
        event = await sim.group_message(f"marsho question {number} from {user_id}", group_id=GROUP + 1,
                                        user_id=user_id)
        try:
            await sim.reply_to(event, timeout=max(1.0, until - time.time()))
        except TimeoutError:
            return
        await asyncio.sleep(rng.uniform(10, 30))


async def flooder(sim: OneBotSim, until: float) -> None:
    """The flood test's member: 2,000 `marsho flood N` at 350 a second, then five a second until
    the minute is over (a machine shared with others cannot take 350 a second for a minute)."""
    number = 0
    while time.time() < until:
        number += 1
        await sim.group_message(f"marsho flood {number}", group_id=GROUP + 2, user_id=PERSON + 99)
        await asyncio.sleep(1 / 350 if number < 2000 else 0.2)


async def human_groups() -> str:
    """Scenario 4: answers in one minute in a lively group of 8 and in the flood's group."""
    with FakeOpenAI() as fake:
        fake.latency = 1.5
        process = BotProcess(base_url=fake.base_url, toolkit_dirs=[CHAT_TOOLSET], env=ENV)
        async with process, process.simulator(self_id=BOT_A) as sim:
            await sim.ask("marsho warm up", group_id=GROUP + 3)
            rng = random.Random(3)
            until = time.time() + MINUTE
            members = (member(sim, PERSON + i, rng, until) for i in range(8))
            await asyncio.gather(*members, flooder(sim, until))
            await wait_for_quiet(lambda: len(sim.actions), quiet=2.0, timeout=30)
            lively = [a for a in sends(sim, GROUP + 1) if a.wall <= until]
            flood = [a for a in sends(sim, GROUP + 2) if a.wall <= until]
            asked = sum(1 for e in sim.events.values() if e.get("group_id") == GROUP + 1)
            unanswered = sum(1 for e in sim.events.values()
                             if e.get("group_id") == GROUP + 1 and not sim.sends_quoting(e))
    per_minute = 60 / MINUTE
    return (f"a lively group of 8: {len(lively) * per_minute:.0f} answers per minute ({asked} asked, "
            f"{unanswered} unanswered); one member flooding: {len(flood) * per_minute:.0f} answers per "
            "minute (endpoint 1.5 s)")


async def main() -> None:
    print(f"settings: defaults{' + ' + json.dumps(ENV) if ENV else ''}")
    print(await two_bots(strip_invisible=False), flush=True)
    print(await two_bots(strip_invisible=True), flush=True)
    print(await echo_account(), flush=True)
    print(await echo_account(strip_invisible=True), flush=True)
    print(await human_groups(), flush=True)


if __name__ == "__main__":
    run(main)
