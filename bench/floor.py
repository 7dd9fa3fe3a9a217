"""Marsho beside the thinnest NoneBot plugin that does the same job (issue 30: close to the floor).

The floor is `bench/floor_plugin.py`: one `on_message` rule for `marsho …`, one request per
question through the openai SDK (one client made at startup, the plugin's aiohttp transport),
the answer sent quoting the question. Both sides start as `bot.py` does (`tests/onebot_sim.py`'s
BotProcess: a fresh working directory, settings in the environment only, the drivers fastapi +
httpx + websockets, the OneBot v11 reverse WebSocket) against the same fake endpoint
(`tests/fake_openai.py`), and take turns: floor, Marsho, floor, Marsho (`--runs`, 2). Each run of
a side, in one bot process:

- start: spawn → WebSocket accepted (bench/start.py's measure), first in a new directory (Marsho
  creates its database and runs every migration), then again in it, the figure compared; the
  CPU time the bot used by then, and its resident memory (RSS) right then and 3 s later (Marsho
  imports the OpenAI SDK in the background a second after its start, the floor before it);
- per turn, against a 0 s endpoint: 10 warm-up questions in one group, then the median of 40
  (event pushed → the reply received) minus the endpoint's own median for the very bodies the
  bot sent (replayed with a minimal keep-alive client, as bench/overhead.py does), and the bot's
  CPU time per turn;
- 500 group messages nobody addressed to the bot (where the job is to stay silent), pushed one
  after another, then one question: the bot's CPU per such message;
- bursts, endpoint 0.5 s: 20 groups ask at once (one member each), last reply ÷ 0.5 s, then 200
  groups (bench/concurrent_sessions.py's burst, `--bursts` of each, 2, the median kept; one
  untimed burst of each at 0 s first);
- RSS again after all that.

Then each figure's median over the runs, Marsho's ÷ the floor's (RSS: the difference) beside the
issue's targets. Reports, never asserts; exits 0.

    python bench/floor.py                          # ~3 min on 2 busy cores
    python bench/floor.py --against ../other       # that checkout's bot.py as a third side
    python bench/floor.py --runs 1 --turns 1000 --chatter 5000 --py-spy /tmp/spy
                        # py-spy samples of the per-turn loop, the messages not for the bot
                        # and the 200-group bursts, summarised
                        # (pip install py-spy; sampling slows the bot: read no figure of that run)
    python bench/floor.py --smoke                  # one question and two tiny bursts per side

`--env KEY=VALUE` (repeatable) gives Marsho's sides a setting (the floor has none to take), e.g.
`MARSHO_GROUP_CONTEXT_DEFAULT=on` for what observing every group's chat costs. `--against
CHECKOUT` (repeatable) runs that checkout's `bot.py` with it first on PYTHONPATH, in
this interpreter, alternately with the others. Knobs: `BENCH_RUNS` (2).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import (  # noqa: E402
    REPO_ROOT,
    SELF_ID,
    UNPAUSED,
    FakeOpenAI,
    SpyCosts,
    median_ms,
    process_cpu_seconds,
    process_rss_bytes,
    py_spy,
    raw_round_trips,
    run,
)
from bench.concurrent_sessions import burst  # noqa: E402
from bench.start import TIMEOUT, Checkout, accepted, child_env  # noqa: E402
from tests.onebot_sim import BotProcess, OneBotSim, terminate  # noqa: E402

FLOOR_BOT = Path(__file__).resolve().parent / "floor_plugin.py"
LATENCY = 0.5
MB = 1024 * 1024
SETTLE = 3.0
"""Seconds after the start before its RSS is read again (plugin.py's SDK_WARM_DELAY is 1 s)."""


@dataclass(frozen=True)
class Figure:
    label: str
    unit: str
    target: float | None = None
    """Marsho's median ÷ the floor's at most this (issue 30's "done when"); for RSS, MB above."""
    difference: bool = False
    """Compared as Marsho's minus the floor's, not as a ratio."""


FIGURES = {
    "turn": Figure("overhead per turn, 0 s endpoint (median of --turns, 40, − endpoint)", "ms", 1.3),
    "turn_cpu": Figure("bot CPU per turn in that loop", "ms"),
    "unaddressed_cpu": Figure("bot CPU per group message not for the bot", "ms"),
    "first_start": Figure("first start → WebSocket accepted (new directory)", "s"),
    "start": Figure("start → WebSocket accepted (again, in that directory)", "s", 1.3),
    "start_cpu": Figure("bot CPU by then", "s"),
    "burst20": Figure("20 groups at once, endpoint 0.5 s: last reply ÷ 0.5 s", "×", 1.1),
    "burst200": Figure("200 groups at once: last reply ÷ 0.5 s", "×", 1.2),
    "burst200_cpu": Figure("bot CPU per question in the 200-group burst", "ms"),
    "rss": Figure("RSS at the WebSocket accepted", "MB", difference=True),
    "rss_settled": Figure(f"RSS after start ({SETTLE:g} s later: Marsho loads the SDK 1 s after it)",
                          "MB", 25, difference=True),
    "rss_end": Figure("RSS after the turns and bursts", "MB", difference=True),
}

SPY_WITHIN = ("nonebot_plugin_marsho/", "nonebot/", "nonebot_plugin_alconna/", "nonebot_plugin_uninfo/",
              "nonebot/adapters/")
"""Files whose functions the profile summary lists by inclusive time (the plugins and NoneBot)."""


@dataclass
class Plan:
    """How much of each measure a run makes."""

    warmup_turns: int = 10
    turns: int = 40
    bursts: int = 2
    small: int = 20
    large: int = 200
    latency: float = LATENCY
    restart: bool = True
    chatter: int = 500
    """Group messages not for the bot, pushed one after another."""


SMOKE = Plan(warmup_turns=0, turns=1, bursts=1, small=2, large=3, latency=0.05, restart=False, chatter=5)


@dataclass
class Side(Checkout):
    """One bot measured: a checkout's bot.py, or the floor's."""

    script: Path | None = None
    """The bot script run (None: the checkout's bot.py)."""
    env: dict[str, str] = field(default_factory=dict)
    """Settings of its own, over BotProcess's."""

    @property
    def bot_py(self) -> Path:
        return self.script or self.root / "bot.py"


def spawn(side: Side, bot: BotProcess) -> subprocess.Popen[bytes]:
    """Start `side`'s bot script in `bot`'s directory, with bench/start.py's environment; the
    process is `bot`'s, so `bot.stop()` ends it."""
    with open(bot.log_path, "ab") as log:
        bot.process = subprocess.Popen(
            [sys.executable, str(side.bot_py)], cwd=bot.workdir, env=child_env(bot, side),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    return bot.process


async def start(side: Side, bot: BotProcess, record: bool = True) -> subprocess.Popen[bytes]:
    """Spawn and wait until the WebSocket accepts; the time, CPU and RSS recorded."""
    started = time.perf_counter()
    process = spawn(side, bot)
    try:
        await accepted(bot.ws_url, time.monotonic() + TIMEOUT, process)
    except (RuntimeError, TimeoutError) as error:
        raise RuntimeError(f"{side.label}: {error}:\n{bot.output()[-4000:]}") from None
    took = time.perf_counter() - started
    cpu, rss = process_cpu_seconds(process.pid), process_rss_bytes(process.pid)
    if record:
        side.figures["start"].append(took)
        if cpu is not None:
            side.figures["start_cpu"].append(cpu)
        if rss is not None:
            side.figures["rss"].append(rss / MB)
    return process


async def per_turn(side: Side, sim: OneBotSim, fake: FakeOpenAI, plan: Plan, pid: int,
                   spy: Path | None) -> None:
    """Questions one after another in one group against a 0 s endpoint."""
    fake.latency = 0.0
    for i in range(plan.warmup_turns):
        await sim.ask(f"marsho warm-up {i}", group_id=50001)
    fake.reset()
    turns = []
    async with py_spy(pid, spy):
        cpu_before = process_cpu_seconds(pid)
        for i in range(plan.turns):
            event = sim.group_event(f"marsho question number {i}", group_id=50001)
            started = time.perf_counter()
            await sim.push(event)
            reply = await sim.reply_to(event, timeout=30)
            turns.append(reply.received - started)
        cpu_after = process_cpu_seconds(pid)
    bodies = list(fake.requests)
    # the endpoint's own cost for those bodies, twice, the lower kept (load only adds time)
    endpoint = min([median_ms(await asyncio.to_thread(raw_round_trips, fake.port, bodies, 2))
                    for _ in range(2)])
    side.figures["turn"].append(median_ms(turns) - endpoint)
    if cpu_before is not None and cpu_after is not None:
        side.figures["turn_cpu"].append((cpu_after - cpu_before) / plan.turns * 1000)


async def settled_cpu(pid: int) -> float | None:
    """The bot's CPU time once it has stopped growing for 0.3 s (what it had queued is done)."""
    seen = process_cpu_seconds(pid)
    for _ in range(100):
        await asyncio.sleep(0.3)
        now = process_cpu_seconds(pid)
        if now == seen:
            break
        seen = now
    return seen


async def unaddressed(side: Side, sim: OneBotSim, plan: Plan, pid: int, spy: Path | None) -> None:
    """Group messages nobody addressed to the bot, then one question: the bot's CPU per message,
    that question's own (the loop's last figure) left out."""
    events = [sim.group_event(f"just chatting, line {i}", group_id=50002, user_id=30000 + i % 7)
              for i in range(plan.chatter)]
    async with py_spy(pid, spy):
        before = await settled_cpu(pid)
        for event in events:
            await sim.push(event)
        await sim.ask("marsho anything new?", group_id=50002, user_id=30999, timeout=60)
        after = await settled_cpu(pid)
    if before is not None and after is not None and side.figures["turn_cpu"]:
        question = side.figures["turn_cpu"][-1] / 1000
        side.figures["unaddressed_cpu"].append(max(0.0, after - before - question) / plan.chatter * 1000)


async def bursts(side: Side, sim: OneBotSim, fake: FakeOpenAI, plan: Plan, pid: int,
                 spy: Path | None) -> None:
    """Groups asking at once, one member each: last reply ÷ the endpoint's latency."""
    fake.latency = 0.0
    for sessions in (plan.small, plan.large):  # untimed: lazy imports, the connection pool
        await burst(sim, sessions)
    fake.latency = plan.latency
    for key, sessions in (("burst20", plan.small), ("burst200", plan.large)):
        totals, cpu = [], []
        async with py_spy(pid, spy if key == "burst200" else None):
            for _ in range(plan.bursts):
                before = process_cpu_seconds(pid)
                total, _ = await burst(sim, sessions)
                after = process_cpu_seconds(pid)
                totals.append(total / plan.latency)
                if before is not None and after is not None:
                    cpu.append((after - before) / sessions * 1000)
        side.figures[key].append(statistics.median(totals))
        if cpu:
            side.figures[f"{key}_cpu"].append(statistics.median(cpu))
    fake.latency = 0.0


async def one_run(side: Side, fake: FakeOpenAI, plan: Plan, spy_dir: Path | None, run_no: int) -> None:
    """One run of one side: its starts, then the turns and the bursts in the started bot."""
    bot = BotProcess(base_url=fake.base_url, bot_py=side.bot_py, env=side.env)
    fake.reset()
    spy = (lambda phase: spy_dir / f"{side.label}-{phase}-{run_no}.txt") if spy_dir else (lambda phase: None)
    try:
        if plan.restart:
            first = time.perf_counter()
            process = await start(side, bot, record=False)
            side.figures["first_start"].append(time.perf_counter() - first)
            await asyncio.to_thread(terminate, process)  # the directory stays
        process = await start(side, bot)
        await asyncio.sleep(SETTLE)
        if (rss := process_rss_bytes(process.pid)) is not None:
            side.figures["rss_settled"].append(rss / MB)
        try:
            # not the start probe's X-Self-ID: the bot may not have dropped that connection yet,
            # and the adapter closes a second one with the same id right after accepting it
            async with bot.simulator(self_id=SELF_ID + 1) as sim:
                await per_turn(side, sim, fake, plan, process.pid, spy("turns"))
                await unaddressed(side, sim, plan, process.pid, spy("unaddressed"))
                await bursts(side, sim, fake, plan, process.pid, spy("burst200"))
        except (TimeoutError, ConnectionError, AssertionError) as error:  # what the bot said
            raise RuntimeError(f"{side.label}: {error}\n{bot.output()[-4000:]}") from None
        rss = process_rss_bytes(process.pid)
        if rss is not None:
            side.figures["rss_end"].append(rss / MB)
    finally:
        await asyncio.to_thread(bot.stop)


def compared(side: Side, floor: Side, key: str) -> str:
    figure = FIGURES[key]
    mine, base = median(side.figures[key]), median(floor.figures[key])
    if figure.difference:
        text = f"{mine - base:+.1f} MB"
        met = figure.target is None or mine - base <= figure.target
    else:
        value = mine / base if base else float("nan")
        text = f"{value:.2f}×"
        met = figure.target is None or value <= figure.target
    if figure.target is None:
        return text
    limit = f"+{figure.target:g} MB" if figure.difference else f"{figure.target:g}×"
    return f"{text} (target ≤ {limit}: {'meets' if met else 'MISSES'})"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(sides: list[Side]) -> None:
    floor, others = sides[0], sides[1:]
    print("\nfigure: each side's runs in order (median); then each side's median ÷ the floor's")
    for key, figure in FIGURES.items():
        print(f"\n{figure.label}, {figure.unit}:")
        for side in sides:
            values = side.figures[key]
            runs = " / ".join(f"{value:.3g}" for value in values)
            print(f"  {side.label:>12}: {runs}  (median {median(values):.3g})")
        for side in others:
            if side.figures[key] and floor.figures[key]:
                print(f"  {side.label:>12} vs floor: {compared(side, floor, key)}")


def summarise_profiles(spy_dir: Path, sides: list[Side], top: int = 25) -> None:
    """Per side and phase, all runs' samples together (a thread holding the GIL): each thread's
    share, then in the event loop's thread the plugins' and NoneBot's functions by inclusive
    share, and the functions by own share."""
    for side in sides:
        for phase in ("turns", "unaddressed", "burst200"):
            files = sorted(spy_dir.glob(f"{side.label}-{phase}-*.txt"))
            costs = SpyCosts()
            for file in files:
                costs.add(file, thread="MainThread", within=SPY_WITHIN)
            if not costs.total:
                continue
            loop = costs.threads["MainThread"] or 1
            threads = ", ".join(f"{name} {count / costs.total:.0%}"
                                for name, count in costs.threads.most_common(5))
            print(f"\n[py-spy] {side.label}, {phase}: {costs.total} samples holding the GIL "
                  f"in {len(files)} file(s); by thread: {threads}")
            packages = Counter[str]()
            for frame, count in costs.own.items():  # the package of the file the sample was in
                packages[frame.rpartition(" (")[2].rstrip(")").split("/")[0]] += count
            print("  the event loop's own time by package: "
                  + ", ".join(f"{name} {count / loop:.0%}" for name, count in packages.most_common(16)))
            print("  the event loop (MainThread), inclusive, plugins and NoneBot:")
            for frame, count in costs.inclusive.most_common(top):
                print(f"    {count / loop:6.1%}  {frame}")
            print("  the event loop, own time:")
            for frame, count in costs.own.most_common(top // 2):
                print(f"    {count / loop:6.1%}  {frame}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS", "2")),
                        help="runs of each side, taken in turn (BENCH_RUNS, 2)")
    parser.add_argument("--bursts", type=int, default=Plan.bursts, help="bursts of each size per run (2)")
    parser.add_argument("--turns", type=int, default=Plan.turns,
                        help="timed questions per run in the per-turn loop (40; more for a profile)")
    parser.add_argument("--chatter", type=int, default=Plan.chatter,
                        help="group messages not for the bot per run (500; more for a profile)")
    parser.add_argument("--against", type=Path, action="append", default=[], metavar="CHECKOUT",
                        help="another checkout's bot.py as one more side (repeatable)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for Marsho's sides, e.g. MARSHO_GROUP_CONTEXT_DEFAULT=on")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR", dest="spy",
                        help="sample the per-turn loop and the 200-group burst with py-spy into DIR")
    parser.add_argument("--smoke", action="store_true",
                        help="one run, one question, tiny bursts: checks that both sides answer")
    return parser.parse_args(argv)


