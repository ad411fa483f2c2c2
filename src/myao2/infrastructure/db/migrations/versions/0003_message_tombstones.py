"""Tombstones of deleted messages, so a history fetched before a deletion cannot bring one back.

Revision ID: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "message_tombstones",
        sa.Column("channel_id", sa.String(32), primary_key=True),
        sa.Column("ts", sa.String(32), primary_key=True),
        sa.Column("deleted_at", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("message_tombstones")
