"""store/sqlite_direct.py: a turn's insert into a SQLite file, and the read of a session's newest
turns, in one call on a thread of their own; the insert all of it or none of it, both seen by
the store's SQLAlchemy connections (issue 30)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.store.sql import INSERT_MESSAGES, SqlStore
from nonebot_plugin_marsho.store.sqlite_direct import SqliteDirect

KEY = "onebot:group:1"


def rows(*contents: Any) -> list[dict[str, Any]]:
    return [{"session_key": KEY, "turn_id": "t1", "role": "user", "data": content, "tokens": 1,
             "created_at": 0.0} for content in contents]


def stored(path: Path) -> list[str]:
    with sqlite3.connect(path) as connection:
        return [row[0] for row in connection.execute("SELECT data FROM marsho_messages ORDER BY id")]


def on_threads(store: SqlStore) -> list[str]:
    """The names of the threads the store's direct calls run on, from now on."""
    direct = store._direct
    assert direct is not None
    names: list[str] = []
    run = direct._run

    def recorded(work: Any) -> Any:
        names.append(threading.current_thread().name)
        return run(work)

    direct._run = recorded  # type: ignore[method-assign]
    return names


async def test_a_turn_in_a_sqlite_file_is_written_and_read_off_the_event_loop(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    threads = on_threads(store)
    try:
        await store.start()
        await store.append_turn(KEY, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                [2, 3])
        store._recent.clear()  # read from the database, not from the turns kept in memory
        (turn,) = await store.recent_turns(KEY, max_messages=10, max_tokens=100)
        assert turn.messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        assert turn.tokens == [2, 3]
        assert len(threads) == 2 and all(name.startswith("marsho-sqlite") for name in threads)
        # what SQLAlchemy's connections read, too
        assert (await store.export(KEY))[0]["message"] == {"role": "user", "content": "hi"}
    finally:
        await store.close()


async def test_a_read_cut_by_its_limit_keeps_whole_turns_or_the_newest_whole(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    try:
        await store.start()
        await store.append_turn(KEY, [{"role": "user", "content": "old"}, {"role": "assistant", "content": "a"}],
                                [1, 1])
        big = [{"role": "user", "content": "new"}, *[{"role": "assistant", "content": str(n)} for n in range(5)]]
        await store.append_turn(KEY, big, [1] * 6)
        store._recent.clear()
        (turn,) = await store.recent_turns(KEY, max_messages=3, max_tokens=100)
        assert turn.messages == big  # the newest turn whole, though bigger than the limit
        store._recent.clear()
        turns = await store.recent_turns(KEY, max_messages=8, max_tokens=100)
        assert [t.messages[0]["content"] for t in turns] == ["old", "new"]
    finally:
        await store.close()


async def test_a_failed_insert_stores_none_of_its_rows_and_the_next_one_works(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    await store.start()
    await store.close()
    direct = SqliteDirect(str(tmp_path / "marsho.db"))
    try:
        with pytest.raises(sqlite3.IntegrityError):
            await direct.insert(INSERT_MESSAGES, rows("first", None))  # data may not be NULL
        assert stored(tmp_path / "marsho.db") == []
        await direct.insert(INSERT_MESSAGES, rows("again"))
        assert stored(tmp_path / "marsho.db") == ["again"]
        await direct.close()
        await direct.insert(INSERT_MESSAGES, rows("after closing"))  # opens it again
        assert stored(tmp_path / "marsho.db") == ["again", "after closing"]
    finally:
        await direct.close()


def test_an_in_memory_database_is_read_and_written_through_sqlalchemy_only() -> None:
    # a second connection to sqlite:// would be a database of its own
    assert SqlStore("sqlite://")._direct is None
    assert SqlStore("sqlite:///file:shared?mode=memory&cache=shared&uri=true")._direct is None
