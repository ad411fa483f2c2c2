"""Summaries the memory job keeps per workspace, channel and thread.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("scope", sa.String(96), nullable=False),
        sa.Column("term", sa.String(8), nullable=False),
        sa.Column("audience", sa.String(32)),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("bullets", sa.Text, nullable=False),
        sa.Column("covered", sa.Text, nullable=False),
        sa.Column("updated_at", sa.String(32), nullable=False),
        sa.UniqueConstraint("scope", "term", name="uq_memories_scope_term"),
    )


def downgrade() -> None:
    op.drop_table("memories")
