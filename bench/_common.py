"""Shared pieces of the benchmarks: paths, the fake endpoint, a bot process with its simulator."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.fake_openai import FakeOpenAI  # noqa: E402
from tests.onebot_sim import BotProcess, OneBotSim  # noqa: E402

CHAT_TOOLSET = REPO_ROOT / "tests" / "toolsets" / "chat"
E2E_TOOLSET = REPO_ROOT / "tests" / "toolsets" / "e2e"
SELF_ID = 1234567


UNPAUSED = {"MARSHO_CHAT_ANSWERS_PER_MINUTE": "0"}
"""What every benchmark's Marsho gets: a benchmark asks one chat more than a lively group does
in a minute, which the loop guard's breaker (MARSHO_CHAT_ANSWERS_PER_MINUTE, 30) would pause;
the benchmarks measure answering, not the breaker (bench/bot_loops.py measures that)."""


@asynccontextmanager
async def bot_and_sim(
    fake: FakeOpenAI,
    *,
    toolkit_dirs: Iterable[Path] = (),
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[tuple[BotProcess, OneBotSim]]:
    """A real `bot.py` against `fake`, and a connected OneBot v11 simulator."""
    process = BotProcess(base_url=fake.base_url, toolkit_dirs=toolkit_dirs, env={**UNPAUSED, **(env or {})})
    async with process:
        async with process.simulator(self_id=SELF_ID) as sim:
            yield process, sim


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far (Linux /proc), or None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def median_ms(values: Iterable[float]) -> float:
    return statistics.median(values) * 1000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def raw_round_trips(port: int, bodies: list[dict[str, Any]], repeat: int = 1) -> list[float]:
    """Seconds per request for a minimal keep-alive HTTP client posting `bodies` to the fake.

    This is the endpoint's own cost (loopback + the fake's handling), with almost no client cost.
    """
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    import socket

    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    try:
        for _ in range(repeat):
            for body in bodies:
                payload = json.dumps({k: v for k, v in body.items() if k != "_headers"}).encode()
                started = time.perf_counter()
                conn.request("POST", "/v1/chat/completions", payload,
                             {"Content-Type": "application/json", "Authorization": "Bearer k"})
                response = conn.getresponse()
                response.read()
                times.append(time.perf_counter() - started)
    finally:
        conn.close()
    return times


async def sdk_round_trips(base_url: str, bodies: list[dict[str, Any]]) -> list[float]:
    """Seconds per request for a bare, reused openai client sending `bodies` the way the plugin
    does (aiohttp transport, low-level post). One warm-up pass is not timed."""
    import openai
    from openai.types.chat import ChatCompletion

    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0,
                                http_client=openai.DefaultAioHttpClient())
    times = []
    try:
        for timed in (False, True):
            for body in bodies:
                request = {k: v for k, v in body.items() if k in ("model", "messages", "tools")}
                started = time.perf_counter()
                await client.post("/chat/completions", body=request, cast_to=ChatCompletion)
                if timed:
                    times.append(time.perf_counter() - started)
    finally:
        await client.close()
    return times


def ratio_line(label: str, value: float, target: float, predecessor: str, unit: str = "") -> str:
    verdict = "meets" if value <= target else "MISSES"
    return (f"{label}: {value:.4g}{unit}  (target <= {target:g}{unit}: {verdict}, "
            f"value/target = {value / target:.2f}; predecessor {predecessor})")


def run(main: Callable[[], Any]) -> None:
    """Run an async benchmark's main and exit 0 (benchmarks print, they do not assert)."""
    asyncio.run(main())


def process_rss_bytes(pid: int) -> int | None:
    """The resident memory of a process now (VmRSS from Linux /proc), or None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@asynccontextmanager
async def py_spy(
    pid: int, output: Path | None, *, rate: int = 200, gil: bool = True
) -> AsyncIterator[Path | None]:
    """Sample `pid` with py-spy while the block runs, into `output`: `--format raw` (collapsed
    stacks, one line per stack and its count; read by `SpyCosts`), line numbers left out, each
    stack under its thread's name, and with `gil` only the samples of a thread holding the GIL
    (the Python work; a thread waiting in a select or a lock is not counted). Nothing when
    `output` is None or py-spy is not installed (then the block gets None). py-spy's messages go
    to `output` with the suffix `.log`."""
    import shutil
    import signal
    import subprocess

    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if output is None or spy is None:
        yield None
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    command = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--nolineno",
               "--threads", "--output", str(output), *(["--gil"] if gil else [])]
    with open(output.with_suffix(".log"), "wb") as log:  # py-spy's own messages
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        await asyncio.sleep(0.3)  # py-spy attaches
        yield output
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl+C
        try:
            await asyncio.to_thread(process.wait, 20)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait, 10)


@dataclass
class SpyCosts:
    """What py-spy raw files say, summed: samples in all, per thread name, and per function
    (`name (file)`) on the stack (inclusive, once per stack) and at its top (own time)."""

    total: int = 0
    threads: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)
    own: Counter[str] = field(default_factory=Counter)

    def add(self, raw: Path, *, thread: str | None = None, within: tuple[str, ...] = ()) -> SpyCosts:
        """Add a raw file's samples; with `thread`, the inclusive and own counts keep only that
        thread's stacks; with `within`, the inclusive ones only functions whose file starts so."""
        for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count, frames = int(count_text), stack.split(";")
            name = "?"
            if frames[0].startswith("thread ("):  # "thread (0x7f…): MainThread"
                name, frames = frames[0].partition(": ")[2] or "?", frames[1:]
            self.total += count
            self.threads[name] += count
            if not frames or (thread is not None and name != thread):
                continue
            self.own[frames[-1]] += count
            for frame in set(frames):
                if not within or frame.rpartition(" (")[2].startswith(within):
                    self.inclusive[frame] += count
        return self
