"""50 sessions at once against an endpoint with 0.5 s latency: total time ÷ 0.5 s (issue 2, c).

Through a real `bot.py` and the OneBot v11 simulator over WebSocket: 50 groups each send
`marsho ...` at the same moment; the fake endpoint takes 0.5 s per request. Total time is from
pushing the first event to receiving the last reply. Also run with 20 sessions, the number the
predecessor was measured with.

Target: at most 1.3 for 50 sessions. nonebot-plugin-marshoai 1.2.1 measured 2.3 (20 sessions).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    CHAT_TOOLSET,
    FakeOpenAI,
    bot_and_sim,
    process_cpu_seconds,
    ratio_line,
    run,
)
from tests.onebot_sim import OneBotSim  # noqa: E402

LATENCY = 0.5
SESSIONS = int(os.environ.get("BENCH_SESSIONS", "50"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
TARGET = 1.3
_groups = iter(range(70000, 1_000_000))


async def burst(sim: OneBotSim, sessions: int) -> tuple[float, list[float]]:
    """Seconds from the first push to the last reply, and each session's own reply time."""
    # fifty people, each in their own group (one person's questions queue: MARSHO_USER_QUEUE)
    events = [sim.group_event(f"marsho hello from group {i}", group_id=next(_groups), user_id=20000 + i)
              for i in range(sessions)]
    started = time.perf_counter()
    for event in events:
        await sim.push(event)
    replies = await asyncio.gather(*(sim.reply_to(event, timeout=60) for event in events))
    ends = [reply.received - started for reply in replies]
    assert all(reply.text == "ok" for reply in replies), [r.text for r in replies]
    return max(ends), ends


async def main() -> None:
    fake = FakeOpenAI().start()
    figures: dict[int, list[float]] = {}
    cpu: dict[int, list[float]] = {}
    try:
        async with bot_and_sim(fake, toolkit_dirs=[CHAT_TOOLSET]) as (bot, sim):
            assert bot.process is not None
            for _ in range(2):  # warm-up at zero latency: lazy imports, models, connection pool
                await burst(sim, SESSIONS)
            fake.latency = LATENCY
            for sessions in (SESSIONS, 20):
                for _ in range(ROUNDS):
                    before = process_cpu_seconds(bot.process.pid)
                    total, _ = await burst(sim, sessions)
                    after = process_cpu_seconds(bot.process.pid)
                    figures.setdefault(sessions, []).append(total)
                    if before is not None and after is not None:
                        cpu.setdefault(sessions, []).append((after - before) / sessions)
            requests = len(fake.requests)
    finally:
        fake.stop()

    print(f"sessions at once through bot.py + OneBot v11 WebSocket, endpoint latency "
          f"{LATENCY:g} s ({ROUNDS} bursts each, {requests} requests in all)")
    for sessions, totals in figures.items():
        median = statistics.median(totals)
        print(f"[{sessions} sessions] total times: {', '.join(f'{t:.3f}' for t in totals)} s")
        predecessor = "2.3 with 20 sessions"
        print("  " + ratio_line(f"{sessions} sessions: median total / {LATENCY:g} s",
                                median / LATENCY, TARGET, predecessor)
              + f"; best {min(totals) / LATENCY:.3f}")
        if cpu.get(sessions):
            print(f"  bot process CPU per turn: {statistics.median(cpu[sessions]) * 1000:.1f} ms "
                  f"(x {sessions} turns = {statistics.median(cpu[sessions]) * sessions * 1000:.0f} ms "
                  "of work on one event loop per burst)")


if __name__ == "__main__":
    run(main)
