"""Where each indexed document's keyword terms live and how they are matched: the part of the index that differs by database.

Both databases store text.py's terms as they are (bigrams and words, already split), so
both find exactly the same documents for a term. SQLite keeps them in an FTS5 table
(`search_fts`, migration 0006); PostgreSQL in a text array with a GIN index
(`search_terms`, migration 0018). Both count and rank only the documents a search may read (its `Reach`),
by the weight of the query terms a document holds, then by its length: nothing a reader may not read moves
what it is shown. Any SQL of the index that touches keyword terms goes through here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import Protocol

from sqlalchemy import Connection, Engine, text

from myao2.infrastructure.search.text import fts_query

DocumentRow = tuple[int, str, int, str | None, str | None, float, str]
"""(document id, kind, ref_id, scope, channel, at, keyword terms separated by spaces)."""

SYNC_LOCK = 0x6D79616F33
"""PostgreSQL advisory lock key held while a process indexes (next to engine.MIGRATION_LOCK)."""
LOCK_POLL_SECONDS = 0.05
"""How often a bounded wait for the index's lock tries again."""


@dataclass(frozen=True)
class Within:
    """Documents of `kind` in one of `scopes` (or of no scope, when `workspace`), of one of `channels` (or of no
    channel, when `nowhere`), and heard in one of the sets of conversations `heard` (or in none beyond their channel)."""

    kind: str
    scopes: tuple[str, ...]
    workspace: bool
    channels: tuple[str, ...]
    nowhere: bool
    heard: tuple[str, ...]


@dataclass(frozen=True)
class Reach:
    """The documents a search may read, of each kind it names."""

    kinds: tuple[Within, ...]

    def only(self, kind: str, scope: str | None = None, channel: str | None = None) -> Reach:
        """The documents of `kind` within this reach (in `scope` alone, of `channel` alone, when given)."""

        def narrowed(within: Within) -> Within:
            if scope is not None:
                within = replace(within, scopes=tuple(s for s in within.scopes if s == scope), workspace=False)
            if channel is not None:
                within = replace(within, channels=tuple(c for c in within.channels if c == channel), nowhere=False)
            return within

        return Reach(tuple(narrowed(within) for within in self.kinds if within.kind == kind))


class IndexBusy(Exception):
    """Another process has held the index for longer than one may wait (it may be frozen)."""


class KeywordTable(Protocol):
    """The keyword terms of the documents in `search_docs`, kept by document id."""

    def write(self, connection: Connection, doc_id: int, keywords: str) -> None:
        """Store a document's terms (space-separated), replacing what it had."""

    def remove(self, connection: Connection, doc_id: int) -> None:
        """Forget a document's terms."""

    def clear(self, connection: Connection) -> None:
        """Forget every document's terms."""

    def holders(self, connection: Connection, term: str, reach: Reach, limit: int) -> tuple[int, int | None, int | None]:
        """Of at most `limit` documents within `reach` holding `term`, taken in about id order: how many, the lowest
        id, the highest."""

    def top(self, connection: Connection, reach: Reach, weights: dict[str, float], before: float, limit: int) -> list[int]:
        """The ids of the best `limit` documents within `reach`, at or before `before`, holding any term of `weights`
        (term -> IDF): those holding the most weight first, then the shortest (a shorter text is more about them)."""

    def rows(self, connection: Connection, doc_ids: list[int]) -> list[DocumentRow]:
        """The rows of the documents still stored among `doc_ids`, with their terms."""

    def syncing(self, engine: Engine, wait: float | None = None) -> AbstractContextManager[None]:
        """Held while indexing, so two processes never index the same change at once (one writing it stale).

        With `wait`, raises `IndexBusy` if another process holds it for longer than `wait` seconds.
        """


