"""Opening the search index as configured, for the bot and the command line alike."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import Dialect

from myao2.config import SearchConfig
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.search.embedders import make_embedder
from myao2.infrastructure.search.index import KINDS, SearchIndex
from myao2.infrastructure.threads import name_thread

__all__ = ["IndexProgressLog", "IndexWorker", "SearchIndex", "open_index"]

logger = logging.getLogger(__name__)

GATHER_SECONDS = 0.5
"""How long no change must come before the index worker indexes what came (one batch a burst): embedding takes the
cores the answers need, and beside answers it made their p99 latency three times as long, so it waits for a lull."""
GATHER_CAP_SECONDS = 5.0
"""The longest the index worker waits for a lull after the first change: a channel that never goes quiet is still
indexed every few seconds, in batches (a sync takes what was queued as it began; what comes meanwhile is gathered
for the next). Searches are fresh either way (`SearchIndex.catch_up` applies what they need first)."""
THREAD_NAME = "search-index"
"""The index worker's thread name, also in `top -H` and `ps -L` (bench/mention_latency.py tells its CPU apart by it)."""


def open_index(
    engine: Engine,
    config: SearchConfig,
    memos: SqlMemoStore,
    conversations: SqlConversationStore,
    memories: SqlMemoryStore | None = None,
) -> SearchIndex:
    """The search index of this database (SQLite or PostgreSQL), with the configured embedder."""
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

    It sleeps until a transaction of this process has committed or a search found vectors to
    cluster (nothing is polled), then
    indexes what was queued once no change has come for a short pause (`GATHER_SECONDS`, at most `GATHER_CAP_SECONDS`
    after the first change), so a burst is one batch and embedding keeps out of the answers' way (changes that
    come while it indexes wait for the next batch), and, as it starts, embeds every text waiting for it (a backlog
    of hours after a model change, new texts first). Changes
    other processes make are indexed with the next ones made here, and a search applies
    the changes it needs first anyway (see `SearchIndex.catch_up`). The thread runs at the process's CPU
    priority: a lowered one was starved on a busy machine while it held the GIL or the index, and answers
    waited for it. A batch is one transaction, so a process stopping in the middle of one loses nothing.
    """

    def __init__(
        self,
        index: SearchIndex,
        engine: Engine,
        gather_seconds: float = GATHER_SECONDS,
        warm: Iterable[str] = KINDS,
        cap_seconds: float = GATHER_CAP_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
    ) -> None:
        self._index = index
        self._warm = tuple(warm)
        """The kinds whose vectors are loaded at start, for the searches to come (a million messages' take a while)."""
        self._engine = engine
        self._gather = gather_seconds
        self._cap = cap_seconds
        self._clock = clock
        self._wait = wait
        """Waits for an event up to a time (`Event.wait`), the clock's seconds: a test's fakes run both."""
        self._first = self._last = 0.0
        """When the first and the last change since the last sync came."""
        self._stopped = threading.Event()
        self._changed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)

    def start(self) -> None:
        """Start indexing; a worker already stopped stays stopped."""
        if self._stopped.is_set():
            return
        _CommitHook.add(self._engine.dialect, self._committed)
        self._index.wake_with(self._change)
        self._thread.start()

    def stop(self) -> None:
        """Stop indexing (also before `start`, which then starts nothing); stopping it again does nothing."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread.ident is not None:  # started
            _CommitHook.remove(self._engine.dialect, self._committed)
        self._changed.set()
        self._index.close()

    def _committed(self) -> None:
        """Told of each commit of the engine (`_CommitHook`): wakes the worker, unless it is its own (its writes
        queue nothing)."""
        if threading.current_thread() is not self._thread:
            self._change()

    def _change(self) -> None:
        """Note a change to index (or vectors to cluster) and wake the worker."""
        now = self._clock()
        if not self._changed.is_set():
            self._first = now
        self._last = now
        self._changed.set()

    def _lulled(self) -> bool:
        """Wait until no change has come for the gathering pause, or the cap after the first has passed; false
        if stopped (at once)."""
        while (left := min(self._last + self._gather, self._first + self._cap) - self._clock()) > 0:
            if self._wait(self._stopped, left):
                return False
        return not self._stopped.is_set()

    def _run(self) -> None:
        name_thread(THREAD_NAME)
        try:
            self._index.warm(self._warm)  # first: a backlog may take long, and searches meanwhile need the vectors
            self._index.sync(IndexProgressLog())
            self._index.warm(self._warm)
        except Exception:
            logger.exception("search indexing failed; searches will index what they need")
        while self._changed.wait() and self._lulled():
            self._changed.clear()
            try:
                self._index.sync(only_queued=True)  # what comes meanwhile wakes it again, to be gathered
            except Exception:
                logger.exception("search indexing failed; retrying with the next change")


class _CommitHook:
    """A dialect's `do_commit` (through which SQLAlchemy commits every transaction), telling each worker on its
    engine of each commit once done; installed with the first worker, the dialect's own again once the last stops.

    Not SQLAlchemy's "commit" event: a connection-level listener on the engine makes every connection of it
    dispatch all its events (each statement's, before and after) through listeners it builds for itself,
    ~50 us of CPU per trip to the database of four statements, on every trip the bot makes."""

    _lock = threading.Lock()  # workers start and stop on any thread

    def __init__(self, commit: Callable[[Any], None]) -> None:
        self._commit = commit
        self._told: tuple[Callable[[], None], ...] = ()  # replaced, never changed: commits read it unlocked

    def __call__(self, dbapi_connection: Any) -> None:
        self._commit(dbapi_connection)
        for tell in self._told:
            tell()

    @classmethod
    def add(cls, dialect: Dialect, tell: Callable[[], None]) -> None:
        """Tell `tell()` of each commit through `dialect` from now on."""
        with cls._lock:
            hook = vars(dialect).get("do_commit")
            if not isinstance(hook, cls):
                hook = cls(dialect.do_commit)
                dialect.do_commit = hook  # type: ignore[method-assign]
            hook._told = (*hook._told, tell)

    @classmethod
    def remove(cls, dialect: Dialect, tell: Callable[[], None]) -> None:
        """Tell `tell()` of no more commits; the last one gone, `dialect` commits by its own `do_commit` again."""
        with cls._lock:
            hook = vars(dialect)["do_commit"]
            hook._told = tuple(t for t in hook._told if t != tell)
            if not hook._told:
                del dialect.do_commit
