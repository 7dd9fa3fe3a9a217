"""Where history lives: SQLite in the data folder by default, or any SQLAlchemy async database
(PostgreSQL for several bot processes). A turn is written in one transaction, so a crash never
leaves half of one; one turn of a session runs at a time, across processes on PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from typing import IO, Any, NamedTuple
from urllib.parse import urlsplit

try:  # the lock file that tells two bot processes on one SQLite file apart (POSIX only)
    import fcntl
except ImportError:  # Windows: no such warning
    fcntl = None  # type: ignore[assignment]

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    delete,
    event,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool

from ..exceptions import StoreError
from ..redaction import logger
from . import migrations
from .asyncio_engine import AsyncConnection, AsyncEngine, create_async_engine
from .batch import GroupCommit
from .recent import RecentTurns, StoredTurn
from .session import Message, SessionLocks, Summary, Turn
from .sqlite_direct import SqliteDirect

_held_connection: ContextVar[tuple[SqlStore, AsyncConnection] | None] = ContextVar(
    "marsho_turn_connection", default=None
)
"""The connection holding the running turn's PostgreSQL lock, which its reads and writes use."""

SCHEMA_VERSION = migrations.LEGACY_SCHEMA_VERSION
"""The `schema_version` setting, which only releases before migrations read (they refuse a
database whose number is higher than theirs). The tables' version is their Alembic revision."""

metadata = MetaData()
"""The tables as this code uses them. Changing them takes a migration (store/migrations/):
tests/test_migrations.py fails until the migrations make exactly these."""

