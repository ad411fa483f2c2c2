"""CPU instructions the event loop spends per answer on the model path: the prompt context, the reply.

Run from the repository root (needs valgrind: ``apt-get install valgrind``)::

    .venv/bin/python bench/reply_cost.py [--replies N] [--src DIR ...]

In one process under ``valgrind --tool=callgrind``, against the fake model in a process of its own (not
counted), with a prompt like a busy channel's (30 messages, 20 important and 5 recent memos, memories):

* context: `ContextBuilder.assemble` (the conversation formatted and fitted to its budget);
* reply: `StrandsReplyWriter.write` (the prompt rendered, strands' agent, the streamed model call), with the
  bot's tools (memos and search) offered.

Wall and CPU times move by half or more on a machine other processes load (``bench/mention_latency.py`` prints
them); instructions do not, so a change of a few percent shows. Garbage collection is off while counting and hash
randomisation fixed. ``--src`` counts another source tree (e.g. a checkout of main) beside this one's, for A/B
figures. Under callgrind a tree takes 1-2 minutes of CPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import callgrind  # noqa: E402

STAGES = ("context", "reply")

# os.getppid() (called nowhere else) marks the end of each stage, where callgrind writes out what it counted so far.
SCRIPT = """
import asyncio, gc, os, subprocess, sys, tempfile
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo
from myao2.application.context import Budget, ContextBuilder, MemorySection, MemorySections, Persona
from myao2.config import AgentConfig, AgentsConfig
from myao2.domain.conversation import Channel, Message
from myao2.domain.memo import Memo, Origin
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.llm.agents import ModelClients, StrandsReplyWriter, load_model_libraries
from myao2.infrastructure.llm.phrases import prompt_marks
from myao2.infrastructure.llm.prompts import PromptRenderer

REPLIES = int(sys.argv[1])
NOW = datetime(2026, 1, 2, 3, 0, tzinfo=timezone.utc)
PERSONA = Persona("みゃお", "猫が好き。", "ja", ZoneInfo("Asia/Tokyo"))
CHANNEL = Channel("C1", "general")
NAMES = {"U1": "アリス", "U2": "ボブ", "UBOT": "みゃお"}
MESSAGES = [
    Message("C1", f"{1767322800 + 60 * i}.000100", ("U1", "U2", "UBOT")[i % 3],
            f"<@UBOT> ラーメンの話 {i}: 昨日の店は替え玉が無料で、スープも濃厚だった" if i % 3 != 2
            else f"いいね、今度一緒に行こう {i}", ("アリス", "ボブ", "みゃお")[i % 3])
    for i in range(30)
]
MEMOS = tuple(Memo(f"alice-food-{i}", f"アリスは食べ物 {i} が好き", 4, ("食べ物",), NOW, NOW, id=i)
              for i in range(20))
RECENT = tuple(Memo(f"bob-{i}", f"ボブの近況 {i}", 2, ("近況",), NOW, NOW, id=100 + i) for i in range(5))
MEMORY = MemorySections(
    workspace=MemorySection(tuple(f"- ワークスペースのこと {i}" for i in range(10))),
    channel_short=MemorySection(tuple(f"- 最近の話題 {i}" for i in range(8))),
)
STORED = ((), MEMOS, RECENT), MEMORY


class Clock:
    def now(self):
        return NOW


async def main():
    fake = subprocess.Popen([sys.executable, "-m", "tests.fakes.openai_server", "--text", "いいね、行こう！"],
                            stdout=subprocess.PIPE, text=True)
    base_url = fake.stdout.readline().strip()
    folder = tempfile.mkdtemp()
    store = SqlMemoStore(open_database(f"sqlite:///{folder}/memory.db"), SystemClock())
    config = AgentConfig(model_id="fake", client_args={"base_url": base_url, "api_key": "sk-x"})
    clients = ModelClients(AgentsConfig(response=config))
    renderer = PromptRenderer("ja")
    renderer.warm()
    builder = ContextBuilder(store, Clock(), PERSONA, bot_user_id="UBOT", budget=Budget(6000, 1000),
                             marks=prompt_marks("ja"))
    writer = StrandsReplyWriter(clients, renderer, store, "ja", search=object())
    origin = Origin(channel_id="C1", user_id="U1", message_ts=MESSAGES[-2].ts)
    load_model_libraries().result()
    await clients.load()
    context = builder.assemble(CHANNEL, MESSAGES, STORED, NAMES, MESSAGES[-2])
    for _ in range(10):  # first calls: connections, caches
        await writer.write(context, origin)
    gc.collect()
    gc.disable()
    os.getppid()
    for _ in range(REPLIES):
        builder.assemble(CHANNEL, MESSAGES, STORED, NAMES, MESSAGES[-2])
    os.getppid()
    for _ in range(REPLIES):
        await writer.write(context, origin)
    os.getppid()
    await clients.close()
    fake.terminate()
    fake.wait()


asyncio.run(main())
"""

def measure(src: Path, folder: Path, replies: int) -> list[int]:
    """Each stage's instructions per reply with the bot's modules from `src`."""
    env = callgrind.tree_env(src)
    counted = callgrind.parts(SCRIPT, [str(replies)], folder, len(STAGES) + 1, env=env, cwd=ROOT)
    return [count // replies for count in counted[1:]]  # part 1: start-up and warm-up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=20, help="replies counted (default 20)")
    return callgrind.compare(
        parser, argv, lambda tree, folder, args: measure(tree, folder, args.replies), STAGES, "per reply (K)", 1e3
    )


if __name__ == "__main__":
    raise SystemExit(main())
