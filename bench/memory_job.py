"""Replay a week of synthetic traffic through the memory job and count what it costs.

    .venv/bin/python bench/memory_job.py [--messages N] [--days D] [--channels C] [--interval-hours H] [--seed S]

The real memory job (SQLite store, strands agent, shipped English templates), people's
profiles included, runs in this process against FakeOpenAI on 127.0.0.1, whose memory model
remembers every new message as a note and learns "likes X" from "I like X"
(tests/fakes/memory_model.py). A simulated clock spreads the messages (threads
included) over the days and runs the job every `--interval-hours`.

Printed: LLM calls (by kind: public channels read together, one scope such as the
workspace or a lone channel, profiles) and estimated prompt tokens (characters / 4, CJK as
one) per 1,000 messages; calls of a second run with nothing new (goal 0); wall time of the
slowest run; the size of a mention's prompt in the busiest channel before the first run and
after the last (bounded by the `memory.*_max_tokens` budgets however long the history).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from myao2.application.context import Absorbed, Budget, ContextBuilder, Persona  # noqa: E402
from myao2.application.memory_job import MemoryJob, MemorySettings  # noqa: E402
from myao2.application.profiles import ProfileKeeper  # noqa: E402
from myao2.composition import memory_budgets  # noqa: E402
from myao2.config import AgentConfig, AgentsConfig, Config  # noqa: E402
from myao2.domain.conversation import Channel, Message  # noqa: E402
from myao2.domain.tokens import estimate_tokens  # noqa: E402
from myao2.infrastructure.db.conversation_store import SqlConversationStore  # noqa: E402
from myao2.infrastructure.db.engine import open_database  # noqa: E402
from myao2.infrastructure.db.memo_store import SqlMemoStore  # noqa: E402
from myao2.infrastructure.db.memory_store import SqlMemoryStore  # noqa: E402
from myao2.infrastructure.db.profile_store import SqlProfileStore  # noqa: E402
from myao2.infrastructure.llm.agents import ModelClients, StrandsMemoryWriter  # noqa: E402
from myao2.infrastructure.llm.phrases import prompt_marks  # noqa: E402
from myao2.infrastructure.llm.prompts import PromptRenderer  # noqa: E402
from tests.clocks import ManualClock  # noqa: E402
from tests.fakes.memory_model import is_channels_request, is_profile_request, remember  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402

PEOPLE = ["Alice", "Bob", "Carol", "Dave", "Erin"]
TOPICS = ["the release", "lunch", "the new keyboard", "the weekend", "the standup", "the offsite", "the build"]
VERBS = ["moved", "is fixed", "looks great", "needs help", "got cancelled", "is on friday", "is late again"]
START = datetime(2025, 1, 6, 0, 0, tzinfo=timezone.utc)
PERSONA = Persona("myao", "", "en", ZoneInfo("UTC"))


def traffic(count: int, days: int, channels: list[Channel], rng: random.Random) -> list[Message]:
    """`count` messages over `days`, a third of them thread replies, the first channel the busiest."""
    weights = [len(channels) - i for i in range(len(channels))]
    moments = sorted(START + timedelta(seconds=rng.uniform(0, days * 86400)) for _ in range(count))
    roots: dict[str, list[str]] = {c.id: [] for c in channels}
    messages = []
    for moment in moments:
        channel = rng.choices(channels, weights)[0]
        ts = f"{moment.timestamp():.6f}"
        person = rng.choice(PEOPLE)
        if rng.random() < 0.1:  # now and then something about themselves, for their profile
            text = f"I like {rng.choice(TOPICS)}"
        else:
            text = f"{rng.choice(TOPICS)} {rng.choice(VERBS)} ({rng.randint(1, 999)})"
        thread = rng.choice(roots[channel.id][-5:]) if roots[channel.id] and rng.random() < 0.33 else None
        if thread is None:
            roots[channel.id].append(ts)
        messages.append(Message(channel.id, ts, f"U{person.upper()}", text, person, thread_ts=thread))
    return messages


async def mention_prompt_tokens(contexts: ContextBuilder, store: SqlConversationStore, channel: Channel) -> int:
    messages = store.channel_messages(channel.id, 30)
    context = await contexts.build(channel, messages)
    return estimate_tokens(PromptRenderer("en").render("response", "query", context))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--channels", type=int, default=5)
    parser.add_argument("--interval-hours", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    channels = [Channel(f"C{i}", f"channel-{i}") for i in range(args.channels)]
    messages = traffic(args.messages, args.days, channels, rng)

    with tempfile.TemporaryDirectory() as folder, FakeOpenAI(api_key="sk-bench") as llm:
        llm.set_responder(remember)
        engine = open_database(f"sqlite:///{folder}/bench.db")
        clock = ManualClock(START)
        defaults = Config()
        store = SqlConversationStore(engine, clock)
        memories = SqlMemoryStore(engine, clock)
        for channel in channels:
            store.save_channel(channel)
        agent = AgentConfig(model_id="fake", client_args={"base_url": llm.base_url, "api_key": "sk-bench"})
        clients = ModelClients(AgentsConfig(memory=agent))
        profiles = SqlProfileStore(engine, clock)
        writer = StrandsMemoryWriter(clients, PromptRenderer("en"))
        job = MemoryJob(
            conversations=store,
            memories=memories,
            writer=writer,
            clock=clock,
            persona=PERSONA,
            settings=MemorySettings(timedelta(hours=24), thread_memory_days=7, batch_max_tokens=6000, cut=prompt_marks("en").cut),
            profiles=ProfileKeeper(
                conversations=store,
                profiles=profiles,
                writer=writer,
                clock=clock,
                persona=PERSONA,
                batch_max_tokens=6000, cut=prompt_marks("en").cut,
            ),
        )
        contexts = ContextBuilder(
            SqlMemoStore(engine, clock),
            clock,
            PERSONA,
            bot_user_id="UBOT",
            budget=Budget(defaults.response.conversation_max_tokens, defaults.response.message_max_tokens),
            marks=prompt_marks("en"),
            absorbed=Absorbed(memories, profiles, memory_budgets(defaults)),
        )

        step = timedelta(hours=args.interval_hours)
        pending = iter(messages)
        upcoming = next(pending, None)
        before = 0
        runs = 0
        slowest = 0.0
        while upcoming is not None:
            clock.current += step
            while upcoming is not None and upcoming.posted_at <= clock.current:
                store.save_message(upcoming)
                upcoming = next(pending, None)
            if runs == 0:
                before = await mention_prompt_tokens(contexts, store, channels[0])
            started = time.perf_counter()
            await job.run()
            slowest = max(slowest, time.perf_counter() - started)
            runs += 1

        calls = len(llm.requests)
        kinds = Counter(
            "profiles" if is_profile_request(r) else "channels" if is_channels_request(r) else "one scope"
            for r in llm.requests
        )
        prompt_tokens = sum(
            estimate_tokens(str(m.get("content") or "")) for request in llm.requests for m in request["messages"]
        )
        started = time.perf_counter()
        quiet = await job.run()
        quiet_seconds = time.perf_counter() - started
        after = await mention_prompt_tokens(contexts, store, channels[0])
        await clients.close()
        engine.dispose()

    per_thousand = 1000 / len(messages)
    print(f"messages: {len(messages)} over {args.days} days in {args.channels} channels; "
          f"{runs} runs, one every {args.interval_hours:g} h")
    print(f"LLM calls per 1000 messages:     {calls * per_thousand:.1f} "
          f"({', '.join(f'{kind} {count * per_thousand:.1f}' for kind, count in sorted(kinds.items()))})")
    print(f"prompt tokens per 1000 messages: {prompt_tokens * per_thousand:.0f}")
    print(f"calls of a run with nothing new: {quiet.calls} ({quiet_seconds * 1000:.0f} ms)")
    print(f"wall time of the slowest run:    {slowest:.2f} s")
    print(f"mention prompt tokens, busiest channel: before {before}, after {after}")


if __name__ == "__main__":
    asyncio.run(main())
