"""Store throughput with 50 sessions writing at once, on SQLite and on PostgreSQL (issue 4).

50 tasks, each appending realistic finished turns (plain and tool-call turns, from history.py) to
its own session as fast as it can, for a fixed time, each write under `SqlStore.lock(key)` as
`Engine.chat` holds it. Nothing else runs: no endpoint, no NoneBot. Reports turns and messages
per second, and the latency of one `append_turn` call (p50/p99; the time from asking for the
session lock to the commit is shown too), this process's CPU time per turn and how many database
connections the pool opened meanwhile (connections opened and closed again while the run goes on
are pool churn: each costs a connect). A single session writing alone, for comparison, comes
first. PostgreSQL is a throw-away server from Debian's binaries (skipped, saying why, when one
cannot be started); its fsync is off (`-F`), so its figures are the database's CPU and round
trips, not a disk's.

Knobs: BENCH_SESSIONS (50), BENCH_SECONDS (10 per backend).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, run  # noqa: E402
from bench.history import realistic_turn  # noqa: E402

SESSIONS = int(os.environ.get("BENCH_SESSIONS", "50"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
ALONE_SECONDS = 3.0
WARMUP_SECONDS = 1.0


def turn_pool(size: int = 500) -> list[tuple[list[dict[str, Any]], list[int]]]:
    """Ready-made turns with their token counts, so the timed loop only writes."""
    from nonebot_plugin_marsho.agent.tokens import TokenCounter

    counter = TokenCounter()
    rng = random.Random(3)
    pool = []
    for serial in range(size):
        turn = realistic_turn(rng, serial)
        pool.append((turn, [counter.count_message(m) for m in turn]))
    return pool


async def write_for(store: Any, sessions: int, seconds: float, pool: list, prefix: str) -> dict[str, Any]:
    """`sessions` tasks appending turns to their own sessions for `seconds`."""
    appends: list[float] = []
    locked: list[float] = []
    counts = {"turns": 0, "messages": 0}
    deadline = time.perf_counter() + seconds

    async def writer(index: int) -> None:
        key = f"bench:{prefix}:{index}"
        serial = index * 7919
        while time.perf_counter() < deadline:
            turn, tokens = pool[serial % len(pool)]
            serial += 1
            asked = time.perf_counter()
            async with store.lock(key):
                started = time.perf_counter()
                await store.append_turn(key, turn, tokens)
                done = time.perf_counter()
            appends.append(done - started)
            locked.append(done - asked)
            counts["turns"] += 1
            counts["messages"] += len(turn)

    from sqlalchemy import event

    opened = [0]

    def on_connect(*_: Any) -> None:
        opened[0] += 1

    event.listen(store.engine.sync_engine, "connect", on_connect)
    cpu = time.process_time()
    started = time.perf_counter()
    try:
        await asyncio.gather(*(writer(i) for i in range(sessions)))
    finally:
        event.remove(store.engine.sync_engine, "connect", on_connect)
    wall = time.perf_counter() - started
    return {**counts, "wall": wall, "cpu": time.process_time() - cpu, "appends": appends,
            "locked": locked, "opened": opened[0]}


def report(label: str, sessions: int, result: dict[str, Any]) -> float:
    turns, wall = result["turns"], result["wall"]
    ms = [x * 1000 for x in result["appends"]]
    whole = [x * 1000 for x in result["locked"]]
    print(f"[{label}] {sessions} session{'s' if sessions > 1 else ''}: {turns / wall:.0f} turns/s, "
          f"{result['messages'] / wall:.0f} messages/s ({turns} turns in {wall:.1f} s); "
          f"append_turn p50 {percentile(ms, 0.5):.2f} ms, p99 {percentile(ms, 0.99):.2f} ms; "
          f"lock + append p50 {percentile(whole, 0.5):.2f} ms, p99 {percentile(whole, 0.99):.2f} ms; "
          f"this process's CPU {result['cpu'] / max(turns, 1) * 1000:.2f} ms per turn; "
          f"{result['opened']} database connections opened")
    return turns / wall


async def measure(label: str, url: str, pool: list) -> None:
    from nonebot_plugin_marsho.store.sql import SqlStore

    store = SqlStore(url)
    try:
        await store.start()
        await write_for(store, SESSIONS, WARMUP_SECONDS, pool, "warm")  # fills the pool
        alone = report(label, 1, await write_for(store, 1, ALONE_SECONDS, pool, "alone"))
        together = report(label, SESSIONS, await write_for(store, SESSIONS, SECONDS, pool, "many"))
        print(f"[{label}] {SESSIONS} sessions at once ÷ one alone: {together / alone:.2f}× the turns/s")
    finally:
        await store.close()


async def main() -> None:
    from tests.postgres_server import PostgresServer, Unavailable

    pool = turn_pool()
    mean = sum(len(turn) for turn, _ in pool) / len(pool)
    print(f"store throughput: {SESSIONS} sessions appending turns at once for {SECONDS:g} s per "
          f"backend, each under lock(key); {mean:.1f} messages per turn on average "
          "(70 % plain turns, 30 % tool-call turns)")
    folder = Path(tempfile.mkdtemp(prefix="marsho-bench-store-"))
    try:
        await measure("SQLite", f"sqlite:///{folder / 'marsho.db'}", pool)
    finally:
        for path in folder.glob("*"):
            path.unlink()
        folder.rmdir()
    try:
        server = await asyncio.to_thread(PostgresServer().start)
    except Unavailable as error:
        print(f"[PostgreSQL] skipped: {error}")
        return
    try:
        url = await asyncio.to_thread(server.create_database, "marsho_bench_store")
        await measure("PostgreSQL", url, pool)
    finally:
        await asyncio.to_thread(server.stop)


if __name__ == "__main__":
    run(main)
