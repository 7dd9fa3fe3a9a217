"""baseline: the tables of marsho before migrations (history, settings, nicknames)

Exactly what `metadata.create_all` made, with `schema_version` = 1 in marsho_settings as those
releases wrote it. A database from before migrations already has these tables: each is created
only when missing (one from before nicknames, for instance, lacks marsho_nicknames), and no row is
touched.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    if "marsho_messages" not in existing:
        op.create_table(
            "marsho_messages",
            sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                      autoincrement=True),
            sa.Column("session_key", sa.String(255), nullable=False),
            sa.Column("turn_id", sa.String(32), nullable=False),
            sa.Column("role", sa.String(16), nullable=False),
            sa.Column("data", sa.Text(), nullable=False),
            sa.Column("tokens", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
        )
    indexes = {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("marsho_messages")}
    if "ix_marsho_messages_session_id" not in indexes:
        op.create_index("ix_marsho_messages_session_id", "marsho_messages", ["session_key", "id"])
    if "ix_marsho_messages_turn" not in indexes:
        op.create_index("ix_marsho_messages_turn", "marsho_messages", ["turn_id"])
    if "marsho_settings" not in existing:
        op.create_table(
            "marsho_settings",
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("value", sa.Text(), nullable=False),
        )
    if "marsho_nicknames" not in existing:
        op.create_table(
            "marsho_nicknames",
            sa.Column("user_key", sa.String(255), primary_key=True),
            sa.Column("nickname", sa.Text(), nullable=False),
            sa.Column("updated_at", sa.Float(), nullable=False),
        )
    settings = sa.table("marsho_settings", sa.column("name", sa.String), sa.column("value", sa.Text))
    found = op.get_bind().execute(sa.select(settings.c.value).where(settings.c.name == "schema_version"))
    if found.first() is None:
        op.execute(settings.insert().values(name="schema_version", value="1"))


def downgrade() -> None:
    op.drop_table("marsho_nicknames")
    op.drop_table("marsho_settings")
    op.drop_index("ix_marsho_messages_turn", table_name="marsho_messages")
    op.drop_index("ix_marsho_messages_session_id", table_name="marsho_messages")
    op.drop_table("marsho_messages")
