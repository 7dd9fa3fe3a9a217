"""knowledge base

Each chat's documents (marsho_kb_documents) and their passages (marsho_kb_passages), with the
passages' full-text search as memories have it: on SQLite an FTS5 table kept in step by
triggers, on PostgreSQL a GIN index on to_tsvector('simple', terms) (issue 29).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

SQLITE_SEARCH = [
    # external content, as marsho_memories_fts: the text lives once, in marsho_kb_passages
    "CREATE VIRTUAL TABLE marsho_kb_passages_fts USING fts5("
    "terms, content='marsho_kb_passages', content_rowid='id', tokenize='unicode61 remove_diacritics 0')",
    "CREATE TRIGGER marsho_kb_passages_fts_insert AFTER INSERT ON marsho_kb_passages BEGIN "
    "INSERT INTO marsho_kb_passages_fts(rowid, terms) VALUES (new.id, new.terms); END",
    "CREATE TRIGGER marsho_kb_passages_fts_delete AFTER DELETE ON marsho_kb_passages BEGIN "
    "INSERT INTO marsho_kb_passages_fts(marsho_kb_passages_fts, rowid, terms) "
    "VALUES ('delete', old.id, old.terms); "
    "END",
    "CREATE TRIGGER marsho_kb_passages_fts_update AFTER UPDATE OF terms ON marsho_kb_passages BEGIN "
    "INSERT INTO marsho_kb_passages_fts(marsho_kb_passages_fts, rowid, terms) "
    "VALUES ('delete', old.id, old.terms); "
    "INSERT INTO marsho_kb_passages_fts(rowid, terms) VALUES (new.id, new.terms); END",
]

POSTGRES_SEARCH = [
    "CREATE INDEX ix_marsho_kb_passages_search ON marsho_kb_passages "
    "USING gin (to_tsvector('simple'::regconfig, terms))",
]


def upgrade() -> None:
    op.create_table('marsho_kb_documents',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('bytes', sa.BigInteger(), nullable=False),
    sa.Column('pages', sa.Integer(), nullable=False),
    sa.Column('passages', sa.Integer(), nullable=False),
    sa.Column('added_by', sa.String(length=255), nullable=False),
    sa.Column('added_at', sa.Float(), nullable=False),
    sa.Column('embedding_model', sa.String(length=255), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('marsho_kb_documents', schema=None) as batch_op:
        batch_op.create_index('ix_marsho_kb_documents_owner_sha256', ['owner', 'sha256'], unique=True)
    op.create_table('marsho_kb_passages',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('document_id', sa.BigInteger(), nullable=False),
    sa.Column('owner', sa.String(length=255), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('place', sa.Text(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('terms', sa.Text(), nullable=False),
    sa.Column('vector', sa.LargeBinary(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('marsho_kb_passages', schema=None) as batch_op:
        batch_op.create_index('ix_marsho_kb_passages_document', ['document_id', 'seq'], unique=False)
        batch_op.create_index('ix_marsho_kb_passages_owner', ['owner'], unique=False)
    dialect = op.get_bind().dialect.name
    for statement in {"sqlite": SQLITE_SEARCH, "postgresql": POSTGRES_SEARCH}.get(dialect, []):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS marsho_kb_passages_fts_{trigger}")
        op.execute("DROP TABLE IF EXISTS marsho_kb_passages_fts")
    with op.batch_alter_table('marsho_kb_passages', schema=None) as batch_op:
        batch_op.drop_index('ix_marsho_kb_passages_owner')
        batch_op.drop_index('ix_marsho_kb_passages_document')
    op.drop_table('marsho_kb_passages')
    with op.batch_alter_table('marsho_kb_documents', schema=None) as batch_op:
        batch_op.drop_index('ix_marsho_kb_documents_owner_sha256')
    op.drop_table('marsho_kb_documents')
