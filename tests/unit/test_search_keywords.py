"""The keyword table of each database (FTS5 on SQLite, a GIN-indexed text array on PostgreSQL): the same terms, the same documents."""

from __future__ import annotations

import math
import threading

import pytest
from sqlalchemy import Connection, Engine, text

from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.search.keywords import Reach, Within, keyword_table
from myao2.infrastructure.search.text import fts_document
from tests.e2e.conftest import wait_until
from tests.postgres import PostgresServer

EVERY_MESSAGE = Reach((Within("message", ("C1", "C2", "D1"), True, (), True, ()),))


def within(kind: str, scopes: tuple[str, ...], workspace: bool, channels: tuple[str, ...] = ()) -> Reach:
    return Reach((Within(kind, scopes, workspace, channels, True, ()),))

DOCUMENTS = [
    # (kind, scope, channel, at, text)
    ("message", "C1", None, 10.0, "明日の会議は十時から"),
    ("message", "C1", None, 20.0, "会議室が使えません"),
    ("message", "D1", None, 30.0, "会議のあとでラーメン"),
    ("message", None, None, 40.0, "味噌ラーメンが好き"),
    ("memo", "C1", "C1", 50.0, "会議 memo for the team"),
    ("message", "C2", None, 60.0, "Tanaka's RAMEN, 2 bowls"),
    ("memo", None, "C3", 70.0, "会議 memo of the workspace, written in C3"),
]


def store(connection: Connection, engine: Engine) -> list[int]:
    keywords = keyword_table(engine)
    ids = []
    for seq, (kind, scope, channel, at, body) in enumerate(DOCUMENTS, start=1):
        doc_id = connection.execute(
            text(
                "INSERT INTO search_docs (kind, ref_id, scope, channel, at, text, seq) "
                "VALUES (:kind, :ref, :scope, :channel, :at, :text, :seq) RETURNING id"
            ),
            {"kind": kind, "ref": seq, "scope": scope, "channel": channel, "at": at, "text": body, "seq": seq},
        ).scalar_one()
        keywords.write(connection, doc_id, fts_document(body))
        ids.append(doc_id)
    return ids


@pytest.fixture
def stored(engine: Engine) -> list[int]:
    with engine.begin() as connection:
        return store(connection, engine)


def test_two_character_words_and_english_words_are_held_by_exactly_their_documents(engine: Engine, stored: list[int]) -> None:
    keywords = keyword_table(engine)
    with engine.connect() as connection:
        assert keywords.holders(connection, "会議", EVERY_MESSAGE, 10) == (3, stored[0], stored[2])
        assert keywords.holders(connection, "ラー", EVERY_MESSAGE, 10)[0] == 2
        assert keywords.holders(connection, "ramen", EVERY_MESSAGE, 10) == (1, stored[5], stored[5])
        assert keywords.holders(connection, "会議", EVERY_MESSAGE, 2)[0] == 2  # counted up to the limit
        assert keywords.holders(connection, "議会", EVERY_MESSAGE, 10) == (0, None, None)  # another order, another term


def test_only_the_documents_within_reach_are_counted(engine: Engine, stored: list[int]) -> None:
    keywords = keyword_table(engine)
    with engine.connect() as connection:
        assert keywords.holders(connection, "会議", within("message", ("C1",), False), 10) == (2, stored[0], stored[1])
        assert keywords.holders(connection, "会議", within("message", ("D1",), False), 10) == (1, stored[2], stored[2])
        assert keywords.holders(connection, "ラー", within("message", (), True), 10) == (1, stored[3], stored[3])
        assert keywords.holders(connection, "会議", within("memo", ("C1",), False, ("C1",)), 10) == (1, stored[4], stored[4])
        assert keywords.holders(connection, "会議", within("memo", ("C1",), False), 10)[0] == 0  # not of its channel
        assert keywords.holders(connection, "会議", within("memo", ("C2", "D1"), True), 10)[0] == 0
        assert keywords.holders(connection, "会議", within("memo", (), True, ("C3",)), 10) == (1, stored[6], stored[6])
        both = Reach((Within("message", ("C1",), False, (), True, ()), Within("memo", ("C1",), False, ("C1",), True, ())))
        assert keywords.holders(connection, "会議", both, 10) == (3, stored[0], stored[4])
        assert keywords.holders(connection, "会議", both.only("memo"), 10) == (1, stored[4], stored[4])
        assert keywords.holders(connection, "会議", Reach(()), 10)[0] == 0


