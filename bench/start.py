"""How long the bot takes to start (issue 23): process start → OneBot v11 WebSocket accepted.

Each run starts `bot.py` as the end-to-end tests do (`tests/onebot_sim.py`'s BotProcess: a fresh
temporary working directory, settings in the environment only, the fake endpoint of
`tests/fake_openai.py`), and times from just before the process is spawned until a `websockets`
client connecting to `/onebot/v11/ws` with `X-Self-ID` and `X-Client-Role: Universal` is accepted
(retried every 10 ms until then). That is the whole start a user waits for: the interpreter,
NoneBot, the plugin's import, its startup (toolkits, the database) and the server. Each run is a
first start (a new database: every migration runs) and then a restart in the same directory
(the database is at the newest revision). Beside the wall-clock time, the CPU time the bot
process used until it accepted (user + system, from /proc): on a loaded machine it moves far
less than the wall clock does.

Then the plugin's import alone, as `python -X importtime` reports it: NoneBot initialised and the
OneBot v11 adapter registered as bot.py does, `nonebot.load_plugin("nonebot_plugin_marsho")`
timed; the figure is the sum of the cumulative times of the top-level imports made during it
(the plugin, and the plugins it requires). The heaviest packages it pulls in are listed (their own
"self" time, summed per top-level package).

    python bench/start.py                                    # this checkout, 10 runs
    python bench/start.py --against ../other-checkout        # alternately with another one
    python bench/start.py --runs 5 --against ../a --against ../b

`--against` runs that checkout's `bot.py` with that checkout first on sys.path (PYTHONPATH), in
this interpreter (its dependencies must be installed here); the checkouts take turns run by run,
so a machine whose load changes meanwhile slows them alike. Medians are printed, and this
checkout's median ÷ each other one's. One start of each checkout comes first, not timed: it
writes the `.pyc` files (as pip does when it installs a package). `--no-bytecode` removes the
plugin's `__pycache__` folders first and sets PYTHONDONTWRITEBYTECODE=1, so that every start
compiles the whole plugin, as in a checkout run in such an environment. Knobs: `BENCH_RUNS`
(10), `BENCH_IMPORT_RUNS` (5).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.asyncio.client import connect  # noqa: E402
from websockets.exceptions import InvalidHandshake  # noqa: E402

from bench._common import REPO_ROOT, SELF_ID, FakeOpenAI, process_cpu_seconds, run  # noqa: E402
from tests.onebot_sim import BotProcess, terminate  # noqa: E402

RUNS = int(os.environ.get("BENCH_RUNS", "10"))
IMPORT_RUNS = int(os.environ.get("BENCH_IMPORT_RUNS", "5"))
TIMEOUT = 120.0
PLUGIN = "nonebot_plugin_marsho"

IMPORT_SCRIPT = f"""
import sys, time
import nonebot
from nonebot.adapters.onebot.v11 import Adapter
nonebot.init(driver="~fastapi+~httpx+~websockets")
nonebot.get_driver().register_adapter(Adapter)
sys.stderr.write("bench-start: plugin import begins\\n")
started, cpu = time.perf_counter(), time.process_time()
nonebot.load_plugin({PLUGIN!r})
took, cpu = time.perf_counter() - started, time.process_time() - cpu
sys.stderr.write("bench-start: plugin import ends\\n")
sys.stderr.write(f"bench-start: load_plugin took {{took}} {{cpu}}\\n")
"""
"""What `python -X importtime` runs: bot.py up to its plugin, the plugin's import marked."""

FIGURES = {
    "start": "first start (spawn → WebSocket accepted; a new database, every migration)",
    "start_cpu": "CPU time of the bot process by then",
    "restart": "restart (the same, on that database)",
    "restart_cpu": "CPU time of the bot process by then",
    "import": "plugin import (python -X importtime, after nonebot.init: top-level cumulative, summed)",
    "import_wall": "the same import timed around load_plugin (importtime's own cost included)",
    "import_cpu": "CPU time of that load_plugin",
}
"""What is measured of each checkout, in seconds."""

