"""store/rawwrite.py: a turn's insert into a SQLite file in one call on a thread of its own, all
of it or none of it, seen by the store's SQLAlchemy reads (issue 30)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from nonebot_plugin_marsho.store.rawwrite import SqliteWriter
from nonebot_plugin_marsho.store.sql import INSERT_MESSAGES, SqlStore

KEY = "onebot:group:1"


def rows(*contents: Any) -> list[dict[str, Any]]:
    return [{"session_key": KEY, "turn_id": "t1", "role": "user", "data": content, "tokens": 1,
             "created_at": 0.0} for content in contents]


def stored(path: Path) -> list[str]:
    with sqlite3.connect(path) as connection:
        return [row[0] for row in connection.execute("SELECT data FROM marsho_messages ORDER BY id")]


async def test_a_turn_in_a_sqlite_file_is_written_off_the_event_loop_and_read_back(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    threads: list[str] = []
    writer = store._raw_writes
    assert writer is not None
    insert = writer._insert

    def recorded(sql: str, rows: list[dict[str, Any]]) -> None:
        threads.append(threading.current_thread().name)
        insert(sql, rows)

    writer._insert = recorded  # type: ignore[method-assign]
    try:
        await store.start()
        await store.append_turn(KEY, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                                [2, 3])
        store._recent.clear()  # read from the database, not from the turns kept in memory
        (turn,) = await store.recent_turns(KEY, max_messages=10, max_tokens=100)
        assert turn.messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        assert turn.tokens == [2, 3]
        assert threads and all(name.startswith("marsho-sqlite-writes") for name in threads)
    finally:
        await store.close()


async def test_a_failed_insert_stores_none_of_its_rows_and_the_next_one_works(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'marsho.db'}")
    await store.start()
    await store.close()
    writer = SqliteWriter(str(tmp_path / "marsho.db"))
    try:
        with pytest.raises(sqlite3.IntegrityError):
            await writer.insert(INSERT_MESSAGES, rows("first", None))  # data may not be NULL
        assert stored(tmp_path / "marsho.db") == []
        await writer.insert(INSERT_MESSAGES, rows("again"))
        assert stored(tmp_path / "marsho.db") == ["again"]
        await writer.close()
        await writer.insert(INSERT_MESSAGES, rows("after closing"))  # opens it again
        assert stored(tmp_path / "marsho.db") == ["again", "after closing"]
    finally:
        await writer.close()


def test_an_in_memory_database_is_written_through_sqlalchemy_only() -> None:
    # a second connection to sqlite:// would be a database of its own
    assert SqlStore("sqlite://")._raw_writes is None
    assert SqlStore("sqlite:///file:shared?mode=memory&cache=shared&uri=true")._raw_writes is None
