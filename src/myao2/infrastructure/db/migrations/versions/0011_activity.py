"""What the bot did, for `myao2 stats` (model calls, judgments, replies), and the row /ready writes.

Revision ID: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_calls",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.String(32), nullable=False, index=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("output_tokens", sa.Integer, nullable=False),
        sa.Column("latency_ms", sa.Integer, nullable=False),
        sa.Column("outcome", sa.String(8), nullable=False),
        sa.Column("detail", sa.String(255), nullable=False),
    )
    op.create_table(
        "judgments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.String(32), nullable=False, index=True),
        sa.Column("channel_id", sa.String(32), nullable=False),
        sa.Column("outcome", sa.String(8), nullable=False),
        sa.Column("confidence", sa.Float, nullable=False),
    )
    op.create_table(
        "replies",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.String(32), nullable=False, index=True),
        sa.Column("channel_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
    )
    probe = op.create_table(
        "health_probe",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("written_at", sa.String(32), nullable=True),
    )
    op.bulk_insert(probe, [{"id": 1, "written_at": None}])


def downgrade() -> None:
    op.drop_table("health_probe")
    op.drop_table("replies")
    op.drop_table("judgments")
    op.drop_table("model_calls")
