"""Plugin overhead per chat turn against a zero-latency endpoint (issue 2, benchmark a).

Through a real `bot.py` and the OneBot v11 simulator over WebSocket: the time from pushing a
`marsho ...` event to receiving the bot's `send_msg`, minus what the endpoint itself costs. The
endpoint's cost is measured afterwards by replaying the very request bodies the bot sent: with a
minimal keep-alive HTTP client (the endpoint alone) and with a bare reused `openai.AsyncOpenAI`
(the endpoint plus the SDK every OpenAI-compatible client pays). Then the same turn in process,
calling `Engine.chat` directly, with no NoneBot, adapter or WebSocket in the way.

Target: at most 10 ms per turn. nonebot-plugin-marshoai 1.2.1 measured 33 ms.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    CHAT_TOOLSET,
    FakeOpenAI,
    bot_and_sim,
    median_ms,
    percentile,
    process_cpu_seconds,
    ratio_line,
    raw_round_trips,
    run,
    sdk_round_trips,
)

TURNS = int(os.environ.get("BENCH_TURNS", "200"))
WARMUP = 20
TARGET_MS = 10.0


async def through_websocket(fake: FakeOpenAI) -> tuple[list[float], list[dict], float | None]:
    # BENCH_QUOTA=<tokens>: with MARSHO_USER_DAILY_TOKENS set, each question reads its quota
    quota = os.environ.get("BENCH_QUOTA")
    env = {"MARSHO_USER_DAILY_TOKENS": quota} if quota else None
    async with bot_and_sim(fake, toolkit_dirs=[CHAT_TOOLSET], env=env) as (bot, sim):
        for i in range(WARMUP):
            await sim.ask(f"marsho warm-up {i}", group_id=50001)
        fake.reset()
        turns = []
        assert bot.process is not None
        cpu_before = process_cpu_seconds(bot.process.pid)
        for i in range(TURNS):
            event = sim.group_event(f"marsho question number {i}", group_id=50001)
            started = time.perf_counter()
            await sim.push(event)
            reply = await sim.reply_to(event, timeout=30)
            turns.append(reply.received - started)
        cpu_after = process_cpu_seconds(bot.process.pid)
        cpu = None if cpu_before is None or cpu_after is None else (cpu_after - cpu_before) / TURNS
        return turns, list(fake.requests), cpu


async def in_process(fake: FakeOpenAI) -> tuple[list[float], list[dict]]:
    """Engine.chat called directly: the plugin's own work per turn, nothing of NoneBot's."""
    import nonebot

    workdir = Path(tempfile.mkdtemp(prefix="marsho-bench-"))
    here = Path.cwd()
    os.chdir(workdir)  # no developer .env
    try:
        nonebot.init(driver="~none", log_level="WARNING", localstore_data_dir=str(workdir / "data"),
                     localstore_cache_dir=str(workdir / "cache"),
                     localstore_config_dir=str(workdir / "config"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "No adapters found": none is needed here
            nonebot.load_plugin("nonebot_plugin_marsho")
    finally:
        os.chdir(here)
    from nonebot_plugin_marsho.agent.engine import Engine
    from nonebot_plugin_marsho.agent.llm import LLMClient
    from nonebot_plugin_marsho.agent.persona import base_prompt
    from nonebot_plugin_marsho.store.sql import SqlStore
    from nonebot_plugin_marsho.tools import BUILTIN_TOOLSET, ToolRunner, ToolsetSource, load_toolset

    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in", must_exist=False),
                            ToolsetSource(CHAT_TOOLSET, "bench")])
    llm = LLMClient(base_url=fake.base_url, api_key="k", model="fake-model", timeout=30)
    runner = ToolRunner(toolset)
    engine = Engine(llm, toolset, SqlStore("sqlite://"), runner, system_prompt=base_prompt(None))
    try:
        for i in range(WARMUP):
            await engine.chat("bench:group:1", f"warm-up {i}")
        fake.reset()
        turns = []
        for i in range(TURNS):
            started = time.perf_counter()
            await engine.chat("bench:group:1", f"question number {i}")
            turns.append(time.perf_counter() - started)
        return turns, list(fake.requests)
    finally:
        await llm.close()
        runner.close()


async def endpoint_costs(fake: FakeOpenAI, bodies: list[dict]) -> tuple[float, float]:
    """Median ms of the endpoint alone, and of a bare openai client posting the same bodies."""
    # each measured twice, keeping the lower median: other load on the machine only adds time
    raw = min(median_ms(raw_round_trips(fake.port, bodies, repeat=2)[len(bodies):])
              for _ in range(2))
    sdk = min([median_ms(await sdk_round_trips(fake.base_url, bodies)) for _ in range(2)])
    return raw, sdk


async def main() -> None:
    fake = FakeOpenAI().start()
    try:
        ws_turns, ws_bodies, ws_cpu = await through_websocket(fake)
        ws_costs = await endpoint_costs(fake, ws_bodies)
        ip_turns, ip_bodies = await in_process(fake)
        ip_costs = await endpoint_costs(fake, ip_bodies)
    finally:
        fake.stop()

    messages = statistics.mean(len(b["messages"]) for b in ws_bodies)
    print(f"overhead per turn: {TURNS} turns through bot.py + OneBot v11 WebSocket, zero-latency "
          f"endpoint, {messages:.0f} messages and {len(ws_bodies[0].get('tools', []))} tools "
          "per request (history at MARSHO_MAX_HISTORY)")
    for label, turns, (raw, sdk) in (
        ("bot.py over WebSocket", ws_turns, ws_costs),
        ("in process, Engine.chat", ip_turns, ip_costs),
    ):
        turn = median_ms(turns)
        print(f"[{label}] turn median {turn:.2f} ms (p90 {percentile(turns, 0.9) * 1000:.2f} ms); "
              f"same requests: endpoint alone {raw:.2f} ms, a bare openai client {sdk:.2f} ms")
        print(f"  {ratio_line('overhead (turn - endpoint alone)', turn - raw, TARGET_MS, '33 ms', ' ms')}")
        print(f"  of which the openai client itself: {sdk - raw:.2f} ms")
        if label.startswith("bot.py") and ws_cpu is not None:
            print(f"  CPU used by the bot process per turn: {ws_cpu * 1000:.2f} ms")


if __name__ == "__main__":
    run(main)
