"""reminders

Reminders and scheduled questions (marsho_reminders, issue 27): what to say or ask, in which
chat, for whom, when next, and whether it is being sent (claimed), paused or done.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('marsho_reminders',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('chat_key', sa.String(length=255), nullable=False),
    sa.Column('platform', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=8), nullable=False),
    sa.Column('chat_id', sa.String(length=255), nullable=False),
    sa.Column('guild_id', sa.String(length=255), nullable=False),
    sa.Column('channel_id', sa.String(length=255), nullable=False),
    sa.Column('user_id', sa.String(length=255), nullable=False),
    sa.Column('asker', sa.String(length=255), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('session_key', sa.String(length=255), nullable=False),
    sa.Column('what', sa.String(length=8), nullable=False),
    sa.Column('body', sa.Text(), nullable=False),
    sa.Column('every', sa.String(length=128), nullable=False),
    sa.Column('zone', sa.String(length=64), nullable=False),
    sa.Column('scheduled_at', sa.Float(), nullable=False),
    sa.Column('due_at', sa.Float(), nullable=False),
    sa.Column('state', sa.String(length=8), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('problem', sa.Text(), nullable=False),
    sa.Column('claimed_by', sa.String(length=64), nullable=False),
    sa.Column('claimed_at', sa.Float(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('marsho_reminders', schema=None) as batch_op:
        batch_op.create_index('ix_marsho_reminders_asker', ['asker'], unique=False)
        batch_op.create_index('ix_marsho_reminders_chat', ['chat_key', 'asker'], unique=False)
        batch_op.create_index('ix_marsho_reminders_due', ['state', 'due_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('marsho_reminders', schema=None) as batch_op:
        batch_op.drop_index('ix_marsho_reminders_due')
        batch_op.drop_index('ix_marsho_reminders_chat')
        batch_op.drop_index('ix_marsho_reminders_asker')
    op.drop_table('marsho_reminders')
