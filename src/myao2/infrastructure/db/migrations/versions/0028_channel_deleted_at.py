"""When Slack deleted a channel (NULL while it exists, as far as the bot was told).

Slack answers `channel_not_found` about a deleted channel as about a private one the bot is out of; a channel
known to be deleted is not asked about again, nor taken for one turned private.

Revision ID: 0028
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.add_column(sa.Column("deleted_at", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("channels") as batch:
        batch.drop_column("deleted_at")
