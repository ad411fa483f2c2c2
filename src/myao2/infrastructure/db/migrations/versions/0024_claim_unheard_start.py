"""An answer's claim keeps a digest of the words a chat.startStream left unanswered was sent, when the stream
was not found at once.

Two answers in one thread whose streams both went unheard could each take the other's stream: the next attempt
told them only by where they are (after the message, marked as no answer). With `unheard_start` it takes the
stream that shows just those words (see AnswerMention._unheard).

Revision ID: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.add_column(sa.Column("unheard_start", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.drop_column("unheard_start")