class Fts5Keywords:
    """SQLite: an FTS5 table whose `unicode61` tokenizer only splits the stored terms on spaces."""

    def write(self, connection: Connection, doc_id: int, keywords: str) -> None:
        self.remove(connection, doc_id)
        connection.execute(text("INSERT INTO search_fts (rowid, terms) VALUES (:id, :terms)"), {"id": doc_id, "terms": keywords})

    def remove(self, connection: Connection, doc_id: int) -> None:
        connection.execute(text("DELETE FROM search_fts WHERE rowid = :id"), {"id": doc_id})

    def clear(self, connection: Connection) -> None:
        connection.execute(text("DELETE FROM search_fts"))

    def holders(self, connection: Connection, term: str, reach: Reach, limit: int) -> tuple[int, int | None, int | None]:
        found, low, high = connection.execute(
            text(
                # CROSS JOIN: the terms' documents first, in id order (SQLite may choose to read every document of a kind)
                "SELECT count(*), min(id), max(id) FROM (SELECT d.id FROM search_fts CROSS JOIN search_docs d "
                f"ON d.id = search_fts.rowid WHERE search_fts MATCH :term AND {_fts5_within(reach)} LIMIT :n)"
            ),
            {"term": fts_query([term]), **_parameters(reach, json.dumps), "n": limit},
        ).one()
        return found, low, high

    def top(self, connection: Connection, reach: Reach, weights: dict[str, float], before: float, limit: int) -> list[int]:
        match = fts_query(list(weights))
        if match is None:
            return []
        # Not FTS5's bm25, which weighs terms by how many documents of every kind and scope hold them.
        terms = [f" {term} " for term in weights]
        held = " + ".join(
            f"(instr(' ' || search_fts.terms || ' ', :term{i}) > 0) * :weight{i}" for i in range(len(terms))
        )
        length = "length(search_fts.terms) - length(replace(search_fts.terms, ' ', ''))"
        rows = connection.execute(
            text(
                "SELECT d.id FROM search_fts CROSS JOIN search_docs d ON d.id = search_fts.rowid "
                f"WHERE search_fts MATCH :match AND d.at <= :before AND {_fts5_within(reach)} "
                f"ORDER BY {held} DESC, {length}, d.id LIMIT :n"
            ),
            {
                "match": match,
                "before": before,
                **_parameters(reach, json.dumps),
                **{f"term{i}": term for i, term in enumerate(terms)},
                **{f"weight{i}": weight for i, weight in enumerate(weights.values())},
                "n": limit,
            },
        ).all()
        return [row[0] for row in rows]

    def rows(self, connection: Connection, doc_ids: list[int]) -> list[DocumentRow]:
        return [
            tuple(row)  # type: ignore[misc]
            for row in connection.execute(
                text(
                    "SELECT d.id, d.kind, d.ref_id, d.scope, d.channel, d.at, f.terms FROM search_docs d "
                    "JOIN search_fts f ON f.rowid = d.id WHERE d.id IN (SELECT value FROM json_each(:ids))"
                ),
                {"ids": json.dumps(doc_ids)},
            )
        ]

    @contextmanager
    def syncing(self, engine: Engine, wait: float | None = None) -> Iterator[None]:
        yield  # SQLite lets one writer in at a time: each batch is written whole, by one process


