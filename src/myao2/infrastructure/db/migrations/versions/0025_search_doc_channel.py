"""The search index keeps the conversation each memo was written in, and each digest and memory made of
(`search_docs.channel`), beside its audience (`scope`).

Who may read a document depends on that conversation too (a channel turned private, or one the bot has left): the
keyword weights a search counts among what its reader may read (`keywords.Reach`) must leave such documents out,
as the search leaves out their hits. Filled here for the documents indexed before; a message's stays empty (its
scope is its channel), so no message row is rewritten.

Revision ID: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

_FROM_TABLE = {"memo": "memos", "digest": "digests"}
"""Kinds whose source row names its channel in `channel_id`."""


def upgrade() -> None:
    bind = op.get_bind()
    op.execute("ALTER TABLE search_docs ADD COLUMN channel VARCHAR(32)")
    for kind, table in _FROM_TABLE.items():
        op.execute(
            f"UPDATE search_docs SET channel = (SELECT s.channel_id FROM {table} s WHERE s.id = search_docs.ref_id) "
            f"WHERE kind = '{kind}'"
        )
    # A memory's channel is in its scope key: "channel:C" or "thread:C:TS" (the workspace's is "workspace").
    summaries = bind.execute(
        sa.text("SELECT d.id, m.scope FROM search_docs d JOIN memories m ON m.id = d.ref_id WHERE d.kind = 'summary'")
    ).all()
    channels = [{"id": doc_id, "channel": key.split(":")[1]} for doc_id, key in summaries if ":" in key]
    if channels:
        bind.execute(sa.text("UPDATE search_docs SET channel = :channel WHERE id = :id"), channels)


def downgrade() -> None:
    with op.batch_alter_table("search_docs") as batch:
        batch.drop_column("channel")
