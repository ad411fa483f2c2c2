"""Answer progress on claims: attempts, when to try again, the posted answer.

Revision ID: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("next_attempt_at", sa.String(32)))
        batch.add_column(sa.Column("answer_ts", sa.String(32)))
        batch.add_column(sa.Column("settled_at", sa.String(32)))
    op.create_index(
        "ix_claims_pending",
        "claims",
        ["next_attempt_at"],
        sqlite_where=sa.text("settled_at IS NULL AND next_attempt_at IS NOT NULL"),
        postgresql_where=sa.text("settled_at IS NULL AND next_attempt_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_claims_pending", table_name="claims")
    with op.batch_alter_table("claims") as batch:
        batch.drop_column("settled_at")
        batch.drop_column("answer_ts")
        batch.drop_column("next_attempt_at")
        batch.drop_column("attempts")
