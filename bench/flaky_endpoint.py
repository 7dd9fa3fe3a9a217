"""Questions against an endpoint that fails often (issue 15): the share answered and the time per
question with MARSHO_RETRIES at its default and at 5, and a dead primary with a healthy fallback
against a healthy primary; a hung primary (it answers after HUNG_DELAY s, past MARSHO_TIMEOUT=1)
with a healthy fallback; and a pool of two keys both answered 429 with `Retry-After: 0` (the
requests each question makes stay within the keys and MARSHO_RETRIES).

In process: `Engine.chat` with the real LLMClient against the fake OpenAI-compatible endpoint
(`tests/fake_openai.py`), which answers in BENCH_LATENCY seconds; the flaky one answers 30 % of
requests with 429 + `Retry-After: 1` and 10 % with 500 (seeded, so every run draws the same). The
dead primary is a port where nothing listens. Questions run BENCH_CONCURRENCY at a time, each in
its own session. Prints figures; asserts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import statistics
import time
from typing import Any

from _common import percentile, ratio_line, run

from tests.fake_openai import Answer, FakeOpenAI, error, text

QUESTIONS = int(os.environ.get("BENCH_QUESTIONS", "100"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "10"))
LATENCY = float(os.environ.get("BENCH_LATENCY", "0.1"))
RATE_LIMITED, FAILED = 0.30, 0.10
ANSWERED_TARGET = 0.99
FALLBACK_TARGET = 1.2
HUNG_DELAY = 3.0


def flaky(seed: int) -> Any:
    """A responder: 30 % 429 with Retry-After: 1, 10 % 500, else an answer."""
    draw = random.Random(seed)

    def answer(body: dict[str, Any]) -> Answer:
        roll = draw.random()
        if roll < RATE_LIMITED:
            return error(429, "Rate limit reached for requests", headers={"Retry-After": "1"})
        if roll < RATE_LIMITED + FAILED:
            return error(500, "The server had an error while processing your request")
        return text("ok")

    return answer


def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def ask_all(label: str, base_url: str, **options: Any) -> list[float]:
    """Ask QUESTIONS questions; print the share answered and the time per question; return the
    times of the answered ones."""
    from nonebot_plugin_marsho.agent.engine import Engine
    from nonebot_plugin_marsho.agent.llm import LLMClient
    from nonebot_plugin_marsho.exceptions import EndpointError
    from nonebot_plugin_marsho.store.sql import SqlStore
    from nonebot_plugin_marsho.tools import ToolRunner, Toolset

    options = {"api_key": "k", "timeout": 30, **options}
    llm = LLMClient(base_url=base_url, model="fake-model", **options)
    toolset = Toolset()
    runner = ToolRunner(toolset)
    store = SqlStore("sqlite://")
    engine = Engine(llm, toolset, store, runner)
    slots = asyncio.Semaphore(CONCURRENCY)
    times: list[float] = []
    failures: dict[str, int] = {}

    async def one(number: int) -> None:
        async with slots:
            started = time.perf_counter()
            try:
                await engine.chat(f"bench:group:{number}", f"question {number}")
            except EndpointError as failure:
                failures[failure.code] = failures.get(failure.code, 0) + 1
                return
            times.append(time.perf_counter() - started)

    try:
        await store.start()
        with contextlib.suppress(EndpointError):  # the connection pool and the SDK warmed up
            await engine.chat("bench:warm-up", "warm up")
        started = time.perf_counter()
        await asyncio.gather(*(one(n) for n in range(QUESTIONS)))
        wall = time.perf_counter() - started
    finally:
        await llm.close()
        runner.close()
        await store.close()
    answered = len(times) / QUESTIONS
    tail = f"; failed: {failures}" if failures else ""
    timing = (f"per question median {statistics.median(times):.3f} s, p95 "
              f"{percentile(times, 0.95):.3f} s; " if times else "")
    print(f"[{label}] answered {len(times)}/{QUESTIONS} ({answered:.0%}); {timing}"
          f"{wall:.1f} s for all{tail}")
    return times


async def main() -> None:
    from nonebot_plugin_marsho.agent.llm import Fallback
    from nonebot_plugin_marsho.config import Config
    from nonebot_plugin_marsho.redaction import logger

    default = Config().marsho_retries
    logger.remove()  # each retry and fallback is logged; the figures are what this prints
    print(f"{QUESTIONS} questions, {CONCURRENCY} at a time; the endpoint answers in {LATENCY:g} s")
    with FakeOpenAI(latency=LATENCY) as fake, FakeOpenAI(latency=LATENCY) as backup:
        shares = {}
        for retries in (default, 5):
            fake.reset()
            fake.latency = LATENCY
            fake.responder = flaky(seed=15)
            label = f"flaky, MARSHO_RETRIES={retries}"
            shares[retries] = len(await ask_all(label, fake.base_url, retries=retries)) / QUESTIONS
        verdict = "meets" if shares[5] >= ANSWERED_TARGET else "MISSES"
        print(f"answered with MARSHO_RETRIES={default} (default): {shares[default]:.0%}; with "
              f"MARSHO_RETRIES=5: {shares[5]:.0%}  (target >= {ANSWERED_TARGET:.0%}: {verdict}; "
              "predecessor: no retries, about 60 %)")

        fake.reset()
        fake.latency = LATENCY
        healthy = await ask_all("healthy primary", fake.base_url, retries=default)
        backup.latency = LATENCY
        fallen = await ask_all("dead primary, healthy fallback", dead_url(), retries=default,
                               fallbacks=[Fallback(base_url=backup.base_url, model="fake-model")])
        ratio = percentile(fallen, 0.95) / percentile(healthy, 0.95)
        print(ratio_line("p95 dead primary + fallback / healthy primary", ratio, FALLBACK_TARGET,
                         "n/a (no fallback: every question failed)"))

        fake.reset()
        fake.responder = lambda body: text("far too late", delay=HUNG_DELAY)
        backup.reset()
        backup.latency = LATENCY
        await ask_all(f"hung primary ({HUNG_DELAY:g} s), MARSHO_TIMEOUT=1, healthy fallback",
                      fake.base_url, retries=default, timeout=1,
                      fallbacks=[Fallback(base_url=backup.base_url, model="fake-model")])
        print(f"  requests: primary {len(fake.requests)}, fallback {len(backup.requests)} "
              "(predecessor: the primary's retries took the whole bound, the fallback was never asked)")

        fake.reset()
        fake.latency = LATENCY
        fake.responder = lambda body: error(429, "Rate limit reached", headers={"Retry-After": "0"})
        keys = ["sk-bench-key-1111", "sk-bench-key-2222"]
        await ask_all("two keys, always 429 with Retry-After: 0", fake.base_url, retries=default,
                      timeout=2, retry_budget=1, api_key=keys[0], api_keys=keys[1:])
        asked = QUESTIONS + 1  # and the warm-up
        print(f"  requests per question: {len(fake.requests) / asked:.1f} (at most keys + "
              f"MARSHO_RETRIES + 1 = {len(keys) + default + 1}; predecessor: about 2,400 in 3 s)")


if __name__ == "__main__":
    run(main)
