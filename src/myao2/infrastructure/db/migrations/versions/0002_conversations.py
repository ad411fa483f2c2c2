"""Channels, people, messages and answer claims.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "channels",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("updated_at", sa.String(32), nullable=False),
    )
    op.create_table(
        "people",
        sa.Column("user_id", sa.String(32), primary_key=True),
        sa.Column("display_name", sa.String(255), nullable=False),
        sa.Column("is_bot", sa.Boolean, nullable=False),
        sa.Column("updated_at", sa.String(32), nullable=False),
    )
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("channel_id", sa.String(32), nullable=False),
        sa.Column("ts", sa.String(32), nullable=False),
        sa.Column("thread_ts", sa.String(32)),
        sa.Column("user_id", sa.String(32)),
        sa.Column("user_name", sa.String(255), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("is_bot", sa.Boolean, nullable=False),
        sa.Column("mentions", sa.Text, nullable=False),
        sa.Column("posted_at", sa.String(32), nullable=False),
        sa.Column("edited_at", sa.String(32)),
        sa.UniqueConstraint("channel_id", "ts", name="uq_messages_channel_ts"),
    )
    op.create_index("ix_messages_thread", "messages", ["channel_id", "thread_ts", "ts"])
    op.create_index("ix_messages_posted_at", "messages", ["posted_at"])
    op.create_table(
        "claims",
        sa.Column("channel_id", sa.String(32), primary_key=True),
        sa.Column("ts", sa.String(32), primary_key=True),
        sa.Column("claimed_at", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("claims")
    op.drop_table("messages")
    op.drop_table("people")
    op.drop_table("channels")
