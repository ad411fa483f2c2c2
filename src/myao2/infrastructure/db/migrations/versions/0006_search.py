"""The search index: documents with their vectors, an FTS5 keyword table, and a queue filled by triggers.

Every change to a memo or a message queues its id (triggers, so no writer can forget);
the index drains the queue before each search. Existing memos and messages are queued
here, so an existing database is indexed on first use. SQLite only: on other
databases search is not available.

Revision ID: 0006
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_SOURCES = {
    # kind: (table, the UPDATE that changes what is indexed)
    "memo": ("memos", "UPDATE"),
    "message": ("messages", "UPDATE OF text"),
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute(
        """
        CREATE TABLE search_docs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind VARCHAR(16) NOT NULL,
            ref_id INTEGER NOT NULL,
            scope VARCHAR(32),
            at REAL NOT NULL,
            text TEXT NOT NULL,
            model VARCHAR(128),
            vector BLOB,
            seq INTEGER NOT NULL,
            CONSTRAINT uq_search_docs_ref UNIQUE (kind, ref_id)
        )
        """
    )
    op.execute("CREATE INDEX ix_search_docs_seq ON search_docs (seq)")
    # The last `seq` given: every write of a document takes the next one, never reused.
    op.execute("CREATE TABLE search_seq (value INTEGER NOT NULL)")
    op.execute("INSERT INTO search_seq (value) VALUES (0)")
    op.execute("CREATE VIRTUAL TABLE search_fts USING fts5(terms, tokenize = 'unicode61 remove_diacritics 0')")
    op.execute("CREATE VIRTUAL TABLE search_vocab USING fts5vocab(search_fts, 'row')")
    op.execute(
        "CREATE TABLE search_queue (id INTEGER PRIMARY KEY AUTOINCREMENT, kind VARCHAR(16) NOT NULL, ref_id INTEGER NOT NULL)"
    )
    for kind, (table, update) in _SOURCES.items():
        for event, row in (("INSERT", "NEW"), (update, "NEW"), ("DELETE", "OLD")):
            name = f"search_{table}_{event.split()[0].lower()}"
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN "
                f"INSERT INTO search_queue (kind, ref_id) VALUES ('{kind}', {row}.id); END"
            )
        op.execute(f"INSERT INTO search_queue (kind, ref_id) SELECT '{kind}', id FROM {table}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in ("memos", "messages"):
        for event in ("insert", "update", "delete"):
            op.execute(f"DROP TRIGGER IF EXISTS search_{table}_{event}")
    for name in ("search_queue", "search_seq", "search_vocab", "search_fts", "search_docs"):
        op.execute(f"DROP TABLE IF EXISTS {name}")
