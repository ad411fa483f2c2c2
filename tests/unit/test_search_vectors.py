"""The in-memory vector matrix: exact below a size, clustered above it, never returning what may not be seen."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from myao2.infrastructure.search import vectors
from myao2.infrastructure.search.vectors import StoredVector, VectorCache

DIM = 8
SCOPES = ["C1", "C2", "D1", None]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(1, 60), st.integers(0, 3), st.integers(0, 100), st.integers(0, 10_000)),
        st.tuples(st.just("discard"), st.integers(1, 60)),
    ),
    min_size=1,
    max_size=80,
)


def vector(seed: int) -> bytes:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return (v / np.linalg.norm(v)).tobytes()


def replay(steps: list[tuple]) -> tuple[VectorCache, dict[int, tuple[str | None, float, bytes]]]:
    """The cache after `steps`, and what should be live in it: id -> (scope, at, vector)."""
    cache, live, seq = VectorCache(), {}, 0
    for step in steps:
        if step[0] == "put":
            _, doc_id, scope, at, seed = step
            seq += 1
            live[doc_id] = (SCOPES[scope], float(at), vector(seed))
            cache.put([StoredVector(doc_id, SCOPES[scope], float(at), vector(seed), seq)])
        else:
            live.pop(step[1], None)
            cache.discard([step[1]])
    return cache, live


def exact(live: dict, query: np.ndarray, readable, before: float | None, count: int) -> list[int]:
    scored = [
        (float(np.frombuffer(v, dtype=np.float32) @ query), doc_id)
        for doc_id, (scope, at, v) in live.items()
        if readable(scope) and (before is None or at <= before)
    ]
    return [doc_id for _, doc_id in sorted(scored, key=lambda pair: (-round(pair[0], 5), pair[1]))[:count]]


def ranked(found: list[tuple[int, float]]) -> list[int]:
    """Ids best first, ties by id (as `exact` orders them)."""
    return [doc_id for doc_id, _ in sorted(found, key=lambda pair: (-round(pair[1], 5), pair[0]))]




def cluster(cache: VectorCache) -> None:
    """Cluster `cache` if due, as the background does (planned, built, adopted)."""
    plan = cache.plan_clustering()
    if plan is not None:
        plan.build()
        cache.adopt(plan)


@contextmanager
def clustering(probe_share: float) -> Iterator[None]:
    """Clustering from a handful of vectors on, reading `probe_share` of them."""
    with mock.patch.multiple(vectors, EXACT_ROWS=5, _PROBE_MIN=0, PROBE_SHARE=probe_share):
        yield


@settings(max_examples=30, deadline=None)
@given(steps=operations, seed=st.integers(0, 1000), readable_scopes=st.sets(st.sampled_from(SCOPES)), before=st.none() | st.integers(0, 100))
def test_exact_search_returns_the_best_live_readable_vectors_up_to_the_cutoff(steps, seed, readable_scopes, before) -> None:
    cache, live = replay(steps)
    query = np.frombuffer(vector(seed), dtype=np.float32)

    def readable(scope: str | None) -> bool:
        return scope in readable_scopes

    cutoff = None if before is None else float(before)
    assert ranked(cache.top(query, readable, cutoff, 10)) == exact(live, query, readable, cutoff, 10)


@settings(max_examples=30, deadline=None)
@given(steps=operations, seed=st.integers(0, 1000), readable_scopes=st.sets(st.sampled_from(SCOPES)), before=st.none() | st.integers(0, 100))
def test_a_clustered_search_never_returns_a_gone_unreadable_or_later_vector(steps, seed, readable_scopes, before) -> None:
    with clustering(probe_share=0.0):  # read the nearest cluster only
        cache, live = replay(steps)
        cluster(cache)
        query = np.frombuffer(vector(seed), dtype=np.float32)
        cutoff = None if before is None else float(before)
        found = cache.top(query, lambda scope: scope in readable_scopes, cutoff, 10)
    for doc_id, _ in found:
        scope, at, _ = live[doc_id]
        assert scope in readable_scopes and (cutoff is None or at <= cutoff)


@settings(max_examples=30, deadline=None)
@given(steps=operations, seed=st.integers(0, 1000), before=st.none() | st.integers(0, 100))
def test_a_clustered_search_reading_every_cluster_is_exact(steps, seed, before) -> None:
    with clustering(probe_share=1.0):
        cache, live = replay(steps)
        cluster(cache)
        query = np.frombuffer(vector(seed), dtype=np.float32)
        cutoff = None if before is None else float(before)
        found = ranked(cache.top(query, lambda scope: True, cutoff, 10))
    assert found == exact(live, query, lambda s: True, cutoff, 10)


def replay_in_batches(steps: list[tuple], cuts: set[int], clustered_at: int) -> VectorCache:
    """`replay`, but each run of puts is put at once (split where `cuts` say), as a first load puts its rows."""
    cache, batch, seq = VectorCache(), [], 0

    def flush() -> None:
        cache.put(batch, expected=len(batch))
        batch.clear()

    for index, step in enumerate(steps):
        if index == clustered_at:
            flush()
            cluster(cache)
        if step[0] == "put":
            _, doc_id, scope, at, seed = step
            seq += 1
            batch.append(StoredVector(doc_id, SCOPES[scope], float(at), vector(seed), seq))
            if index in cuts:
                flush()
        else:
            flush()
            cache.discard([step[1]])
    flush()
    return cache


@settings(max_examples=40, deadline=None)
@given(
    steps=operations,
    cuts=st.sets(st.integers(0, 80)),
    clustered_at=st.integers(0, 80),
    seed=st.integers(0, 1000),
    before=st.none() | st.integers(0, 100),
)
def test_rows_put_together_are_found_exactly_as_rows_put_one_by_one(steps, cuts, clustered_at, seed, before) -> None:
    with clustering(probe_share=0.5):
        one_by_one = VectorCache()
        for index, step in enumerate(steps):
            if index == clustered_at:
                cluster(one_by_one)
            if step[0] == "put":
                _, doc_id, scope, at, vector_seed = step
                one_by_one.put([StoredVector(doc_id, SCOPES[scope], float(at), vector(vector_seed), index + 1)])
            else:
                one_by_one.discard([step[1]])
        together = replay_in_batches(steps, cuts, clustered_at)
        query = np.frombuffer(vector(seed), dtype=np.float32)
        cutoff = None if before is None else float(before)
        for readable in (lambda scope: True, lambda scope: scope != "D1"):
            # Every live row, with its cosine: any row put with the wrong vector, scope or time shows.
            assert together.top(query, readable, cutoff, 100) == one_by_one.top(query, readable, cutoff, 100)
        assert len(together) == len(one_by_one)


def test_re_embedding_rows_that_still_fit_their_clusters_leaves_the_clustering_as_it_is() -> None:
    with clustering(probe_share=0.5):
        cache = VectorCache()
        rows = [StoredVector(doc_id, "C1", 0.0, vector(doc_id), doc_id) for doc_id in range(1, 41)]
        cache.put(rows)
        cluster(cache)
        again = [row._replace(seq=row.seq + 40) for row in rows]  # the same vectors, written anew
        moved = [StoredVector(1, "C1", 0.0, vector(1000), 81)]  # and one whose vector changed
        query = np.frombuffer(vector(7), dtype=np.float32)
        for row in again + moved:  # batch by batch, as a backlog is worked off
            cache.put([row])
        assert not cache.clustering_due()
        found = cache.top(query, lambda scope: True, None, 3)
        assert found[0][0] == 7 and len(cache) == 40


def test_a_search_never_clusters_and_reads_the_rows_added_since_the_clustering_exactly() -> None:
    with clustering(probe_share=0.0):  # of the clusters, only the nearest is read
        cache = VectorCache()
        cache.put([StoredVector(doc_id, "C1", 0.0, vector(doc_id), doc_id) for doc_id in range(1, 41)])
        cluster(cache)
        added = [StoredVector(doc_id, "C1", 0.0, vector(doc_id), doc_id) for doc_id in range(41, 81)]
        cache.put(added)  # as many again: due to be clustered again
        assert cache.clustering_due()
        with mock.patch.object(vectors.Clustering, "build") as built:
            for row in added:
                query = np.frombuffer(row.vector, dtype=np.float32)
                assert cache.top(query, lambda scope: True, None, 1)[0][0] == row.doc_id
        built.assert_not_called()
        assert cache.clustering_due()


@settings(max_examples=40, deadline=None)
@given(
    before_plan=operations,
    meanwhile=operations,
    seed=st.integers(0, 1000),
    before=st.none() | st.integers(0, 100),
)
def test_rows_put_or_discarded_while_a_clustering_is_built_are_as_put_once_it_is_adopted(before_plan, meanwhile, seed, before) -> None:
    with clustering(probe_share=1.0):
        cache, _ = replay(before_plan)
        plan = cache.plan_clustering()
        seq, live = 1000, replay(before_plan + meanwhile)[1]
        for step in meanwhile:  # while the background builds it, holding nothing
            if step[0] == "put":
                _, doc_id, scope, at, vector_seed = step
                seq += 1
                cache.put([StoredVector(doc_id, SCOPES[scope], float(at), vector(vector_seed), seq)])
            else:
                cache.discard([step[1]])
        if plan is not None:
            plan.build()
            cache.adopt(plan)
        query = np.frombuffer(vector(seed), dtype=np.float32)
        cutoff = None if before is None else float(before)
        for readable in (lambda scope: True, lambda scope: scope != "D1"):
            assert ranked(cache.top(query, readable, cutoff, 100)) == exact(live, query, readable, cutoff, 100)
        assert len(cache) == len(live)


def test_a_clustering_planned_again_before_the_first_was_adopted_replaces_it() -> None:
    with clustering(probe_share=1.0):
        cache = VectorCache()
        cache.put([StoredVector(doc_id, "C1", 0.0, vector(doc_id), doc_id) for doc_id in range(1, 41)])
        first = cache.plan_clustering()
        second = cache.plan_clustering()
        assert first is not None and second is not None
        first.build()
        cache.adopt(first)  # stale: ignored
        assert cache.clustering_due()
        cache.discard([1])
        second.build()
        cache.adopt(second)
        assert not cache.clustering_due() and len(cache) == 39
        query = np.frombuffer(vector(1), dtype=np.float32)
        assert 1 not in [doc_id for doc_id, _ in cache.top(query, lambda scope: True, None, 100)]
