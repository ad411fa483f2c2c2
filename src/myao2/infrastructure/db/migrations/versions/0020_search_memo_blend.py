"""Every memo is queued once, to be embedded as the index now embeds a memo: its passage and
question readings blended. Memos indexed before that change kept a passage-only vector, made
by the same model, so nothing else would ever have embedded them again.

Revision ID: 0020
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("INSERT INTO search_queue (kind, ref_id) SELECT 'memo', id FROM memos")


def downgrade() -> None:
    op.execute("INSERT INTO search_queue (kind, ref_id) SELECT 'memo', id FROM memos")
