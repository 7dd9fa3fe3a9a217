"""The tables' migrations (store/migrations/, Alembic), applied by `SqlStore.start()` on SQLite and
PostgreSQL: a database of the release before migrations opens with every row, an empty one reaches
the newest revision, an up-to-date one is left alone quickly, a newer one is refused untouched,
bots starting together migrate one at a time, and the migrations make exactly the tables of
store/sql.py.

The databases "written by the previous release" are real dumps of that release's output
(tests/fixtures/store_v1.*.sql, see tests/fixtures/store_v1.py). PostgreSQL tests use the
throw-away server of tests/test_postgres.py (skipped without PostgreSQL, unless
MARSHO_REQUIRE_POSTGRES=1).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from nonebot.log import logger
from sqlalchemy import Column, Connection, MetaData, String, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from nonebot_plugin_marsho.exceptions import StoreError
from nonebot_plugin_marsho.store import migrations
from nonebot_plugin_marsho.store.sql import SCHEMA_VERSION, SqlStore, async_url, metadata
from tests.fixtures.store_v1 import NICKNAMES, SESSIONS, SETTINGS
from tests.postgres_server import PostgresServer
from tests.test_postgres import start_postgres

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
EVERYTHING = {"max_messages": 10**6, "max_tokens": 10**9}
DIALECTS = ["sqlite", "postgresql"]

_databases = itertools.count(1)


# databases -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = start_postgres()
    yield server
    server.stop()


def new_database(dialect: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a new, empty database: an SQLite file, or a database on the test server."""
    if dialect == "sqlite":
        return f"sqlite:///{tmp_path / f'marsho-{next(_databases)}.db'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database(f"marsho_migrations_{os.getpid()}_{next(_databases)}")


@pytest.fixture(params=DIALECTS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return new_database(request.param, request, tmp_path)


async def load_previous_release(url: str) -> None:
    """Fill an empty database with the dump of one the release before migrations wrote."""
    dialect = make_url(url).get_backend_name()
    script = (FIXTURES / f"store_v1.{dialect}.sql").read_text(encoding="utf-8")
    if dialect == "sqlite":
        with sqlite3.connect(make_url(url).database or "") as conn:
            conn.executescript(script)
            conn.execute("PRAGMA journal_mode=WAL")  # as that release left its files
    else:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(script)
        finally:
            await conn.close()


@pytest.fixture
async def previous_release(url: str) -> str:
    """A database as the release before migrations left it, with real rows."""
    await load_previous_release(url)
    return url


@pytest.fixture
async def store(url: str) -> AsyncIterator[SqlStore]:
    store = SqlStore(url)
    yield store
    await store.close()


async def run(url: str, fn: Any) -> Any:
    """`fn(sync connection)` on an engine of its own, outside any store."""
    engine = create_async_engine(async_url(url), poolclass=NullPool)
    try:
        return await on(engine, fn)
    finally:
        await engine.dispose()


async def on(engine: AsyncEngine, fn: Any) -> Any:
    async with engine.begin() as conn:
        return await conn.run_sync(fn)


def everything(conn: Connection) -> dict[str, Any]:
    """Every table: its columns, indexes and rows (for "nothing changed")."""
    inspector = inspect(conn)
    return {
        table: ([column["name"] for column in inspector.get_columns(table)],
                sorted(str(index["name"]) for index in inspector.get_indexes(table)),
                sorted(tuple(map(repr, row)) for row in conn.execute(text(f"SELECT * FROM {table}"))))
        for table in sorted(inspector.get_table_names())
    }


def set_revision(revision: str) -> Any:
    def update(conn: Connection) -> None:
        conn.execute(text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = :rev"), {"rev": revision})
    return update


def differences(conn: Connection, tables: MetaData = metadata) -> list[Any]:
    """What Alembic's autogenerate would change to make the database match store/sql.py."""
    context = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE,
                                                     "include_name": migrations.include_name})
    return compare_metadata(context, tables)


