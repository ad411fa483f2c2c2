"""The search queue tells a change from a re-embedding: a search applies every change first, while
re-embedding a text whose old vector still serves is left to the background (see index.py).

Migrations 0019 and 0020 queued every message and every memo to be embedded again, as changes: a
database upgraded past them made its next search wait for all of it. Those still queued for a memo
or message that is indexed and still there become re-embeddings; what is gone stays a change, so it
leaves the index before the next search. (A text edited just before the upgrade and not yet
indexed is then re-indexed by the background too, found meanwhile by its former words.)

Revision ID: 0021
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_STILL_THERE = {
    # kind: (table, what a row still shown holds)
    "memo": ("memos", "s.removed_at IS NULL"),
    "message": ("messages", "TRUE"),
}


def upgrade() -> None:
    if op.get_bind().dialect.name not in ("sqlite", "postgresql"):
        return
    op.execute("ALTER TABLE search_queue ADD COLUMN reembed BOOLEAN NOT NULL DEFAULT FALSE")
    # The index picks the oldest of either kind of entry, and finds a document's entries to drop them.
    op.execute("CREATE INDEX ix_search_queue_next ON search_queue (reembed, id)")
    op.execute("CREATE INDEX ix_search_queue_ref ON search_queue (kind, ref_id)")
    for kind, (table, shown) in _STILL_THERE.items():
        op.execute(
            f"UPDATE search_queue SET reembed = TRUE WHERE kind = '{kind}' "
            f"AND EXISTS (SELECT 1 FROM search_docs d WHERE d.kind = '{kind}' AND d.ref_id = search_queue.ref_id) "
            f"AND EXISTS (SELECT 1 FROM {table} s WHERE s.id = search_queue.ref_id AND {shown})"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name not in ("sqlite", "postgresql"):
        return
    op.execute("DROP INDEX ix_search_queue_ref")
    op.execute("DROP INDEX ix_search_queue_next")
    op.execute("ALTER TABLE search_queue DROP COLUMN reembed")
