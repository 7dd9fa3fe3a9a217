"""Versioned changes to the history database's tables (Alembic), applied by `SqlStore.start()`.

- `versions/` holds one file per revision, numbered; 0001 is the baseline: the tables marsho made
  with `metadata.create_all` before there were migrations.
- A database records its revision in `marsho_alembic_version` (not `alembic_version`, which may
  belong to another application sharing the database).
- A database from before migrations (marsho's tables, no revision) is brought to the baseline,
  keeping every row, then upgraded like any other.
- A database at a revision this code does not know was written by a newer marsho: `upgrade`
  raises NewerDatabase before it changes anything.

Adding a migration: change the tables in store/sql.py, then run
`python -m nonebot_plugin_marsho.store.migrations revision --autogenerate -m "what changed"`, which
writes versions/<next number>_what_changed.py from the difference; read it, add what
autogenerate cannot see (renames, data), set HEAD below, and run tests/test_migrations.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

HEAD = "0009"
"""The newest revision in versions/: a database there needs no Alembic at startup, which keeps
an up-to-date start quick (Alembic takes ~0.1 s to import). tests/test_migrations.py checks it."""

BASELINE = "0001"
"""The revision of the tables marsho made before it had migrations."""

VERSION_TABLE = "marsho_alembic_version"

LEGACY_SCHEMA_VERSION = 1
"""The `schema_version` setting marsho wrote before migrations: those releases refuse a database
whose number is higher. A migration that they could not work with raises it (in its upgrade)."""

FOLDER = Path(__file__).resolve().parent
"""Where env.py and versions/ are."""


SEARCH_OBJECTS = ("marsho_memories_fts", "ix_marsho_memories_search", "marsho_kb_passages_fts",
                  "ix_marsho_kb_passages_search")
"""The full-text search of memories and of the knowledge base's passages, made by migrations 0004
and 0007 in each database's own way (an FTS5 virtual table with its shadow tables and triggers on
SQLite, a GIN expression index on PostgreSQL): not in store/sql.py's metadata, so autogenerate
must not see them."""


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic's filter: everything but the full-text search objects (SEARCH_OBJECTS)."""
    return not (name and name.startswith(SEARCH_OBJECTS))


class MigrationError(Exception):
    """Alembic could not work out or apply the migrations (a broken revision file)."""


class NewerDatabase(Exception):
    """The database is at a revision this code does not know."""

    def __init__(self, found: str, known: str) -> None:
        super().__init__(f"the database is at {found}; this code knows up to {known}")
        self.found = found
        self.known = known


def current(connection: Connection) -> tuple[str, ...]:
    """The revision(s) the database is at, () when it has none. Plain SQLAlchemy: quick."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return ()
    return tuple(sorted(connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars()))


def up_to_date(connection: Connection) -> bool:
    """True when the database is at HEAD: nothing to do."""
    return current(connection) == (HEAD,)


def config(cmd_opts: Any = None, **attributes: Any) -> Config:
    """Alembic's configuration, without an alembic.ini: where the scripts are, how new ones are
    named; `attributes` reach env.py (`connection`, `on_version_apply`)."""
    from alembic.config import Config

    config = Config(cmd_opts=cmd_opts)
    config.set_main_option("script_location", str(FOLDER).replace("%", "%%"))
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    config.attributes.update(attributes)
    return config


def upgrade(connection: Connection) -> tuple[bool, list[tuple[str, str]]]:
    """Bring the database to the newest revision, in the connection's transaction (which the
    caller holds alone: a PostgreSQL advisory lock, SQLite's write lock).

    Returns (whether the tables were from before migrations, [(revision, what it does) applied]).
    Raises NewerDatabase, having changed nothing, when the database is ahead of this code.
    """
    from alembic import command
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    script = ScriptDirectory(str(FOLDER))  # read again each time: only when something is to do
    head = script.get_current_head() or ""
    found = current(connection)
    unknown = [revision for revision in found if not _known(script, revision)]
    if unknown:
        raise NewerDatabase(found=", ".join(unknown), known=head)
    legacy = not found and inspect(connection).has_table("marsho_messages")
    if legacy:  # marsho before migrations: the baseline creates only what is missing
        legacy_version = str(connection.execute(
            text("SELECT value FROM marsho_settings WHERE name = 'schema_version'")
        ).scalar() if inspect(connection).has_table("marsho_settings") else "")
        if legacy_version.isdigit() and int(legacy_version) > LEGACY_SCHEMA_VERSION:
            raise NewerDatabase(found=legacy_version, known=str(LEGACY_SCHEMA_VERSION))
    if found == (head,):
        return legacy, []  # another process has just done it
    applied: list[tuple[str, str]] = []

    def on_version_apply(*, step: Any, **_: Any) -> None:
        applied.append((step.up_revision_id, (step.up_revision.doc or "").strip()))

    try:
        command.upgrade(config(connection=connection, on_version_apply=on_version_apply), "head")
    except CommandError as error:
        raise MigrationError(str(error)) from error
    return legacy, applied


def _known(script: Any, revision: str) -> bool:
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is not None
    except CommandError:  # ResolutionError: no such revision here
        return False

