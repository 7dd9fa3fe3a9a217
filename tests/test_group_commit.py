"""store/batch.py: the turns that end while one is written are written next, together, each
still whole and alone in its outcome (issue 30: 200 groups at once)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.store.batch import GroupCommit
from nonebot_plugin_marsho.store.sql import SqlStore

Row = dict[str, Any]


class Database:
    """A write that takes until `release` is set, and refuses rows marked "bad"."""

    def __init__(self) -> None:
        self.transactions: list[list[Row]] = []
        self.stored: list[Row] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def write(self, rows: list[Row]) -> None:
        self.transactions.append(rows)
        self.started.set()
        await self.release.wait()
        if any(row.get("bad") for row in rows):
            raise ValueError("the database refuses this text")
        self.stored.extend(rows)


async def test_turns_that_end_while_one_is_written_are_written_next_in_one_transaction() -> None:
    database = Database()
    writes = GroupCommit(database.write, asyncio.Lock())
    first = asyncio.ensure_future(writes.write([{"turn": 0}]))
    await database.started.wait()  # the first turn's write is under way
    others = [asyncio.ensure_future(writes.write([{"turn": n}, {"turn": n, "part": 2}])) for n in (1, 2, 3)]
    await asyncio.sleep(0)
    database.release.set()
    await asyncio.gather(first, *others)
    assert [len(rows) for rows in database.transactions] == [1, 6]
    assert sorted(row["turn"] for row in database.stored) == [0, 1, 1, 2, 2, 3, 3]


async def test_a_turn_the_database_refuses_fails_alone() -> None:
    database = Database()
    writes = GroupCommit(database.write, asyncio.Lock())
    first = asyncio.ensure_future(writes.write([{"turn": 0}]))
    await database.started.wait()
    good = asyncio.ensure_future(writes.write([{"turn": 1}]))
    bad = asyncio.ensure_future(writes.write([{"turn": 2, "bad": True}]))
    also_good = asyncio.ensure_future(writes.write([{"turn": 3}]))
    await asyncio.sleep(0)
    database.release.set()
    await asyncio.gather(first, good, also_good)
    with pytest.raises(ValueError, match="refuses"):
        await bad
    assert sorted(row["turn"] for row in database.stored) == [0, 1, 3]


async def test_a_turn_cancelled_before_its_write_began_is_not_stored() -> None:
    database = Database()
    writes = GroupCommit(database.write, asyncio.Lock())
    first = asyncio.ensure_future(writes.write([{"turn": 0}]))
    await database.started.wait()
    abandoned = asyncio.ensure_future(writes.write([{"turn": 1}]))
    kept = asyncio.ensure_future(writes.write([{"turn": 2}]))
    await asyncio.sleep(0)
    abandoned.cancel()
    database.release.set()
    await asyncio.gather(first, kept)
    assert abandoned.cancelled()
    assert sorted(row["turn"] for row in database.stored) == [0, 2]


async def test_a_turn_alone_is_written_at_once_in_a_transaction_of_its_own() -> None:
    database = Database()
    database.release.set()
    writes = GroupCommit(database.write, asyncio.Lock())
    for turn in range(3):
        await writes.write([{"turn": turn}])
    assert database.transactions == [[{"turn": 0}], [{"turn": 1}], [{"turn": 2}]]


async def test_many_sessions_answered_at_once_on_sqlite_are_all_stored_in_fewer_transactions(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    transactions = 0
    insert = store._insert_messages

    async def counted(rows: list[Row]) -> None:
        nonlocal transactions
        transactions += 1
        await insert(rows)

    monkeypatch.setattr(store, "_insert_messages", counted)
    # the GroupCommit holds the method it was made with: made again to see the counted one
    monkeypatch.setattr(store, "_turn_writes", GroupCommit(store._insert_messages, store._write_lock))
    try:
        await store.start()
        keys = [f"onebot:group:{n}" for n in range(50)]
        await asyncio.gather(*(store.append_turn(key, [{"role": "user", "content": f"q {key}"},
                                                      {"role": "assistant", "content": "a"}], [3, 2])
                               for key in keys))
        for key in keys:
            (turn,) = await store.recent_turns(key, max_messages=10, max_tokens=100)
            assert turn.messages[0]["content"] == f"q {key}"
        assert transactions < len(keys)
    finally:
        await store.close()


async def test_a_turn_sqlite_cannot_take_fails_alone_among_others(tmp_path: Any) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    try:
        await store.start()
        lone_surrogate = "\ud800"
        keys = [f"onebot:group:{n}" for n in range(5)]
        results = await asyncio.gather(
            *(store.append_turn(key, [{"role": "user", "content": lone_surrogate if n == 2 else "fine"}], [1])
              for n, key in enumerate(keys)), return_exceptions=True)
        assert [isinstance(result, StoreError) for result in results] == [False, False, True, False, False]
        for n, key in enumerate(keys):
            stored = await store.recent_turns(key, max_messages=10, max_tokens=100)
            assert len(stored) == (0 if n == 2 else 1)
    finally:
        await store.close()
