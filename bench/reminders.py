"""How late reminders fire (issue 27): 200 reminders due within the same minute, sent by a real
`bot.py` to the OneBot v11 simulator.

One question in a group makes the bot save that chat's target. Then this process writes 200 text
reminders straight into the bot's SQLite database (through store/reminders.py, as another bot
process sharing the database would), due at random moments within one minute that starts 40 s
later (past the loop's longest sleep, so the bot finds them by itself, as it finds another
process's). Each one's lateness is the time its `send_group_msg` frame reached the simulator
(`Action.wall`, this machine's clock) minus its due time. A second round puts all 200 on the same
second. Printed: median, 90th percentile and worst lateness of each round, and how many came
twice (must be 0). Measured on the 2-core machine (2026-12-02): within one minute, median 7 ms,
p90 17 ms, worst 79 ms; on one second, median 134 ms, p90 420 ms, worst 506 ms. After each group
reminder began to check its asker is still a member (one get_group_member_info more), on the
same machine shared with other sessions: within one minute, median 15 ms, p90 51 ms, worst
318 ms; on one second, median 282 ms, p90 335 ms, worst 347 ms.

First, in this process, how long a repeat's next time takes after a long stop (the loop works
it out twice per reminder): '*/5 * * * *' 30 days behind took 3,097 ms when each missed time was
stepped through, 0.3 ms now; 'PT5M' 30 days behind 151 ms, now 0.1 ms; 'P1M' ten years behind
2.2 ms, now 0.1 ms.

    python bench/reminders.py
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import SELF_ID, FakeOpenAI, percentile  # noqa: E402
from nonebot_plugin_marsho.store.reminders import Reminder, ReminderStore  # noqa: E402
from nonebot_plugin_marsho.store.sql import SqlStore  # noqa: E402
from tests.fake_openai import text  # noqa: E402
from tests.onebot_sim import BotProcess, OneBotSim  # noqa: E402

COUNT = 200
GROUP = 86001
USER = 10701
AHEAD = 40.0
"""Seconds from writing the reminders to the start of the minute they fall due in."""
BODY = re.compile(r"bench reminder (\d+)")


async def round_of(sim: OneBotSim, store: ReminderStore, dues: list[float], label: str) -> None:
    """Write reminders due at `dues`, wait for every one's frame, print their lateness."""
    chat = f"OneBot V11:group:{GROUP}"
    due_of: dict[int, float] = {}
    for index, due in enumerate(dues):
        added = await store.add(Reminder(
            id=0, chat_key=chat, platform="OneBot V11", kind="group", chat_id=str(GROUP),
            user_id=str(USER), asker=f"OneBot V11:{USER}", what="text", body=f"bench reminder {index}",
            due_at=due, scheduled_at=due, session_key=chat, zone="UTC"))
        due_of[index] = added.due_at
    late: dict[int, float] = {}
    twice = 0
    deadline = max(dues) + 120
    while len(late) < len(dues) and time.time() < deadline:
        try:
            action = await sim.wait_send(timeout=max(1.0, deadline - time.time()))
        except TimeoutError:
            break
        found = BODY.search(action.text)
        if found is None:
            continue
        index = int(found.group(1))
        if index in late:
            twice += 1
        else:
            late[index] = action.wall - due_of[index]
    values = sorted(late.values())
    print(f"{label}: {len(values)}/{len(dues)} arrived, {twice} twice; lateness median "
          f"{statistics.median(values) * 1000:.0f} ms, p90 {percentile(values, 0.9) * 1000:.0f} ms, "
          f"worst {values[-1] * 1000:.0f} ms")


def long_stop() -> None:
    """How long a repeat's next time takes after a long stop (in this process, as the loop
    works it out, twice per reminder): each repeat's first time that many days ago."""
    from nonebot_plugin_marsho.agent.reminders import next_time

    start = time.time() - 3650 * 86400
    for every, behind in (("*/5 * * * *", 30), ("PT5M", 30), ("P1M", 3650)):
        reminder = Reminder(id=1, chat_key="c", platform="OneBot V11", kind="group", chat_id="1",
                            user_id=str(USER), asker=f"OneBot V11:{USER}", what="text", body="x",
                            due_at=start, scheduled_at=start, every=every, zone="America/New_York")
        now = start + behind * 86400 + 60
        next_time(reminder, now)  # croniter and isodate imported
        began = time.perf_counter()
        next_time(reminder, now)
        print(f"next time of {every!r} {behind} days behind: {(time.perf_counter() - began) * 1000:.1f} ms")


async def main() -> None:
    long_stop()
    fake = FakeOpenAI().start()
    folder = Path(tempfile.mkdtemp(prefix="marsho-bench-reminders-"))
    data = folder / "data"
    process = BotProcess(base_url=fake.base_url, env={"LOCALSTORE_DATA_DIR": str(data),
                                                      "LOG_LEVEL": "WARNING"})
    try:
        async with process, process.simulator(self_id=SELF_ID) as sim:
            fake.push(text("hello"))
            await sim.ask("marsho hi", group_id=GROUP, user_id=USER)  # the group's target is saved
            sql = SqlStore(f"sqlite+aiosqlite:///{data / 'nonebot_plugin_marsho' / 'marsho.db'}")
            try:
                store = ReminderStore(sql)
                start = time.time() + AHEAD
                await round_of(sim, store, [start + random.uniform(0, 60) for _ in range(COUNT)],
                               f"{COUNT} due within one minute")
                start = time.time() + AHEAD
                await round_of(sim, store, [start] * COUNT, f"{COUNT} due on the same second")
            finally:
                await sql.close()
    finally:
        fake.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
