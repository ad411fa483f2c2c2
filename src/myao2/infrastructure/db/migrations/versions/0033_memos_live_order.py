"""A prompt's memo read walks each audience's live memos in its orders (by priority, then newest; newest) and
stops at its limits: it tested every live memo of the notebook at each prompt, then sorted them
(`memo_store._prompt_query`). Its test of a nearer audience's memo of the same name finds it by name, audience
and all (SQLite, which keeps no statistics, would otherwise walk that audience's memos at each memo read).

Revision ID: 0033
"""

import sqlalchemy as sa
from alembic import op

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

LIVE = sa.text("removed_at IS NULL")
INDEXES = {
    "ix_memos_live_priority": ["visibility", "priority", "updated_at", "id"],
    "ix_memos_live_newest": ["visibility", "updated_at", "id"],
    "ix_memos_live_channel_priority": ["visibility", "channel_id", "priority", "updated_at", "id"],
    "ix_memos_live_channel_newest": ["visibility", "channel_id", "updated_at", "id"],
    "ix_memos_live_name": ["name", "visibility", "channel_id"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "memos", columns, sqlite_where=LIVE, postgresql_where=LIVE)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="memos")
