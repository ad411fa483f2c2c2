"""Replicas: leases (a replica's own, and the periodic jobs'), and which replica holds each claim.

Revision ID: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.String(32), nullable=False),
    )
    with op.batch_alter_table("claims") as batch:
        batch.add_column(sa.Column("holder", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.drop_column("holder")
    op.drop_table("leases")
