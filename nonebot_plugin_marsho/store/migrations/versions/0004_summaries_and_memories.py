"""summaries and memories

Each session's summary of its trimmed turns (marsho_summaries), and the facts kept about people
and groups (marsho_memories) with their full-text search: on SQLite an FTS5 table kept in step by
triggers, on PostgreSQL a GIN index on to_tsvector('simple', terms) (issue 18).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

SQLITE_SEARCH = [
    # an external-content FTS5 table: the text lives once, in marsho_memories; the index reads
    # `terms` as words split by spaces (store/memory.search_terms made them: CJK as bigrams)
    "CREATE VIRTUAL TABLE marsho_memories_fts USING fts5("
    "terms, content='marsho_memories', content_rowid='id', tokenize='unicode61 remove_diacritics 0')",
    "CREATE TRIGGER marsho_memories_fts_insert AFTER INSERT ON marsho_memories BEGIN "
    "INSERT INTO marsho_memories_fts(rowid, terms) VALUES (new.id, new.terms); END",
    "CREATE TRIGGER marsho_memories_fts_delete AFTER DELETE ON marsho_memories BEGIN "
    "INSERT INTO marsho_memories_fts(marsho_memories_fts, rowid, terms) "
    "VALUES ('delete', old.id, old.terms); "
    "END",
    "CREATE TRIGGER marsho_memories_fts_update AFTER UPDATE OF terms ON marsho_memories BEGIN "
    "INSERT INTO marsho_memories_fts(marsho_memories_fts, rowid, terms) "
    "VALUES ('delete', old.id, old.terms); "
    "INSERT INTO marsho_memories_fts(rowid, terms) VALUES (new.id, new.terms); END",
]

POSTGRES_SEARCH = [
    "CREATE INDEX ix_marsho_memories_search ON marsho_memories "
    "USING gin (to_tsvector('simple'::regconfig, terms))",
]


def upgrade() -> None:
    op.create_table('marsho_summaries',
    sa.Column('session_key', sa.String(length=255), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('through_turn', sa.String(length=32), nullable=False),
    sa.Column('turns', sa.Integer(), nullable=False),
    sa.Column('tokens', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('session_key')
    )
    op.create_table('marsho_memories',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('about', sa.String(length=8), nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=False),
    sa.Column('learned_in', sa.String(length=255), nullable=False),
    sa.Column('private', sa.Integer(), nullable=False),
    sa.Column('author', sa.String(length=255), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('terms', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('used_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('marsho_memories', schema=None) as batch_op:
        batch_op.create_index('ix_marsho_memories_owner', ['about', 'owner', 'used_at'], unique=False)
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": SQLITE_SEARCH, "postgresql": POSTGRES_SEARCH}.get(dialect, []):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS marsho_memories_fts_{trigger}")
        op.execute("DROP TABLE IF EXISTS marsho_memories_fts")
    with op.batch_alter_table('marsho_memories', schema=None) as batch_op:
        batch_op.drop_index('ix_marsho_memories_owner')
    op.drop_table('marsho_memories')
    op.drop_table('marsho_summaries')