_IMPORT_ROW = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


@dataclass
class Checkout:
    """A checkout whose bot.py is measured, and its figures."""

    label: str
    root: Path
    bytecode: bool = True
    """Let the bot write and read `__pycache__`, as an installed plugin does."""
    figures: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    """Seconds, by FIGURES key."""
    heaviest: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))


def child_env(process: BotProcess, checkout: Checkout) -> dict[str, str]:
    """BotProcess's environment for `checkout`, with that checkout first on sys.path."""
    env = process._child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(checkout.root), *filter(None, [os.environ.get("PYTHONPATH")])])
    if checkout.bytecode:
        # an installed plugin has its .pyc files (pip compiles them); without them each start
        # compiles the whole plugin again, and the figure grows with the size of the code
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


async def accepted(url: str, deadline: float, process: subprocess.Popen[bytes]) -> None:
    """Connect as a OneBot v11 implementation until the bot accepts (then close)."""
    headers = {"X-Self-ID": str(SELF_ID), "X-Client-Role": "Universal"}
    while True:
        try:
            async with connect(url, additional_headers=headers, open_timeout=5, compression=None):
                return
        except (OSError, InvalidHandshake, asyncio.TimeoutError):
            if process.poll() is not None:
                raise RuntimeError(f"bot.py exited with code {process.returncode} before accepting") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"the bot did not accept {url} within {TIMEOUT:g} s") from None
            await asyncio.sleep(0.01)


def spawn(checkout: Checkout, bot: BotProcess) -> subprocess.Popen[bytes]:
    """Start `checkout`'s bot.py in `bot`'s working directory, its output appended to its log."""
    with open(bot.log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(checkout.root / "bot.py")], cwd=bot.workdir, env=child_env(bot, checkout),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )


async def timed_start(checkout: Checkout, bot: BotProcess, figure: str) -> None:
    """Seconds from spawning `checkout`'s bot.py to its WebSocket accepting a connection, and
    the CPU time the process used by then; the bot is stopped again (its directory kept)."""
    started = time.perf_counter()
    process = spawn(checkout, bot)
    try:
        await accepted(bot.ws_url, time.monotonic() + TIMEOUT, process)
        checkout.figures[figure].append(time.perf_counter() - started)
        cpu = process_cpu_seconds(process.pid)
        if cpu is not None:
            checkout.figures[f"{figure}_cpu"].append(cpu)
    except (RuntimeError, TimeoutError) as error:
        raise RuntimeError(f"{checkout.label}: {error}:\n{bot.output()[-4000:]}") from None
    finally:
        await asyncio.to_thread(terminate, process)


async def first_start_and_restart(checkout: Checkout, fake: FakeOpenAI) -> None:
    """A first start in a fresh working directory (the database is created: every migration
    runs), then a restart in the same one (the database is at the newest revision)."""
    bot = BotProcess(base_url=fake.base_url, bot_py=checkout.root / "bot.py")
    try:
        await timed_start(checkout, bot, "start")
        await timed_start(checkout, bot, "restart")
    finally:
        await asyncio.to_thread(bot.stop)


