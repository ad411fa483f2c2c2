"""CPU instructions of a prompt's memo read (`SqlMemoStore.for_prompt`) by the size of the notebook.

Run from the repository root (needs valgrind: ``apt-get install valgrind``)::

    .venv/bin/python bench/memo_read_cost.py [--reads N] [--src DIR ...]

In one process under ``valgrind --tool=callgrind``, on an SQLite file of 0, 100, 500 and 5,000 live memos (as many
again removed; four in five kept for the workspace, the others for 20 DMs; priorities 1-5; 5 pinned), the read a
prompt makes (20 important, 5 recent) in a public channel and in one of the DMs, per read. The read's cost should
follow what it returns, not the notebook. ``--src`` counts another source tree (e.g. a checkout of main) beside this
one's, for A/B figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import callgrind  # noqa: E402

SIZES = (0, 100, 500, 5000)
READERS = ("channel", "DM")
STAGES = tuple(f"{size:,} memos, {reader}" for size in SIZES for reader in READERS)

# os.getppid() (called nowhere else) marks the end of each part, where callgrind writes out what it counted so far:
# each notebook's making and warm-up is a part, then each reader's reads one.
SCRIPT = """
import gc, os, sys, tempfile
from datetime import datetime, timedelta, timezone
from sqlalchemy import insert
from myao2.application.context import IMPORTANT_MEMO_LIMIT, RECENT_MEMO_LIMIT
from myao2.domain.conversation import Channel, ChannelKind
from myao2.domain.memo import IMPORTANT_PRIORITY
from myao2.domain.visibility import Reader
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.tables import MemoPinRow, MemoRow

READS = int(sys.argv[1])
SIZES = [int(size) for size in sys.argv[2:]]
START = datetime(2025, 1, 1, tzinfo=timezone.utc)
CHANNELS = [Channel("C1", "general"), *(Channel(f"D{i}", f"dm{i}", ChannelKind.IM) for i in range(20))]


def memo(number, removed):
    at = START + timedelta(minutes=number)
    dm = number % 5 == 4
    return {"name": f"memo-{number}", "content": f"memo {number}", "priority": 1 + number * 7 % 5, "tags": ["t"],
            "channel_id": f"D{number % 20}" if dm else "C1", "visibility": "conversation" if dm else "workspace",
            "created_at": at, "updated_at": at, "removed_at": at if removed else None}


for size in SIZES:
    engine = open_database(f"sqlite:///{tempfile.mkdtemp()}/memory.db")
    conversations = SqlConversationStore(engine, SystemClock())
    for channel in CHANNELS:
        conversations.save_channel(channel)
    with engine.begin() as connection:
        if size:
            connection.execute(insert(MemoRow.__table__), [memo(n, n % 2 == 1) for n in range(2 * size)])
            connection.execute(insert(MemoPinRow.__table__),
                               [{"memo_id": i, "pinned_by": "cli", "pinned_at": START} for i in range(1, 10, 2)])
    store = SqlMemoStore(engine, SystemClock())
    readers = [Reader.of(c.id, c) for c in (CHANNELS[0], CHANNELS[5])]  # D4 keeps memos
    for reader in readers:
        for _ in range(5):
            store.for_prompt(reader, min_priority=IMPORTANT_PRIORITY, important=IMPORTANT_MEMO_LIMIT,
                             recent=RECENT_MEMO_LIMIT)
    gc.collect()
    gc.disable()
    os.getppid()
    for reader in readers:
        for _ in range(READS):
            store.for_prompt(reader, min_priority=IMPORTANT_PRIORITY, important=IMPORTANT_MEMO_LIMIT,
                             recent=RECENT_MEMO_LIMIT)
        os.getppid()
    gc.enable()
    engine.dispose()
"""


def measure(src: Path, folder: Path, reads: int) -> list[int]:
    """Each stage's instructions per read with the bot's modules from `src`."""
    args = [str(reads), *map(str, SIZES)]
    env = callgrind.tree_env(src)
    counted = callgrind.parts(SCRIPT, args, folder, len(SIZES) * (len(READERS) + 1), env=env, cwd=ROOT)
    per_size = len(READERS) + 1  # the notebook's making, then each reader's reads
    return [counted[i] // reads for i in range(len(counted)) if i % per_size]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=20, help="reads counted per stage (default 20)")
    return callgrind.compare(
        parser, argv, lambda tree, folder, args: measure(tree, folder, args.reads), STAGES, "per read (K)", 1e3
    )


if __name__ == "__main__":
    raise SystemExit(main())
