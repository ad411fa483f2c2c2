"""A large embedding backlog (a migration queueing every memo, a new model, a rebuild) never holds up a search.

Counted in texts embedded, not timed: a search embeds at most a small batch itself, and waits
for none of the background's embedding, however loaded the machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from sqlalchemy import event, text

from myao2.domain.memo import MemoChanges
from myao2.infrastructure.search import index as index_module
from myao2.infrastructure.search.index import BATCH_SIZE, SEARCH_EMBED_LIMIT
from myao2.infrastructure.search.keywords import SYNC_LOCK
from tests.fakes.embedder import HashEmbedder
from tests.unit.test_search_index import START, IndexFollowsTheData, World, counted_clusterings

FILLERS = 120


class SlowEmbedder(HashEmbedder):
    """Takes `seconds` per passage (or waits at a gate), as a real model's 15-30 ms add up over a backlog; reads "beverage" as "tea",
    so a question can find a memo by meaning alone, sharing no keyword with it."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds = 0.0
        self.gate: threading.Semaphore | None = None
        """When set, each call waits for a release of it first (see `held`)."""
        self.held = threading.Event()
        self.batches: list[list[str]] = []

    def passages(self, texts: list[str]) -> np.ndarray:
        self.batches.append(texts)
        if self.gate is not None:
            self.held.set()
            self.gate.acquire()
        time.sleep(self.seconds * len(texts))
        return super().passages(texts)

    def _vector(self, text: str) -> np.ndarray:
        return super()._vector(text.replace("beverage", "tea"))


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    world = World(database_url, SlowEmbedder())
    world.memo("tea", "alice drinks green tea")
    for number in range(FILLERS):
        world.memo(f"filler{number}", f"meeting notes number {number}")
    world.index.sync()
    with world.engine.begin() as connection:  # as migration 0021 leaves 0020's queue: every memo, to embed again
        connection.execute(text("INSERT INTO search_queue (kind, ref_id, reembed) SELECT 'memo', id, TRUE FROM memos"))
    yield world
    world.close()


def _embedder(world: World) -> SlowEmbedder:
    assert isinstance(world.embedder, SlowEmbedder)
    return world.embedder


def test_a_search_embeds_a_small_batch_at_most_and_finds_the_rest_by_old_vectors_and_keywords(world: World) -> None:
    embedder = _embedder(world)
    embedder.seconds = 0.02
    new = 2 * SEARCH_EMBED_LIMIT + 3  # more new memos than a search embeds itself
    for number in range(new):
        world.memo(f"new{number}", f"codeword{number} for a new memo")
    before = embedder.embedded
    assert world.memo_names("favourite beverage", limit=1) == ["tea"]  # no shared keyword: by its old vector
    for number in range(new):
        assert world.memo_names(f"codeword{number}", limit=1) == [f"new{number}"]
    assert embedder.embedded - before <= SEARCH_EMBED_LIMIT
    with world.engine.connect() as connection:
        unembedded = connection.execute(text("SELECT count(*) FROM search_docs WHERE vector IS NULL")).scalar_one()
    assert unembedded == new - SEARCH_EMBED_LIMIT  # found by keyword alone
    assert world.index.pending() >= FILLERS  # the backlog is still there

    embedder.seconds = 0.0
    world.index.sync()  # the background works it off
    assert world.index.pending() == 0
    with world.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM search_docs WHERE vector IS NULL")).scalar_one() == 0
    assert world.memo_names("favourite beverage", limit=1) == ["tea"]
    assert world.memo_names("codeword0", limit=1) == ["new0"]


def test_a_removed_memo_is_gone_from_the_next_search_however_long_the_backlog(world: World) -> None:
    world.memos.remove("tea", None, "test")
    assert "tea" not in world.memo_names("alice drinks green tea", limit=20)
    with world.engine.connect() as connection:
        names = connection.execute(text("SELECT text FROM search_docs WHERE text LIKE '%green tea%'")).all()
    assert names == []


