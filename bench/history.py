"""Per-turn overhead with 10,000 stored messages in the session ÷ with an empty session (issue 4).

In process: `Engine.chat` with the real LLMClient against the fake OpenAI-compatible endpoint
(zero latency) and the real SqlStore, first on a SQLite file in a temporary folder, then on a
throw-away PostgreSQL server (skipped, saying why, when one cannot be started).

One session is filled with 10,000 messages of realistic turns (plain question/answer turns and
tool-call turns: assistant `tool_calls`, `tool` results, final answer) through
`SqlStore.append_turn`. Then the timed turns alternate between three sessions, so load on the
machine hits every case alike:
- "10k": the filled session (it grows by two messages per timed turn);
- "empty": a fresh session key for every turn, so the history is always empty;
- "window": a small session, starting with as many messages as one request takes
  (MARSHO_MAX_HISTORY, 40) and growing like "10k". It sends the same amount of history as
  "10k", so "10k ÷ window" isolates what the 10,000 stored messages cost, and "window ÷ empty"
  what sending a full history costs (bigger request bodies to build and serialize).

Each case's figure is the median turn time minus the endpoint's own median time for the very
request bodies that case sent (replayed with a minimal keep-alive HTTP client, as overhead.py does).

Target: 10k ÷ empty under 1.5.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    CHAT_TOOLSET,
    FakeOpenAI,
    median_ms,
    percentile,
    ratio_line,
    raw_round_trips,
    run,
)

STORED = int(os.environ.get("BENCH_STORED", "10000"))
TURNS = int(os.environ.get("BENCH_TURNS", "300"))  # timed turns per case
WARMUP = 30
TARGET = 1.5

FULL_KEY = "bench:group:10k"
WINDOW_KEY = "bench:group:window"

_WORDS = ("the weather tomorrow could you check what time is it in Tokyo please remind me how "
          "many people are coming to the meeting and what did we decide about the schedule "
          "python asyncio database benchmark token budget history group chat").split()
_HANZI = "今天天气怎么样明天会下雨吗我们几点开会请帮我查一下这个问题的答案谢谢大家好久不见最近在忙什么"
_NAMES = ("Alice", "小明", "Bob", "猫猫", "Carol", "阿强")


def _sentence(rng: random.Random, low: int, high: int) -> str:
    """Text of `low`..`high` characters, English or Chinese, as group chats mix them."""
    size = rng.randint(low, high)
    if rng.random() < 0.4:
        return "".join(rng.choice(_HANZI) for _ in range(max(1, size // 2)))
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(_WORDS))
    return " ".join(words).capitalize() + "."


def realistic_turn(rng: random.Random, serial: int) -> list[dict[str, Any]]:
    """One stored turn: 70 % a plain question and answer, 30 % a tool-call turn (one or two
    calls, their results, then the answer), with the speaker's name as shared scopes store it."""
    question = {"role": "user", "content": f"[{rng.choice(_NAMES)}] {_sentence(rng, 10, 200)}"}
    if rng.random() < 0.7:
        return [question, {"role": "assistant", "content": _sentence(rng, 40, 600)}]
    calls = [
        {"id": f"call_{serial}_{n}", "type": "function",
         "function": {"name": rng.choice(("clock__now", "marshoai-example__weather",
                                          "marshoai-example__search")),
                      "arguments": f'{{"query": "{_sentence(rng, 5, 40)}", "n": {n}}}'}}
        for n in range(rng.randint(1, 2))
    ]
    results = [
        {"role": "tool", "tool_call_id": call["id"],
         "content": f'{{"ok": true, "result": "{_sentence(rng, 50, 900)}"}}'}
        for call in calls
    ]
    return [question, {"role": "assistant", "content": None, "tool_calls": calls}, *results,
            {"role": "assistant", "content": _sentence(rng, 40, 400)}]


async def fill(store: Any, counter: Any, key: str, messages: int, seed: int) -> tuple[int, float]:
    """Append realistic turns to `key` until it holds `messages` messages; (turns, seconds)."""
    rng = random.Random(seed)
    stored = turns = 0
    started = time.perf_counter()
    while stored < messages:
        turn = realistic_turn(rng, turns)[: messages - stored]
        await store.append_turn(key, turn, [counter.count_message(m) for m in turn])
        stored += len(turn)
        turns += 1
    return turns, time.perf_counter() - started


async def endpoint_median_ms(fake: FakeOpenAI, bodies: list[dict]) -> float:
    """The endpoint's own median time for `bodies` (the lower of two replays: load only adds)."""
    return min([median_ms(await asyncio.to_thread(raw_round_trips, fake.port, bodies))
                for _ in range(2)])


async def measure(label: str, url: str, fake: FakeOpenAI) -> None:
    from nonebot_plugin_marsho.agent.engine import Engine
    from nonebot_plugin_marsho.agent.llm import LLMClient
    from nonebot_plugin_marsho.agent.persona import base_prompt
    from nonebot_plugin_marsho.store.sql import SqlStore
    from nonebot_plugin_marsho.tools import BUILTIN_TOOLSET, ToolRunner, ToolsetSource, load_toolset

    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in", must_exist=False),
                            ToolsetSource(CHAT_TOOLSET, "bench")])
    llm = LLMClient(base_url=fake.base_url, api_key="k", model="fake-model", timeout=30)
    runner = ToolRunner(toolset)
    store = SqlStore(url)
    engine = Engine(llm, toolset, store, runner, system_prompt=base_prompt(None))
    try:
        await store.start()
        fill_turns, fill_seconds = await fill(store, engine.counter, FULL_KEY, STORED, seed=1)
        turns, messages, tokens = await store.stats(FULL_KEY)
        print(f"[{label}] filled {FULL_KEY}: {messages} messages in {turns} turns "
              f"({tokens} tokens) in {fill_seconds:.1f} s, {fill_turns / fill_seconds:.0f} turns/s "
              "(one append_turn per turn)")
        await fill(store, engine.counter, WINDOW_KEY, engine.max_history, seed=2)

        cases = ("empty", "window", "10k")
        times: dict[str, list[float]] = {case: [] for case in cases}
        bodies: dict[str, list[dict]] = {case: [] for case in cases}
        fresh = 0
        for round_ in range(WARMUP + TURNS):
            for case in cases:
                if case == "empty":
                    fresh += 1
                    key = f"bench:group:empty-{fresh}"
                elif case == "window":
                    key = WINDOW_KEY
                else:
                    key = FULL_KEY
                before = len(fake.requests)
                started = time.perf_counter()
                await engine.chat(key, f"[Alice] question number {round_}")
                elapsed = time.perf_counter() - started
                if round_ >= WARMUP:
                    times[case].append(elapsed)
                    bodies[case].extend(fake.requests[before:])
        fake.reset()
        after = {key: (await store.stats(key))[1] for key in (FULL_KEY, WINDOW_KEY)}
        overhead: dict[str, float] = {}
        for case in cases:
            sent = statistics.mean(len(b["messages"]) for b in bodies[case])
            endpoint = await endpoint_median_ms(fake, bodies[case])
            turn = median_ms(times[case])
            overhead[case] = turn - endpoint
            stored = {"empty": "0", "window": f"{engine.max_history}..{after[WINDOW_KEY]}",
                      "10k": f"{STORED}..{after[FULL_KEY]}"}[case]
            print(f"[{label}] {case:>6}: {stored} stored messages, {sent:.0f} sent per request; "
                  f"turn median {turn:.2f} ms (p90 {percentile(times[case], 0.9) * 1000:.2f} ms), "
                  f"endpoint alone {endpoint:.2f} ms, overhead {overhead[case]:.2f} ms")
        ratio = overhead["10k"] / overhead["empty"]
        print(f"[{label}] {ratio_line('overhead 10k / empty', ratio, TARGET, 'n/a')}")
        print(f"[{label}]   10k / window (what the stored volume costs): "
              f"{overhead['10k'] / overhead['window']:.2f}; window / empty (what sending "
              f"{engine.max_history} messages of history costs): "
              f"{overhead['window'] / overhead['empty']:.2f}")
    finally:
        await llm.close()
        runner.close()
        await store.close()


async def main() -> None:
    from tests.postgres_server import PostgresServer, Unavailable

    print(f"history size: per-turn overhead of Engine.chat in process, {STORED} stored messages "
          f"vs an empty session, {TURNS} timed turns per case after {WARMUP} warm-up rounds, "
          "zero-latency endpoint")
    fake = FakeOpenAI().start()
    folder = Path(tempfile.mkdtemp(prefix="marsho-bench-history-"))
    try:
        await measure("SQLite", f"sqlite:///{folder / 'marsho.db'}", fake)
        try:
            server = await asyncio.to_thread(PostgresServer().start)
        except Unavailable as error:
            print(f"[PostgreSQL] skipped: {error}")
            return
        try:
            url = await asyncio.to_thread(server.create_database, "marsho_bench_history")
            await measure("PostgreSQL", url, fake)
        finally:
            await asyncio.to_thread(server.stop)
    finally:
        fake.stop()
        for path in folder.glob("*"):
            path.unlink()
        folder.rmdir()


if __name__ == "__main__":
    run(main)