@pytest.fixture
def migration_log() -> Iterator[list[str]]:
    """The store's log lines about migrations."""
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO",
                      filter=lambda record: record["message"].startswith("marsho: database "))
    yield lines
    logger.remove(sink)


async def assert_every_previous_row_is_there(store: SqlStore) -> None:
    """What tests/fixtures/store_v1.py wrote reads back whole through the store's API."""
    for key, turns in SESSIONS.items():
        found = await store.recent_turns(key, **EVERYTHING)
        assert [(turn.messages, turn.tokens) for turn in found] == [(m, t) for m, t in turns]
        exported = await store.export(key)
        assert [row["message"] for row in exported] == [m for messages, _ in turns for m in messages]
        assert [row["tokens"] for row in exported] == [t for _, tokens in turns for t in tokens]
        turn_ids = [row["turn"] for row in exported]
        assert [len(list(group)) for _, group in itertools.groupby(turn_ids)] == [len(m) for m, _ in turns]
        assert all(isinstance(row["time"], float) and row["time"] > 1.7e9 for row in exported)
        assert await store.stats(key) == (len(turns), len(turn_ids), sum(sum(t) for _, t in turns))
    for name, value in SETTINGS.items():
        assert await store.get_setting(name) == value
    assert await store.get_setting("schema_version") == str(SCHEMA_VERSION)
    for user_key, nickname in NICKNAMES.items():
        assert await store.get_nickname(user_key) == nickname


# the previous release's databases ---------------------------------------------------------------


async def test_a_database_written_by_the_previous_release_opens_with_every_row(
    previous_release: str, migration_log: list[str],
) -> None:
    assert await run(previous_release, migrations.current) == ()  # no revision yet
    store = SqlStore(previous_release)
    try:
        await store.start()
        assert await on(store.engine, migrations.current) == (migrations.HEAD,)
        await assert_every_previous_row_is_there(store)
        # new rows go after the old ones (PostgreSQL's id sequence came along)
        key = next(iter(SESSIONS))
        await store.append_turn(key, [{"role": "user", "content": "new"}], [1])
        assert (await store.last_turn(key)).messages == [{"role": "user", "content": "new"}]  # type: ignore[union-attr]
        await store.set_nickname("onebot:10003", "Bob")
        assert await store.get_nickname("onebot:10003") == "Bob"
    finally:
        await store.close()
    assert migration_log == [
        f"marsho: database {store.safe_url}: tables from before migrations, kept with every row",
        *(f"marsho: database {store.safe_url}: {applied}" for applied in APPLIED),
    ]
    assert await run(previous_release, differences) == []


async def test_a_database_from_before_nicknames_gets_the_table_it_lacks(previous_release: str) -> None:
    await run(previous_release, lambda conn: conn.execute(text("DROP TABLE marsho_nicknames")))
    store = SqlStore(previous_release)
    try:
        await store.start()
        assert await store.get_nickname("onebot:10001") is None
        for user_key, nickname in NICKNAMES.items():  # the table works: what was set is kept
            await store.set_nickname(user_key, nickname)
        await assert_every_previous_row_is_there(store)
    finally:
        await store.close()
    assert await run(previous_release, differences) == []


async def test_tables_from_before_migrations_with_a_newer_schema_version_are_refused(
    previous_release: str,
) -> None:
    await run(previous_release, lambda conn: conn.execute(
        text("UPDATE marsho_settings SET value = '2' WHERE name = 'schema_version'")))
    before = await run(previous_release, everything)
    store = SqlStore(previous_release)
    try:
        with pytest.raises(StoreError) as refused:
            await store.start()
    finally:
        await store.close()
    assert refused.value.code == "store.newer"
    assert refused.value.params == {"url": store.safe_url, "found": "2", "known": "1"}
    assert await run(previous_release, everything) == before


# empty, up to date, newer ---------------------------------------------------------------------


