"""chat targets

Where each chat marsho has answered in is (marsho_targets: nonebot-plugin-alconna's Target,
dumped), so that it can speak there later, after a restart too: reminders and notices (issue 23).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('marsho_targets',
    sa.Column('chat_key', sa.String(length=255), nullable=False),
    sa.Column('target', sa.Text(), nullable=False),
    sa.Column('adapter', sa.String(length=64), nullable=False),
    sa.Column('self_id', sa.String(length=255), nullable=False),
    sa.Column('seen_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('chat_key')
    )


def downgrade() -> None:
    op.drop_table('marsho_targets')
