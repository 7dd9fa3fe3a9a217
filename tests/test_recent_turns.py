"""The sessions' newest turns kept in memory (store/recent.py): a turn reads its history without
the database where this process is its only writer, and reads exactly what the database holds."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from nonebot_plugin_marsho.store.recent import RecentTurns
from nonebot_plugin_marsho.store.session import Turn
from nonebot_plugin_marsho.store.sql import SqlStore

KEY = "test:group:1"


def plain_turn(name: str, messages: int = 2, tokens: int = 10) -> Turn:
    roles = ["user", *["assistant"] * (messages - 1)]
    return Turn([{"role": role, "content": f"{name}.{i}"} for i, role in enumerate(roles)],
                [tokens] * messages)


def history_reads(store: SqlStore) -> list[str]:
    """The SELECTs of marsho_messages `store` sends from now on."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "marsho_messages" in statement:
            seen.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    return seen


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlStore]:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    yield store
    await store.close()


async def fresh_read(path: Path, key: str, **bounds: int) -> list[Turn]:
    """What the database holds, read by a store that has kept nothing."""
    other = SqlStore(f"sqlite:///{path}")
    try:
        return await other.recent_turns(key, **bounds)
    finally:
        await other.close()


async def test_the_next_turn_reads_its_history_without_the_database(store: SqlStore) -> None:
    await store.append_turn(KEY, plain_turn("a").messages, plain_turn("a").tokens)
    first = await store.recent_turns(KEY, max_messages=40, max_tokens=8000)
    reads = history_reads(store)
    await store.append_turn(KEY, plain_turn("b").messages, plain_turn("b").tokens)
    second = await store.recent_turns(KEY, max_messages=40, max_tokens=8000)
    assert reads == []
    assert [t.messages[0]["content"] for t in second] == ["a.0", "b.0"]
    assert second[0] == first[0]


async def test_what_memory_answers_is_what_the_database_holds(store: SqlStore, tmp_path: Path) -> None:
    rng = random.Random(30)
    for step in range(60):
        size = rng.choice([1, 2, 3, 5, 9])
        turn = plain_turn(f"t{step}", size, tokens=rng.choice([1, 7, 40]))
        await store.append_turn(KEY, turn.messages, turn.tokens)
        for max_messages in (rng.randint(0, 2 * step), 12):  # a new largest read now and then
            bounds = {"max_messages": max_messages, "max_tokens": rng.choice([5, 60, 10**9])}
            got = await store.recent_turns(KEY, **bounds)
            assert got == await fresh_read(tmp_path / "marsho.db", KEY, **bounds), (step, bounds)
            assert [t.id for t in got] == [t.id for t in await fresh_read(
                tmp_path / "marsho.db", KEY, **bounds)]


async def test_changing_what_was_read_changes_nothing_kept(store: SqlStore) -> None:
    turn = plain_turn("a")
    await store.append_turn(KEY, turn.messages, turn.tokens)
    got = await store.recent_turns(KEY, max_messages=40, max_tokens=8000)
    got[0].messages[0]["content"] = "changed"
    got[0].tokens[0] = 999
    again = await store.recent_turns(KEY, max_messages=40, max_tokens=8000)
    assert again[0].messages == turn.messages and again[0].tokens == turn.tokens


async def test_a_cleared_session_is_read_empty(store: SqlStore) -> None:
    turn = plain_turn("a")
    await store.append_turn(KEY, turn.messages, turn.tokens)
    assert await store.recent_turns(KEY, max_messages=40, max_tokens=8000)
    await store.clear(KEY)
    assert await store.recent_turns(KEY, max_messages=40, max_tokens=8000) == []
    assert await store.last_turn(KEY) is None


async def test_a_failed_write_leaves_what_is_read_as_the_database_holds(store: SqlStore) -> None:
    turn = plain_turn("a")
    await store.append_turn(KEY, turn.messages, turn.tokens)
    assert len(await store.recent_turns(KEY, max_messages=40, max_tokens=8000)) == 1
    with pytest.raises(Exception):  # noqa: B017 - a row the database refuses
        await store.append_turn(KEY, [{"role": "user", "content": "x"}], [None])  # type: ignore[list-item]
    assert len(await store.recent_turns(KEY, max_messages=40, max_tokens=8000)) == 1


async def test_a_store_that_found_its_file_claimed_reads_the_database_each_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'marsho.db'}"
    owner, second = SqlStore(url), SqlStore(url)
    try:
        assert owner.claim() is True
        assert second.claim() is False  # another bot process on the same file
        turn = plain_turn("a")
        await second.append_turn(KEY, turn.messages, turn.tokens)
        assert len(await second.recent_turns(KEY, max_messages=40, max_tokens=8000)) == 1
        await owner.append_turn(KEY, turn.messages, turn.tokens)
        assert len(await second.recent_turns(KEY, max_messages=40, max_tokens=8000)) == 2
    finally:
        await second.close()
        await owner.close()


async def test_postgresql_keeps_nothing_in_memory() -> None:
    store = SqlStore("postgresql://marsho@127.0.0.1:1/marsho")
    try:
        assert store._recent_turns() is None
    finally:
        await store.close()


def stored(name: str, size: int = 2) -> tuple[str, list[str], list[int]]:
    return (name, [f'{{"role": "user", "content": "{name}.{i}"}}' for i in range(size)], [1] * size)


def test_a_read_that_raced_a_write_of_its_session_is_not_kept() -> None:
    recent = RecentTurns()
    recent.read_started(KEY)
    recent.write_started(KEY)
    recent.write_ended(KEY, stored("b"))
    recent.read_ended(KEY, [stored("a")], max_messages=40, complete=True)  # read before b
    assert recent.get(KEY, 40) is None
    recent.read_started(KEY)
    recent.read_ended(KEY, [stored("b"), stored("a")], max_messages=40, complete=True)
    assert [t.id for t in recent.get(KEY, 40) or []] == ["b", "a"]


def test_a_read_while_a_write_is_in_flight_is_not_kept() -> None:
    recent = RecentTurns()
    recent.write_started(KEY)
    recent.read_started(KEY)
    recent.read_ended(KEY, [stored("a")], max_messages=40, complete=True)  # may already hold it
    recent.write_ended(KEY, stored("a"))
    assert recent.get(KEY, 40) is None


def test_only_the_most_recently_used_sessions_are_kept() -> None:
    recent = RecentTurns(max_sessions=2)
    for key in ("one", "two", "three"):
        recent.read_started(key)
        recent.read_ended(key, [stored(key)], max_messages=40, complete=True)
    assert recent.get("one", 40) is None
    assert recent.get("two", 40) is not None and recent.get("three", 40) is not None


def test_a_session_keeps_only_the_turns_its_reads_need() -> None:
    recent = RecentTurns()
    recent.read_started(KEY)
    recent.read_ended(KEY, [], max_messages=4, complete=True)
    for name in "abcdef":
        recent.write_started(KEY)
        recent.write_ended(KEY, stored(name))
    assert [t.id for t in recent.get(KEY, 4) or []] == ["f", "e"]
    assert [t.id for t in recent.get(KEY, 5) or []] == ["f", "e"]  # d would make 6
    assert recent.get(KEY, 6) is None  # needs d, which is not kept: the database answers
    assert len(recent._entries[KEY].turns) == 2
