"""reminder first time

A reminder's first time (marsho_reminders.first_at, issue 27): each time of a repeat is counted
from it, so a day of the month clamped (the 31st in February) or a wall time the clocks skipped
(02:30 on the night daylight saving time starts) moves that occurrence only. Reminders kept
before take their current time as their first.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('marsho_reminders', schema=None) as batch_op:
        batch_op.add_column(sa.Column('first_at', sa.Float(), server_default=sa.text('0'), nullable=False))
    op.execute("UPDATE marsho_reminders SET first_at = scheduled_at")


def downgrade() -> None:
    with op.batch_alter_table('marsho_reminders', schema=None) as batch_op:
        batch_op.drop_column('first_at')