def sides_for(args: argparse.Namespace) -> list[Side]:
    env = {**UNPAUSED, **dict(setting.partition("=")[::2] for setting in args.env)}
    sides = [Side("floor", REPO_ROOT, script=FLOOR_BOT), Side("marsho", REPO_ROOT, env=env)]
    for root in args.against:
        root = root.resolve()
        if not (root / "bot.py").is_file():
            raise SystemExit(f"{root} has no bot.py")
        sides.append(Side(root.name, root, env=env))
    return sides


async def measure(args: argparse.Namespace, say: Callable[[str], None] = print) -> list[Side]:
    """Every side's figures, the sides taking turns run by run."""
    sides = sides_for(args)
    plan = SMOKE if args.smoke else Plan(bursts=args.bursts, turns=args.turns, chatter=args.chatter)
    runs = 1 if args.smoke else args.runs
    with FakeOpenAI() as fake:
        if not args.smoke:
            for side in sides:  # not counted: writes the .pyc files, warms the disk cache
                bot = BotProcess(base_url=fake.base_url, bot_py=side.bot_py, env=side.env)
                try:
                    await start(side, bot, record=False)
                finally:
                    await asyncio.to_thread(bot.stop)
        for run_no in range(1, runs + 1):
            for side in sides:
                await one_run(side, fake, plan, args.spy, run_no)
                figures = ", ".join(f"{key} {side.figures[key][-1]:.3g}" for key in FIGURES
                                    if side.figures[key])
                say(f"  run {run_no}, {side.label}: {figures}")
    return sides


async def main() -> None:
    args = parse()
    sides = await measure(args)
    report(sides)
    if args.spy is not None:
        summarise_profiles(args.spy, sides)


if __name__ == "__main__":
    run(main)
