"""Opening the search index as configured, for the bot and the command line alike."""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Engine

from myao2.config import SearchConfig
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.search.embedders import make_embedder
from myao2.infrastructure.search.index import SearchIndex

__all__ = ["IndexProgressLog", "IndexWorker", "SearchIndex", "open_index"]

logger = logging.getLogger(__name__)


def open_index(
    engine: Engine,
    config: SearchConfig,
    memos: SqlMemoStore,
    conversations: SqlConversationStore,
    memories: SqlMemoryStore | None = None,
) -> SearchIndex | None:
    """The search index of this database; None where search is not available (databases other than SQLite)."""
    if engine.dialect.name != "sqlite":
        logger.warning("search needs SQLite; the search tools are off for %s", engine.dialect.name)
        return None
    return SearchIndex(engine, make_embedder(config), memos, conversations, memories)


class IndexProgressLog:
    """Logs indexing progress about every tenth of a large backlog."""

    def __init__(self) -> None:
        self._logged = 0

    def __call__(self, done: int, total: int) -> None:
        step = max(total // 10, 200)
        if done - self._logged >= step or (done == total and self._logged and done != self._logged):
            self._logged = done
            logger.info("search index: %d of %d documents indexed", done, total)


class IndexWorker:
    """Keeps the index up to date from a daemon thread: never on the event loop, never holding up shutdown.

    A batch is one transaction, so a process stopping in the middle of one loses nothing.
    """

    def __init__(self, index: SearchIndex, interval_seconds: float) -> None:
        self._index = index
        self._interval = interval_seconds
        self._stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="search-index", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        self._index.close()

    def _run(self) -> None:
        try:
            self._index.sync(IndexProgressLog())
            self._index.warm()
        except Exception:
            logger.exception("search indexing failed; searches will index what they need")
        while not self._stopped.wait(self._interval):
            try:
                self._index.sync()
            except Exception:
                logger.exception("search indexing failed; retrying")
