"""Memos and their revisions.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memos",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("tags", sa.Text, nullable=False),
        sa.Column("detail", sa.Text),
        sa.Column("user_id", sa.String(32)),
        sa.Column("channel_id", sa.String(32)),
        sa.Column("message_ts", sa.String(32)),
        sa.Column("visibility", sa.String(16), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.Column("updated_at", sa.String(32), nullable=False),
        sa.Column("removed_at", sa.String(32)),
    )
    op.create_index("ix_memos_name", "memos", ["name"])
    op.create_index(
        "ux_memos_live_name",
        "memos",
        ["name"],
        unique=True,
        sqlite_where=sa.text("removed_at IS NULL"),
        postgresql_where=sa.text("removed_at IS NULL"),
    )
    op.create_table(
        "memo_revisions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("memo_id", sa.Integer, sa.ForeignKey("memos.id"), nullable=False),
        sa.Column("memo_name", sa.String(64), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("at", sa.String(32), nullable=False),
        sa.Column("before", sa.Text),
        sa.Column("after", sa.Text),
    )
    op.create_index("ix_memo_revisions_memo_id", "memo_revisions", ["memo_id"])


def downgrade() -> None:
    op.drop_table("memo_revisions")
    op.drop_table("memos")
