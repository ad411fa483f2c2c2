"""A channel records whether it is a DM or group DM with people of another organisation (Slack Connect): such a
DM was stored as an ordinary one, and its prompts, memo tools and searches read the workspace's text.

A DM stored before this revision counts as an ordinary one until Slack says otherwise of it: the history sync's
listing (users.conversations), if it carries is_ext_shared for DMs, or conversations.info, which the bot asks only of
a conversation it has not stored.

Revision ID: 0032
"""

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.add_column(sa.Column("ext_shared", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.drop_column("ext_shared")
