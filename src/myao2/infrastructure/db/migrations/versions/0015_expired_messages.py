"""Retention keeps who spoke when of each message it deleted (no text), not a per-channel mark.

So forgetting a person still finds the notes made from their words after their
messages' text is gone, and a deleted message is never stored again.

Revision ID: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "expired_messages",
        sa.Column("channel_id", sa.String(32), primary_key=True),
        sa.Column("ts", sa.String(32), primary_key=True),
        sa.Column("user_id", sa.String(32)),
    )
    op.create_index("ix_expired_messages_user", "expired_messages", ["user_id"])
    op.drop_table("message_expiry")


def downgrade() -> None:
    op.create_table(
        "message_expiry",
        sa.Column("channel_id", sa.String(32), primary_key=True),
        sa.Column("deleted_through", sa.String(32), nullable=False),
    )
    op.drop_index("ix_expired_messages_user", table_name="expired_messages")
    op.drop_table("expired_messages")
