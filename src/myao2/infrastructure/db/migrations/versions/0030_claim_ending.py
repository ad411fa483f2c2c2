"""An answer's claim keeps the end its stream lacks when that stream was left open (its stop failed for a passing
reason), until the answer is settled.

The end was kept in the process's memory only: after a restart, or by another replica taking the answer over,
the next attempt ended the stream with the apology alone, and the words the reader was never shown were gone.

Revision ID: 0030
"""

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.add_column(sa.Column("ending", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.drop_column("ending")