def test_the_best_documents_keep_to_the_kind_the_readable_scopes_and_the_cutoff(engine: Engine, stored: list[int]) -> None:
    keywords = keyword_table(engine)
    weights = {"会議": 1.0, "ラー": 2.0}
    with engine.connect() as connection:
        def top(scopes: list[str], workspace: bool, before: float = math.inf, kind: str = "message") -> set[int]:
            return set(keywords.top(connection, within(kind, tuple(scopes), workspace, ("C1",)), weights, before, 10))

        assert top(["C1"], False) == {stored[0], stored[1]}
        assert top(["C1", "D1"], True) == {stored[0], stored[1], stored[2], stored[3]}
        assert top(["C1", "D1"], True, before=20.0) == {stored[0], stored[1]}
        assert top([], True) == {stored[3]}
        assert top(["C1"], False, kind="memo") == {stored[4]}
        assert keywords.top(connection, EVERY_MESSAGE, {}, math.inf, 10) == []
        # the documents holding the most weight come first, then the shortest, then the first stored
        assert keywords.top(connection, EVERY_MESSAGE, weights, math.inf, 10) == [stored[i] for i in (2, 3, 1, 0)]
        assert keywords.top(connection, EVERY_MESSAGE, {"会議": 2.0, "ラー": 1.0}, math.inf, 10) == [stored[i] for i in (2, 1, 0, 3)]


def test_rows_give_each_document_with_its_terms_and_removed_documents_are_gone(engine: Engine, stored: list[int]) -> None:
    keywords = keyword_table(engine)
    with engine.begin() as connection:
        rows = {row[0]: row for row in keywords.rows(connection, [stored[0], stored[5], 10_000])}
        assert set(rows) == {stored[0], stored[5]}
        assert rows[stored[5]][1:6] == ("message", 6, "C2", None, 60.0)
        assert set(rows[stored[5]][6].split()) == {"tanaka", "s", "ramen", "2", "bowls"}
        keywords.write(connection, stored[5], fts_document("udon now"))
        keywords.remove(connection, stored[0])
    with engine.connect() as connection:
        assert keywords.holders(connection, "ramen", EVERY_MESSAGE, 10)[0] == 0
        assert keywords.holders(connection, "udon", EVERY_MESSAGE, 10)[0] == 1
        assert keywords.holders(connection, "会議", EVERY_MESSAGE, 10)[0] == 2
        assert [row[0] for row in keywords.rows(connection, [stored[0]])] == []
    with engine.begin() as connection:
        keywords.clear(connection)
    with engine.connect() as connection:
        assert keywords.holders(connection, "udon", EVERY_MESSAGE, 10)[0] == 0


def test_only_one_replica_indexes_at_a_time_on_postgresql(postgres: PostgresServer) -> None:
    """Two engines stand for two replicas: the second waits for the first's indexing to end (else it could write stale text last)."""
    with postgres.database() as url:
        first, second = open_database(url), open_database(url)
        order: list[str] = []
        try:
            with keyword_table(first).syncing(first):
                waiting = threading.Thread(target=_sync, args=(second, order))
                waiting.start()
                wait_until(lambda: _blocked_on_advisory_lock(first), what="the second replica to wait for the lock")
                order.append("first done")
            waiting.join(timeout=30)
            assert order == ["first done", "second syncing"]
        finally:
            first.dispose()
            second.dispose()


def _blocked_on_advisory_lock(engine: Engine) -> bool:
    with engine.connect() as connection:
        return bool(connection.execute(text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).scalar_one())


def _sync(engine: Engine, order: list[str]) -> None:
    with keyword_table(engine).syncing(engine):
        order.append("second syncing")
