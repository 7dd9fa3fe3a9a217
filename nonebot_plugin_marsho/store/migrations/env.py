"""Alembic's environment for marsho's tables. `SqlStore.start()` runs it on the store's own
connection, inside the transaction holding the migration lock (`config.attributes["connection"]`);
`python -m nonebot_plugin_marsho.store.migrations` runs it on a database of its own
(`sqlalchemy.url`). No logging is configured here: the store logs what was applied."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from nonebot_plugin_marsho.store.migrations import VERSION_TABLE, include_name
from nonebot_plugin_marsho.store.sql import metadata

config = context.config


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        include_name=include_name,  # the full-text search objects are the migrations' alone
        render_as_batch=True,  # SQLite alters a table by copying it: autogenerate writes that way
        on_version_apply=config.attributes.get("on_version_apply"),
    )
    with context.begin_transaction():  # joins the caller's transaction when there is one
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("--sql (offline) mode is not supported: the baseline looks at the database")
if config.attributes.get("connection") is not None:
    run(config.attributes["connection"])
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as connection:
            run(connection)
    finally:
        engine.dispose()