def test_a_search_waits_for_none_of_the_background_s_embedding(world: World) -> None:
    embedder = _embedder(world)
    embedder.gate = threading.Semaphore(0)  # the background's first batch never ends until released
    working = threading.Thread(target=world.index.sync)
    working.start()
    try:
        assert embedder.held.wait(30)  # the background is embedding
        world.memos.remove("filler0", None, "test")  # a change: the search applies it
        found: list[list[str]] = []

        def search() -> None:
            found.append(world.memo_names("favourite beverage", limit=1))
            found.append(world.memo_names("meeting notes number 0", limit=20))

        searching = threading.Thread(target=search, daemon=True)  # a search that waited would never end
        searching.start()
        searching.join(30)
        assert found[0] == ["tea"] and "filler0" not in found[1] and len(found[1]) == 20
    finally:
        world.index.close()
        embedder.gate.release(FILLERS)
        working.join()


def test_the_background_embeds_a_new_text_before_the_backlog(world: World) -> None:
    embedder = _embedder(world)
    world.memo("new", "codeword for a new memo")
    embedder.gate = threading.Semaphore(0)
    working = threading.Thread(target=world.index.sync)
    working.start()
    try:
        assert embedder.held.wait(30)
        assert any("codeword" in text for text in embedder.batches[-1])
    finally:
        world.index.close()
        embedder.gate.release(FILLERS)
        working.join()


def test_a_message_not_embedded_yet_is_found_by_its_keywords_in_a_channel_with_no_vector_yet(world: World) -> None:
    """The first messages of a channel, left for the background to embed, are found from it by their words."""
    for number in range(SEARCH_EMBED_LIMIT):  # the changes a search embeds itself: another channel's
        world.message("C1", f"chatter {number}", START + timedelta(minutes=number))
    world.message("C2", "the zeppelin lands at noon", START + timedelta(hours=1))
    assert world.message_texts("zeppelin", reader="C2", limit=1) == ["the zeppelin lands at noon"]
    with world.engine.connect() as connection:  # found before the background embedded it
        assert connection.execute(text("SELECT count(*) FROM search_docs WHERE vector IS NULL")).scalar_one() == 1


def test_the_index_follows_the_data_when_a_search_embeds_nothing_itself(
    new_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 10's acceptance with every change left to the background to embed: found by keywords and former vectors."""
    monkeypatch.setattr(index_module, "SEARCH_EMBED_LIMIT", 0)
    run_state_machine_as_test(
        lambda: IndexFollowsTheData(new_database), settings=settings(max_examples=15, stateful_step_count=12, deadline=None)
    )


def test_a_memo_edited_and_not_embedded_again_yet_is_found_first_by_its_new_words(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its former vector, of words it no longer holds, ranked it below a memo sharing only part of them."""
    monkeypatch.setattr(index_module, "SEARCH_EMBED_LIMIT", 0)  # as when the background applied the edit first
    world.memos.edit("filler0", MemoChanges.create(content="alice drinks green tea at noon"), None, "test")
    assert world.memo_names("alice drinks green tea at noon", limit=1) == ["filler0"]


def test_a_search_does_not_wait_for_a_replica_frozen_while_holding_the_index(
    database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("replicas share the index through PostgreSQL's advisory lock")
    world = World(database_url)
    try:
        world.memo("tea", "alice drinks green tea")
        world.memo("coffee", "bob drinks black coffee")
        world.index.sync()
        monkeypatch.setattr(index_module, "SEARCH_LOCK_WAIT_SECONDS", 0.2)
        with world.engine.connect() as frozen:  # another replica, stopped while it held the index
            frozen.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SYNC_LOCK})
            world.memo("cake", "carol bakes carrot cake")
            world.memos.remove("coffee", None, "test")
            assert world.memo_names("green tea", limit=1) == ["tea"]  # the index as it was
            assert "held by another process for over 0.2 s; searching without the latest changes" in caplog.text
            assert "coffee" not in world.memo_names("black coffee")  # removed meanwhile: never returned
            frozen.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SYNC_LOCK})
            frozen.commit()
        assert world.memo_names("carrot cake", limit=1) == ["cake"]  # caught up once the replica let go
    finally:
        world.close()


def test_a_batch_one_process_embeds_is_not_embedded_by_another(world: World, database_url: str) -> None:
    """Replicas (or the bot and `myao2 mcp`) each run the background: each embeds batches no other has taken."""
    embedder = _embedder(world)
    gate = embedder.gate = threading.Semaphore(0)  # this process's first batch embeds until released
    first = len(embedder.batches)
    working = threading.Thread(target=world.index.sync)
    working.start()
    elsewhere = World(database_url, SlowEmbedder())
    try:
        assert embedder.held.wait(30)
        elsewhere.index.sync()  # another process works the rest off meanwhile
        assert elsewhere.index.pending() == BATCH_SIZE  # the batch under way here
    finally:
        embedder.gate = None
        gate.release()
        working.join(60)
    taken_here = set(embedder.batches[first])
    taken_elsewhere = [text for batch in _embedder(elsewhere).batches for text in batch]
    assert len(taken_here) == BATCH_SIZE and not taken_here & set(taken_elsewhere)
    assert len(taken_elsewhere) == len(set(taken_elsewhere)) == FILLERS + 1 - BATCH_SIZE
    assert world.index.pending() == 0
    elsewhere.close()


def test_a_batch_claimed_by_a_process_that_stopped_is_embedded_once_its_claim_lapses(
    world: World, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claimed = world.index._claimed()  # and stopped there
    assert len(claimed) == BATCH_SIZE
    elsewhere = World(database_url, SlowEmbedder())
    try:
        elsewhere.index.sync()
        assert elsewhere.index.pending() == BATCH_SIZE
        now = time.time()
        monkeypatch.setattr(index_module, "_wall_clock", lambda: now + index_module.CLAIM_SECONDS + 1)
        elsewhere.index.sync()
        assert elsewhere.index.pending() == 0
    finally:
        elsewhere.close()


def test_a_text_edited_while_its_batch_is_embedded_is_embedded_again_as_edited(world: World) -> None:
    embedder = _embedder(world)
    gate = embedder.gate = threading.Semaphore(0)
    first = len(embedder.batches)
    working = threading.Thread(target=world.index.sync)
    working.start()
    try:
        assert embedder.held.wait(30)
        embedder.gate = None  # the batch under way stays held; the search's own embedding is not
        newest = embedder.batches[first][0].split("\n")[0]  # a memo's content, whose batch is under way
        name = next(m.name for m in world.memos.list(None, limit=200).memos if m.content == newest)
        world.memos.edit(name, MemoChanges.create(content="carol drinks hot cocoa"), None, "test")
        assert world.memo_names("carol drinks hot cocoa", limit=1) == [name]  # applied by the search
    finally:
        embedder.gate = None
        gate.release()
        working.join(60)
    world.index.sync()
    assert world.index.pending() == 0
    with world.engine.connect() as connection:
        stored = connection.execute(
            text("SELECT text FROM search_docs WHERE kind = 'memo' AND vector IS NOT NULL AND text LIKE '%cocoa%'")
        ).scalars().all()
    assert len(stored) == 1


def test_two_processes_claiming_at_the_same_moment_take_different_batches(world: World, database_url: str) -> None:
    """The bot and `myao2 mcp` on one SQLite file (or replicas) look for unclaimed texts at once: what one reads
    as unclaimed, the other may not claim too."""
    elsewhere = World(database_url, SlowEmbedder())
    taken_elsewhere: list[list[tuple[str, int]]] = []
    other = threading.Thread(target=lambda: taken_elsewhere.append(elsewhere.index._claimed()))
    started = False

    def claim_elsewhere(connection, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        nonlocal started
        if not started and "claimed_until IS NULL" in statement:  # read what is unclaimed here, not claimed yet
            started = True
            other.start()
            other.join(1)  # done meanwhile unless it waits for this claim (then within its busy timeout: this one commits at once)

    event.listen(world.engine, "after_cursor_execute", claim_elsewhere)
    try:
        taken_here = world.index._claimed()
    finally:
        event.remove(world.engine, "after_cursor_execute", claim_elsewhere)
        other.join(60)
        elsewhere.close()
    assert started and len(taken_here) == BATCH_SIZE
    assert not set(taken_here) & set(taken_elsewhere[0])


def test_a_change_two_processes_index_at_once_ends_indexed_as_the_text_is_now(database_url: str) -> None:
    """The bot and `myao2 mcp` on one SQLite file (or replicas) index the same queued change: one read the text
    before it was edited again, the other after. The text read first must not be the one left indexed."""
    here, elsewhere = World(database_url, SlowEmbedder()), World(database_url, SlowEmbedder())
    other = threading.Thread(target=elsewhere.index.catch_up)
    started = False

    def edited_meanwhile(connection, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        nonlocal started
        if not started and "THEN vector END FROM search_docs" in statement:  # the text read here, not written yet
            started = True
            elsewhere.memos.edit("tea", MemoChanges.create(content="alice drinks black coffee"), None, "test")
            other.start()
            other.join(2)  # indexed there meanwhile, unless it waits for this process's indexing

    try:
        here.memo("tea", "alice drinks green tea")
        here.index.sync()
        here.memos.edit("tea", MemoChanges.create(content="alice drinks oolong tea"), None, "test")
        event.listen(here.engine, "after_cursor_execute", edited_meanwhile)
        try:
            here.index.catch_up()
        finally:
            event.remove(here.engine, "after_cursor_execute", edited_meanwhile)
            other.join(60)
        assert started
        here.index.sync()  # whatever is left queued
        with here.engine.connect() as connection:
            indexed = connection.execute(text("SELECT text FROM search_docs WHERE kind = 'memo'")).scalars().all()
        assert len(indexed) == 1 and "coffee" in indexed[0]
    finally:
        here.close()
        elsewhere.close()


def test_a_text_queued_again_while_another_process_embeds_it_is_not_claimed_by_a_third(world: World, database_url: str) -> None:
    """`myao2 index rebuild` queues every text again while the bot embeds a batch: the batch's texts stay the bot's."""
    taken_there = world.index._claimed()
    with world.engine.begin() as connection:  # as `rebuild` queues them: every memo, once more
        connection.execute(text("INSERT INTO search_queue (kind, ref_id, reembed) SELECT 'memo', id, TRUE FROM memos"))
    elsewhere = World(database_url, SlowEmbedder())
    try:
        taken_here = elsewhere.index._claimed()
    finally:
        elsewhere.close()
    assert len(taken_there) == len(taken_here) == BATCH_SIZE
    assert not set(taken_there) & set(taken_here)


def test_a_text_another_process_edits_and_indexes_while_a_batch_is_checked_is_not_written_over(
    world: World, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bot and `myao2 mcp` on one SQLite file: an edit indexed by the other between this batch's check of its
    texts and their writing was overwritten by the text embedded, and its queue entries were gone with it."""
    elsewhere = World(database_url, world.embedder)  # the same model (a fake's vectors are its own)
    read = world.index._documents_of
    calls: list[list[tuple[str, int]]] = []
    edited: list[int] = []

    def edit_after_the_check(refs: list[tuple[str, int]]) -> dict:
        documents = read(refs)
        calls.append(refs)
        if len(calls) == 2:  # the batch's texts checked as they are now: another process edits one and indexes it
            memo_id = next(ref_id for kind, ref_id in refs if kind == "memo")
            name = world.memos.by_ids([memo_id])[memo_id].name
            edited.append(memo_id)

            def edit() -> None:
                elsewhere.memos.edit(name, MemoChanges.create(content="carol drinks hot cocoa"), None, "test")
                elsewhere.index.catch_up()

            editing = threading.Thread(target=edit)
            editing.start()
            editing.join(1)  # it waits for this batch's write (SQLite's write lock, PostgreSQL's advisory lock)
            threads.append(editing)
        return documents

    threads: list[threading.Thread] = []
    monkeypatch.setattr(world.index, "_documents_of", edit_after_the_check)
    try:
        world.index._embed_queued()
        for thread in threads:
            thread.join(60)
        monkeypatch.undo()
        world.index.sync()
        with world.engine.connect() as connection:
            stored = connection.execute(
                text("SELECT text FROM search_docs WHERE kind = 'memo' AND ref_id = :id"), {"id": edited[0]}
            ).scalar_one()
        assert stored.startswith("carol drinks hot cocoa")
        assert world.memo_names("carol drinks hot cocoa", limit=1) == [world.memos.by_ids(edited)[edited[0]].name]
    finally:
        elsewhere.close()


@contextmanager
def _statements(world: World, starting: str) -> Iterator[list[bool]]:
    """Collects, for each statement run starting with `starting`, whether it ran as one executemany."""
    ran: list[bool] = []

    def seen(connection, cursor, statement, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().startswith(starting):
            ran.append(executemany)

    event.listen(world.engine, "before_cursor_execute", seen)
    try:
        yield ran
    finally:
        event.remove(world.engine, "before_cursor_execute", seen)


def test_a_batch_is_claimed_and_released_in_one_statement_each(world: World) -> None:
    """A batch's texts are claimed together and released together (one executemany each), not one statement per text."""
    with _statements(world, "UPDATE search_queue SET claimed_until") as claims:
        taken, _ = world.index._embed_queued()
    assert taken == BATCH_SIZE
    assert claims == [True, True]  # claimed, released
    assert world.index.pending() == FILLERS + 1 - BATCH_SIZE


def test_the_background_reads_the_vectors_back_once_per_sync_not_after_each_batch(world: World) -> None:
    """Rows written by the background's batches are read into the loaded vectors once, when `sync` ends: after each
    batch, the rows it wrote are only counted, and read back only when they could make a clustering due."""
    world.index.warm(["memo"])
    with _statements(world, "SELECT id, scope, channel, heard, at, CASE WHEN model") as refreshes:  # a refresh of a kind's vectors
        world.index.sync()
    assert len(_embedder(world).batches) >= (FILLERS + 1) // BATCH_SIZE  # eight batches
    assert len(refreshes) == 1
    assert world.memo_names("alice drinks beverage", limit=1) == ["tea"]


def test_the_background_clusters_a_growing_collection_between_its_batches(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows the background writes that make a clustering due are clustered before its next batch, not only when the
    whole backlog is done (searches read the rows added since the last clustering exactly)."""
    builds = counted_clusterings(monkeypatch)
    world = World(database_url, SlowEmbedder())
    builds_before_batch: list[int] = []
    passages = world.embedder.passages

    def embedding(texts: list[str]) -> np.ndarray:
        builds_before_batch.append(len(builds))
        return passages(texts)

    monkeypatch.setattr(world.embedder, "passages", embedding)
    try:
        for number in range(10):
            world.memo(f"note{number}", f"note number {number}")
        world.index.sync()
        world.index.warm(["memo"])
        assert len(builds) == 1
        for number in range(10, 10 + 3 * BATCH_SIZE):
            world.memo(f"note{number}", f"note number {number}")
        builds_before_batch.clear()
        world.index.sync()
        assert len(builds_before_batch) == 3
        assert builds_before_batch[-1] > 1  # clustered again before the last batch
        assert world.memo_names("note number 40", limit=1) == ["note40"]
    finally:
        world.close()
