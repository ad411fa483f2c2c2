"""Search over digests and long-term memories: their changes are queued for the index, like memos and messages.

Revision ID: 0012
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_SOURCES = {"digest": "digests", "summary": "memories"}


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for kind, table in _SOURCES.items():
        for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
            op.execute(
                f"CREATE TRIGGER search_{table}_{event.lower()} AFTER {event} ON {table} BEGIN "
                f"INSERT INTO search_queue (kind, ref_id) VALUES ('{kind}', {row}.id); END"
            )
        op.execute(f"INSERT INTO search_queue (kind, ref_id) SELECT '{kind}', id FROM {table}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for kind, table in _SOURCES.items():
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS search_{table}_{event}")
        op.execute(f"DELETE FROM search_docs WHERE kind = '{kind}'")
        op.execute(f"DELETE FROM search_queue WHERE kind = '{kind}'")
