"""A message is indexed with the message before it in its flow (its window): a change to a message
also queues the message after it, whose window held it. Every message is queued once, to be
embedded with its window.

The next message of X in the sense of `SqlConversationStore.neighbours`: the next top-level
message when X is top-level, and the next reply of X's thread (the first one when X is its parent).

Revision ID: 0019
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_NEXT = """
INSERT INTO search_queue (kind, ref_id)
SELECT 'message', id FROM (
    SELECT * FROM (
        SELECT m.id FROM messages m
        WHERE ({row}.thread_ts IS NULL OR {row}.thread_ts = {row}.ts)
          AND m.channel_id = {row}.channel_id AND m.posted_at > {row}.posted_at
          AND (m.thread_ts IS NULL OR m.thread_ts = m.ts)
        ORDER BY m.posted_at, m.ts LIMIT 1
    ) AS top_level
    UNION ALL
    SELECT * FROM (
        SELECT m.id FROM messages m
        WHERE m.channel_id = {row}.channel_id AND m.thread_ts = coalesce({row}.thread_ts, {row}.ts)
          AND m.ts != m.thread_ts AND m.posted_at > {row}.posted_at
        ORDER BY m.posted_at, m.ts LIMIT 1
    ) AS in_thread
) AS next;
"""

_SQLITE_TRIGGERS = {
    # name: (event, the row whose next message is queued)
    "search_messages_next_insert": ("INSERT", "NEW"),
    "search_messages_next_update": ("UPDATE OF text", "NEW"),
    "search_messages_next_delete": ("DELETE", "OLD"),
}


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for name, (event, row) in _SQLITE_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} AFTER {event} ON messages BEGIN {_NEXT.format(row=row)} END")
    elif dialect == "postgresql":
        op.execute(
            f"""
            CREATE FUNCTION search_enqueue_next() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE
                changed messages%ROWTYPE;
            BEGIN
                IF TG_OP = 'DELETE' THEN changed := OLD; ELSE changed := NEW; END IF;
                {_NEXT.format(row="changed")}
                RETURN NULL;
            END
            $$
            """
        )
        op.execute(
            "CREATE TRIGGER search_messages_next AFTER INSERT OR UPDATE OF text OR DELETE ON messages "
            "FOR EACH ROW EXECUTE FUNCTION search_enqueue_next()"
        )
    else:
        return
    op.execute("INSERT INTO search_queue (kind, ref_id) SELECT 'message', id FROM messages")


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    elif dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS search_messages_next ON messages")
        op.execute("DROP FUNCTION IF EXISTS search_enqueue_next()")
    else:
        return
    op.execute("INSERT INTO search_queue (kind, ref_id) SELECT 'message', id FROM messages")