@pytest.mark.parametrize("where", ["memory", *DIALECTS])
async def test_an_empty_database_reaches_the_newest_revision(
    where: str, request: pytest.FixtureRequest, tmp_path: Path, migration_log: list[str],
) -> None:
    store = SqlStore("sqlite://" if where == "memory" else new_database(where, request, tmp_path))
    try:
        await store.start()
        assert await on(store.engine, migrations.current) == (migrations.HEAD,)
        assert await store.get_setting("schema_version") == str(SCHEMA_VERSION)
        assert await on(store.engine, differences) == []
        assert await store.recent_turns("k", **EVERYTHING) == []
    finally:
        await store.close()
    assert migration_log == [f"marsho: database {store.safe_url}: {applied}" for applied in APPLIED]


async def test_starting_again_changes_nothing(url: str, migration_log: list[str]) -> None:
    first = SqlStore(url)
    try:
        await first.start()
        await first.append_turn("k", [{"role": "user", "content": "a"}], [1])
        await first.start()  # the same store: once only
    finally:
        await first.close()
    before = await run(url, everything)
    migration_log.clear()
    second = SqlStore(url)  # a restart
    try:
        await second.start()
        assert [t.messages for t in await second.recent_turns("k", **EVERYTHING)] == [
            [{"role": "user", "content": "a"}]]
    finally:
        await second.close()
    assert migration_log == []
    assert await run(url, everything) == before


async def test_a_database_from_a_newer_marsho_is_refused_and_left_as_it_was(
    store: SqlStore, url: str,
) -> None:
    await store.append_turn("k", [{"role": "user", "content": "a"}], [1])
    await store.close()

    def newer(conn: Connection) -> None:  # what a later release's migration might have done
        conn.execute(text("ALTER TABLE marsho_messages ADD COLUMN flags INTEGER"))
        conn.execute(text("CREATE TABLE marsho_future (id INTEGER PRIMARY KEY)"))
        set_revision("0999")(conn)

    await run(url, newer)
    before = await run(url, everything)
    newer_store = SqlStore(url)
    try:
        with pytest.raises(StoreError) as refused:
            await newer_store.start()
        assert refused.value.code == "store.newer"
        assert refused.value.params == {"url": newer_store.safe_url, "found": "0999",
                                        "known": migrations.HEAD}
        assert "newer marsho" in str(refused.value) and "upgrade the plugin" in str(refused.value)
        with pytest.raises(StoreError, match="upgrade the plugin"):  # every use, not only start
            await newer_store.recent_turns("k", **EVERYTHING)
    finally:
        await newer_store.close()
    assert await run(url, everything) == before


# later revisions ------------------------------------------------------------------------------

NICKNAME_PRONOUN = '''"""nicknames: a pronoun (a test revision)"""

import sqlalchemy as sa
from alembic import op

revision = "@REVISION@"
down_revision = "@DOWN@"


def upgrade() -> None:
    with op.batch_alter_table("marsho_nicknames") as batch:
        batch.add_column(sa.Column("pronoun", sa.String(16), nullable=True))
'''

PRONOUN_DEFAULT = '''"""nicknames: everyone's pronoun is "they" (a test revision that moves data)"""

from alembic import op

revision = "@REVISION@"
down_revision = "@DOWN@"


def upgrade() -> None:
    op.execute("UPDATE marsho_nicknames SET pronoun = 'they'")
'''

BROKEN = '''"""half a change, then a mistake (a test revision)"""

import sqlalchemy as sa
from alembic import op

revision = "@REVISION@"
down_revision = "@DOWN@"


def upgrade() -> None:
    op.create_table("marsho_extra", sa.Column("id", sa.Integer, primary_key=True))
    with op.batch_alter_table("marsho_nicknames") as batch:
        batch.add_column(sa.Column("pronoun", sa.String(16), nullable=True))
    op.execute("INSERT INTO marsho_settings (name, value) VALUES ('half', 'done')")
    op.execute("SELECT no_such_column FROM marsho_settings")
'''


