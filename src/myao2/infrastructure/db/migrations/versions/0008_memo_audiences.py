"""Memo names unique per audience; a revision number on each memo for compare-and-set.

Revision ID: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

AUDIENCE_KEY = "(CASE WHEN visibility = 'conversation' THEN channel_id ELSE '' END)"
LIVE = "removed_at IS NULL"


def upgrade() -> None:
    op.add_column("memos", sa.Column("revision", sa.Integer, nullable=False, server_default="0"))
    op.execute(
        "UPDATE memos SET revision = (SELECT COUNT(*) FROM memo_revisions WHERE memo_revisions.memo_id = memos.id)"
    )
    op.drop_index("ux_memos_live_name", table_name="memos")
    op.create_index(
        "ux_memos_live_audience_name",
        "memos",
        [sa.text(AUDIENCE_KEY), "name"],
        unique=True,
        sqlite_where=sa.text(LIVE),
        postgresql_where=sa.text(LIVE),
    )


def downgrade() -> None:
    op.drop_index("ux_memos_live_audience_name", table_name="memos")
    op.create_index(
        "ux_memos_live_name",
        "memos",
        ["name"],
        unique=True,
        sqlite_where=sa.text(LIVE),
        postgresql_where=sa.text(LIVE),
    )
    with op.batch_alter_table("memos") as batch:
        batch.drop_column("revision")
