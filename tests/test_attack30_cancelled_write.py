"""Attack on store/batch.py's `finishes_alone` (issue 30): a turn whose store write is cancelled
(a debounce restart, the bot stopping) while SqliteDirect's thread is busy. On main the write
lock stays held until that turn's rows are committed (the batch's own task holds it), so the
next writer of the process, `marsho.reset`'s clear, runs after them and clears them too."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from nonebot_plugin_marsho.store.sql import SqlStore


async def test_a_clear_after_a_cancelled_turn_write_clears_that_turn_too(tmp_path: Any) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    key = "onebot:group:20001"
    try:
        await store.append_turn(key, [{"role": "user", "content": "first"}], [1])
        assert store._direct is not None
        loop = asyncio.get_running_loop()
        busy, release = asyncio.Event(), threading.Event()

        def occupied(_db: Any) -> None:  # another session's read keeps the thread busy
            loop.call_soon_threadsafe(busy.set)
            release.wait(60)

        blocker = asyncio.ensure_future(store._direct.call(occupied))
        await busy.wait()
        turn = asyncio.ensure_future(store.append_turn(
            key, [{"role": "user", "content": "second"}, {"role": "assistant", "content": "hi"}], [1, 1]))
        assert store._write_lock is not None
        while not store._write_lock.locked():  # the turn's write is under way
            await asyncio.sleep(0)
        turn.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await turn
        clearing = asyncio.ensure_future(store.clear(key))
        while not clearing.done() and not store._write_lock._waiters:  # done, or waiting its turn
            await asyncio.sleep(0.01)
        release.set()
        await blocker
        await clearing
        await store._direct.call(lambda _db: None)  # whatever was queued on the thread is done
        assert await store.recent_turns(key, max_messages=100, max_tokens=10_000) == []
    finally:
        release.set()
        await store.close()


async def test_a_clear_after_a_cancelled_summary_save_leaves_no_summary(tmp_path: Any) -> None:
    """The same through `save_summary`'s SqliteDirect path (store/sql.py): its own hold of the
    write lock ends at the cancellation, its statements still queued on the thread; they then
    run after the clear and the cleared session has its summary back. On main a cancelled save
    is rolled back, and a finished one is cleared."""
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    key = "onebot:group:20001"
    release = threading.Event()
    try:
        await store.append_turn(key, [{"role": "user", "content": "first"}], [1])
        loop = asyncio.get_running_loop()
        busy = asyncio.Event()

        def occupied(_db: Any) -> None:
            loop.call_soon_threadsafe(busy.set)
            release.wait(60)

        direct = store._direct
        assert direct is not None and store._write_lock is not None
        blocker = asyncio.ensure_future(direct.call(occupied))
        await busy.wait()
        saving = asyncio.ensure_future(store.save_summary(key, "they talked about cats", through_turn="t",
                                                          turns=1, tokens=5))
        while not store._write_lock.locked() and not saving.done():
            await asyncio.sleep(0)
        saving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await saving
        clearing = asyncio.ensure_future(store.clear(key))
        while not clearing.done() and not store._write_lock._waiters:
            await asyncio.sleep(0.01)
        release.set()
        await blocker
        await clearing
        await direct.call(lambda _db: None)
        assert await store.get_summary(key) is None
    finally:
        release.set()
        await store.close()
