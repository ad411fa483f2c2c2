"""Profiles of people: facts learnt from what each person said, kept by the memory job.

Revision ID: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("user_id", sa.String(32), primary_key=True),
        sa.Column("facts", sa.Text, nullable=False),
        sa.Column("read_up_to", sa.Text, nullable=False),
        sa.Column("updated_at", sa.String(32), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("profiles")