@pytest.fixture
def later_revisions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Makes the store see the migrations of this code plus the given revision files, numbered
    after this code's newest (`later(1)` is the first one's number)."""
    def install(*scripts: str) -> None:
        folder = tmp_path / "migrations"
        shutil.copytree(migrations.FOLDER, folder, ignore=shutil.ignore_patterns("__pycache__"))
        for step, script in enumerate(scripts, start=1):
            script = script.replace("@REVISION@", later(step)).replace("@DOWN@", later(step - 1))
            (folder / "versions" / f"{later(step)}_test.py").write_text(script, encoding="utf-8")
        monkeypatch.setattr(migrations, "FOLDER", folder)
        monkeypatch.setattr(migrations, "HEAD", later(len(scripts)))
    return install


CODE_HEAD = migrations.HEAD
"""This code's newest revision (the fixture below moves migrations.HEAD past it)."""
APPLIED = [
    "applied migration 0001 (baseline: the tables of marsho before migrations (history, settings, nicknames))",
    "applied migration 0002 (group settings and observed chat)",
    "applied migration 0003 (usage and quotas)",
    "applied migration 0004 (summaries and memories)",
    "applied migration 0005 (chat targets)",
    "applied migration 0006 (group actions)",
    "applied migration 0007 (reminders)",
    "applied migration 0008 (knowledge base)",
    "applied migration 0009 (reminder first time)",
]
"""What the store logs as it applies each of this code's revisions."""


def later(step: int) -> str:
    """The number of the test revision `step` after this code's newest (0: the newest itself)."""
    return f"{int(CODE_HEAD) + step:04d}"


async def test_a_database_at_an_older_revision_is_upgraded_one_revision_after_the_other(
    previous_release: str, later_revisions: Any, migration_log: list[str],
) -> None:
    store = SqlStore(previous_release)
    try:
        await store.start()  # today's revisions
    finally:
        await store.close()
    later_revisions(NICKNAME_PRONOUN, PRONOUN_DEFAULT)
    migration_log.clear()
    upgraded = SqlStore(previous_release)
    try:
        await upgraded.start()
        assert await on(upgraded.engine, migrations.current) == (later(2),)
        await assert_every_previous_row_is_there(upgraded)
        pronouns = await on(upgraded.engine, lambda conn: conn.execute(
            text("SELECT user_key, pronoun FROM marsho_nicknames ORDER BY user_key")).all())
        assert [tuple(row) for row in pronouns] == [(key, "they") for key in sorted(NICKNAMES)]
    finally:
        await upgraded.close()
    assert migration_log == [
        f"marsho: database {upgraded.safe_url}: applied migration {later(1)} (nicknames: a pronoun (a test "
        "revision))",
        f"marsho: database {upgraded.safe_url}: applied migration {later(2)} (nicknames: everyone's pronoun is "
        '"they" (a test revision that moves data))',
    ]


async def test_the_previous_releases_database_goes_through_every_revision_at_once(
    previous_release: str, later_revisions: Any, migration_log: list[str],
) -> None:
    later_revisions(NICKNAME_PRONOUN, PRONOUN_DEFAULT)
    store = SqlStore(previous_release)
    try:
        await store.start()
        assert await on(store.engine, migrations.current) == (later(2),)
        await assert_every_previous_row_is_there(store)
    finally:
        await store.close()
    assert [line.split(": ", 2)[2].split(" (")[0] for line in migration_log] == [
        "tables from before migrations, kept with every row",
        *(applied.split(" (")[0] for applied in APPLIED),
        f"applied migration {later(1)}", f"applied migration {later(2)}"]


async def test_a_migration_that_fails_leaves_the_database_as_it_was(
    previous_release: str, later_revisions: Any, migration_log: list[str],
) -> None:
    store = SqlStore(previous_release)
    try:
        await store.start()
    finally:
        await store.close()
    before = await run(previous_release, everything)
    later_revisions(BROKEN)
    migration_log.clear()
    broken = SqlStore(previous_release)
    try:
        with pytest.raises(StoreError) as failed:
            await broken.start()
        assert failed.value.code == "store.open"
        assert "no_such_column" in failed.value.params["detail"]
    finally:
        await broken.close()
    assert migration_log == []
    # DDL included: on SQLite as on PostgreSQL, the migration is one transaction
    assert await run(previous_release, everything) == before


