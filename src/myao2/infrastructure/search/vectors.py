"""The vectors of one kind of document, in memory as one contiguous float32 matrix.

Loaded from `search_docs` on first use, then refreshed incrementally: rows written
since the last refresh (their `seq` is higher) are added or replaced in place.
Scoring is one matrix-vector product and an `argpartition`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

_INITIAL_CAPACITY = 1024


@dataclass(frozen=True)
class StoredVector:
    """A document row as the cache needs it."""

    doc_id: int
    scope: str | None
    at: float
    vector: bytes
    seq: int


class VectorCache:
    """Vectors of one kind, each with its document id, scope (who may read it) and time."""

    def __init__(self, dim: int | None = None) -> None:
        self.seq = 0
        self._dim = dim
        self._size = 0
        self._matrix = np.zeros((0, dim or 0), dtype=np.float32)
        self._ids = np.zeros(0, dtype=np.int64)
        self._scopes = np.zeros(0, dtype=np.int32)
        self._at = np.zeros(0, dtype=np.float64)
        self._alive = np.zeros(0, dtype=bool)
        self._positions: dict[int, int] = {}
        self._scope_codes: dict[str | None, int] = {}
        self._scope_names: list[str | None] = []

    def __len__(self) -> int:
        return len(self._positions)

    @property
    def scopes(self) -> list[str | None]:
        """Every scope a stored vector has had."""
        return list(self._scope_names)

    def put(self, rows: Iterable[StoredVector]) -> None:
        """Add or replace rows (by document id)."""
        for row in rows:
            vector = np.frombuffer(row.vector, dtype=np.float32)
            if self._dim is None:
                self._dim = vector.shape[0]
                self._matrix = np.zeros((0, self._dim), dtype=np.float32)
            if vector.shape[0] != self._dim:
                continue
            position = self._positions.get(row.doc_id)
            if position is None:
                position = self._append_slot()
                self._positions[row.doc_id] = position
            self._matrix[position] = vector
            self._ids[position] = row.doc_id
            self._scopes[position] = self._scope_code(row.scope)
            self._at[position] = row.at
            self._alive[position] = True
            self.seq = max(self.seq, row.seq)

    def discard(self, doc_ids: Iterable[int]) -> None:
        """Forget documents that were deleted."""
        for doc_id in doc_ids:
            position = self._positions.pop(doc_id, None)
            if position is not None:
                self._alive[position] = False

    def vector_of(self, doc_id: int) -> np.ndarray | None:
        position = self._positions.get(doc_id)
        return None if position is None else self._matrix[position]

    def top(
        self,
        query: np.ndarray,
        readable: Callable[[str | None], bool],
        before: float | None,
        count: int,
    ) -> list[tuple[int, float]]:
        """The `count` best (document id, cosine) pairs among vectors in a readable scope, at or before `before`."""
        n = self._size
        if n == 0 or self._dim is None or query.shape[0] != self._dim:
            return []
        allowed = np.fromiter((readable(s) for s in self._scope_names), dtype=bool, count=len(self._scope_names))
        mask = self._alive[:n] & allowed[self._scopes[:n]]
        if before is not None:
            mask &= self._at[:n] <= before
        scores = self._matrix[:n] @ query
        scores[~mask] = -np.inf
        eligible = int(mask.sum())
        count = min(count, eligible)
        if count <= 0:
            return []
        best = np.argpartition(-scores, count - 1)[:count] if count < n else np.arange(n)
        best = best[np.argsort(-scores[best])]
        return [(int(self._ids[i]), float(scores[i])) for i in best if mask[i]]

    def _scope_code(self, scope: str | None) -> int:
        code = self._scope_codes.get(scope)
        if code is None:
            code = self._scope_codes[scope] = len(self._scope_names)
            self._scope_names.append(scope)
        return code

    def _append_slot(self) -> int:
        if self._size == self._matrix.shape[0]:
            capacity = max(_INITIAL_CAPACITY, self._size * 2)
            self._matrix = _grown(self._matrix, capacity)
            self._ids = _grown(self._ids, capacity)
            self._scopes = _grown(self._scopes, capacity)
            self._at = _grown(self._at, capacity)
            self._alive = _grown(self._alive, capacity)
        self._size += 1
        return self._size - 1


def _grown(array: np.ndarray, capacity: int) -> np.ndarray:
    grown = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown
