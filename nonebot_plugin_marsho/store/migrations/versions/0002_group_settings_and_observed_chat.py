"""group settings and observed chat

What a group's admins chose (recent chat on or off, its persona), the recent chat of groups that
share it, and how far each session's turns have carried it (issue 17).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 14:08:01.004616
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('marsho_group_settings',
    sa.Column('group_key', sa.String(length=255), nullable=False),
    sa.Column('name', sa.String(length=32), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('group_key', 'name')
    )
    op.create_table('marsho_observed',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('group_key', sa.String(length=255), nullable=False),
    sa.Column('speaker', sa.String(length=64), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('marsho_observed', schema=None) as batch_op:
        batch_op.create_index('ix_marsho_observed_created_at', ['created_at'], unique=False)
        batch_op.create_index('ix_marsho_observed_group_id', ['group_key', 'id'], unique=False)

    op.create_table('marsho_observed_cursors',
    sa.Column('session_key', sa.String(length=255), nullable=False),
    sa.Column('group_key', sa.String(length=255), nullable=False),
    sa.Column('last_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.PrimaryKeyConstraint('session_key', 'group_key')
    )


def downgrade() -> None:
    op.drop_table('marsho_observed_cursors')
    with op.batch_alter_table('marsho_observed', schema=None) as batch_op:
        batch_op.drop_index('ix_marsho_observed_group_id')
        batch_op.drop_index('ix_marsho_observed_created_at')

    op.drop_table('marsho_observed')
    op.drop_table('marsho_group_settings')
