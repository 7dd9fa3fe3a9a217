"""Saving a chat's target waits only for that chat's own save: a burst of new chats is not
serialised behind one lock (chat/targets.py's TargetBook)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event

from nonebot_plugin_marsho.chat.targets import TargetBook
from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.store.sql import SqlStore
from nonebot_plugin_marsho.store.targets import SavedTarget
from tests.platforms import PLATFORMS


class HeldStore:
    """A TargetStore whose reads of `held` chats wait until released; it records the saves."""

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.release = asyncio.Event()
        self.reading: set[str] = set()
        self.saved: list[str] = []
        self.listed = 0
        self.writes = 0
        self.unlisted = True

    async def get(self, chat_key: str) -> SavedTarget | None:
        self.reading.add(chat_key)
        if chat_key in self.held:
            await self.release.wait()
        return None

    async def save_all(self, take: Any) -> None:
        self.writes += 1
        self.saved.extend(saved.chat_key for saved in take())

    async def newest(self, limit: int) -> list[SavedTarget]:
        self.listed += 1
        if self.unlisted:  # the saved chats cannot be listed: each new one is read first
            raise StoreError(code="store.read", url="sqlite://", detail="OperationalError: locked")
        return []


async def test_a_slow_save_of_one_chat_does_not_hold_another_chats() -> None:
    first, second = PLATFORMS["OneBot V11"](), PLATFORMS["OneBot V11"]()
    second.group_id = "30002"
    book = TargetBook(SqlStore("sqlite://"))
    store = HeldStore({"first"})
    book.store = store  # type: ignore[assignment]
    slow = asyncio.create_task(book.remember(first.bot, first.group_event("marsho hi"), "first"))
    while "first" not in store.reading:
        await asyncio.sleep(0)
    other = asyncio.create_task(book.remember(second.bot, second.group_event("marsho hi"), "second"))
    for _ in range(50):  # turns of the event loop, not time
        await asyncio.sleep(0)
    assert store.saved == ["second"]  # saved while the first chat's read still waits
    assert other.done()
    store.release.set()
    await slow
    assert store.saved == ["second", "first"]


async def test_a_chats_first_questions_at_once_read_and_write_it_once() -> None:
    chat = PLATFORMS["OneBot V11"]()
    book = TargetBook(SqlStore("sqlite://"))
    store = HeldStore({"chat"})
    book.store = store  # type: ignore[assignment]
    asks: list[Any] = [asyncio.create_task(book.remember(chat.bot, chat.group_event("marsho hi"), "chat"))
                       for _ in range(5)]
    while "chat" not in store.reading:
        await asyncio.sleep(0)
    store.release.set()
    await asyncio.gather(*asks)
    assert store.saved == ["chat"]


async def test_new_chats_are_written_without_a_read_once_the_saved_ones_are_listed() -> None:
    chats = [PLATFORMS["OneBot V11"]() for _ in range(3)]
    book = TargetBook(SqlStore("sqlite://"))
    store = HeldStore(set())
    store.unlisted = False
    book.store = store  # type: ignore[assignment]
    await asyncio.gather(*(book.remember(chat.bot, chat.group_event("marsho hi"), f"chat{n}")
                           for n, chat in enumerate(chats)))
    assert store.listed == 1 and store.reading == set()
    assert sorted(store.saved) == ["chat0", "chat1", "chat2"]
    assert store.writes == 1  # new chats at the same moment: one write


async def test_a_burst_of_new_chats_is_one_write_and_every_target_is_kept(tmp_path: Any) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    inserts: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("INSERT") and "marsho_targets" in statement:
            inserts.append(statement)

    try:
        chats = [PLATFORMS["OneBot V11"]() for _ in range(20)]
        for n, chat in enumerate(chats):
            chat.group_id = str(70000 + n)
        await store.start()
        event.listen(store.engine.sync_engine, "before_cursor_execute", record)
        book = TargetBook(store)
        await asyncio.gather(*(book.remember(chat.bot, chat.group_event("marsho hi"), f"chat{n}")
                               for n, chat in enumerate(chats)))
        assert len(inserts) == 1
        restarted = TargetBook(store)
        for n, chat in enumerate(chats):
            found = await restarted.target(f"chat{n}")
            assert found is not None and found.id == chat.group_id
    finally:
        await store.close()
