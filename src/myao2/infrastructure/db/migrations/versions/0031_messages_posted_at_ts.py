"""The messages' index by channel and posting time holds their ts too, the tie-break of every read in posting
order: ordered by (posted_at, ts), the rows of one posting time were sorted as they were read, one sort per row
of a prompt's newest messages, and one at each insert in the search index's trigger (`0019`).

Revision ID: 0031
"""

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_messages_channel_posted_at", table_name="messages")
    op.create_index("ix_messages_channel_posted_at", "messages", ["channel_id", "posted_at", "ts"])


def downgrade() -> None:
    op.drop_index("ix_messages_channel_posted_at", table_name="messages")
    op.create_index("ix_messages_channel_posted_at", "messages", ["channel_id", "posted_at"])
