"""Retention: dated digests of each conversation's days, and how far raw messages were deleted.

Revision ID: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "digests",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("channel_id", sa.String(32), nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("stage", sa.String(16), nullable=False),
        sa.Column("audience", sa.String(32)),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("lines", sa.Text, nullable=False),
        sa.Column("first_ts", sa.String(32), nullable=False),
        sa.Column("last_ts", sa.String(32), nullable=False),
        sa.Column("authors", sa.Text, nullable=False),
        sa.Column("made_at", sa.String(32), nullable=False),
        sa.UniqueConstraint("channel_id", "day", name="uq_digests_channel_day"),
    )
    op.create_table(
        "message_expiry",
        sa.Column("channel_id", sa.String(32), primary_key=True),
        sa.Column("deleted_through", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("message_expiry")
    op.drop_table("digests")
