"""The time from the endpoint's finishing an answer's first paragraph to the group's first
message (issue 26: within 3 s), with MARSHO_SEGMENTED_REPLY on and off.

Each turn's answer streams three paragraphs; the fake endpoint writes the first one and the
blank line after it (the moment is noted just before that line is written), then takes
BENCH_WRITE seconds (1 s) to write the rest, as a model still writing would. The figure is
the median over BENCH_TURNS turns (20) of the first group message's arrival at the simulator
minus that moment. Off, the bot still streams (MARSHO_STREAM=true) but sends the answer when
it is whole: its figure is about BENCH_WRITE.
Both clocks are this process's `time.perf_counter` (the fake and the simulator run here)."""

from __future__ import annotations

import os
import statistics
import time

from _common import bot_and_sim, median_ms, run

from tests.fake_openai import FakeOpenAI, streamed_text

TURNS = int(os.environ.get("BENCH_TURNS", "20"))
WRITE = float(os.environ.get("BENCH_WRITE", "1.0"))
GROUP = 40001
PIECES = ("First paragraph of the answer.", "\n\n", "Second paragraph.\n\n", "Third paragraph.")


def answer(finished: list[float]) -> object:
    """The streamed answer; `finished` gets the moment its first paragraph was written."""
    calls = iter(range(len(PIECES) + 2))

    def gap() -> None:
        index = next(calls)
        if index == 1:  # the blank line that ends the first paragraph goes out now
            finished.append(time.perf_counter())
        elif index == 2:
            time.sleep(WRITE)  # writing the rest
    return streamed_text(*PIECES, gap=gap)


async def measure(segmented: bool) -> list[float]:
    env = {"MARSHO_SEGMENTED_REPLY": "true" if segmented else "false", "MARSHO_STREAM": "true"}
    delays: list[float] = []
    with FakeOpenAI() as fake:
        async with bot_and_sim(fake, env=env) as (_, sim):
            for turn in range(TURNS + 1):  # the first turn warms up
                finished: list[float] = []
                fake.push(answer(finished))
                _, first = await sim.ask(f"marsho question {turn}", group_id=GROUP, user_id=10000 + turn)
                if turn:
                    delays.append(first.received - finished[0])
                await _quiet(sim, fake)
    return delays


async def _quiet(sim: object, fake: FakeOpenAI) -> None:
    """Wait until the turn's last messages are in, so the next turn starts alone."""
    from tests.onebot_sim import OneBotSim, wait_for_quiet

    assert isinstance(sim, OneBotSim)
    await wait_for_quiet(lambda: len(sim.actions), until=lambda: fake.in_flight == 0, quiet=0.3)
    sim.clear()


async def main() -> None:
    print(f"first paragraph written -> first group message, {TURNS} turns, the rest takes {WRITE:g} s")
    results = {}
    for segmented in (True, False):
        delays = await measure(segmented)
        results[segmented] = statistics.median(delays)
        label = "segmented on " if segmented else "segmented off"
        print(f"  {label}: median {median_ms(delays):.1f} ms  (min {min(delays) * 1000:.1f}, "
              f"max {max(delays) * 1000:.1f})")
    verdict = "meets" if results[True] <= 3.0 else "MISSES"
    print(f"  target: within 3 s of the endpoint finishing the paragraph: {verdict}")


if __name__ == "__main__":
    run(main)
