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
p90 17 ms, worst 79 ms; on one second, median 134 ms, p90 420 ms, worst 506 ms.

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


async def main() -> None:
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