messages_table = Table(
    "marsho_messages",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("session_key", String(255), nullable=False),
    Column("turn_id", String(32), nullable=False),
    Column("role", String(16), nullable=False),
    Column("data", Text, nullable=False),
    Column("tokens", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_marsho_messages_session_id", "session_key", "id"),
    Index("ix_marsho_messages_turn", "turn_id"),
)

MESSAGE_ROW = ("session_key", "turn_id", "role", "data", "tokens", "created_at")
"""The columns a turn's rows give (the id is the database's)."""
INSERT_MESSAGES = (f"INSERT INTO {messages_table.name} ({', '.join(MESSAGE_ROW)}) "
                   f"VALUES ({', '.join(':' + column for column in MESSAGE_ROW)})")
"""A turn's rows, inserted without SQLAlchemy (store/sqlite_direct.py)."""
NEWEST_MESSAGES = (f"SELECT turn_id, data, tokens FROM {messages_table.name} WHERE session_key = ? "
                   "ORDER BY id DESC LIMIT ?")
"""A session's newest messages (as `_read_recent` selects them), without SQLAlchemy."""
TURN_MESSAGES = f"SELECT turn_id, data, tokens FROM {messages_table.name} WHERE turn_id = ? ORDER BY id DESC"
"""A turn's messages, newest first (`_whole_turn`'s), without SQLAlchemy."""

settings_table = Table(
    "marsho_settings",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

nicknames_table = Table(
    "marsho_nicknames",
    metadata,
    Column("user_key", String(255), primary_key=True),
    Column("nickname", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)
"""What each person asked to be called (`marsho.nickname`)."""

group_settings_table = Table(
    "marsho_group_settings",
    metadata,
    Column("group_key", String(255), primary_key=True),
    Column("name", String(32), primary_key=True),
    Column("value", Text, nullable=False),
    Column("updated_at", Float, nullable=False),
)
"""What a group's admins chose for their group: `context` (`on`/`off`), `persona` (its text)."""

observed_table = Table(
    "marsho_observed",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("group_key", String(255), nullable=False),
    Column("speaker", String(64), nullable=False),
    Column("text", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_marsho_observed_group_id", "group_key", "id"),
    Index("ix_marsho_observed_created_at", "created_at"),
)
"""The recent chat of groups that chose to share it with the model: messages not addressed to
marsho, at most MARSHO_GROUP_CONTEXT per group, each for MARSHO_GROUP_CONTEXT_TTL seconds."""

observed_cursors_table = Table(
    "marsho_observed_cursors",
    metadata,
    Column("session_key", String(255), primary_key=True),
    Column("group_key", String(255), primary_key=True),
    Column("last_id", BigInteger().with_variant(Integer, "sqlite"), nullable=False),
)
"""The newest observed message each session's turns have already carried, per group: the next
question carries only what came after it."""

# the owner's bill (issue 16): store/usage.py reads and writes these

_TOKENS = BigInteger().with_variant(Integer, "sqlite")

usage_table = Table(
    "marsho_usage",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("created_at", Float, nullable=False),
    Column("day", String(10), nullable=False),
    Column("session_key", String(255), nullable=False),
    Column("user_key", String(255), nullable=False),
    Column("group_key", String(255), nullable=False),
    Column("model", String(128), nullable=False),
    Column("endpoint", String(255), nullable=False),
    Column("prompt_tokens", _TOKENS, nullable=False),
    Column("completion_tokens", _TOKENS, nullable=False),
    Column("cached_tokens", _TOKENS, nullable=False),
    Column("reasoning_tokens", _TOKENS, nullable=False),
    Column("questions", Integer, nullable=False),
    Column("estimated", Integer, nullable=False),
    Index("ix_marsho_usage_day", "day"),
)
"""One row per request to an endpoint (tool rounds, pokes, judges and summaries included): its
tokens as the endpoint reported them (`estimated` 1: it reported none, ours are stored), who
asked, where, which model at which host. `day` is the date in MARSHO_TIMEZONE. Rows older than
MARSHO_USAGE_RETENTION_DAYS are rolled up into marsho_usage_daily."""

usage_daily_table = Table(
    "marsho_usage_daily",
    metadata,
    Column("day", String(10), primary_key=True),
    Column("user_key", String(255), primary_key=True),
    Column("group_key", String(255), primary_key=True),
    Column("model", String(128), primary_key=True),
    Column("endpoint", String(255), primary_key=True),
    Column("requests", _TOKENS, nullable=False),
    Column("prompt_tokens", _TOKENS, nullable=False),
    Column("completion_tokens", _TOKENS, nullable=False),
    Column("cached_tokens", _TOKENS, nullable=False),
    Column("reasoning_tokens", _TOKENS, nullable=False),
    Column("questions", _TOKENS, nullable=False),
    Column("estimated", _TOKENS, nullable=False),
)
"""Daily totals of marsho_usage rows past the retention period."""

usage_totals_table = Table(
    "marsho_usage_totals",
    metadata,
    Column("day", String(10), primary_key=True),
    Column("scope", String(8), primary_key=True),
    Column("target", String(255), primary_key=True),
    Column("tokens", _TOKENS, nullable=False),
)
"""Tokens used per day by each user (`scope` user), group (group) and by all (all, target `*`),
kept up to date with every write: the quota check reads it (one indexed read)."""

quotas_table = Table(
    "marsho_quotas",
    metadata,
    Column("scope", String(8), primary_key=True),
    Column("target", String(255), primary_key=True),
    Column("tokens", _TOKENS, nullable=False),
    Column("updated_at", Float, nullable=False),
)
"""Daily token quotas a superuser set for one user or group (`marsho.quota`), over the
MARSHO_*_DAILY_TOKENS defaults; 0: none for them."""


# memory (issue 18): store/memory.py reads and writes these

summaries_table = Table(
    "marsho_summaries",
    metadata,
    Column("session_key", String(255), primary_key=True),
    Column("text", Text, nullable=False),
    Column("through_turn", String(32), nullable=False),
    Column("turns", Integer, nullable=False),
    Column("tokens", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
)
"""Each session's summary of the turns trimmed off the start of its history: `through_turn` is
the newest turn folded in, `turns` how many it covers in all (MARSHO_SUMMARY)."""

SUMMARY_ROW = ("session_key", "text", "through_turn", "turns", "tokens", "updated_at")
DELETE_SUMMARY = f"DELETE FROM {summaries_table.name} WHERE session_key = :session_key"
INSERT_SUMMARY = (f"INSERT INTO {summaries_table.name} ({', '.join(SUMMARY_ROW)}) "
                  f"VALUES ({', '.join(':' + column for column in SUMMARY_ROW)})")
"""A summary's replacement (`save_summary`'s two statements), without SQLAlchemy."""
TURN_BOUNDS = (f"SELECT turn_id, min(id), max(id) FROM {messages_table.name} "
               "WHERE session_key = ? AND turn_id IN (?, ?) GROUP BY turn_id")
MESSAGES_BETWEEN = (f"SELECT turn_id, data, tokens FROM {messages_table.name} "
                    "WHERE session_key = ? AND id >= ? AND id < ? ORDER BY id DESC LIMIT ?")
"""`turns_between`'s two reads, without SQLAlchemy."""

memories_table = Table(
    "marsho_memories",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("about", String(8), nullable=False),
    Column("owner", String(255), nullable=False),
    Column("learned_in", String(255), nullable=False),
    Column("private", Integer, nullable=False),
    Column("author", String(255), nullable=False),
    Column("text", Text, nullable=False),
    Column("terms", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("used_at", Float, nullable=False),
    Index("ix_marsho_memories_owner", "about", "owner", "used_at"),
)
"""What marsho remembers: `about` `user` (`owner` "<platform>:<user id>") or `group` (`owner`
the group's key); `learned_in` the key of the chat it was told in, `private` 1 when that was a
private chat (never used in a group); `author` who told it; `terms` the text as the full-text
index reads it (store/memory.search_terms). Searched with SQLite FTS5 (the virtual table
marsho_memories_fts, kept by triggers) or PostgreSQL's full-text search (a GIN index on
to_tsvector('simple', terms)): neither is in this metadata (migrations.SEARCH_OBJECTS)."""


# saved chat targets (issue 23): store/targets.py reads and writes this

targets_table = Table(
    "marsho_targets",
    metadata,
    Column("chat_key", String(255), primary_key=True),
    Column("target", Text, nullable=False),
    Column("adapter", String(64), nullable=False),
    Column("self_id", String(255), nullable=False),
    Column("seen_at", Float, nullable=False),
)
"""Where each chat marsho has answered in is, to speak there later (reminders, notices), after a
restart too: `chat_key` the chat's session key (`X:group:<id>`, `X:channel:<guild>/<channel>`,
`X:private:<id>`), `target` nonebot-plugin-alconna's `Target.dump()` as JSON, the adapter's name
and the bot's self id that answered there, and when the chat was last seen (written when the
target changes, else at most once a day: chat/targets.SEEN_EVERY)."""


# group actions (issue 28): store/group_actions.py reads and writes this

group_actions_table = Table(
    "marsho_group_actions",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("group_key", String(255), nullable=False),
    Column("asker", String(255), nullable=False),
    Column("action", String(16), nullable=False),
    Column("target", String(255), nullable=False),
    Column("detail", String(255), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Index("ix_marsho_group_actions_group_at", "group_key", "at"),
    Index("ix_marsho_group_actions_asker_at", "asker", "at"),
)
"""Each group action marsho was asked for (mute, unmute, kick, recall): when, in which group
(its key), who asked and on whom (user ids; a recall's target is the message's sender, its
`detail` the message id; a mute's `detail` its minutes), and how it ended (`outcome` done,
denied: refused by the rules before any call, failed: refused by the platform) with the reason."""


# reminders (issue 27): store/reminders.py reads and writes this

reminders_table = Table(
    "marsho_reminders",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("chat_key", String(255), nullable=False),
    Column("platform", String(64), nullable=False),
    Column("kind", String(8), nullable=False),
    Column("chat_id", String(255), nullable=False),
    Column("guild_id", String(255), nullable=False),
    Column("channel_id", String(255), nullable=False),
    Column("user_id", String(255), nullable=False),
    Column("asker", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("session_key", String(255), nullable=False),
    Column("what", String(8), nullable=False),
    Column("body", Text, nullable=False),
    Column("every", String(128), nullable=False),
    Column("zone", String(64), nullable=False),
    Column("scheduled_at", Float, nullable=False),
    Column("due_at", Float, nullable=False),
    Column("state", String(8), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("problem", Text, nullable=False),
    Column("claimed_by", String(64), nullable=False),
    Column("claimed_at", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("first_at", Float, nullable=False, server_default=text("0")),
    Index("ix_marsho_reminders_due", "state", "due_at"),
    Index("ix_marsho_reminders_chat", "chat_key", "asker"),
    Index("ix_marsho_reminders_asker", "asker"),
)
"""Reminders and scheduled questions (`reminders__add`): posted in `chat_key` (the chat asked
in, with its platform, kind, ids), by and mentioning `user_id` (`asker` "<platform>:<id>",
`name` their display name then), a `text` sent as is or a `prompt` answered as the asker in
`session_key` (`what`, `body`); `every` an ISO 8601 duration or a five-field cron expression
("" once) in time zone `zone`, each time counted from the first, `first_at`; `scheduled_at` the
occurrence's time, `due_at` when it is next tried (later after a failed send); `state` active,
sending (claimed by `claimed_by` at `claimed_at`: fired at most once), paused (`problem` says why) or done."""
# the knowledge base (issue 29): store/knowledge.py reads and writes these

documents_table = Table(
    "marsho_kb_documents",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("owner", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("pages", Integer, nullable=False),
    Column("passages", Integer, nullable=False),
    Column("added_by", String(255), nullable=False),
    Column("added_at", Float, nullable=False),
    Column("embedding_model", String(255), nullable=False),
    Index("ix_marsho_kb_documents_owner_sha256", "owner", "sha256", unique=True),
)
"""The documents of each chat's knowledge base: `owner` the chat's key (a group's, or a
person's private chat's), the file's name, format (agent/documents.KINDS) and SHA-256 (the
same file twice is kept once), its size, pages and passages, who added it and when, and the
model its passages were embedded with ("" for none)."""

passages_table = Table(
    "marsho_kb_passages",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("document_id", BigInteger, nullable=False),
    Column("owner", String(255), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("place", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("terms", Text, nullable=False),
    Column("vector", LargeBinary, nullable=True),
    Index("ix_marsho_kb_passages_document", "document_id", "seq"),
    Index("ix_marsho_kb_passages_owner", "owner"),
)
"""A document's passages: its owner again (every search is one WHERE on it), their order, where
each is (`place`: the section's page, heading, sheet and rows as JSON), the text and its
`terms` (store/fulltext.search_terms), and its embedding as float32 bytes (None without
MARSHO_EMBEDDING_MODEL). Searched like memories: an FTS5 table marsho_kb_passages_fts kept by
triggers on SQLite, a GIN index on to_tsvector('simple', terms) on PostgreSQL (neither in this
metadata: migrations.SEARCH_OBJECTS)."""


def async_url(url: str) -> str:
    """The URL with an async driver: `postgresql://` → asyncpg, `sqlite://` → aiosqlite."""
    parsed = make_url(url)
    driver = {"postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg",
              "sqlite": "sqlite+aiosqlite"}.get(parsed.drivername)
    return parsed.set(drivername=driver).render_as_string(hide_password=False) if driver else url


def _lock_id(key: str) -> int:
    """A signed 64-bit number for pg_advisory_lock, the same in every process."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big", signed=True)


def _sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names, or None for an in-memory database (`sqlite://`, `:memory:`,
    a `file:` URI with mode=memory)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.query.get("uri") in ("true", "1") or database.startswith("file:"):
        if "mode=memory" in database or parsed.query.get("mode") == "memory":
            return None
        database = urlsplit(database).path
    return database if database not in ("", ":memory:") else None


def _wait_for_lock(handle: IO[str], claimed: threading.Event) -> None:
    """Wait until the other process gives up its claim (a blocking flock), then hold it."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
    except (OSError, ValueError):  # closed meanwhile: this store stopped
        return
    claimed.set()


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


class SqlStore:
    """The conversation history in a SQL database, through SQLAlchemy's async engine."""

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = async_url(url)
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        options: dict[str, Any] = {"echo": echo}
        if self.dialect == "sqlite":
            options["connect_args"] = {"timeout": 30}  # wait for another writer, not fail
            if _sqlite_file(self.url) is None:
                options["poolclass"] = StaticPool  # one shared in-memory database
        else:
            # a running turn holds one connection, for its lock and its reads and writes
            options.update(pool_pre_ping=True, pool_size=20, max_overflow=80)
        self.engine: AsyncEngine = create_async_engine(self.url, **options)
        if self.dialect == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self._local_locks = SessionLocks()
        self._write_lock = asyncio.Lock() if self.dialect == "sqlite" else None
        self._turn_writes = GroupCommit(self._insert_messages, self._write_lock) if self._write_lock else None
        """SQLite: the turns that end while one is written are written next, together (store/batch.py)."""
        path = _sqlite_file(self.url) if self.dialect == "sqlite" and "uri" not in parsed.query else None
        self._direct = SqliteDirect(path) if path is not None else None
        """A SQLite file: the turns' inserts, and the reads of sessions not kept in memory, in one hop
        to a thread of their own (store/sqlite_direct.py)."""
        self._started: asyncio.Task[None] | None = None
        self._claim: IO[str] | None = None
        self._claimed = threading.Event()
        self._recent = RecentTurns()
        """The sessions' newest turns, while no other process writes them (`_recent_turns`)."""

    async def start(self) -> None:
        """Create the tables, or bring them to this code's revision (store/migrations/); raises
        StoreError saying what failed, and refuses a database written by a newer marsho. Every
        other method does this first, once; calling it at startup reports problems early."""
        await self._ready()

    async def _ready(self) -> None:
        if self._started is None:  # one setup, even when many turns start at once
            self._started = asyncio.ensure_future(self._migrate())
        try:
            await asyncio.shield(self._started)
        except StoreError:
            self._started = None  # the database may be back next time
            raise

    def upsert(self, table: Table) -> Any:
        """An INSERT of `table` that can say `on_conflict_do_update`, in this database's dialect
        (PostgreSQL's is imported only for a PostgreSQL database: about 2 MB and 70 ms)."""
        name = "postgresql" if self.dialect == "postgresql" else "sqlite"
        dialect = importlib.import_module(f"sqlalchemy.dialects.{name}")
        return dialect.insert(table)

    @property
    def shared(self) -> bool:
        """True when other bot processes may use the same database (turn locks in it)."""
        return self.dialect == "postgresql"

    async def _migrate(self) -> None:
        """A quick read when the tables are at the newest revision; otherwise, alone (a PostgreSQL
        advisory lock: bots starting together migrate one after the other; SQLite's write lock),
        look again and apply what is missing, all in one transaction."""
        try:
            async with self.engine.connect() as conn:
                if await conn.run_sync(migrations.up_to_date):
                    return
            async with self.engine.begin() as conn:
                if self.shared:  # bots starting together: one migrates, the others wait, then see it done
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                       {"id": _lock_id("marsho:schema")})
                elif self.dialect == "sqlite":
                    await conn.exec_driver_sql("BEGIN IMMEDIATE")  # DDL included, all or nothing
                legacy, applied = await conn.run_sync(migrations.upgrade)
        except migrations.NewerDatabase as error:
            raise StoreError(code="store.newer", url=self.safe_url, found=error.found,
                             known=error.known) from None
        except (SQLAlchemyError, migrations.MigrationError) as error:
            raise StoreError(code="store.open", url=self.safe_url, detail=_describe(error)) from None
        except OSError as error:
            raise StoreError(code="store.reach", url=self.safe_url, detail=_describe(error)) from None
        if legacy:
            logger.info(f"marsho: database {self.safe_url}: tables from before migrations, "
                        "kept with every row")
        for revision, what in applied:
            logger.info(f"marsho: database {self.safe_url}: applied migration {revision} ({what})")

    @property
    def safe_url(self) -> str:
        """The URL without its password, for messages."""
        return make_url(self.url).render_as_string(hide_password=True)

    def claim(self) -> bool | None:
        """Mark a SQLite file as this process's, until `close`: an exclusive lock on the file
        `<database>.lock` beside it (released by the system when the process dies). False when
        another process holds it: this one then waits for it in a thread, so that once the other
        stops, a third started on the file is told in turn. None where it does not apply
        (PostgreSQL, which bot processes share by design; an in-memory database; a file system
        or system without locks)."""
        path = _sqlite_file(self.url) if self.dialect == "sqlite" else None
        if path is None or fcntl is None:
            return None
        if self._claim is not None:
            return self._claimed.is_set()
        try:
            handle = open(f"{path}.lock", "a", encoding="utf-8")  # noqa: SIM115 - held until close
        except OSError:  # a read-only folder: nothing to tell
            return None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held by another process
            self._claim = handle
            threading.Thread(target=_wait_for_lock, args=(handle, self._claimed), daemon=True,
                             name="marsho-sqlite-claim").start()
            return False
        except OSError:  # no locks on this file system (some network mounts): nothing to tell
            handle.close()
            return None
        self._claim = handle
        self._claimed.set()
        return True

    async def close(self) -> None:
        """Close every connection (and give up the claim on a SQLite file)."""
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.close()  # closing the file releases its lock (and ends a wait for it)
            self._claimed = threading.Event()
        if self._direct is not None:
            await self._direct.close()
        await self.engine.dispose()

    def lock(self, key: str) -> AbstractAsyncContextManager[None]:
        """Run alone in the session: in this process, and on PostgreSQL in every process (an
        async context manager, History.lock's; on SQLite the local lock's own, without a
        generator's context around it: every turn takes one).

        The advisory lock lives on a connection of its own, so it is released even if this
        process dies mid-turn.
        """
        if not self.shared:
            return self._local_locks.hold(key)
        return self._shared_lock(key)

    @asynccontextmanager
    async def _shared_lock(self, key: str) -> AsyncIterator[None]:
        async with self._local_locks.hold(key):
            conn = None
            try:
                conn = await self.engine.connect()
                await conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _lock_id(key)})
                await conn.commit()  # the lock is the session's: it outlives this transaction
            except BaseException as error:  # a failed or cancelled wait must not leak the connection
                if conn is not None:
                    await conn.invalidate()
                if isinstance(error, (SQLAlchemyError, OSError)):
                    raise StoreError(code="store.lock", url=self.safe_url, detail=_describe(error)) from None
                raise
            # the turn reads and writes on this same connection: one per running turn
            token = _held_connection.set((self, conn))
            try:
                yield
            finally:
                _held_connection.reset(token)
                try:
                    await conn.rollback()
                    await conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _lock_id(key)})
                    await conn.commit()
                    await conn.close()
                except (SQLAlchemyError, OSError):
                    await conn.invalidate()  # closing the connection frees the lock too

    @asynccontextmanager
    async def _connection(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """A connection for one read, or one write transaction: the running turn's own on
        PostgreSQL; on SQLite, writers of this process take turns (SQLite's own busy waiting
        is unfair and can keep a writer waiting for seconds)."""
        held = _held_connection.get()
        if held is not None and held[0] is self:
            conn = held[1]
            if conn.in_transaction():
                await conn.commit()
            if write:
                async with conn.begin():
                    yield conn
            else:
                try:
                    yield conn
                finally:
                    await conn.rollback()  # end the read's transaction
            return
        if write and self._write_lock is not None:
            async with self._write_lock, self.engine.begin() as conn:
                yield conn
            return
        async with (self.engine.begin() if write else self.engine.connect()) as conn:
            yield conn

    def _recent_turns(self) -> RecentTurns | None:
        """The newest turns kept in memory, where this process is the only writer: SQLite, unless
        another bot process claimed the file first (`claim`; then, and on PostgreSQL, where bot
        processes share the database, every read goes to the database)."""
        if self.dialect == "sqlite" and (self._claim is None or self._claimed.is_set()):
            return self._recent
        self._recent.clear()
        return None

    async def recent_turns(self, key: str, *, max_messages: int, max_tokens: int) -> list[Turn]:
        """The newest whole turns within both bounds (oldest first); the newest turn always,
        even if alone it is too big (the engine shrinks it). Read from memory when this process
        wrote the session's last turns (`_recent_turns`), else from the database."""
        recent = self._recent_turns()
        turns = recent.get(key, max_messages) if recent is not None else None
        if turns is None:
            turns = await self._read_recent(key, max_messages, recent)
        chosen: list[Turn] = []
        used_messages = used_tokens = 0
        for turn in turns:  # newest first
            used_messages += len(turn.messages)
            used_tokens += sum(turn.tokens)
            if chosen and (used_messages > max_messages or used_tokens > max_tokens):
                break
            chosen.append(turn)
        return chosen[::-1]

    async def _read_recent(self, key: str, max_messages: int, recent: RecentTurns | None) -> list[Turn]:
        """The session's newest whole turns within `max_messages` messages (the newest one
        alone when it has more), newest first, from the database (kept in `recent`)."""
        await self._ready()
        found: list[StoredTurn] | None = None
        complete = False
        if recent is not None:
            recent.read_started(key)
        try:
            if self._direct is not None:
                turns, complete = await self._direct.call(lambda db: _newest_turns(db, key, max_messages))
            else:
                async with self._connection(write=False) as conn:
                    rows = (await conn.execute(
                        select(messages_table.c.turn_id, messages_table.c.data, messages_table.c.tokens)
                        .where(messages_table.c.session_key == key)
                        .order_by(messages_table.c.id.desc())
                        .limit(max_messages + 1)
                    )).all()
                    turns = _stored_turns(rows)
                    complete = len(rows) <= max_messages
                    if len(turns) == 1 and not complete:  # the newest turn, cut by LIMIT
                        turns = [await self._whole_turn(conn, rows[0].turn_id)]
                    elif not complete:
                        turns = turns[:-1]  # the oldest one was cut by LIMIT
            found = turns
        except (SQLAlchemyError, sqlite3.Error) as error:
            raise StoreError(code="store.read_history", url=self.safe_url, detail=_describe(error)) from None
        finally:
            if recent is not None:  # kept only when the read is whole (`found`)
                recent.read_ended(key, found, max_messages=max_messages, complete=complete)
        return [_turn_of(turn) for turn in turns]

    async def _whole_turn(self, conn: Any, turn_id: str) -> StoredTurn:
        rows = (await conn.execute(
            select(messages_table.c.turn_id, messages_table.c.data, messages_table.c.tokens)
            .where(messages_table.c.turn_id == turn_id)
            .order_by(messages_table.c.id.desc())
        )).all()
        return _stored_turns(rows)[0]

    async def last_turn(self, key: str) -> Turn | None:
        """The session's newest turn."""
        turns = await self.recent_turns(key, max_messages=0, max_tokens=0)
        return turns[-1] if turns else None

    async def append_turn(self, key: str, messages: list[Message], tokens: list[int]) -> None:
        """Store a finished turn in one transaction: all of it, or (on failure) none of it."""
        await self._ready()
        turn_id = uuid.uuid4().hex
        now = time.time()
        recent = self._recent_turns()
        stored: StoredTurn | None = None
        if recent is not None:
            recent.write_started(key)
        try:
            data = [json.dumps(message, ensure_ascii=False) for message in messages]
            rows = [
                {"session_key": key, "turn_id": turn_id, "role": str(message.get("role", "")),
                 "data": text, "tokens": count, "created_at": now}
                for message, text, count in zip(messages, data, tokens, strict=True)
            ]
            await self._insert_turn(rows)
            stored = (turn_id, data, list(tokens))
        except (SQLAlchemyError, sqlite3.Error, TypeError, ValueError) as error:
            raise StoreError(code="store.save_turn", url=self.safe_url, detail=_describe(error)) from None
        finally:
            if recent is not None:
                recent.write_ended(key, stored)

    async def _insert_turn(self, rows: list[dict[str, Any]]) -> None:
        """One turn's messages, in one transaction (with other turns', on SQLite: GroupCommit)."""
        held = _held_connection.get()
        if self._turn_writes is None or (held is not None and held[0] is self):
            async with self._connection(write=True) as conn:
                await conn.execute(insert(messages_table), rows)
            return
        await self._turn_writes.write(rows)

    async def _insert_messages(self, rows: list[dict[str, Any]]) -> None:
        """GroupCommit's write: the rows in one transaction (it holds the write lock)."""
        if self._direct is not None:
            await self._direct.insert(INSERT_MESSAGES, rows)
            return
        async with self.engine.begin() as conn:
            await conn.execute(insert(messages_table), rows)

    async def clear(self, key: str) -> int:
        """Forget the session; returns how many turns were dropped."""
        await self._ready()
        recent = self._recent_turns()
        if recent is not None:
            recent.write_started(key)
        try:
            async with self._connection(write=True) as conn:
                count = (await conn.execute(
                    select(func.count(func.distinct(messages_table.c.turn_id)))
                    .where(messages_table.c.session_key == key)
                )).scalar_one()
                await conn.execute(delete(messages_table).where(messages_table.c.session_key == key))
                await conn.execute(delete(summaries_table).where(summaries_table.c.session_key == key))
        except SQLAlchemyError as error:
            raise StoreError(code="store.clear", url=self.safe_url, detail=_describe(error)) from None
        finally:
            if recent is not None:
                recent.write_ended(key)
        return int(count)

    async def turns_between(self, key: str, after: str, before: str, *, max_messages: int,
                            with_after: bool = False) -> list[Turn]:
        """The whole turns stored after turn `after` (and `after` itself, `with_after`) and before
        turn `before` (by message order), oldest first: the newest of them within `max_messages`
        messages; none when either turn is not stored."""
        await self._ready()
        if self._direct is not None:
            try:
                found = await self._direct.call(
                    lambda db: _between(db, key, after, before, max_messages + 1, with_after=with_after))
            except sqlite3.Error as error:
                raise StoreError(code="store.read_history", url=self.safe_url,
                                 detail=_describe(error)) from None
            return _turns_between(found, max_messages)
        messages = messages_table.c
        try:
            async with self._connection(write=False) as conn:
                bounds = (await conn.execute(
                    select(messages.turn_id, func.min(messages.id), func.max(messages.id))
                    .where(messages.session_key == key, messages.turn_id.in_([after, before]))
                    .group_by(messages.turn_id)
                )).all()
                ids = {row[0]: (row[1], row[2]) for row in bounds}
                if after not in ids or before not in ids:
                    return []
                rows = (await conn.execute(
                    select(messages.turn_id, messages.data, messages.tokens)
                    .where(messages.session_key == key,
                           messages.id >= ids[after][0] if with_after else messages.id > ids[after][1],
                           messages.id < ids[before][0])
                    .order_by(messages.id.desc())
                    .limit(max_messages + 1)
                )).all()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read_history", url=self.safe_url, detail=_describe(error)) from None
        return _turns_between(rows, max_messages)

    async def get_summary(self, key: str) -> Summary | None:
        """The session's summary of its trimmed turns, if it has one (one read by primary key)."""
        await self._ready()
        summaries = summaries_table.c
        try:
            async with self._connection(write=False) as conn:
                row = (await conn.execute(
                    select(summaries.text, summaries.through_turn, summaries.turns, summaries.tokens,
                           summaries.updated_at)
                    .where(summaries.session_key == key)
                )).first()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None
        if row is None:
            return None
        return Summary(row.text, row.through_turn, row.turns, row.tokens, row.updated_at)

    async def save_summary(self, key: str, text: str, *, through_turn: str, turns: int, tokens: int) -> None:
        """Keep the session's summary, replacing the one before."""
        await self._ready()
        if self._direct is not None and self._write_lock is not None:
            # a SQLite file: both statements in one hop to its thread, in one transaction
            row = {"session_key": key, "text": text, "through_turn": through_turn, "turns": turns,
                   "tokens": tokens, "updated_at": time.time()}
            try:
                await self._direct.insert_holding(self._write_lock, DELETE_SUMMARY, [{"session_key": key}],
                                                  (INSERT_SUMMARY, [row]))
            except (sqlite3.Error, TypeError, ValueError) as error:
                raise StoreError(code="store.save", url=self.safe_url, detail=_describe(error)) from None
            return
        try:
            async with self._connection(write=True) as conn:
                await conn.execute(delete(summaries_table).where(summaries_table.c.session_key == key))
                await conn.execute(insert(summaries_table).values(
                    session_key=key, text=text, through_turn=through_turn, turns=turns, tokens=tokens,
                    updated_at=time.time()))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.safe_url, detail=_describe(error)) from None

    async def stats(self, key: str) -> tuple[int, int, int]:
        """(turns, messages, tokens) stored for the session."""
        await self._ready()
        try:
            async with self._connection(write=False) as conn:
                row = (await conn.execute(
                    select(func.count(func.distinct(messages_table.c.turn_id)), func.count(),
                           func.coalesce(func.sum(messages_table.c.tokens), 0))
                    .where(messages_table.c.session_key == key)
                )).one()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None
        return int(row[0]), int(row[1]), int(row[2])

    async def export(self, key: str) -> list[dict[str, Any]]:
        """Every stored message of the session, oldest first, with its turn and time."""
        await self._ready()
        try:
            async with self._connection(write=False) as conn:
                rows = (await conn.execute(
                    select(messages_table.c.turn_id, messages_table.c.data, messages_table.c.tokens,
                           messages_table.c.created_at)
                    .where(messages_table.c.session_key == key)
                    .order_by(messages_table.c.id)
                )).all()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None
        return [{"turn": row.turn_id, "time": row.created_at, "tokens": row.tokens,
                 "message": json.loads(row.data)} for row in rows]

    async def get_setting(self, name: str) -> str | None:
        """A persisted setting (the model chosen with marsho.model...)."""
        await self._ready()
        try:
            async with self._connection(write=False) as conn:
                return (await conn.execute(
                    select(settings_table.c.value).where(settings_table.c.name == name)
                )).scalar()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None

    async def set_setting(self, name: str, value: str) -> None:
        """Persist a setting."""
        await self._ready()
        try:
            async with self._connection(write=True) as conn:
                await conn.execute(delete(settings_table).where(settings_table.c.name == name))
                await conn.execute(insert(settings_table).values(name=name, value=value))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.safe_url, detail=_describe(error)) from None

    async def get_nickname(self, user_key: str) -> str | None:
        """The nickname a person set, or None."""
        await self._ready()
        try:
            async with self._connection(write=False) as conn:
                return (await conn.execute(
                    select(nicknames_table.c.nickname).where(nicknames_table.c.user_key == user_key)
                )).scalar()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None

    async def set_nickname(self, user_key: str, nickname: str | None) -> None:
        """Keep a person's nickname (None forgets it)."""
        await self._ready()
        try:
            async with self._connection(write=True) as conn:
                await conn.execute(delete(nicknames_table).where(nicknames_table.c.user_key == user_key))
                if nickname is not None:
                    await conn.execute(insert(nicknames_table).values(
                        user_key=user_key, nickname=nickname, updated_at=time.time()))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.safe_url, detail=_describe(error)) from None

    # group settings and the observed chat (issue 17)

    async def group_settings(self, name: str) -> dict[str, str]:
        """Every group's value of setting `name` (`context`: a few short rows, read at once)."""
        await self._ready()
        try:
            async with self._connection(write=False) as conn:
                rows = (await conn.execute(
                    select(group_settings_table.c.group_key, group_settings_table.c.value)
                    .where(group_settings_table.c.name == name)
                )).all()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None
        return {row.group_key: row.value for row in rows}

    async def get_group_setting(self, group_key: str, name: str) -> str | None:
        """One group's setting, or None when its admins have not chosen."""
        await self._ready()
        try:
            async with self._connection(write=False) as conn:
                return (await conn.execute(
                    select(group_settings_table.c.value).where(
                        group_settings_table.c.group_key == group_key, group_settings_table.c.name == name)
                )).scalar()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None

    async def set_group_setting(self, group_key: str, name: str, value: str | None, *,
                                forget_observed: bool = False) -> None:
        """Keep a group's setting (None forgets it); `forget_observed` also empties the group's
        observed chat, in the same transaction (turning the recent chat off)."""
        await self._ready()
        try:
            async with self._connection(write=True) as conn:
                await conn.execute(delete(group_settings_table).where(
                    group_settings_table.c.group_key == group_key, group_settings_table.c.name == name))
                if value is not None:
                    await conn.execute(insert(group_settings_table).values(
                        group_key=group_key, name=name, value=value, updated_at=time.time()))
                if forget_observed:
                    await self._forget_observed(conn, group_key)
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.safe_url, detail=_describe(error)) from None

    async def observe(self, group_key: str, rows: Sequence[tuple[str, str, float]], *, keep: int,
                      ttl: float, default_on: bool) -> int:
        """Keep (speaker, text, time) messages of a group's chat, if the group has the recent chat
        on (checked in the same transaction, so a group turned off in another process keeps
        nothing); then the group keeps only its newest `keep`, and messages older than `ttl`
        seconds go, in every group. Returns how many were kept."""
        await self._ready()
        settings = group_settings_table.c
        try:
            async with self._connection(write=True) as conn:
                chosen = (await conn.execute(select(settings.value).where(
                    settings.group_key == group_key, settings.name == "context"))).scalar()
                if not rows or (chosen == "off" if chosen is not None else not default_on):
                    return 0
                await conn.execute(insert(observed_table), [
                    {"group_key": group_key, "speaker": speaker, "text": text, "created_at": at}
                    for speaker, text, at in rows])
                observed = observed_table.c
                oldest_kept = (select(observed.id).where(observed.group_key == group_key)
                               .order_by(observed.id.desc()).offset(max(keep - 1, 0)).limit(1)
                               .scalar_subquery())
                await conn.execute(delete(observed_table).where(
                    observed.group_key == group_key, observed.id < oldest_kept))
                await conn.execute(delete(observed_table).where(observed.created_at < time.time() - ttl))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.safe_url, detail=_describe(error)) from None
        return len(rows)

    async def observed_since(self, session_key: str, group_key: str, *, limit: int,
                             ttl: float) -> list[tuple[int, str, str, float]]:
        """The group's observed messages (id, speaker, text, time), oldest first, that the
        session's turns have not carried yet and that are younger than `ttl` seconds: at most
        the newest `limit`."""
        await self._ready()
        observed, cursors = observed_table.c, observed_cursors_table.c
        try:
            async with self._connection(write=False) as conn:
                seen = (await conn.execute(select(cursors.last_id).where(
                    cursors.session_key == session_key, cursors.group_key == group_key))).scalar()
                query = (select(observed.id, observed.speaker, observed.text, observed.created_at)
                         .where(observed.group_key == group_key,
                                observed.created_at >= time.time() - ttl)
                         .order_by(observed.id.desc()).limit(limit))
                if seen is not None:
                    query = query.where(observed.id > seen)
                rows = (await conn.execute(query)).all()
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None
        return [(row.id, row.speaker, row.text, row.created_at) for row in reversed(rows)]

    async def mark_observed(self, session_key: str, group_key: str, last_id: int) -> None:
        """The session's turns have carried the group's observed messages up to `last_id` (a
        mark never goes back)."""
        await self._ready()
        cursors = observed_cursors_table.c
        mine = (cursors.session_key == session_key) & (cursors.group_key == group_key)
        try:
            async with self._connection(write=True) as conn:
                seen = (await conn.execute(select(cursors.last_id).where(mine))).scalar()
                await conn.execute(delete(observed_cursors_table).where(mine))
                await conn.execute(insert(observed_cursors_table).values(
                    session_key=session_key, group_key=group_key, last_id=max(last_id, seen or 0)))
        except SQLAlchemyError as error:
            raise StoreError(code="store.save", url=self.safe_url, detail=_describe(error)) from None

    async def count_observed(self, group_key: str, *, ttl: float) -> int:
        """How many of the group's observed messages are kept (younger than `ttl` seconds)."""
        await self._ready()
        observed = observed_table.c
        try:
            async with self._connection(write=False) as conn:
                return int((await conn.execute(select(func.count()).where(
                    observed.group_key == group_key, observed.created_at >= time.time() - ttl))).scalar_one())
        except SQLAlchemyError as error:
            raise StoreError(code="store.read", url=self.safe_url, detail=_describe(error)) from None

    async def forget_observed(self, group_key: str) -> int:
        """Empty a group's observed chat; returns how many messages went."""
        await self._ready()
        try:
            async with self._connection(write=True) as conn:
                return await self._forget_observed(conn, group_key)
        except SQLAlchemyError as error:
            raise StoreError(code="store.clear", url=self.safe_url, detail=_describe(error)) from None

    @staticmethod
    async def _forget_observed(conn: AsyncConnection, group_key: str) -> int:
        result = await conn.execute(delete(observed_table).where(observed_table.c.group_key == group_key))
        await conn.execute(delete(observed_cursors_table).where(
            observed_cursors_table.c.group_key == group_key))
        return int(result.rowcount or 0)


class _Row(NamedTuple):
    turn_id: str
    data: str
    tokens: int


def _newest_turns(db: sqlite3.Connection, key: str, max_messages: int) -> tuple[list[StoredTurn], bool]:
    """SqlStore._read_recent's read on SqliteDirect's connection (one snapshot: one transaction):
    the session's newest whole turns within `max_messages` messages, and whether they are all."""
    db.execute("BEGIN")
    try:
        rows = [_Row(*row) for row in db.execute(NEWEST_MESSAGES, (key, max_messages + 1))]
        turns = _stored_turns(rows)
        complete = len(rows) <= max_messages
        if len(turns) == 1 and not complete:  # the newest turn, cut by LIMIT
            turns = _stored_turns([_Row(*row) for row in db.execute(TURN_MESSAGES, (rows[0].turn_id,))])
        elif not complete:
            turns = turns[:-1]  # the oldest one was cut by LIMIT
        return turns, complete
    finally:
        db.execute("COMMIT")


def _between(db: sqlite3.Connection, key: str, after: str, before: str, limit: int, *,
             with_after: bool) -> list[_Row]:
    """SqlStore.turns_between's reads on SqliteDirect's connection (one snapshot): the rows after
    turn `after` (or from it, `with_after`) and before turn `before`, newest first, at most
    `limit`; none when either turn is not stored."""
    db.execute("BEGIN")
    try:
        ids = {row[0]: (row[1], row[2]) for row in db.execute(TURN_BOUNDS, (key, after, before))}
        if after not in ids or before not in ids:
            return []
        first = ids[after][0] if with_after else ids[after][1] + 1
        return [_Row(*row) for row in db.execute(MESSAGES_BETWEEN, (key, first, ids[before][0], limit))]
    finally:
        db.execute("COMMIT")


def _turns_between(rows: Sequence[Any], max_messages: int) -> list[Turn]:
    """`turns_between`'s rows (newest first, one past `max_messages` when there are more) → its
    whole turns, oldest first."""
    turns = _group_turns(rows)
    if len(rows) > max_messages and turns:
        turns = turns[:-1]  # the oldest one was cut by LIMIT
    return turns[::-1]


def _stored_turns(rows: Sequence[Any]) -> list[StoredTurn]:
    """Rows newest first → turns newest first, each turn's messages (JSON text) oldest first."""
    turns: list[StoredTurn] = []
    current_id = None
    for row in rows:
        if row.turn_id != current_id:
            turns.append((row.turn_id, [], []))
            current_id = row.turn_id
        turns[-1][1].append(row.data)
        turns[-1][2].append(row.tokens)
    for _, data, tokens in turns:
        data.reverse()
        tokens.reverse()
    return turns


def _turn_of(stored: StoredTurn) -> Turn:
    turn_id, data, tokens = stored
    return Turn([json.loads(item) for item in data], list(tokens), turn_id)


def _group_turns(rows: Sequence[Any]) -> list[Turn]:
    """Rows newest first → turns newest first, each turn's messages oldest first."""
    return [_turn_of(turn) for turn in _stored_turns(rows)]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers do not wait for the writer
    cursor.execute("PRAGMA synchronous=NORMAL")  # safe with WAL, and much faster
    cursor.close()