def one_import(checkout: Checkout, fake: FakeOpenAI) -> None:
    """Run IMPORT_SCRIPT under `-X importtime` for `checkout`; add its figures."""
    bot = BotProcess(base_url=fake.base_url)  # for its environment and working directory only
    try:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", IMPORT_SCRIPT], cwd=bot.workdir,
            env=child_env(bot, checkout), capture_output=True, text=True, timeout=TIMEOUT,
        )
    finally:
        shutil.rmtree(bot.workdir, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"{checkout.label}: the import failed:\n{done.stderr[-4000:]}")
    inside, total, own = False, 0, defaultdict(int)
    for line in done.stderr.splitlines():
        if line.startswith("bench-start: plugin import begins"):
            inside = True
        elif line.startswith("bench-start: plugin import ends"):
            inside = False
        elif line.startswith("bench-start: load_plugin took "):
            wall, cpu = line.split()[-2:]
            checkout.figures["import_wall"].append(float(wall))
            checkout.figures["import_cpu"].append(float(cpu))
        elif inside and (row := _IMPORT_ROW.match(line)):
            self_us, cumulative_us, indent, name = int(row[1]), int(row[2]), len(row[3]), row[4]
            if indent == 1:  # a top-level import of this stretch: its cumulative holds the rest
                total += cumulative_us
            own[name.split(".")[0]] += self_us
    checkout.figures["import"].append(total / 1e6)
    for package, microseconds in own.items():
        checkout.heaviest[package].append(microseconds / 1e6)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(checkouts: list[Checkout]) -> None:
    for key, label in FIGURES.items():
        print(f"\n{label}, seconds (each run in the order run):")
        for checkout in checkouts:
            times = checkout.figures[key]
            runs = " ".join(f"{t:.2f}" for t in times)
            print(f"  {checkout.label:>12}: median {median(times):.3f}  min {min(times, default=0):.3f}"
                  f"  runs: {runs}")
    for checkout in checkouts:
        ranked = sorted(checkout.heaviest.items(), key=lambda item: -median(item[1]))[:12]
        print(f"\nheaviest packages in {checkout.label}'s plugin import (own time, median ms): "
              + ", ".join(f"{name} {median(times) * 1000:.0f}" for name, times in ranked))
    first = checkouts[0]
    if len(checkouts) > 1:
        print(f"\nratios, {first.label}'s median ÷ another's (below 1: {first.label} is faster):")
        for other in checkouts[1:]:
            ratios = [f"{key} {median(first.figures[key]) / median(other.figures[key]):.3f}"
                      for key in FIGURES if other.figures[key]]
            print(f"  {first.label} ÷ {other.label}: {', '.join(ratios)}")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help="starts per checkout (BENCH_RUNS, 10)")
    parser.add_argument("--import-runs", type=int, default=IMPORT_RUNS,
                        help="importtime runs per checkout (BENCH_IMPORT_RUNS, 5)")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="compile the plugin at each start: its __pycache__ folders removed, "
                        "PYTHONDONTWRITEBYTECODE=1")
    parser.add_argument("--against", type=Path, action="append", default=[], metavar="CHECKOUT",
                        help="another checkout to run alternately with this one (repeatable)")
    return parser.parse_args()


async def main() -> None:
    args = parse()
    checkouts = [Checkout("this", REPO_ROOT, bytecode=not args.no_bytecode)]
    for root in args.against:
        root = root.resolve()
        if not (root / "bot.py").is_file():
            raise SystemExit(f"{root} has no bot.py")
        checkouts.append(Checkout(root.name, root, bytecode=not args.no_bytecode))
    print(f"{args.runs} starts and {args.import_runs} plugin imports per checkout, alternately: "
          + ", ".join(f"{c.label} ({c.root})" for c in checkouts))
    with FakeOpenAI() as fake:
        for checkout in checkouts:
            if not checkout.bytecode:  # PYTHONDONTWRITEBYTECODE stops writes, not reads
                for cache in (checkout.root / PLUGIN).rglob("__pycache__"):
                    shutil.rmtree(cache, ignore_errors=True)
        for checkout in checkouts:  # not counted: writes the .pyc files, warms the disk cache
            await first_start_and_restart(checkout, fake)
            checkout.figures.clear()
        for _ in range(args.import_runs):
            for checkout in checkouts:
                await asyncio.to_thread(one_import, checkout, fake)
        for i in range(args.runs):
            for checkout in checkouts:
                await first_start_and_restart(checkout, fake)
            figures = [f"{c.label} {c.figures['start'][-1]:.2f} s, again {c.figures['restart'][-1]:.2f} s"
                       for c in checkouts]
            print(f"  round {i + 1}: {'; '.join(figures)}", flush=True)
    report(checkouts)


if __name__ == "__main__":
    run(main)
