"""A channel records whether it is a DM or group DM with people of another organisation (Slack Connect): such a
DM was stored as an ordinary one, and its prompts, memo tools and searches read the workspace's text.

A DM stored before this revision counts as an ordinary one until the bot reads it from Slack again: at the history
sync run at start-up (users.conversations), or at the first message there since the start (conversations.info),
whichever comes first; either tells it by is_ext_shared or by its people's organisation (users.info's team_id, not
the bot's; a group DM's people from conversations.members).

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