# several bots at once ----------------------------------------------------------------------------


@pytest.mark.parametrize("contents", ["empty", "previous release"])
async def test_bots_starting_together_on_one_postgres_database_migrate_it_once(
    contents: str, request: pytest.FixtureRequest, tmp_path: Path, migration_log: list[str],
) -> None:
    url = new_database("postgresql", request, tmp_path)
    if contents == "previous release":
        await load_previous_release(url)
    stores = [SqlStore(url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(store.start() for store in stores), return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert await on(stores[0].engine, migrations.current) == (migrations.HEAD,)
        if contents == "previous release":
            await assert_every_previous_row_is_there(stores[1])
    finally:
        for store in stores:
            await store.close()
    assert len([line for line in migration_log if "applied migration 0001" in line]) == 1


async def test_two_stores_starting_together_on_one_sqlite_file_both_work(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'marsho.db'}"
    await load_previous_release(url)
    stores = [SqlStore(url) for _ in range(2)]
    try:
        results = await asyncio.gather(*(store.start() for store in stores), return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        for store in stores:
            await assert_every_previous_row_is_there(store)
    finally:
        for store in stores:
            await store.close()


# the migrations themselves -------------------------------------------------------------------


def test_head_names_the_newest_of_one_numbered_line_of_revisions() -> None:
    script = ScriptDirectory(str(migrations.FOLDER))
    assert script.get_heads() == [migrations.HEAD], (
        "set HEAD in nonebot_plugin_marsho/store/migrations/__init__.py to the newest revision "
        "(and keep one line of revisions)")
    revisions = list(reversed(list(script.walk_revisions())))
    assert [r.revision for r in revisions] == [f"{n:04d}" for n in range(1, len(revisions) + 1)]
    assert revisions[0].revision == migrations.BASELINE
    assert all(Path(r.path).name.startswith(f"{r.revision}_") for r in revisions)


async def test_the_migrations_make_exactly_the_tables_of_the_code(url: str) -> None:
    """After the migrations, autogenerate finds nothing to change: a column added to store/sql.py
    without a migration fails here."""
    store = SqlStore(url)
    try:
        await store.start()
    finally:
        await store.close()
    assert await run(url, differences) == []


async def test_a_table_change_without_a_migration_is_noticed(tmp_path: Path) -> None:
    """The check above is not blind: a column the code has and the migrations lack shows."""
    url = f"sqlite:///{tmp_path / 'marsho.db'}"
    store = SqlStore(url)
    try:
        await store.start()
    finally:
        await store.close()
    changed = MetaData()
    for table in metadata.sorted_tables:
        copy = table.to_metadata(changed)
        if table.name == "marsho_nicknames":
            copy.append_column(Column("pronoun", String(16)))
    found = await run(url, lambda conn: differences(conn, changed))
    assert [(kind, table, column.name) for kind, _, table, column in found] == [
        ("add_column", "marsho_nicknames", "pronoun")]


# nothing on the console ------------------------------------------------------------------------

CHILD = """
import asyncio, sys
from nonebot_plugin_marsho.store.sql import SqlStore

async def main():
    store = SqlStore(sys.argv[1])
    await store.start()
    await store.close()

asyncio.run(main())
print("alembic imported:", "alembic" in sys.modules)
"""


def start_in_a_new_process(url: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url], cwd=cwd, capture_output=True, text=True, timeout=120,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO_ROOT)}, check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_migrating_prints_only_the_stores_log_line_and_an_up_to_date_start_skips_alembic(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'marsho.db'}"
    first = start_in_a_new_process(url, tmp_path).splitlines()
    assert len(first) == len(APPLIED) + 1 and first[-1] == "alembic imported: True", first
    for line, applied in zip(first[:-1], APPLIED, strict=True):
        assert applied.split(" (")[0] in line and "alembic." not in line
    assert start_in_a_new_process(url, tmp_path).splitlines() == ["alembic imported: False"]
