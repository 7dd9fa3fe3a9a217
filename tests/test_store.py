"""The SQL store on SQLite (a file, and memory): whole turns in, whole turns out, nothing half-done."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.store.session import Turn
from nonebot_plugin_marsho.store.sql import SCHEMA_VERSION, SqlStore, async_url

KEY = "test:group:1"
EVERYTHING = {"max_messages": 10**6, "max_tokens": 10**9}

WEATHER_TURN = Turn(
    [
        {"role": "user", "content": "小明: 杭州天气怎么样？"},
        {"role": "assistant", "content": None, "reasoning_content": "look it up",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "wx__get_weather",
                                      "arguments": '{"location": "杭州"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "杭州: 21°C ☀"},
        {"role": "assistant", "content": "杭州今天晴，21°C。"},
    ],
    [17, 30, 12, 15],
)


def plain_turn(name: str, messages: int = 2, tokens: int = 10) -> Turn:
    """A turn of `messages` messages (user first), each costing `tokens`, tagged with `name`."""
    roles = ["user", *["assistant"] * (messages - 1)]
    return Turn([{"role": role, "content": f"{name}.{i}"} for i, role in enumerate(roles)],
                [tokens] * messages)


async def append(store: SqlStore, *turns: Turn, key: str = KEY) -> None:
    for turn in turns:
        await store.append_turn(key, turn.messages, turn.tokens)


def names(turns: list[Turn]) -> list[str]:
    """Which plain turns came back, by their tag."""
    return [turn.messages[0]["content"].split(".")[0] for turn in turns]


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(params=["file", "memory"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlStore]:
    """An empty store on an SQLite file, or in memory."""
    url = sqlite_url(tmp_path / "marsho.db") if request.param == "file" else "sqlite://"
    store = SqlStore(url)
    yield store
    await store.close()


def tables_in(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def schema_version_in(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT value FROM marsho_settings WHERE name='schema_version'").fetchone()[0]


# --- tables ---------------------------------------------------------------------------------


async def test_first_use_creates_the_tables_without_a_start(tmp_path: Path) -> None:
    path = tmp_path / "marsho.db"
    store = SqlStore(sqlite_url(path))
    try:
        assert await store.recent_turns(KEY, **EVERYTHING) == []
    finally:
        await store.close()
    assert {"marsho_messages", "marsho_settings"} <= tables_in(path)
    assert schema_version_in(path) == str(SCHEMA_VERSION)


async def test_start_creates_the_tables_and_can_be_called_again(tmp_path: Path) -> None:
    path = tmp_path / "marsho.db"
    store = SqlStore(sqlite_url(path))
    try:
        await store.start()
        assert {"marsho_messages", "marsho_settings"} <= tables_in(path)
        await append(store, plain_turn("a"))
        await store.start()  # at every startup: existing history is left alone
        assert names(await store.recent_turns(KEY, **EVERYTHING)) == ["a"]
    finally:
        await store.close()


async def test_many_turns_arriving_before_the_tables_exist_are_all_stored(tmp_path: Path) -> None:
    store = SqlStore(sqlite_url(tmp_path / "marsho.db"))
    try:
        await asyncio.gather(*(append(store, plain_turn(f"t{i}"), key=f"k{i % 4}") for i in range(20)))
        assert sum([(await store.stats(f"k{i}"))[0] for i in range(4)]) == 20
    finally:
        await store.close()


async def test_an_in_memory_store_works_without_a_start() -> None:
    store = SqlStore("sqlite://")
    try:
        assert await store.stats(KEY) == (0, 0, 0)
        await append(store, plain_turn("a"))
        assert await store.stats(KEY) == (1, 2, 20)
    finally:
        await store.close()


# --- turns ----------------------------------------------------------------------------------


async def test_a_turn_is_read_back_exactly_as_it_was_stored(store: SqlStore) -> None:
    await append(store, WEATHER_TURN)
    assert await store.recent_turns(KEY, **EVERYTHING) == [WEATHER_TURN]
    assert await store.last_turn(KEY) == WEATHER_TURN


async def test_sessions_are_kept_apart(store: SqlStore) -> None:
    await append(store, plain_turn("a"), key="k1")
    await append(store, plain_turn("b"), key="k2")
    assert names(await store.recent_turns("k1", **EVERYTHING)) == ["a"]
    assert names(await store.recent_turns("k2", **EVERYTHING)) == ["b"]
    assert await store.recent_turns("k3", **EVERYTHING) == []


@pytest.mark.parametrize(
    ("messages", "tokens", "why"),
    [
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None},
          {"role": "assistant", "content": "bye"}], [5, None, 7],
         "the database refuses the second row"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": object()}],
         [5, 7], "the second message cannot be JSON-encoded"),
        ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "bye"}], [5],
         "one token count is missing"),
    ],
)
async def test_a_turn_that_fails_half_way_leaves_nothing_behind(
    store: SqlStore, messages: list[dict[str, Any]], tokens: list[Any], why: str
) -> None:
    await append(store, plain_turn("before"))
    with pytest.raises(Exception):  # noqa: B017 - whatever it is, nothing may be stored
        await store.append_turn(KEY, messages, tokens)
    assert names(await store.recent_turns(KEY, **EVERYTHING)) == ["before"], why
    assert await store.stats(KEY) == (1, 2, 20), why


async def test_a_row_the_database_refuses_is_a_store_error(store: SqlStore) -> None:
    with pytest.raises(StoreError, match="cannot save the turn"):
        await store.append_turn(KEY, [{"role": "user", "content": "hi"}], [None])  # type: ignore[list-item]
    assert await store.stats(KEY) == (0, 0, 0)


# --- recent_turns ---------------------------------------------------------------------------


async def test_recent_turns_are_the_newest_whole_turns_oldest_first(store: SqlStore) -> None:
    # a: 2 messages, 20 tokens; b: 4 messages, 40 tokens; c: 2 messages, 20 tokens
    await append(store, plain_turn("a"), plain_turn("b", messages=4), plain_turn("c"))
    assert names(await store.recent_turns(KEY, **EVERYTHING)) == ["a", "b", "c"]
    assert names(await store.recent_turns(KEY, max_messages=8, max_tokens=10**9)) == ["a", "b", "c"]
    assert names(await store.recent_turns(KEY, max_messages=7, max_tokens=10**9)) == ["b", "c"]
    assert names(await store.recent_turns(KEY, max_messages=6, max_tokens=10**9)) == ["b", "c"]
    assert names(await store.recent_turns(KEY, max_messages=5, max_tokens=10**9)) == ["c"]
    assert names(await store.recent_turns(KEY, max_messages=10**6, max_tokens=80)) == ["a", "b", "c"]
    assert names(await store.recent_turns(KEY, max_messages=10**6, max_tokens=79)) == ["b", "c"]
    assert names(await store.recent_turns(KEY, max_messages=10**6, max_tokens=59)) == ["c"]
    for turn in await store.recent_turns(KEY, max_messages=6, max_tokens=10**9):
        assert len(turn.messages) == len(turn.tokens)
        assert turn.messages[0]["role"] == "user"  # never a turn's tail


async def test_the_newest_turn_comes_back_whole_even_when_it_alone_is_over_the_bounds(
    store: SqlStore,
) -> None:
    big = plain_turn("big", messages=6, tokens=100)
    await append(store, plain_turn("a"), big)
    for max_messages, max_tokens in [(0, 0), (1, 10**9), (5, 10**9), (10**6, 1), (3, 50)]:
        assert await store.recent_turns(
            KEY, max_messages=max_messages, max_tokens=max_tokens) == [big]


def expected_names(turns: list[Turn], max_messages: int, max_tokens: int) -> list[str]:
    """The contract, computed in Python from every turn: newest whole turns within both bounds,
    the newest always."""
    chosen: list[Turn] = []
    for turn in reversed(turns):
        if chosen and (sum(len(t.messages) for t in chosen) + len(turn.messages) > max_messages
                       or sum(t.total_tokens for t in chosen) + turn.total_tokens > max_tokens):
            break
        chosen.append(turn)
    return names(chosen[::-1])


async def test_recent_turns_are_right_wherever_the_limit_cuts_through_a_turn(
    store: SqlStore,
) -> None:
    turns = [plain_turn("a", 3), plain_turn("b", 1), plain_turn("c", 5, tokens=3),
             plain_turn("d", 2), plain_turn("e", 4, tokens=1)]
    await append(store, *turns)
    total = sum(len(t.messages) for t in turns)
    for max_messages in range(total + 2):
        for max_tokens in (0, 4, 30, 45, 75, 10**9):
            got = await store.recent_turns(KEY, max_messages=max_messages, max_tokens=max_tokens)
            assert names(got) == expected_names(turns, max_messages, max_tokens), (
                max_messages, max_tokens)
            assert all(t == turns[ord(name) - ord("a")] for t, name in zip(got, names(got), strict=True))


# --- last_turn, clear, stats, export --------------------------------------------------------


async def test_last_turn_is_the_newest_whole_turn(store: SqlStore) -> None:
    assert await store.last_turn(KEY) is None
    await append(store, plain_turn("a"), WEATHER_TURN)
    assert await store.last_turn(KEY) == WEATHER_TURN


async def test_clear_forgets_only_that_session_and_counts_its_turns(store: SqlStore) -> None:
    await append(store, plain_turn("a"), WEATHER_TURN, plain_turn("c"))
    await append(store, plain_turn("other"), key="k2")
    assert await store.clear(KEY) == 3
    assert await store.recent_turns(KEY, **EVERYTHING) == []
    assert await store.stats(KEY) == (0, 0, 0)
    assert await store.clear(KEY) == 0
    assert names(await store.recent_turns("k2", **EVERYTHING)) == ["other"]
    await append(store, plain_turn("new"))  # the session goes on after a clear
    assert names(await store.recent_turns(KEY, **EVERYTHING)) == ["new"]


async def test_stats_count_turns_messages_and_tokens(store: SqlStore) -> None:
    assert await store.stats(KEY) == (0, 0, 0)
    await append(store, plain_turn("a"), WEATHER_TURN)
    assert await store.stats(KEY) == (2, 6, 20 + 17 + 30 + 12 + 15)


async def test_export_holds_every_message_oldest_first_with_its_turn(store: SqlStore) -> None:
    await append(store, plain_turn("a"), WEATHER_TURN)
    await append(store, plain_turn("other"), key="k2")
    exported = await store.export(KEY)
    assert [item["message"] for item in exported] == [
        *plain_turn("a").messages, *WEATHER_TURN.messages]
    assert [item["tokens"] for item in exported] == [10, 10, *WEATHER_TURN.tokens]
    turn_ids = [item["turn"] for item in exported]
    assert turn_ids[0] == turn_ids[1] != turn_ids[2]
    assert len(set(turn_ids[2:])) == 1
    assert all(isinstance(item["time"], float) for item in exported)
    assert await store.export("nobody") == []


# --- settings -------------------------------------------------------------------------------


async def test_settings_are_kept_and_overwritten(store: SqlStore) -> None:
    assert await store.get_setting("model") is None
    await store.set_setting("model", "gpt-4o")
    assert await store.get_setting("model") == "gpt-4o"
    await store.set_setting("model", "deepseek-chat")
    assert await store.get_setting("model") == "deepseek-chat"
    assert await store.get_setting("schema_version") == str(SCHEMA_VERSION)


# --- surviving a restart, and databases we cannot use ----------------------------------------


async def test_history_and_settings_survive_reopening_the_same_file(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "marsho.db")
    first = SqlStore(url)
    await append(first, plain_turn("a"), WEATHER_TURN)
    await first.set_setting("model", "gpt-4o")
    await first.close()

    second = SqlStore(url)
    try:
        await second.start()
        assert await second.recent_turns(KEY, **EVERYTHING) == [plain_turn("a"), WEATHER_TURN]
        assert await second.get_setting("model") == "gpt-4o"
        await append(second, plain_turn("c"))
        assert names((await second.recent_turns(KEY, **EVERYTHING))[::2]) == ["a", "c"]
    finally:
        await second.close()


async def test_a_database_from_a_newer_marsho_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "marsho.db"
    store = SqlStore(sqlite_url(path))
    await append(store, plain_turn("a"))
    await store.close()
    with sqlite3.connect(path) as conn:  # a migration this code does not have (tests/test_migrations.py)
        conn.execute("UPDATE marsho_alembic_version SET version_num='9999'")

    newer = SqlStore(sqlite_url(path))
    try:
        with pytest.raises(StoreError, match="newer marsho.*upgrade the plugin"):
            await newer.start()
        with pytest.raises(StoreError, match="upgrade the plugin"):  # every use, not only start
            await newer.recent_turns(KEY, **EVERYTHING)
    finally:
        await newer.close()
    with sqlite3.connect(path) as conn:  # left as the newer one wrote it
        assert conn.execute("SELECT version_num FROM marsho_alembic_version").fetchall() == [("9999",)]


async def test_a_sqlite_file_in_a_missing_folder_is_a_store_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "marsho.db"
    store = SqlStore(sqlite_url(path))
    try:
        with pytest.raises(StoreError) as caught:
            await store.start()
        assert str(path) in str(caught.value)
        assert "cannot open the database" in str(caught.value)
        # once the folder exists the same store works: a failed start is not remembered
        path.parent.mkdir()
        await store.start()
        await append(store, plain_turn("a"))
        assert await store.stats(KEY) == (1, 2, 20)
    finally:
        await store.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_an_unreachable_postgresql_is_a_store_error_without_the_password() -> None:
    port = closed_port()
    store = SqlStore(f"postgresql://marsho:hunter2-secret@127.0.0.1:{port}/marsho")
    try:
        with pytest.raises(StoreError) as caught:
            await store.start()
        message = str(caught.value)
        assert f"postgresql+asyncpg://marsho:***@127.0.0.1:{port}/marsho" in message
        assert "hunter2" not in message
        with pytest.raises(StoreError) as caught:
            await store.append_turn(KEY, [{"role": "user", "content": "hi"}], [5])
        assert "hunter2" not in str(caught.value)
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:p@db.example/marsho", "postgresql+asyncpg://u:p@db.example/marsho"),
        ("postgres://u:p@db.example:5433/marsho", "postgresql+asyncpg://u:p@db.example:5433/marsho"),
        ("postgresql://u:p%40ss@db/marsho", "postgresql+asyncpg://u:p%40ss@db/marsho"),
        ("postgresql+asyncpg://u:p@db/marsho", "postgresql+asyncpg://u:p@db/marsho"),
        ("sqlite:////var/lib/marsho.db", "sqlite+aiosqlite:////var/lib/marsho.db"),
        ("sqlite:///marsho.db", "sqlite+aiosqlite:///marsho.db"),
        ("sqlite://", "sqlite+aiosqlite://"),
        ("sqlite+aiosqlite:///marsho.db", "sqlite+aiosqlite:///marsho.db"),
    ],
)
def test_async_url_picks_an_async_driver(url: str, expected: str) -> None:
    assert async_url(url) == expected


def test_the_store_uses_the_async_url_and_hides_the_password() -> None:
    store = SqlStore("postgresql://marsho:hunter2@db.example/marsho")
    assert store.url == "postgresql+asyncpg://marsho:hunter2@db.example/marsho"
    assert store.safe_url == "postgresql+asyncpg://marsho:***@db.example/marsho"
    assert store.shared
    assert not SqlStore("sqlite://").shared


async def test_a_sqlite_file_is_claimed_by_one_store_at_a_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'marsho.db'}"
    first, second = SqlStore(url), SqlStore(url)
    try:
        assert first.claim() is True and first.claim() is True  # its own, still
        assert second.claim() is False  # another process's (flock: per open file, so in one process too)
        await first.close()
        for _ in range(1500):  # the second waited for it, and now holds it (30 s at most)
            if second.claim():
                break
            await asyncio.sleep(0.02)
        assert second.claim() is True
        third = SqlStore(url)
        assert third.claim() is False  # so a third started now is told too
        await third.close()
    finally:
        await first.close()
        await second.close()
    for in_memory in ("sqlite://", "sqlite:///file:shared?mode=memory&uri=true"):
        memory = SqlStore(in_memory)
        assert memory.claim() is None  # nobody else can open it: no lock file either
        await memory.close()
    assert not Path("file:shared.lock").exists()
    uri = SqlStore(f"sqlite:///file:{tmp_path / 'uri.db'}?uri=true")
    assert uri.claim() is True and (tmp_path / "uri.db.lock").exists()
    await uri.close()
