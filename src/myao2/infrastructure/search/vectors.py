"""The vectors of one kind of document, in memory as one contiguous float32 matrix.

Loaded from `search_docs` on first use, then refreshed incrementally: rows written
since the last refresh (their `seq` is higher) are added, a changed row replaced.

Up to `EXACT_ROWS` vectors are scored exactly, by one matrix-vector product. Beyond,
the matrix is grouped into clusters (k-means on a sample), and a search scores the
clusters whose centres are nearest the query until it has read `PROBE_SHARE` of the
vectors it may see, plus every vector added since the clustering: an approximate
search whose cost grows with the square root of the collection, not with its size.

A search never clusters: clustering a million rows takes seconds. The background plans
a clustering of the rows as they are (`plan_clustering`), builds it holding nothing
(`Clustering.build`) while searches read the matrix as it is, and puts it in place
(`adopt`) with the rows put or discarded meanwhile applied again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

_INITIAL_CAPACITY = 1024
EXACT_ROWS = 20_000
"""Collections up to this size are searched exactly."""
PROBE_SHARE = 0.02
"""The share of the readable vectors an approximate search reads (at least `_PROBE_MIN` of them)."""
_PROBE_MIN = 4_000
_SAMPLE_PER_CLUSTER = 40
_ITERATIONS = 8
_CHUNK = 65_536


class StoredVector(NamedTuple):
    """A document row as the cache needs it (a tuple: a million of them are made at start-up)."""

    doc_id: int
    scope: Hashable
    """Who may read it, as the index tells (its audience and the conversation it came from)."""
    at: float
    vector: bytes
    """Empty when the document has no vector of this model yet: only its scope counts."""
    seq: int


class VectorCache:
    """Vectors of one kind, each with its document id, scope (who may read it) and time.

    Rows `[0, clustered)` are grouped by cluster (cluster c is rows `offsets[c]:offsets[c+1]`);
    rows from `clustered` on were added since, and are always read. A row whose new vector
    is nearer another cluster moves to the end, so no row sits in a cluster that no longer fits it.
    """

    def __init__(self, dim: int | None = None) -> None:
        self.seq = 0
        self.unread = 0
        """Rows this process wrote to the database since they were last read into this cache (kept by the index):
        that many rows at most are added at the next refresh."""
        self._dim = dim
        self._size = 0
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)
        self._scopes = np.zeros(0, dtype=np.int32)
        self._at = np.zeros(0, dtype=np.float64)
        self._alive = np.zeros(0, dtype=bool)
        self._positions: dict[int, int] = {}
        self._scope_codes: dict[Hashable, int] = {}
        self._scope_names: list[Hashable] = []
        self._live_per_scope = np.zeros(0, dtype=np.int64)
        self._clustered = 0
        self._centroids: np.ndarray | None = None
        self._offsets = np.zeros(1, dtype=np.int64)
        self._planned: Clustering | None = None
        """The clustering being built, which learns of every row put or discarded meanwhile."""

    def __len__(self) -> int:
        return len(self._positions)

    @property
    def scopes(self) -> list[Hashable]:
        """Every scope a stored document has had (with a vector or none yet)."""
        return list(self._scope_names)

    def put(self, rows: Iterable[StoredVector], expected: int = 0) -> None:
        """Add or replace rows (by document id); room for `expected` more rows is made at once."""
        wanted = self._size + expected
        if self._planned is not None:
            rows = list(rows)
            self._planned.touched.update(row.doc_id for row in rows)
        batch: list[StoredVector] = []
        for row in rows:
            batch.append(row)
            if len(batch) == _CHUNK:
                self._put_batch(batch, wanted)
                batch = []
        self._put_batch(batch, wanted)

    def _put_batch(self, rows: list[StoredVector], wanted: int) -> None:
        """Put `rows`, with room for `wanted` rows in all."""
        latest = {row.doc_id: row for row in rows}  # the last write wins
        bare = [doc_id for doc_id, row in latest.items() if not row.vector]
        for doc_id in bare:  # no vector of this model (yet): its scope is known, any vector it had is gone
            self._scope_code(latest.pop(doc_id).scope)
        self.discard(bare)
        if self._dim is None and latest:
            self._dim = len(next(iter(latest.values())).vector) // 4
            self._matrix = np.zeros((0, self._dim), dtype=np.float32)
        latest = {doc_id: row for doc_id, row in latest.items() if len(row.vector) == 4 * self._dim}
        if not latest:
            return
        kept = list(latest.values())
        matrix = np.frombuffer(b"".join([row.vector for row in kept]), dtype=np.float32).reshape(len(kept), -1)
        positions = self._positions
        moved = []
        for doc_id, fits in zip(latest, self._still_fitting(list(latest), matrix)):
            position = positions.get(doc_id)
            if position is None:
                moved.append(doc_id)
            else:
                self._kill(position)
                if position < self._clustered and not fits:
                    moved.append(doc_id)
        # New rows, and rows whose vector left their cluster, go to the end in their order.
        first = self._size
        self._reserve(max(len(moved), wanted - first))
        self._size += len(moved)
        positions.update(zip(moved, range(first, self._size)))
        where = np.fromiter((positions[doc_id] for doc_id in latest), dtype=np.int64, count=len(latest))
        codes = np.fromiter((self._scope_code(row.scope) for row in kept), dtype=np.int32, count=len(kept))
        self._matrix[where] = matrix
        self._ids[where] = np.fromiter(latest, dtype=np.int64, count=len(latest))
        self._scopes[where] = codes
        self._at[where] = np.fromiter((row.at for row in kept), dtype=np.float64, count=len(kept))
        self._alive[where] = True
        np.add.at(self._live_per_scope, codes, 1)
        self.seq = max(self.seq, max(row.seq for row in kept))

    def _still_fitting(self, doc_ids: list[int], matrix: np.ndarray) -> np.ndarray:
        """Of rows about to be replaced, which are clustered and still nearest their own cluster with their new vector.

        Such a row is replaced where it is: re-embedding a text (a new way of embedding, the same
        model) hardly moves its vector, and moving every re-embedded row to the end would have the
        background re-cluster the whole collection again and again while a backlog is worked off.
        """
        fitting = np.zeros(len(doc_ids), dtype=bool)
        if self._centroids is None:
            return fitting
        where = np.fromiter((self._positions.get(doc_id, -1) for doc_id in doc_ids), dtype=np.int64, count=len(doc_ids))
        clustered = np.flatnonzero((where >= 0) & (where < self._clustered))
        if len(clustered) > self._clustered // 4:  # as costly as clustering again, which they make due anyway
            return fitting
        own = np.searchsorted(self._offsets, where[clustered], side="right") - 1
        fitting[clustered] = own == np.argmax(matrix[clustered] @ self._centroids.T, axis=1)
        return fitting

    def discard(self, doc_ids: Iterable[int]) -> None:
        """Forget documents that were deleted."""
        if self._planned is not None:
            doc_ids = list(doc_ids)
            self._planned.touched.update(doc_ids)
        for doc_id in doc_ids:
            position = self._positions.pop(doc_id, None)
            if position is not None:
                self._kill(position)

    def vector_of(self, doc_id: int) -> np.ndarray | None:
        position = self._positions.get(doc_id)
        return None if position is None else self._matrix[position]

    def top(
        self,
        query: np.ndarray,
        readable: Callable[[Hashable], bool],
        before: float | None,
        count: int,
    ) -> list[tuple[int, float]]:
        """The `count` best (document id, cosine) pairs among vectors in a readable scope, at or before `before`."""
        if self._size == 0 or self._dim is None or query.shape[0] != self._dim or count <= 0:
            return []
        allowed = self._allowed(readable)
        found, cosines = self._scored(query, allowed, before, self._slices(query, allowed))
        if len(found) < count and self._centroids is not None:  # an early cutoff left too few nearby
            found, cosines = self._scored(query, allowed, before, [(0, self._size)])
        if count < len(found):
            best = np.argpartition(-cosines, count - 1)[:count]
        else:
            best = np.arange(len(found))
        best = best[np.argsort(-cosines[best])]
        return [(int(self._ids[found[i]]), float(cosines[i])) for i in best]

    def count(self, readable: Callable[[Hashable], bool]) -> int:
        """How many vectors are in a readable scope; safe without the cache's lock (a count as of some moment)."""
        live = self._live_per_scope  # replaced whole when a scope is added, before any row of it is counted
        names = self._scope_names[: len(live)]
        allowed = np.fromiter((readable(s) for s in names), dtype=bool, count=len(names))
        return int(live[: len(names)][allowed].sum())

    def count_between(self, readable: Callable[[Hashable], bool], low: int, high: int) -> int:
        """How many vectors with a document id from `low` to `high` are in a readable scope."""
        ids = self._ids[: self._size]
        eligible = self._alive[: self._size] & self._allowed(readable)[self._scopes[: self._size]]
        return int(np.count_nonzero(eligible & (ids >= low) & (ids <= high)))

    def _allowed(self, readable: Callable[[Hashable], bool]) -> np.ndarray:
        """Whether each scope code is readable."""
        return np.fromiter((readable(s) for s in self._scope_names), dtype=bool, count=len(self._scope_names))

    def _scored(
        self, query: np.ndarray, allowed: np.ndarray, before: float | None, slices: list[tuple[int, int]]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The positions of the eligible rows in `slices`, and their cosines."""
        positions, scores = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.float32)]
        for lo, hi in slices:
            mask = self._alive[lo:hi] & allowed[self._scopes[lo:hi]]
            if before is not None:
                mask &= self._at[lo:hi] <= before
            eligible = np.flatnonzero(mask)
            if len(eligible) * 2 < hi - lo:
                scores.append(self._matrix[lo + eligible] @ query)
            else:
                scores.append((self._matrix[lo:hi] @ query)[eligible])
            positions.append(eligible + lo)
        return np.concatenate(positions), np.concatenate(scores)

    def _slices(self, query: np.ndarray, allowed: np.ndarray) -> list[tuple[int, int]]:
        """The row ranges to read: all of them, or the clusters nearest `query` and the rows added since."""
        readable_rows = int(self._live_per_scope[: len(allowed)][allowed].sum())
        if self._centroids is None or readable_rows <= _PROBE_MIN:
            return [(0, self._size)]
        wanted = max(_PROBE_MIN, int(readable_rows * PROBE_SHARE))
        slices = [(self._clustered, self._size)]
        taken = 0
        for cluster in np.argsort(-(self._centroids @ query)):
            lo, hi = int(self._offsets[cluster]), int(self._offsets[cluster + 1])
            slices.append((lo, hi))
            taken += hi - lo
            if taken * readable_rows >= wanted * self._clustered:  # about `wanted` readable rows read
                break
        return slices

    def clustering_due(self, added: int = 0) -> bool:
        """Whether the rows should be clustered (again): a large collection not clustered yet, or one a quarter
        of whose rows were added since (searches read those exactly); or clusters of one grown small to drop.

        With `added`, whether they may be once up to that many rows more are put (rows new or moved to the end).
        """
        if len(self._positions) <= EXACT_ROWS and self._centroids is not None:
            return True
        if len(self._positions) + added <= EXACT_ROWS:
            return False
        return self._centroids is None or self._size + added - self._clustered > self._clustered // 4

    def plan_clustering(self) -> Clustering | None:
        """A clustering of the live rows as they are, to `build` holding nothing and then `adopt`; None when
        none is due. A small collection's clusters are dropped here (searched exactly from now on).

        The plan reads the matrix in place: a row put or discarded from now on is noted, and applied
        again when the clustering is adopted. A plan made since replaces this one.
        """
        self._planned = None
        if not self.clustering_due():
            return None
        if len(self._positions) <= EXACT_ROWS:
            self._centroids = None
            self._clustered = 0
            return None
        size = self._size
        self._planned = Clustering(
            self._matrix[:size], self._ids[:size], self._scopes[:size], self._at[:size], self._alive[:size].copy(), len(self._scope_names)
        )
        return self._planned

    def adopt(self, clustering: Clustering) -> None:
        """Put a built clustering in place, with the rows put or discarded since it was planned as they are now
        (a plan made since, or one not built, is ignored). Takes as long as those rows take to put."""
        built = clustering.built
        if clustering is not self._planned or built is None:
            return
        self._planned = None
        matrix, scopes, at, positions = self._matrix, self._scopes, self._at, self._positions
        self._matrix, self._ids, self._scopes, self._at, self._alive = built.matrix, built.ids, built.scopes, built.at, built.alive
        self._size = self._clustered = built.size
        self._positions = built.positions
        self._centroids, self._offsets = built.centroids, built.offsets
        self._live_per_scope = np.zeros(len(self._scope_names), dtype=np.int64)
        self._live_per_scope[: len(built.live_per_scope)] = built.live_per_scope
        again, gone = [], []
        for doc_id in clustering.touched:
            position = positions.get(doc_id)
            if position is None:
                gone.append(doc_id)
            else:
                again.append(
                    StoredVector(doc_id, self._scope_names[scopes[position]], float(at[position]), matrix[position].tobytes(), self.seq)
                )
        self.discard(gone)
        self._put_batch(again, self._size + len(again))

    def _scope_code(self, scope: Hashable) -> int:
        code = self._scope_codes.get(scope)
        if code is None:
            code = self._scope_codes[scope] = len(self._scope_names)
            self._scope_names.append(scope)
            self._live_per_scope = np.append(self._live_per_scope, 0)
        return code

    def _kill(self, position: int) -> None:
        if self._alive[position]:
            self._alive[position] = False
            self._live_per_scope[self._scopes[position]] -= 1

    def _reserve(self, count: int) -> None:
        """Room for `count` more rows: capacity at least doubles, so rows added one by one cost little."""
        if self._size + count <= self._matrix.shape[0] or self._dim is None:
            return
        capacity = max(_INITIAL_CAPACITY, self._size * 2, self._size + count)
        self._matrix = _grown(self._matrix, capacity)
        self._ids = _grown(self._ids, capacity)
        self._scopes = _grown(self._scopes, capacity)
        self._at = _grown(self._at, capacity)
        self._alive = _grown(self._alive, capacity)


@dataclass
class _Built:
    """A cache's arrays grouped by cluster: rows `[0, size)` all live, cluster c at `offsets[c]:offsets[c+1]`."""

    matrix: np.ndarray
    ids: np.ndarray
    scopes: np.ndarray
    at: np.ndarray
    alive: np.ndarray
    size: int
    positions: dict[int, int]
    centroids: np.ndarray
    offsets: np.ndarray
    live_per_scope: np.ndarray


@dataclass
class Clustering:
    """A clustering of a cache's rows as they were planned (see `VectorCache.plan_clustering`)."""

    matrix: np.ndarray
    ids: np.ndarray
    scopes: np.ndarray
    at: np.ndarray
    alive: np.ndarray
    scope_count: int
    touched: set[int] = field(default_factory=set)
    """Documents put or discarded since the plan: the cache notes them, `VectorCache.adopt` applies them again."""
    built: _Built | None = None

    def build(self) -> None:
        """Group the planned live rows by k-means cluster (seconds for a million rows): call it holding nothing.

        Rows changed meanwhile may be read half-written: they are among `touched`, put again on adoption.
        """
        live = np.flatnonzero(self.alive)
        k = min(len(live), 1024, max(16, round(math.sqrt(len(live)) / 4)))
        rng = np.random.default_rng(0)
        sample = self.matrix[rng.choice(live, min(len(live), k * _SAMPLE_PER_CLUSTER), replace=False)]
        centroids = sample[rng.choice(len(sample), k, replace=False)].copy()
        for _ in range(_ITERATIONS):
            nearest = np.argmax(sample @ centroids.T, axis=1)
            sums = np.zeros_like(centroids)
            np.add.at(sums, nearest, sample)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            centroids = np.where(norms > 0, sums / np.maximum(norms, 1e-12), centroids)
        nearest = np.concatenate(
            [np.argmax(self.matrix[live[i : i + _CHUNK]] @ centroids.T, axis=1) for i in range(0, len(live), _CHUNK)]
        )
        order = live[np.argsort(nearest, kind="stable")]
        size = len(order)
        capacity = size + size // 4 + _INITIAL_CAPACITY
        ids = _gathered(self.ids, order, capacity)
        scopes = _gathered(self.scopes, order, capacity)
        alive = np.zeros(capacity, dtype=bool)
        alive[:size] = True
        self.built = _Built(
            matrix=_gathered(self.matrix, order, capacity),
            ids=ids,
            scopes=scopes,
            at=_gathered(self.at, order, capacity),
            alive=alive,
            size=size,
            positions=dict(zip(ids[:size].tolist(), range(size))),
            centroids=centroids.astype(np.float32),
            offsets=np.concatenate([[0], np.cumsum(np.bincount(nearest, minlength=k))]),
            live_per_scope=np.bincount(scopes[:size], minlength=self.scope_count).astype(np.int64),
        )


def _gathered(array: np.ndarray, order: np.ndarray, capacity: int) -> np.ndarray:
    """`array[order]` at the start of a new array of `capacity` rows (one copy, not two)."""
    gathered = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    np.take(array, order, axis=0, out=gathered[: len(order)])
    return gathered


def _grown(array: np.ndarray, capacity: int) -> np.ndarray:
    grown = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown
