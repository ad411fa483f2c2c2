"""The hybrid search index over memos, messages, digests and long-term memories, kept in the database beside them.

Triggers queue every change to a memo, a message, a digest or a memory (migrations
0006 and 0012 on SQLite, 0018 on PostgreSQL). Before each search, `catch_up` applies
every change queued, so a search never misses one nor returns something removed; it
embeds only a small batch itself. Embedding is the slow part: `sync` does the rest in
the background (in a worker thread, never on the event loop), batch by batch, with the
texts queued to be embedded again (a new model, a new way of embedding, a rebuild),
which keep their former vector, if any, until then; it also clusters the vectors of a
large collection (see vectors.py), which a search never does. Each hit is scored by the cosine of
its vector, plus a keyword bonus that only a close keyword match earns (see `keyword_bonus`); a message
also by its neighbours, the dates the query names and how nearly it is the query's very text. How much
each keyword weighs is counted among the documents the reader may read (its `Reach`, by each document's audience
and the conversation it came from, the rule that hides a hit, and a memory's only where it is shown whole, by the
conversations its bullets were heard in), of every kind: how often a word is written where the reader may not read
moves neither a score nor a rank.
The SQL that differs by database (keyword terms) lives in keywords.py; the rest is portable.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

from sqlalchemy import Connection, Engine, bindparam, text

from myao2.application.search import Reads
from myao2.domain.conversation import Message
from myao2.domain.memory import Memory, Term, bullet_line
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import reading, take_write_lock
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.search.dates import periods
from myao2.infrastructure.search.embedders import Embedder
from myao2.infrastructure.search.keywords import DocumentRow, IndexBusy, KeywordTable, Reach, Within, keyword_table
from myao2.infrastructure.search.text import content_terms, fts_document, terms
from myao2.infrastructure.search.words import word_vectors

if TYPE_CHECKING:
    import numpy as np

    from myao2.infrastructure.search.vectors import VectorCache

logger = logging.getLogger(__name__)

KINDS = ("memo", "message", "digest", "summary")
"""What is indexed: memos, messages, digests of past days and long-term memories (summaries)."""
_SOURCES = {"memo": "memos", "message": "messages", "digest": "digests", "summary": "memories"}
BATCH_SIZE = 16
"""Texts the background embeds at a time."""
SEARCH_EMBED_LIMIT = BATCH_SIZE
"""The most texts a search embeds itself (of the changes queued first): the others are found by their keywords
until the background embeds them."""
SEARCH_LOCK_WAIT_SECONDS = 3.0
"""How long a search waits for another process holding the index (PostgreSQL replicas) before it searches the
index as it is: a replica frozen while holding it must not stall every other replica's answers."""
CLAIM_SECONDS = 300.0
"""How long a batch claimed for embedding stays claimed (see `_claimed`): far longer than a batch takes."""
CHANGES_CHUNK = 256
"""Queued changes applied at a time."""
_ALL = 2**63 - 1
"""No entry of the queue has a later id (a 64-bit integer in both databases)."""
_LOAD_CHUNK = 10_000
"""Rows read at a time when loading vectors."""
CANDIDATES = 50
"""How many hits each ranking (dense, keyword) proposes before fusion."""
MAX_QUERY_TERMS = 64
"""Keyword terms of a query beyond these are not looked up (a question is far shorter)."""
FREQUENT = 2000
"""A term held by this many documents is frequent: its count is estimated, and it proposes no candidates."""
_FREQUENT_SHARES_KEPT = 10_000
FREQUENT_SHARE_SECONDS = 3600.0
"""How long a frequent term's measured share is used before it is measured again."""
_monotonic = time.monotonic
_wall_clock = time.time
NEIGHBOUR_WEIGHT = 0.4
"""How much of its best neighbour's lead over the weakest candidate a message found gains (see `_lifted_by_neighbours`)."""
KEYWORD_WEIGHT = 0.1
"""The largest bonus a keyword match adds to a cosine (which spans about 0.75-0.95 for this model)."""
MEMO_KEYWORD_WEIGHT = 0.1
"""The same for a memo, whose bonus grows with the square of its keyword coverage, counted over the
query's content terms (see `keyword_bonus`)."""
MESSAGE_KEYWORD_WEIGHT = 0.2
"""The same for a message: its vector reads it with the message before it, its keywords are its own,
so a keyword match tells it apart from the message after it, whose window holds the same words."""
WORD_WEIGHT = 0.05
"""What a memo gains, at most, for how near the query's Japanese words are to its own (see words.py): a
paraphrase that shares no word with its memo (新入社員 for 新人) still tells it from the memos that merely
read alike, where the model's cosines of the few best lie within a few hundredths."""
WORD_RERANKED = 10
"""How many of the best memos their words reorder."""
DATE_WEIGHT = 0.05
"""What a message posted within a period the query names (its day, or the day after) gains (see dates.py)."""
DATE_SLACK = 86_400.0
"""How long after a named period a message still counts as within it: what happened is often told the next day."""
EXACT_WEIGHT = 1.0
"""The most a message gains for holding nearly the query's very terms and little else (see `nearness`):
its exact text finds it first, before the message after it, whose window holds the same text."""

Progress = Callable[[int, int], None]
"""Called with (done, total) while indexing."""


@dataclass(frozen=True)
class Document:
    """What is indexed for one memo or message."""

    scope: str | None
    """Its audience's conversation (None: the workspace); a message's, its channel."""
    channel: str | None
    """The conversation a memo was written in, or a digest or memory made of (None: in no one conversation, and for a
    message, whose scope tells it): who may read it depends on it too (`Reads`)."""
    at: float
    text: str
    keywords: str
    heard: str | None = None
    """The conversations a memory's bullets were heard in, sorted, space-separated (None: none): a reader that may
    not read one of them is shown only part of it, and its terms are not counted in that reader's keyword weights."""


_Write = tuple[tuple[str, int], Document, bytes | None]
"""A document to store, by (kind, id), with its vector (None: not embedded yet)."""


@dataclass(frozen=True)
class _Applied:
    """What a pass over queued changes did: documents changed, of them embedded, and left for the background to embed."""

    documents: int
    embedded: int
    deferred: int


@dataclass(frozen=True)
class _Stored:
    """What a write to the index did: rows written, by kind, and the ids of the documents deleted, by kind."""

    written: Counter[str]
    deleted: dict[str, list[int]]


@dataclass(frozen=True)
class Hit:
    """A ranked document: the id of its memo or message, and its fused score."""

    ref_id: int
    score: float


class SearchIndex:
    """Keyword (bigrams and words, see keywords.py) and vector search over one database."""

    def __init__(
        self,
        engine: Engine,
        embedder: Embedder,
        memos: SqlMemoStore,
        conversations: SqlConversationStore,
        memories: SqlMemoryStore | None = None,
    ) -> None:
        self._engine = engine
        self._keywords = keyword_table(engine)
        self._embedder = embedder
        self._memos = memos
        self._conversations = conversations
        self._memories = memories or SqlMemoryStore(engine, SystemClock())
        # One recall searches several kinds with the same query: it is embedded once.
        self._query_vector = functools.lru_cache(maxsize=32)(embedder.query)
        self._caches: dict[str, VectorCache] = {}
        """Each kind's vectors, once loaded (see `_refreshed`)."""
        self._sync_lock = threading.Lock()
        self._cache_locks = {kind: threading.Lock() for kind in KINDS}
        """One per kind: a memo search never waits for a million messages' vectors to load."""
        self._checked_model = False
        self._frequent_shares: dict[tuple[Reach, str], tuple[float, float]] = {}
        """Of frequent terms, by the reach they were counted in, the share of its documents holding them and when
        it was measured (see `_document_frequencies`); read and changed under `_shares_lock`, as searches run in
        several threads."""
        self._shares_lock = threading.Lock()
        self._closed = threading.Event()
        self._wake: Callable[[], None] = lambda: None
        """Wakes the background (see `wake_with`)."""

    def close(self) -> None:
        """Stop a running `sync` after its current batch (at shutdown)."""
        self._closed.set()

    # -- keeping up with the data ---------------------------------------------

    def pending(self, at_most: int | None = None) -> int:
        """How many documents wait to be indexed or embedded again (counted up to `at_most`: after an upgrade a
        million may wait, and counting them all reads the whole queue)."""
        limit = "" if at_most is None else "LIMIT :n"
        with reading(self._engine) as connection:
            return int(
                connection.execute(
                    text(f"SELECT count(*) FROM (SELECT DISTINCT kind, ref_id FROM search_queue {limit}) AS queued"),
                    {"n": at_most},
                ).scalar_one()
            )

    def catch_up(self) -> int:
        """Apply every queued change, before a search; returns how many documents it changed.

        What was removed or deleted leaves the index and what changed gets its new keywords,
        scope and time: the search misses no change and returns nothing gone. Of the changed
        texts, only the first `SEARCH_EMBED_LIMIT` are embedded here; the others are embedded by
        `sync` in the background, with every text queued to be embedded again (see `_apply_changes`),
        holding nothing while it embeds: a search waits for another's few texts at most, and for
        nothing when no change is queued.
        """
        done, budget = 0, SEARCH_EMBED_LIMIT
        while not self._checked_model or self._changes_queued():
            try:
                with self._held(wait=SEARCH_LOCK_WAIT_SECONDS):
                    applied = self._apply_changes(budget)
            except IndexBusy as busy:
                # Searched as indexed: whatever it finds is checked again against the data itself.
                logger.warning("search: %s; searching without the latest changes", busy)
                return done
            done += applied.documents
            budget -= applied.embedded
        return done

    # The queue's flag is compared, never read as it is: `reembed = FALSE` finds its entries through the index on
    # (reembed, id), `NOT reembed` reads every entry, a million after an upgrade.

    def _changes_queued(self) -> bool:
        """Whether a change waits: if none does, a search need not wait for the background's batch under way
        (a batch deletes its changes from the queue as it writes them)."""
        with reading(self._engine) as connection:
            return connection.execute(text("SELECT 1 FROM search_queue WHERE reembed = FALSE LIMIT 1")).first() is not None

    def sync(self, progress: Progress | None = None, *, only_queued: bool = False) -> int:
        """Index every queued change, embed every text waiting for it and cluster the vectors loaded that are
        due (the background's work); returns how many documents were written or deleted.

        With `only_queued`, only the changes queued as it begins, and then the texts waiting to be embedded once
        they are indexed: what comes meanwhile waits for the next sync, however busy the workspace (each text
        would be embedded as it came, beside the answers)."""
        total = self.pending() if progress is not None else 0
        changes_upto = self._newest_queued() if only_queued else _ALL
        texts_upto: int | None = None  # known once the changes are indexed (their texts are queued then)
        done = 0
        while not self._closed.is_set():
            with self._held():
                applied = self._apply_changes(0, changes_upto)
            if applied.documents:
                count = applied.documents - applied.deferred
            else:
                if texts_upto is None:
                    texts_upto = self._newest_queued() if only_queued else _ALL
                taken, count = self._embed_queued(texts_upto)
                if not taken:
                    break
            done += count
            if progress is not None:
                progress(min(done, total), max(total, done))
            self._cluster_due(written_only=True)
        self._cluster_due()
        return done

    def rebuild(self, progress: Progress | None = None) -> int:
        """Re-index and re-embed every memo, message, digest and memory (searches meanwhile find them as they were)."""
        sources = " UNION ".join(f"SELECT '{kind}' AS kind, id AS ref_id FROM {table}" for kind, table in _SOURCES.items())
        with self._held(), self._engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO search_queue (kind, ref_id, reembed) SELECT kind, ref_id, TRUE FROM "
                    f"({sources} UNION SELECT kind, ref_id FROM search_docs) AS every"
                )
            )
        return self.sync(progress)

    @contextmanager
    def _held(self, wait: float | None = None) -> Iterator[None]:
        """Hold the index to write to it, in this process and in the database (see `KeywordTable.syncing`).

        Never held while embedding, but for the few texts a search embeds itself. With `wait`, raises
        `IndexBusy` when another process has held it for longer.
        """
        with self._sync_lock, self._keywords.syncing(self._engine, wait):
            if not self._checked_model:
                self._requeue_other_models()
                self._checked_model = True
            yield

    def _requeue_other_models(self) -> None:
        """Documents embedded by another model are queued to be embedded again: the index rebuilds itself."""
        with self._engine.begin() as connection:
            queued = connection.execute(
                text(
                    "INSERT INTO search_queue (kind, ref_id, reembed) SELECT kind, ref_id, TRUE FROM search_docs d "
                    "WHERE (model IS NULL OR model <> :model) AND NOT EXISTS "
                    "(SELECT 1 FROM search_queue q WHERE q.kind = d.kind AND q.ref_id = d.ref_id AND q.reembed = TRUE)"
                ),
                {"model": self._embedder.model_id},
            ).rowcount
        if queued:
            logger.info("search: %d documents were embedded by another model; re-embedding them", queued)

    def _newest_queued(self) -> int:
        """The id of the newest entry of the queue (0 when it is empty)."""
        with reading(self._engine) as connection:
            return int(connection.execute(text("SELECT COALESCE(MAX(id), 0) FROM search_queue")).scalar_one())

    def _apply_changes(self, embed_limit: int, upto: int = _ALL) -> _Applied:
        """Index the changes queued first (up to `CHANGES_CHUNK` documents), of those queued up to entry `upto`.

        A document gone leaves the index. One whose text is as indexed, embedded by this model,
        keeps its vector. Of the others, the first `embed_limit` are embedded now; the rest have
        no vector until the background embeds them: their keywords find them meanwhile (the vector
        of words an edit took out would rank an edited text below those sharing part of its words,
        and find it for words it no longer holds).
        """
        with reading(self._engine) as connection:
            queued = connection.execute(
                text("SELECT id, kind, ref_id FROM search_queue WHERE reembed = FALSE AND id <= :upto ORDER BY id LIMIT :n"),
                {"n": CHANGES_CHUNK, "upto": upto},
            ).all()
        last = {(kind, ref_id): queue_id for queue_id, kind, ref_id in queued}
        if not last:
            return _Applied(0, 0, 0)
        documents = self._documents_of(list(last))
        stored = self._stored(list(last))
        writes: list[_Write] = []
        fresh: list[tuple[tuple[str, int], Document]] = []
        later: list[tuple[str, int]] = []
        for ref, doc in documents.items():
            if doc is None:
                continue
            text_was, vector = stored.get(ref, (None, None))
            if vector is not None and text_was == doc.text:
                writes.append((ref, doc, vector))
            elif len(fresh) < embed_limit:
                fresh.append((ref, doc))
            else:
                writes.append((ref, doc, None))
                later.append(ref)
        writes += [(ref, doc, vector) for (ref, doc), vector in zip(fresh, self._embedded(fresh))]
        with self._engine.begin() as connection:
            # Another process (the bot and `myao2 mcp` on one SQLite file) may have indexed these changes meanwhile,
            # from texts read later than these: a change no longer queued is left as it indexed it.
            take_write_lock(connection)
            present = set(
                connection.execute(
                    text("SELECT id FROM search_queue WHERE id IN :ids").bindparams(bindparam("ids", expanding=True)),
                    {"ids": list(last.values())},
                ).scalars()
            )
            kept = {ref: queue_id for ref, queue_id in last.items() if queue_id in present}
            writes = [write for write in writes if write[0] in kept]
            stored_now = self._store(connection, writes, [ref for ref in kept if documents[ref] is None])
            _execute_each(
                connection,
                "DELETE FROM search_queue WHERE kind = :kind AND ref_id = :ref AND id <= :last AND reembed = FALSE",
                [{"kind": kind, "ref": ref_id, "last": queue_id} for (kind, ref_id), queue_id in kept.items()],
            )
            _execute_each(  # left for the background to embed
                connection,
                "INSERT INTO search_queue (kind, ref_id, reembed) SELECT CAST(:kind AS VARCHAR(16)), CAST(:ref AS INTEGER), TRUE "
                "WHERE NOT EXISTS (SELECT 1 FROM search_queue WHERE kind = :kind AND ref_id = :ref AND reembed = TRUE)",
                [{"kind": kind, "ref": ref_id} for (kind, ref_id), _, vector in writes if vector is None],
            )
            embedded_now = {ref for ref, _ in fresh}
            _execute_each(  # embedded as it is now: nothing to embed again
                connection,
                "DELETE FROM search_queue WHERE kind = :kind AND ref_id = :ref AND reembed = TRUE",
                [{"kind": kind, "ref": ref_id} for (kind, ref_id), _, _ in writes if (kind, ref_id) in embedded_now],
            )
        self._noted(stored_now)
        return _Applied(len(last), len(fresh), len(later))

    def _embed_queued(self, upto: int = _ALL) -> tuple[int, int]:
        """Embed a batch of the documents queued for it up to entry `upto`; returns how many were taken, and of them
        written or deleted.

        The batch is claimed first, so another process's background never embeds it too. The
        embedding, the slow part, holds nothing: a search meanwhile finds the former vectors. A
        document whose text changed meanwhile is left queued, to be embedded as it is now.
        """
        refs = self._claimed(upto)
        if not refs:
            return 0, 0
        try:
            live = [(ref, doc) for ref, doc in self._documents_of(refs).items() if doc is not None]
            vectors = self._embedded(live)
            with self._held(), self._engine.begin() as connection:
                # SQLite: no other process (the bot and `myao2 mcp` on one file) commits an edit, nor indexes it,
                # between this reading of the texts and their writing: an older text would be written over it.
                take_write_lock(connection)
                now = self._documents_of(refs)
                writes = [(ref, doc, vector) for (ref, doc), vector in zip(live, vectors) if now[ref] == doc]
                gone = [ref for ref, doc in now.items() if doc is None]
                stored_now = self._store(connection, writes, gone)
                _execute_each(
                    connection,
                    "DELETE FROM search_queue WHERE kind = :kind AND ref_id = :ref AND reembed = TRUE",
                    [{"kind": kind, "ref": ref_id} for kind, ref_id in [ref for ref, _, _ in writes] + gone],
                )
        finally:
            with self._engine.begin() as connection:  # what is left, changed meanwhile, may be taken again at once
                _execute_each(
                    connection,
                    "UPDATE search_queue SET claimed_until = NULL WHERE kind = :kind AND ref_id = :ref AND reembed = TRUE",
                    [{"kind": kind, "ref": ref_id} for kind, ref_id in refs],
                )
        self._noted(stored_now)
        return len(refs), len(writes) + len(gone)

    def _claimed(self, upto: int = _ALL) -> list[tuple[str, int]]:
        """Claim the newest documents queued to be embedded up to entry `upto` (up to `BATCH_SIZE`) that no process
        has claimed, for `CLAIM_SECONDS`: a claim of a process that stopped mid-batch lapses."""
        now = _wall_clock()
        with self._held(), self._engine.begin() as connection:
            take_write_lock(connection)  # SQLite: another process must not read these as unclaimed before this commits
            queued = connection.execute(
                # Newest first: a text just stored or edited is not left behind a backlog of hours.
                text(
                    "SELECT kind, ref_id FROM search_queue q WHERE reembed = TRUE AND id <= :upto "
                    "AND (claimed_until IS NULL OR claimed_until < :now) "
                    # nor one queued again (a rebuild) while another entry of it is claimed
                    "AND NOT EXISTS (SELECT 1 FROM search_queue c WHERE c.kind = q.kind AND c.ref_id = q.ref_id "
                    "AND c.reembed = TRUE AND c.claimed_until >= :now) ORDER BY id DESC LIMIT :n"
                ),
                {"now": now, "n": BATCH_SIZE, "upto": upto},
            ).all()
            refs = list(dict.fromkeys((kind, ref_id) for kind, ref_id in queued))
            _execute_each(  # every entry of the document: it may be queued twice (a rebuild)
                connection,
                "UPDATE search_queue SET claimed_until = :until WHERE kind = :kind AND ref_id = :ref AND reembed = TRUE",
                [{"until": now + CLAIM_SECONDS, "kind": kind, "ref": ref_id} for kind, ref_id in refs],
            )
        return refs

    def _documents_of(self, refs: list[tuple[str, int]]) -> dict[tuple[str, int], Document | None]:
        """What to index for each (kind, id); None for what is gone or removed."""
        documents: dict[tuple[str, int], Document | None] = {}
        for kind in KINDS:
            ids = [ref_id for k, ref_id in refs if k == kind]
            if ids:
                documents.update({(kind, i): d for i, d in self._documents(kind, ids).items()})
        return documents

    def _stored(self, refs: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, bytes | None]]:
        """The text each (kind, id) is indexed with, and its vector if this model made it."""
        stored: dict[tuple[str, int], tuple[str, bytes | None]] = {}
        with reading(self._engine) as connection:
            for kind in KINDS:
                ids = [ref_id for k, ref_id in refs if k == kind]
                if not ids:
                    continue
                rows = connection.execute(
                    text(
                        "SELECT ref_id, text, CASE WHEN model = :model THEN vector END FROM search_docs "
                        "WHERE kind = :kind AND ref_id IN :ids"
                    ).bindparams(bindparam("ids", expanding=True)),
                    {"kind": kind, "ids": ids, "model": self._embedder.model_id},
                )
                stored.update({(kind, ref_id): (text_was, vector) for ref_id, text_was, vector in rows})
        return stored

    def _embedded(self, documents: list[tuple[tuple[str, int], Document]]) -> list[bytes]:
        """The vectors of `documents`, as stored; a memo's reads it both as a passage and as a question."""
        if not documents:
            return []
        np = _numpy()
        vectors = self._embedder.passages([doc.text for _, doc in documents])
        return [
            np.asarray(
                _blend(vector, self._embedder.query(doc.text)) if kind == "memo" else vector, dtype=np.float32
            ).tobytes()
            for ((kind, _), doc), vector in zip(documents, vectors)
        ]

    def _store(self, connection: Connection, writes: list[_Write], gone: list[tuple[str, int]]) -> _Stored:
        """Write documents (with their vector, or none yet) and delete those gone."""
        written: Counter[str] = Counter()
        for (kind, ref_id), doc, vector in writes:
            model = None if vector is None else self._embedder.model_id
            doc_id = _upsert(connection, kind, ref_id, doc, model, vector)
            self._keywords.write(connection, doc_id, doc.keywords)
            written[kind] += 1
        deleted: dict[str, list[int]] = {}
        for kind, ref_id in gone:
            doc_id = _delete(connection, kind, ref_id)
            if doc_id is not None:
                self._keywords.remove(connection, doc_id)
                deleted.setdefault(kind, []).append(doc_id)
        return _Stored(written, deleted)

    def _noted(self, stored: _Stored) -> None:
        """Once committed: the loaded vectors lose the documents deleted, and count the rows written, which they read
        at their next refresh."""
        for kind in set(stored.written) | set(stored.deleted):
            with self._cache_locks[kind]:
                cache = self._caches.get(kind)
                if cache is not None:
                    cache.unread += stored.written[kind]
                    cache.discard(stored.deleted.get(kind, []))

    def _documents(self, kind: str, ids: list[int]) -> dict[int, Document | None]:
        """What to index for each id; None for what is gone or removed."""
        found: dict[int, Document | None] = dict.fromkeys(ids)
        if kind == "memo":
            for memo_id, memo in self._memos.by_ids(ids).items():
                if memo.removed:
                    continue
                body = "\n".join(part for part in (memo.content, " ".join(memo.tags), memo.detail or "") if part)
                found[memo_id] = Document(
                    scope=memo.audience.conversation_id,
                    channel=memo.channel_id,
                    at=memo.created_at.timestamp(),
                    # The name often spells the person in Latin letters ("sato-food"), which
                    # lets English questions find Japanese memos.
                    text=f"{body}\n{memo.name.replace('-', ' ')}",
                    keywords=fts_document(f"{memo.name}\n{body}"),
                )
        elif kind == "message":
            messages = self._conversations.messages_by_ids(ids)
            earlier = {i: e for i, (e, _) in self._conversations.neighbours(list(messages)).items() if e is not None}
            texts = self._conversations.messages_by_ids(list(set(earlier.values())))
            previous = {i: texts[e] for i, e in earlier.items() if e in texts}
            for message_id, message in messages.items():
                body = _said(message)
                before = previous.get(message_id)
                found[message_id] = Document(
                    scope=message.channel_id,
                    channel=None,
                    at=float(message.ts),
                    # Embedded with the message before it in its flow (never a later one, never
                    # another channel's): a reply ("yes, on Friday") is found by what it answers.
                    text=body if before is None else f"{_said(before)}\n{body}",
                    keywords=fts_document(body),
                )
        elif kind == "digest":
            # Dated by its day's last message: a cutoff inside that day leaves the whole digest out.
            for digest_id, digest in self._memories.digests_by_ids(ids).items():
                if not digest.lines:
                    continue
                body = f"{digest.label} {digest.day.isoformat()}\n" + "\n".join(digest.lines)
                found[digest_id] = Document(
                    scope=digest.audience.conversation_id,
                    channel=digest.channel_id,
                    at=float(digest.last_ts),
                    text=body,
                    keywords=fts_document(body),
                )
        else:
            for memory_id, memory in self._memories.memories_by_ids(ids).items():
                found[memory_id] = _memory_document(memory)
        return found

    def line_scores(self, query: str, lines: list[str], reads: Reads) -> list[float]:
        """How much of `query`'s keyword weight each line holds, from 0 to 1 (to pick a long document's lines), for a
        reader that `reads` what it does."""
        covered = coverage(self._weights("summary", query, reads))
        return [covered(fts_document(line)) for line in lines]

    def memory_score(self, query: str, memory: Memory, reads: Reads) -> float | None:
        """The score `search` gives `memory` once indexed as it is now, not as it was indexed (e.g. a memory as
        a reader is shown it, without the bullets it may not read), for a reader that `reads` what it does; None
        when it would not be indexed."""
        document = _memory_document(memory)
        if document is None:
            return None
        np = _numpy()
        vector = np.asarray(self._embedder.passages([document.text])[0], dtype=np.float32)
        cosine = float(vector @ self._query_vector(query))
        return cosine + keyword_bonus("summary", coverage(self._weights("summary", query, reads))(document.keywords))

    def _weights(self, kind: str, query: str, reads: Reads) -> dict[str, float]:
        """Each of `query`'s keyword terms for `kind`, with its weight for a reader that `reads` what it does."""
        with reading(self._engine) as connection:
            return self._statistics(connection, _query_terms(kind, query), self._reach(reads))[1]

    # -- searching --------------------------------------------------------------

    def search(
        self,
        kind: str,
        query: str,
        reads: Reads,
        before: float | None,
        limit: int,
        conversation: str | None = None,
    ) -> list[Hit]:
        """The best `limit` documents of `kind` for `query` among those the reader may read (`reads`), at or before
        `before`, and of `conversation` alone when given (a message's channel, the conversation a memo was written
        in or a digest or memory made of).

        Call `catch_up` first for the newest changes to count.
        """
        query_vector = self._query_vector(query)
        scope, channel = (conversation, None) if kind == "message" else (None, conversation)  # see `Document`
        # Asked once per scope and channel: a search checks a few of them for hundreds of documents.
        # A memory shown only in part is found (and scored again as shown, see `memory_score`): the conversations its
        # place says it was heard in decide only whether its terms count in the keyword weights (`_within`).
        readable = functools.lru_cache(maxsize=None)(
            lambda place: reads(kind, place[0], place[1]) and scope in (None, place[0]) and channel in (None, place[1])
        )
        with self._cache_locks[kind]:
            cache = self._refreshed(kind)
            dense = cache.top(query_vector, readable, before, CANDIDATES)
            due = cache.clustering_due()
        if due:  # never here: searches meanwhile read the rows added since the last clustering exactly
            self._wake()
        reach = self._reach(reads)
        with reading(self._engine) as connection:
            query_terms = _query_terms(kind, query)
            frequencies, weights = self._statistics(connection, query_terms, reach)
            # A term in very many documents says little and would take long to rank by: it only
            # counts towards the keyword bonus of the documents proposed.
            rare = {term: weights[term] for term in query_terms if 0 < frequencies[term] < FREQUENT}
            before_or_ever = math.inf if before is None else before
            keyword = self._keywords.top(connection, reach.only(kind, scope, channel), rare, before_or_ever, CANDIDATES)
            candidates = list(dict.fromkeys([doc_id for doc_id, _ in dense] + keyword))
            rows = _rows(connection, self._keywords, candidates)
        cosines = dict(dense)
        floor, top = min(cosines.values(), default=0.0), max(cosines.values(), default=0.0)
        covered = coverage(weights)
        messages = kind == "message"
        named = periods(query) if messages else []
        query_set = set(query_terms)
        exact: dict[int, float] = {}

        def scored(found: dict[int, _DocRow], order: Iterable[int]) -> dict[int, float]:
            """The fused score of each document that may be read, by its memo's or message's id."""
            scores = {}
            for doc_id in order:
                row = found.get(doc_id)
                # Checked again on the row itself: the cache may trail another process's changes.
                if row is None or row.kind != kind or not readable((row.scope, row.channel)):
                    continue
                if before is not None and row.at > before:
                    continue
                keyword_coverage = covered(row.terms)
                cosine = cosines.get(doc_id)
                if cosine is None:
                    with self._cache_locks[kind]:
                        cache = self._caches.get(kind)
                        vector = cache.vector_of(doc_id) if cache is not None else None
                    # Not embedded yet (see `catch_up`): as close as its keywords say, up to the closest
                    # document's, so its exact words find it first.
                    cosine = float(vector @ query_vector) if vector is not None else floor + (top - floor) * keyword_coverage
                score = cosine + keyword_bonus(kind, keyword_coverage)
                if any(start <= row.at < end + DATE_SLACK for start, end in named):
                    score += DATE_WEIGHT
                if messages:
                    exact[row.ref_id] = EXACT_WEIGHT * nearness(query_set, row.terms) ** 4
                scores[row.ref_id] = score
            return scores

        scores = scored(rows, candidates)
        if kind == "memo" and scores:
            scores = self._nearer_by_words(query, scores)
        if messages and scores:
            lifted = self._lifted_by_neighbours(scores, before, scored)
            # Added once lifted: a neighbour gains nothing from a message's own exact text.
            scores = {ref_id: score + exact[ref_id] for ref_id, score in lifted.items()}
        ranked = sorted(scores.items(), key=lambda item: -item[1])
        return [Hit(ref_id, score) for ref_id, score in ranked[:limit]]

    def _nearer_by_words(self, query: str, scores: dict[int, float]) -> dict[int, float]:
        """The memos' scores, the best `WORD_RERANKED` each raised by how near its words are to the query's."""
        words = word_vectors()
        if not words.words(query):
            return scores
        best = sorted(scores, key=lambda ref_id: -scores[ref_id])[:WORD_RERANKED]
        with reading(self._engine) as connection:
            texts = dict(
                connection.execute(
                    text("SELECT ref_id, text FROM search_docs WHERE kind = 'memo' AND ref_id IN :ids").bindparams(
                        bindparam("ids", expanding=True)
                    ),
                    {"ids": best},
                ).all()
            )
        closeness = words.closeness(query, [texts.get(ref_id, "") for ref_id in best])
        held = [near for near in closeness if near is not None]
        # A memo without Japanese words (one in English) is taken as near as the others are on average: a Japanese
        # query's words never push it down for the script it is written in.
        usual = sum(held) / len(held) if held else 0.0
        return {
            **scores,
            **{ref_id: scores[ref_id] + WORD_WEIGHT * (usual if near is None else near) for ref_id, near in zip(best, closeness)},
        }

    def _lifted_by_neighbours(
        self,
        scores: dict[int, float],
        before: float | None,
        scored: Callable[[dict[int, _DocRow], Iterable[int]], dict[int, float]],
    ) -> dict[int, float]:
        """The messages found and those next to them in their flow, each lifted by its best neighbour.

        A message's score rises by `NEIGHBOUR_WEIGHT` times how far its best-scoring neighbour
        stands above the weakest message found: an answer ("yes, on Friday") is found with
        the question it answers, and a hit amid a matching exchange outranks a stray one.
        Only neighbours posted at or before `before` count.
        """
        weakest = min(scores.values())
        until = None if before is None else datetime.fromtimestamp(before, timezone.utc)
        pairs = self._conversations.neighbours(list(scores), until)
        others = {n for pair in pairs.values() for n in pair if n is not None and n not in scores}
        if others:
            with reading(self._engine) as connection:
                doc_ids = connection.execute(
                    text("SELECT id FROM search_docs WHERE kind = 'message' AND ref_id IN :ids").bindparams(
                        bindparam("ids", expanding=True)
                    ),
                    {"ids": sorted(others)},
                ).scalars().all()
                found = _rows(connection, self._keywords, list(doc_ids))
            scores = {**scores, **scored(found, found)}
        adjacent: dict[int, set[int]] = {ref_id: set() for ref_id in scores}
        for ref_id, pair in pairs.items():
            for neighbour in pair:
                if neighbour is not None and neighbour in scores and ref_id in scores:
                    adjacent[ref_id].add(neighbour)
                    adjacent[neighbour].add(ref_id)
        return {
            ref_id: score + NEIGHBOUR_WEIGHT * max((scores[n] - weakest for n in adjacent[ref_id]), default=0.0)
            for ref_id, score in scores.items()
        }

    def _reach(self, reads: Reads) -> Reach:
        """The documents of the kinds whose vectors are loaded that a reader that `reads` what it does may read: those
        of each scope and of each channel it may read, of the scopes and channels the index has given each kind.
        Keyword weights are counted among them (every kind once the background has loaded them all; a memo search
        never waits for them, see `warm`). Each kind is first read as this process has written it (`_read_written`)."""
        self._read_written()
        return Reach(tuple(self._within(kind, reads) for kind in list(self._caches)))

    def _read_written(self) -> None:
        """Refresh the loaded kinds this process has written rows of since they were read (`VectorCache.unread`), but
        one being loaded or clustered (a search never waits for it): a document indexed before a search is counted in
        its keyword weights, where it is and in the documents' number, whatever kind was searched. Another process's
        rows are read at that kind's next refresh (its search, the end of the background's `sync`)."""
        for kind, cache in list(self._caches.items()):
            lock = self._cache_locks[kind]
            if not cache.unread or not lock.acquire(blocking=False):
                continue
            try:
                due = self._refreshed(kind).clustering_due()
            finally:
                lock.release()
            if due:
                self._wake()

    def _within(self, kind: str, reads: Reads) -> Within:
        """What a reader that `reads` what it does may read of `kind`: the scopes and channels of this kind's own
        documents (those its cache knows) that it may read, and the sets of conversations heard (a memory's bullets')
        it may read all of, each asked once. A document of a scope, channel or set not listed (one the cache does not
        know yet) is left out, never counted by mistake."""
        places = self._caches[kind].scopes
        scopes = sorted({scope for scope, _, _ in places if scope is not None})
        channels = sorted({channel for _, channel, _ in places if channel is not None})
        heard = sorted({heard for _, _, heard in places if heard is not None})
        return Within(
            kind,
            tuple(s for s in scopes if reads.scope(kind, s)),
            reads.scope(kind, None),
            tuple(c for c in channels if reads.channel(kind, c)),
            reads.channel(kind, None),
            tuple(h for h in heard if reads.heard(tuple(h.split()))),
        )

    def _loaded(self, reach: Reach) -> int:
        """How many vectors loaded within `reach` there are: the documents counted (of a kind not searched, as of its
        last refresh, see `_read_written`)."""
        return sum(self._caches[within.kind].count(_holding(within)) for within in reach.kinds)

    def _loaded_between(self, reach: Reach, low: int, high: int) -> int | None:
        """How many vectors loaded within `reach` have a document id from `low` to `high`; None
        while those of a kind are being read or clustered (a search never waits for them)."""
        count = 0
        for within in reach.kinds:
            lock = self._cache_locks[within.kind]
            if not lock.acquire(blocking=False):
                return None
            try:
                count += self._caches[within.kind].count_between(_holding(within), low, high)
            finally:
                lock.release()
        return count

    def _statistics(
        self, connection: Connection, query_terms: list[str], reach: Reach
    ) -> tuple[dict[str, float], dict[str, float]]:
        """How many documents within `reach` hold each term (see `_document_frequencies`), and each term's weight there
        (its inverse document frequency)."""
        documents = self._loaded(reach)
        frequencies = self._document_frequencies(connection, query_terms, reach, documents)
        documents = max(documents, int(max(frequencies.values(), default=0)))
        return frequencies, {term: _idf(documents, frequency) for term, frequency in frequencies.items()}

    def _document_frequencies(
        self, connection: Connection, query_terms: list[str], reach: Reach, documents: int
    ) -> dict[str, float]:
        """How many of the documents within `reach` hold each term: counted up to `FREQUENT`, estimated beyond
        (`documents` of them are loaded).

        The estimate reads only the first `FREQUENT` documents holding the term (by id) and scales
        their count by the share they are of the loaded documents within `reach` in their id range,
        so a word in half a million messages costs little more than a rare one; and that share
        is kept, as it hardly moves (only a rare term's count decides what is proposed).
        """
        frequencies: dict[str, float] = {}
        for term in query_terms:
            now = _monotonic()
            with self._shares_lock:
                share, measured = self._frequent_shares.get((reach, term), (None, 0.0))
            if share is None or now - measured > FREQUENT_SHARE_SECONDS:
                found, low, high = self._keywords.holders(connection, term, reach, FREQUENT)
                spanned = None if found < FREQUENT else self._loaded_between(reach, low, high)
                with self._shares_lock:
                    self._frequent_shares.pop((reach, term), None)  # re-inserted last: the oldest measured go first
                    if spanned is not None:
                        share = found / max(spanned, found)
                        self._frequent_shares[(reach, term)] = (share, now)
                        while len(self._frequent_shares) > _FREQUENT_SHARES_KEPT:
                            del self._frequent_shares[next(iter(self._frequent_shares))]
                if spanned is None:
                    frequencies[term] = float(found)  # all of a rare term; the least of a frequent one
                    continue
            frequencies[term] = max(float(FREQUENT), share * documents)
        return frequencies

    def warm(self, kinds: Iterable[str] = KINDS) -> None:
        """Load `kinds`' vectors into memory (done on first search otherwise), and cluster those loaded that are due;
        with memos among them, the word vectors their searches are reordered by too (see `_nearer_by_words`)."""
        for kind in kinds:
            with self._cache_locks[kind]:
                self._refreshed(kind)
            if kind == "memo":
                word_vectors().load()
        self._cluster_due()

    def wake_with(self, wake: Callable[[], None]) -> None:
        """Have `wake` called when a search finds work for the background: vectors to cluster (see `sync`)."""
        self._wake = wake

    def _cluster_due(self, written_only: bool = False) -> None:
        """Cluster (again) the vectors loaded that are due, holding each kind's lock only to plan and to adopt the
        clustering: searches meanwhile read the vectors as they are (seconds for a million messages' vectors).

        With `written_only` (after each of the background's batches), a kind is read again from the database only
        when the rows this process wrote since it was last read could make its clustering due (see
        `VectorCache.unread`): rows other processes wrote are read at the end of `sync`, or by the next search.
        """
        for kind in KINDS:
            with self._cache_locks[kind]:
                cache = self._caches.get(kind)
                if cache is None or (written_only and not cache.clustering_due(cache.unread)):
                    continue
                cache = self._refreshed(kind)
                clustering = cache.plan_clustering()
            if clustering is None:
                continue
            clustering.build()
            with self._cache_locks[kind]:
                cache.adopt(clustering)

    def _refreshed(self, kind: str) -> VectorCache:
        """`kind`'s vectors with every row written since the last refresh (call with its lock held).

        The first load fills a new cache, put in place once full: until then, what counts the
        documents for keyword weights (see `_statistics`) sees none of this kind, never some.
        """
        _numpy()
        from myao2.infrastructure.search.vectors import StoredVector, VectorCache

        cache = self._caches.get(kind)
        first = cache is None or cache.seq == 0
        if cache is None or first:
            cache = VectorCache()
        newest = cache.seq
        # A refresh finds the rows written since by the index on `seq`, never by kind (`|| ''` keeps SQLite off that
        # index). The first load finds this kind's rows by kind (reading a million messages' rows once, not once per
        # kind) and puts them in `seq` order, as a refresh would. Either reads the last `seq` given in the same
        # statement: rows of the other kinds up to it need no reading again.
        # A row without this model's vector (not embedded yet, see `catch_up`) is read for its place alone (scope, channel
        # and the conversations it was heard in): the keyword ranking looks in every place the cache knows.
        found = "kind = :kind" if first else "kind || '' = :kind AND seq > :seq"
        loaded: list[StoredVector] = []
        with reading(self._engine) as connection:
            result = connection.execute(
                text(
                    "SELECT id, scope, channel, heard, at, CASE WHEN model = :model THEN vector ELSE :bare END, seq "
                    f"FROM search_docs WHERE {found} "
                    "UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, value FROM search_seq"
                ),
                {"kind": kind, "seq": cache.seq, "model": self._embedder.model_id, "bare": b""},
            )
            for part in result.partitions(_LOAD_CHUNK):
                for row in part:
                    if row[0] is None:
                        newest = max(newest, row[6])
                    else:
                        loaded.append(StoredVector(row[0], (row[1], row[2], row[3]), row[4], row[5], row[6]))
        if first:
            loaded.sort(key=lambda row: row.seq)
        cache.put(loaded, len(loaded))
        cache.seq = max(cache.seq, newest)
        cache.unread = 0
        self._caches[kind] = cache
        return cache


def keyword_bonus(kind: str, keyword_coverage: float) -> float:
    """What a document's keyword coverage (see `coverage`) adds to its cosine.

    A paraphrase shares only common terms with its answer (a name, さん), which weigh
    little, so its bonus stays small and the dense ranking decides; a query whose rare
    terms a document holds (a name, a date, a code word) lifts it to the top. A memo's
    bonus is squared: a question that shares one word of several with a memo (its
    topic, a person's name shared by all their memos) gains little, so it never
    outweighs a memo that reads closer, while a keyword query a memo holds whole
    gains all of it.
    """
    if kind == "memo":
        return MEMO_KEYWORD_WEIGHT * keyword_coverage**2
    return (MESSAGE_KEYWORD_WEIGHT if kind == "message" else KEYWORD_WEIGHT) * keyword_coverage


def _query_terms(kind: str, query: str) -> list[str]:
    """The keyword terms of `query` looked up for `kind`: a memo's content terms, the others' every term."""
    return (content_terms(query) if kind == "memo" else list(dict.fromkeys(terms(query))))[:MAX_QUERY_TERMS]


def _memory_document(memory: Memory) -> Document | None:
    """What is indexed for a long-term memory: its label and active bullets, newest first; None for a
    short-term memory or one without a bullet made from messages."""
    bullets = [b for b in memory.active if b.source_ts]
    if memory.term is not Term.LONG or not bullets:
        return None
    body = "\n".join([memory.label, *(bullet_line(b) for b in reversed(bullets))])
    return Document(
        # Dated by its oldest bullet: readers drop the bullets past their cutoff.
        scope=memory.audience.conversation_id,
        channel=memory.scope.channel_id,
        at=min(float(max(b.source_ts)) for b in bullets),
        text=body,
        keywords=fts_document(body),
        heard=" ".join(sorted({c for b in bullets for c in b.heard_in})) or None,
    )


def _said(message: Message) -> str:
    return f"{message.user_name}: {message.text}"


def _blend(passage: np.ndarray, query: np.ndarray) -> np.ndarray:
    """A memo's vector: how it reads as a passage and as a question, averaged (unit length).

    A memo is one short statement, worded much like the questions that look for it, and
    the model's symmetric (query-to-query) reading matches such paraphrases better.
    """
    both = passage + query
    return both / max(float(_numpy().linalg.norm(both)), 1e-12)


@functools.cache
def _numpy() -> ModuleType:
    """numpy, imported when the index first needs vectors: at start-up it was ~0.1 s of CPU before the bot
    could connect, for what no answer needs before its first search.

    Its BLAS then runs on one thread, for the whole process: a search's products are small, and
    on a busy machine BLAS threads wait for each other far longer than the product takes.
    """
    import numpy
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")
    return numpy


def coverage(weights: dict[str, float]) -> Callable[[str], float]:
    """The share of the query's term weight (IDF) found in a document's terms (its total summed once, for many documents)."""
    total = sum(weights.values())
    items = list(weights.items())

    def covered(document_terms: str) -> float:
        if total <= 0:
            return 0.0
        present = set(document_terms.split())
        return sum(weight for term, weight in items if term in present) / total

    return covered


def nearness(query_terms: set[str], document_terms: str) -> float:
    """How nearly a document holds the query's very terms and no others (Jaccard), from 0 to 1."""
    present = set(document_terms.split())
    union = len(query_terms | present)
    return len(query_terms & present) / union if union else 0.0


def _idf(documents: int, frequency: float) -> float:
    return math.log(1 + (documents - frequency + 0.5) / (frequency + 0.5))




class _DocRow(NamedTuple):
    """A stored document as a search scores it."""

    kind: str
    ref_id: int
    scope: str | None
    channel: str | None
    at: float
    terms: str
    """Its keyword terms, separated by spaces."""


def _rows(connection: Connection, keywords: KeywordTable, doc_ids: list[int]) -> dict[int, _DocRow]:
    """Each document id still stored, with its row."""
    if not doc_ids:
        return {}
    rows: list[DocumentRow] = keywords.rows(connection, doc_ids)
    return {row[0]: _DocRow(*row[1:]) for row in rows}


def _holding(within: Within) -> Callable[[tuple[str | None, str | None, str | None]], bool]:
    """Whether a cache's place (a document's scope, channel and the conversations it was heard in, see `_refreshed`) is
    within `within`, as its SQL tells (keywords.py): the loaded vectors counted are those of the places listed, each
    asked of the reader once (`_within`)."""
    scopes, channels, heard_in = frozenset(within.scopes), frozenset(within.channels), frozenset(within.heard)
    workspace, nowhere = within.workspace, within.nowhere

    def held(place: tuple[str | None, str | None, str | None]) -> bool:
        scope, channel, heard = place
        return (
            (workspace if scope is None else scope in scopes)
            and (nowhere if channel is None else channel in channels)
            and (heard is None or heard in heard_in)
        )

    return held


def _execute_each(connection: Connection, statement: str, rows: list[dict[str, object]]) -> None:
    """Run `statement` with each row of parameters, in one call (executemany); nothing when there is none."""
    if rows:
        connection.execute(text(statement), rows)


def _upsert(
    connection: Connection, kind: str, ref_id: int, doc: Document, model: str | None, vector: bytes | None
) -> int:
    """Store a document with the vector `model` made (or none yet); returns its id (the keyword terms are stored apart)."""
    seq = connection.execute(text("UPDATE search_seq SET value = value + 1 RETURNING value")).scalar_one()
    doc_id = connection.execute(
        text(
            "INSERT INTO search_docs (kind, ref_id, scope, channel, heard, at, text, model, vector, seq) "
            "VALUES (:kind, :ref, :scope, :channel, :heard, :at, :text, :model, :vector, :seq) "
            "ON CONFLICT (kind, ref_id) DO UPDATE SET scope = excluded.scope, channel = excluded.channel, "
            "heard = excluded.heard, at = excluded.at, "
            "text = excluded.text, model = excluded.model, vector = excluded.vector, seq = excluded.seq "
            "RETURNING id"
        ),
        {
            "kind": kind,
            "ref": ref_id,
            "scope": doc.scope,
            "channel": doc.channel,
            "heard": doc.heard,
            "at": doc.at,
            "text": doc.text,
            "model": model,
            "vector": vector,
            "seq": seq,
        },
    ).scalar_one()
    return int(doc_id)


def _delete(connection: Connection, kind: str, ref_id: int) -> int | None:
    doc_id = connection.execute(
        text("DELETE FROM search_docs WHERE kind = :kind AND ref_id = :ref RETURNING id"),
        {"kind": kind, "ref": ref_id},
    ).scalar_one_or_none()
    return doc_id
