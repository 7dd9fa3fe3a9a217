"""Three 1-second tool calls in one response: turn time ÷ 1 s (issue 2, benchmark b).

Through a real `bot.py` and the OneBot v11 simulator over WebSocket, with a zero-latency fake
endpoint that answers a question with three calls to a tool sleeping 1 s, then with text once the
results are in. Run twice: a sync tool (`time.sleep`, run in worker threads) and an async one
(`asyncio.sleep`, on the loop). While the sync tools sleep, another group asks a question: its
answer time shows whether the bot stays responsive (the predecessor froze for 2.8 s).

Target: at most 1.1 (the floor is 1.0). nonebot-plugin-marshoai 1.2.1 measured 3.04.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import E2E_TOOLSET, FakeOpenAI, bot_and_sim, ratio_line, run  # noqa: E402
from tests.fake_openai import Answer, text, tool_calls  # noqa: E402

SECONDS = 1.0
TURNS = int(os.environ.get("BENCH_TURNS", "5"))
TARGET = 1.1


def responder(body: dict[str, Any]) -> Answer:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return text("all three napped")
    question = last["content"].split(": ", 1)[-1]  # a shared group names the speaker first
    if question.startswith("nap"):
        kind = question.split()[1]
        return tool_calls(*[(f"sleepy__nap_{kind}", {"seconds": SECONDS})] * 3)
    return text("quick answer")


async def main() -> None:
    fake = FakeOpenAI(responder=responder).start()
    results: dict[str, list[float]] = {}
    spreads: dict[str, list[float]] = {}
    side_latency: list[float] = []
    try:
        async with bot_and_sim(fake, toolkit_dirs=[E2E_TOOLSET]) as (_, sim):
            await sim.ask("marsho warm-up", group_id=60000)
            for base, kind in ((61000, "sync"), (62000, "async")):
                for turn in range(TURNS + 1):  # the first turn warms the thread pool up
                    fake.reset()
                    fake.responder = responder
                    event = sim.group_event(f"marsho nap {kind} please", group_id=base + turn)
                    started = time.perf_counter()
                    await sim.push(event)
                    if kind == "sync":
                        await asyncio.sleep(0.3)
                        side_started = time.perf_counter()
                        _, side = await sim.ask("marsho are you there?", group_id=69999, timeout=30)
                        side_latency.append(side.received - side_started)
                    reply = await sim.reply_to(event, timeout=60)
                    elapsed = reply.received - started
                    final = [b for b in fake.requests if b["messages"][-1]["role"] == "tool"][-1]
                    naps = [json.loads(m["content"]) for m in final["messages"][-3:]]
                    assert len(naps) == 3 and all(n["kind"] == kind for n in naps), naps
                    if turn:
                        results.setdefault(kind, []).append(elapsed)
                        spreads.setdefault(kind, []).append(
                            max(n["started"] for n in naps) - min(n["started"] for n in naps)
                        )
    finally:
        fake.stop()

    print(f"three tool calls of {SECONDS:g} s in one response, through bot.py + OneBot v11 "
          f"WebSocket ({TURNS} turns each, zero-latency endpoint)")
    for kind, times in results.items():
        best, median = min(times), sorted(times)[len(times) // 2]
        print(f"[{kind} tool] turn times: {', '.join(f'{t:.3f}' for t in times)} s; "
              f"the three calls started within {max(spreads[kind]) * 1000:.1f} ms of each other")
        print("  " + ratio_line(f"{kind}: median turn time / {SECONDS:g} s", median / SECONDS,
                                TARGET, "3.04") + f"; best {best / SECONDS:.3f}")
    print(f"another group's question while the sync tools slept: answered in "
          f"{max(side_latency) * 1000:.0f} ms at worst ({[round(s * 1000) for s in side_latency]}), median "
          f"{sorted(side_latency)[len(side_latency) // 2] * 1000:.0f} ms "
          "(predecessor: bot frozen for 2.8 s)")


if __name__ == "__main__":
    run(main)
