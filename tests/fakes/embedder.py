"""A fast, deterministic stand-in for an embedding model: hashed bags of keyword terms.

Texts sharing terms get close vectors, so exact-content searches behave like with a
real model, while property-based tests run thousands of searches in seconds. Each
embedder gives its first `DIMENSIONS` distinct terms a dimension of their own (no two
unrelated texts collide), and hashes any term beyond.
"""

from __future__ import annotations

import hashlib

import numpy as np

from myao2.infrastructure.search.text import terms

DIMENSIONS = 256


class HashEmbedder:
    """`Embedder` over hashed terms; `model_id` can be changed to test rebuilding."""

    def __init__(self, model_id: str = "fake/hash") -> None:
        self.model_id = model_id
        self.embedded = 0
        self._dimensions: dict[str, int] = {}

    def passages(self, texts: list[str]) -> np.ndarray:
        self.embedded += len(texts)
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, DIMENSIONS), np.float32)

    def query(self, text: str) -> np.ndarray:
        return self._vector(text)

    def _vector(self, text: str) -> np.ndarray:
        vector = np.full(DIMENSIONS, 1e-3, dtype=np.float32)
        for term in terms(text):
            vector[self._dimension(term)] += 1.0
        return vector / np.linalg.norm(vector)

    def _dimension(self, term: str) -> int:
        if term not in self._dimensions and len(self._dimensions) < DIMENSIONS:
            self._dimensions[term] = len(self._dimensions)
        if term in self._dimensions:
            return self._dimensions[term]
        return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "little") % DIMENSIONS
