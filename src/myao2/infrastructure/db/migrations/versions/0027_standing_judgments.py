"""Standing judgments: the last judgment on joining each conversation, kept across restarts and replicas, so a
conversation judged with nothing said since is not judged again when the bot starts or another replica takes over.

Revision ID: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "standing_judgments",
        sa.Column("channel_id", sa.String(32), primary_key=True),
        sa.Column("thread_ts", sa.String(32), primary_key=True),  # "": the channel's top-level flow
        sa.Column("newest_ts", sa.String(32), nullable=False),
        sa.Column("until", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("standing_judgments")
