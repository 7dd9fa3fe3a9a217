"""group actions

Each group action marsho was asked for (marsho_group_actions: who asked, on whom, what, how it
ended), listed for the group's admins with `marsho.actions` and counted for
MARSHO_GROUP_ACTIONS_PER_HOUR (issue 28).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('marsho_group_actions',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('group_key', sa.String(length=255), nullable=False),
    sa.Column('asker', sa.String(length=255), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('target', sa.String(length=255), nullable=False),
    sa.Column('detail', sa.String(length=255), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('marsho_group_actions', schema=None) as batch_op:
        batch_op.create_index('ix_marsho_group_actions_asker_at', ['asker', 'at'], unique=False)
        batch_op.create_index('ix_marsho_group_actions_group_at', ['group_key', 'at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('marsho_group_actions', schema=None) as batch_op:
        batch_op.drop_index('ix_marsho_group_actions_group_at')
        batch_op.drop_index('ix_marsho_group_actions_asker_at')
    op.drop_table('marsho_group_actions')
