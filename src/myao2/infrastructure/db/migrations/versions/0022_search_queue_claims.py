"""A text queued to be embedded again is claimed by the process embedding it, until a time.

Every process running an index worker (PostgreSQL replicas, the bot and `myao2 mcp` on one
SQLite file) took the same newest texts and embedded them each. A process now claims its
batch first (see index.py); the claim lapses at `claimed_until` (seconds since the epoch),
so a batch whose process stopped is embedded by another later.

Revision ID: 0022
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name not in ("sqlite", "postgresql"):
        return
    op.execute("ALTER TABLE search_queue ADD COLUMN claimed_until FLOAT")


def downgrade() -> None:
    if op.get_bind().dialect.name not in ("sqlite", "postgresql"):
        return
    op.execute("ALTER TABLE search_queue DROP COLUMN claimed_until")
