"""Japanese word vectors: how near a query's words are to a text's, when they share no characters (新人 and 新入社員).

The embedding model reads a short memo mostly as the person it names; word vectors trained
on a large Japanese corpus (chiVe, via ja-ginza; see data/README.md) tell that 出社 is about
the 職場 and 新人 about 新入社員. A text is split into the longest words of the vocabulary,
left to right, keeping the words written with kanji or katakana; text in other scripts has
no words here. Loaded by the search index's warm-up (`SearchIndex.warm`, in the background as a process
starts), else on first use (about 20 MB in memory).
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

WORDS_FILE = Path(__file__).with_name("data") / "ja_words.npz"
MAX_WORD = 8
"""The longest word of the vocabulary, in characters."""
MAX_CHARACTERS = 1000
"""Text beyond this is not split (as the embedder cuts it)."""
_JAPANESE = r"\u3005\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"


@functools.cache
def _runs() -> re.Pattern[str]:
    return re.compile(rf"[{_JAPANESE}]+")


class WordVectors:
    """The vocabulary (sorted words, each with the row of its vector) and the 8-bit vectors."""

    def __init__(self, path: Path = WORDS_FILE) -> None:
        self._path = path
        self._loaded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load the vocabulary and the vectors now (about 0.1-0.3 s of CPU), not at their first use."""
        self._data()

    def _data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with self._lock:
            if self._loaded is None:
                import numpy as np

                with np.load(self._path) as stored:
                    self._loaded = (stored["words"], stored["rows"], stored["vectors"])
            return self._loaded

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (one instance per process): a memo is split once, not per search
    def words(self, text: str) -> tuple[int, ...]:
        """The vector rows of `text`'s words, in order: at each place the longest word of the vocabulary."""
        import numpy as np

        vocabulary, rows, _ = self._data()
        found: list[int] = []
        for run in _runs().findall(unicodedata.normalize("NFKC", text[:MAX_CHARACTERS])):
            candidates = [run[i : i + n] for i in range(len(run)) for n in range(1, min(MAX_WORD, len(run) - i) + 1)]
            wanted = np.array(candidates, dtype=vocabulary.dtype)
            at = np.minimum(np.searchsorted(vocabulary, wanted), len(vocabulary) - 1)
            hit = np.flatnonzero(vocabulary[at] == wanted)
            known = dict(zip((candidates[i] for i in hit), rows[at[hit]].tolist()))
            i = 0
            while i < len(run):
                word = next((run[i : i + n] for n in range(min(MAX_WORD, len(run) - i), 0, -1) if run[i : i + n] in known), None)
                if word is None:
                    i += 1
                else:
                    found.append(known[word])
                    i += len(word)
        return tuple(found)

    def closeness(self, query: str, texts: list[str]) -> list[float | None]:
        """For each text, the mean over the query's words of the cosine of its nearest word in the text; None for a
        text without words, or for every text when the query has none."""
        import numpy as np

        asked = list(dict.fromkeys(self.words(query)))
        if not asked:
            return [None] * len(texts)
        found = [self.words(text) for text in texts]
        vectors = self._data()[2]
        wanted = sorted(set(asked).union(*found))
        unit = vectors[wanted].astype(np.float32)
        unit /= np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)
        place = {row: i for i, row in enumerate(wanted)}
        query_unit = unit[[place[row] for row in asked]]
        return [
            float((query_unit @ unit[[place[row] for row in words]].T).max(axis=1).mean()) if words else None
            for words in found
        ]


@functools.cache
def word_vectors() -> WordVectors:
    """The process's word vectors (loaded by `WordVectors.load`, else on first use)."""
    return WordVectors()
