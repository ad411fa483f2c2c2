"""An answer's claim notes that an attempt began to show it, before its first words go to Slack.

chat.startStream takes no metadata: a stream Slack started whose ts the bot never heard (a
crash, or the call timing out after Slack started it) could not be told from other messages,
and the attempt after it started a second answer. A claim marked `showing` without an
`answer_ts` has the next attempt look for such a stream (see AnswerMention._earlier_answer).

Revision ID: 0023
"""

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.add_column(sa.Column("showing", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("claims") as batch:
        batch.drop_column("showing")
