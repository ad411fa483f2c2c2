"""Who the bot is in Slack, as it last connected: read by the commands that run without Slack.

Revision ID: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "bot_identity",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.String(32), nullable=False),
        sa.Column("bot_id", sa.String(32)),
        sa.Column("team_id", sa.String(32)),
        sa.Column("updated_at", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("bot_identity")
