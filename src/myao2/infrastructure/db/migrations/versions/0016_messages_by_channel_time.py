"""Messages indexed by channel and time: the messages around a search hit are found without
reading (and sorting) the whole channel.

Revision ID: 0016
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_messages_channel_posted_at", "messages", ["channel_id", "posted_at"])


def downgrade() -> None:
    op.drop_index("ix_messages_channel_posted_at", table_name="messages")
