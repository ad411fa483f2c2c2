"""Memos pinned by people: rules the bot's tools may not change.

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memo_pins",
        sa.Column("memo_id", sa.Integer, sa.ForeignKey("memos.id"), primary_key=True),
        sa.Column("pinned_by", sa.String, nullable=False),
        sa.Column("pinned_at", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("memo_pins")