class PostgresKeywords:
    """PostgreSQL: a `text[]` of distinct terms per document, found through a GIN index (no text-search parser)."""

    def write(self, connection: Connection, doc_id: int, keywords: str) -> None:
        connection.execute(
            text(
                "INSERT INTO search_terms (doc_id, terms) VALUES (:id, CAST(:terms AS text[])) "
                "ON CONFLICT (doc_id) DO UPDATE SET terms = excluded.terms"
            ),
            {"id": doc_id, "terms": list(dict.fromkeys(keywords.split()))},
        )

    def remove(self, connection: Connection, doc_id: int) -> None:
        connection.execute(text("DELETE FROM search_terms WHERE doc_id = :id"), {"id": doc_id})

    def clear(self, connection: Connection) -> None:
        connection.execute(text("DELETE FROM search_terms"))

    def holders(self, connection: Connection, term: str, reach: Reach, limit: int) -> tuple[int, int | None, int | None]:
        found, low, high = connection.execute(
            text(
                "SELECT count(*), min(id), max(id) FROM (SELECT d.id FROM search_terms t JOIN search_docs d ON "
                f"d.id = t.doc_id WHERE t.terms @> ARRAY[CAST(:term AS text)] AND {_postgres_within(reach)} LIMIT :n) AS held"
            ),
            {"term": term, **_parameters(reach, list), "n": limit},
        ).one()
        return found, low, high

    def top(self, connection: Connection, reach: Reach, weights: dict[str, float], before: float, limit: int) -> list[int]:
        if not weights:
            return []
        rows = connection.execute(
            text(
                "SELECT d.id FROM search_terms t JOIN search_docs d ON d.id = t.doc_id "
                f"WHERE t.terms && CAST(:terms AS text[]) AND d.at <= :before AND {_postgres_within(reach)} "
                "ORDER BY (SELECT sum(w.weight) FROM unnest(CAST(:terms AS text[]), CAST(:weights AS float8[])) "
                "AS w(term, weight) WHERE w.term = ANY(t.terms)) DESC, cardinality(t.terms), d.id LIMIT :n"
            ),
            {"terms": list(weights), "weights": list(weights.values()), "before": before, **_parameters(reach, list), "n": limit},
        ).all()
        return [row[0] for row in rows]

    def rows(self, connection: Connection, doc_ids: list[int]) -> list[DocumentRow]:
        return [
            tuple(row)  # type: ignore[misc]
            for row in connection.execute(
                text(
                    "SELECT d.id, d.kind, d.ref_id, d.scope, d.channel, d.at, array_to_string(t.terms, ' ') FROM search_docs d "
                    "JOIN search_terms t ON t.doc_id = d.id WHERE d.id = ANY(CAST(:ids AS bigint[]))"
                ),
                {"ids": doc_ids},
            )
        ]

    @contextmanager
    def syncing(self, engine: Engine, wait: float | None = None) -> Iterator[None]:
        # Replicas index concurrently: one at a time, or a slow one could write a document's old text last.
        with engine.connect() as connection:
            if wait is None:
                connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SYNC_LOCK})
            else:
                _try_lock(connection, wait)
            connection.commit()
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SYNC_LOCK})
                connection.commit()


def _fts5_within(reach: Reach) -> str:
    """What keeps a query on `search_docs d` within `reach` in SQLite (its parameters: `_parameters`)."""
    return _within(reach, "{column} IN (SELECT value FROM json_each(:{names}))")


def _postgres_within(reach: Reach) -> str:
    """What keeps a query on `search_docs d` within `reach` in PostgreSQL (its parameters: `_parameters`)."""
    return _within(reach, "{column} = ANY(CAST(:{names} AS text[]))")


def _within(reach: Reach, in_list: str) -> str:
    """The condition of `reach` on `search_docs d`, `in_list` this database's test that `{column}` is one of the
    list bound as `:{names}`."""

    def held(column: str, names: str, or_null: str) -> str:
        return f"(({column} IS NULL AND :{or_null}) OR {in_list.format(column=column, names=names)})"

    return _any(
        f"(d.kind = :kind{i} AND {held('d.scope', f'scopes{i}', f'workspace{i}')} "
        f"AND {held('d.channel', f'channels{i}', f'nowhere{i}')} AND (d.heard IS NULL OR {in_list.format(column='d.heard', names=f'heard{i}')}))"
        for i in range(len(reach.kinds))
    )


def _any(conditions: Iterable[str]) -> str:
    return "(" + (" OR ".join(conditions) or "FALSE") + ")"


def _parameters(reach: Reach, listed: Callable[[list[str]], object]) -> dict[str, object]:
    """The parameters of `_fts5_within` or `_postgres_within`, each list (of scopes, of channels) given as `listed`
    makes it."""
    parameters: dict[str, object] = {}
    for i, within in enumerate(reach.kinds):
        parameters |= {
            f"kind{i}": within.kind,
            f"workspace{i}": within.workspace,
            f"scopes{i}": listed(list(within.scopes)),
            f"nowhere{i}": within.nowhere,
            f"channels{i}": listed(list(within.channels)),
            f"heard{i}": listed(list(within.heard)),
        }
    return parameters


def _try_lock(connection: Connection, wait: float) -> None:
    """Take the index's advisory lock within `wait` seconds, or raise `IndexBusy`."""
    deadline = time.monotonic() + wait
    while not connection.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": SYNC_LOCK}).scalar_one():
        if time.monotonic() >= deadline:
            connection.commit()
            raise IndexBusy(f"the search index has been held by another process for over {wait:g} s")
        time.sleep(LOCK_POLL_SECONDS)


def keyword_table(engine: Engine) -> KeywordTable:
    """The keyword table of `engine`'s database."""
    return PostgresKeywords() if engine.dialect.name == "postgresql" else Fts5Keywords()
