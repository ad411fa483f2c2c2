"""The search index keeps, of each long-term memory, the conversations its bullets were heard in
(`search_docs.heard`, sorted ids separated by spaces; empty for every other document).

A memory kept for the workspace may still hold bullets heard in a channel since turned private, until the narrowing
reaches it: a reader elsewhere is shown the memory without them, and the keyword weights its search counts
(`keywords.Reach`) must not count their terms. The memories indexed before are queued to be indexed again, which
fills it (their text is unchanged: they keep their vectors).

Revision ID: 0029
"""

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE search_docs ADD COLUMN heard TEXT")
    op.execute("INSERT INTO search_queue (kind, ref_id) SELECT kind, ref_id FROM search_docs WHERE kind = 'summary'")


def downgrade() -> None:
    with op.batch_alter_table("search_docs") as batch:
        batch.drop_column("heard")
