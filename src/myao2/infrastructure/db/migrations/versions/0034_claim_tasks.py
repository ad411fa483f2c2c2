"""An answer's claim keeps the tasks its stream shows still running (call id to title), until the answer is
settled.

A bot killed while a tool ran left its task shown running: the next attempt ended the stream without knowing the
task, whose card then spun for ever.

Revision ID: 0034
"""

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.add_column(sa.Column("tasks", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.drop_column("tasks")
