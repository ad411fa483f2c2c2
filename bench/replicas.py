"""Throughput and latency of 1 and 2 bot replicas sharing one PostgreSQL, and the memory job on PostgreSQL.

Run from the repository root (needs PostgreSQL's server binaries, as the tests do)::

    .venv/bin/python bench/replicas.py [--rate R] [--seconds S] [--model-delay D] [--messages M]

A throwaway PostgreSQL cluster runs on 127.0.0.1 (tests/postgres.py), the fake Slack
(a child process) spreads the events over the replicas' Socket Mode connections, and
the fake model (a child process too) answers after `--model-delay` seconds. For 1 and then 2 replicas (``python -m myao2 run``
each, a fresh database each time), mentions arrive at a steady `--rate` per second
for `--seconds`, each in a thread of its own; answers are posted whole (no streaming).

Printed per replica count: mentions answered per second (from the first mention to
the last answer), latency p50/p99 from a mention's ts to its answer's ts, and how many
were answered more or less than once. Then the memory job: `--messages` messages in 5
channels stored in PostgreSQL (and in SQLite, for comparison), one round of the real job
(the fake memory model answering at once), messages read per second. The machine's other load moves the figures: run it
more than once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from myao2.composition import build_application  # noqa: E402
from myao2.config import Config  # noqa: E402
from myao2.domain.conversation import Channel, Message  # noqa: E402
from myao2.infrastructure.db.engine import open_database  # noqa: E402
from tests.clocks import ManualClock  # noqa: E402
from tests.e2e.conftest import ALICE, GENERAL, BotProcess  # noqa: E402
from tests.fakes import PROXY_VARIABLES  # noqa: E402
from tests.fakes.memory_model import remember  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.postgres import PostgresServer, server_binaries  # noqa: E402

BOT_SETTINGS = {
    "response.streaming": False,
    "response.reaction": "",
    "response.check_interval_seconds": 3600,
    "response.history_sync_interval_seconds": 3600,
    "memory.update_interval_seconds": 3600,
    "logging.level": "WARNING",
}
ANSWER_TIMEOUT = 120.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


class Child:
    """A fake (Slack or the model) served by a child process of its own, so its CPU never slows the bots' peers."""

    def __init__(self, module: str, *arguments: str) -> None:
        environment = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
        environment["PYTHONPATH"] = str(ROOT)
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *arguments], cwd=ROOT, env=environment, stdout=subprocess.PIPE, text=True
        )
        self.base_url = self.process.stdout.readline().strip()  # type: ignore[union-attr]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


class SlackChild(Child):
    """The fake Slack spreading events over the connections, driven over HTTP (what `BotProcess` needs of it)."""

    bot_token, app_token, bot_user_id = "xoxb-test-token", "xapp-test-token", "UBOT"
    connection_count = 0

    def __init__(self) -> None:
        super().__init__("tests.fakes.slack_server", "--bot-name", "myao", "--spread-events")

    def call(self, method: str, **arguments: object) -> object:
        request = urllib.request.Request(
            self.base_url.replace("/api/", f"/_fake/{method}"),
            data=json.dumps(arguments).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())["result"]

    def state(self) -> dict:
        with urllib.request.urlopen(self.base_url.replace("/api/", "/_fake/state"), timeout=30) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]

    def answers(self) -> dict[str, list[float]]:
        """The ts of the bot's answers to each message."""
        found: dict[str, list[float]] = {}
        for post in self.state()["posted"]:
            answering = (post.get("metadata") or {}).get("event_payload", {}).get("answers")
            if answering:
                found.setdefault(answering, []).append(float(post["ts"]))
        return found

    def wait_for(self, done: Callable[[], object], what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.5)


def mentions_under_load(replicas: int, postgres: PostgresServer, args: argparse.Namespace, folder: Path) -> None:
    slack = SlackChild()
    llm = Child("tests.fakes.openai_server", "--text", "Here I am.", "--delay", str(args.model_delay))
    bots = []
    try:
        slack.call("add_user", user_id=ALICE, name="alice", display_name="Alice")
        slack.call("add_channel", channel_id=GENERAL, name="general", members=[ALICE])
        with postgres.database(migrated=True) as url:
            try:
                for n in range(replicas):
                    (folder / f"{replicas}-{n}").mkdir()
                    bot = BotProcess(folder / f"{replicas}-{n}", slack, llm)  # type: ignore[arg-type]
                    bot.settings.update(BOT_SETTINGS, **{"memory.database_url": url})
                    bots.append(bot.start(wait_connected=False))
                slack.wait_for(lambda: slack.state()["open_connections"] == replicas, "the replicas connected")
                warm = slack.call("post_message", channel=GENERAL, user=ALICE, text="<@UBOT> warming up")
                slack.wait_for(lambda: warm in slack.answers(), "the first answer")
                time.sleep(2)  # every replica's model libraries loaded (they load in the background once connected)
                mentions: list[str] = []
                started = time.monotonic()
                for i in range(round(args.rate * args.seconds)):
                    time.sleep(max(0.0, started + i / args.rate - time.monotonic()))
                    text = f"<@UBOT> question {i}"
                    mentions.append(str(slack.call("post_message", channel=GENERAL, user=ALICE, text=text)))
                slack.wait_for(lambda: set(mentions) <= set(slack.answers()), "every answer", ANSWER_TIMEOUT)
                time.sleep(1)  # room for a second answer to show up
                found = slack.answers()
            finally:
                for bot in bots:
                    bot.stop()
    finally:
        slack.stop()
        llm.stop()
    answered_by = {ts: found.get(ts, []) for ts in mentions}
    answered = {ts: min(answered_by[ts]) for ts in mentions if answered_by[ts]}
    latencies = [(answered[ts] - float(ts)) * 1000 for ts in answered]
    span = max(answered.values()) - float(mentions[0]) if answered else float("nan")
    twice = sum(1 for found in answered_by.values() if len(found) > 1)
    print(
        f"{replicas} replica(s): {len(answered) / span:6.1f} mentions/s answered "
        f"(offered {args.rate:g}/s for {args.seconds:g} s), latency p50 {percentile(latencies, 50):6.0f} ms "
        f"p99 {percentile(latencies, 99):6.0f} ms; unanswered {len(mentions) - len(answered)}, twice {twice}",
        flush=True,
    )


async def memory_job_throughput(url: str, messages: int) -> None:
    start = datetime(2025, 1, 6, 9, 0, tzinfo=timezone.utc)
    clock = ManualClock(start)
    with FakeOpenAI(api_key="sk-bench") as llm:
        llm.set_responder(remember)
        agent = {"model_id": "fake", "client_args": {"base_url": llm.base_url, "api_key": "sk-bench"}}
        config = Config.model_validate(
            {
                "agents": {"response": agent, "judgment": agent, "memory": agent},
                "memory": {"database_url": url},
                "persona": {"name": "myao", "language": "en"},  # the fake memory model reads the English templates
            }
        )
        engine = open_database(url)
        app = build_application(config, engine, clock, "UBOT")
        channels = [Channel(f"C{i}", f"channel-{i}") for i in range(5)]
        for channel in channels:
            app.conversations.save_channel(channel)
        for i in range(messages):
            at = start + timedelta(seconds=i * 20)
            app.conversations.save_message(
                Message(
                    channel_id=channels[i % len(channels)].id,
                    ts=f"{at.timestamp():.6f}",
                    user_id=f"U{i % 7}",
                    user_name=f"person{i % 7}",
                    text=f"message {i}: the release {['moved', 'is fixed', 'is late'][i % 3]}",
                )
            )
        clock.current = start + timedelta(seconds=messages * 20 + 60)
        began = time.perf_counter()
        await app.memory_job.run()
        seconds = time.perf_counter() - began
        calls = len(llm.requests)
        await app.clients.close()
        engine.dispose()
    kind = "PostgreSQL" if url.startswith("postgresql") else "SQLite (for comparison)"
    print(f"memory job on {kind}: {messages} messages in {seconds:.2f} s, {messages / seconds:.0f} messages/s, "
          f"{calls} model calls")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=10.0, help="mentions per second offered")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--model-delay", type=float, default=0.3, help="seconds the fake model takes to answer")
    parser.add_argument("--messages", type=int, default=2000, help="messages the memory job reads")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    binaries = server_binaries()
    if binaries is None:
        print("PostgreSQL's server is not installed (apt-get install postgresql)", file=sys.stderr)
        return 2
    postgres = PostgresServer(binaries)
    postgres.start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            for replicas in args.replicas:
                mentions_under_load(replicas, postgres, args, Path(folder))
            with postgres.database(migrated=True) as url:
                asyncio.run(memory_job_throughput(url, args.messages))
            asyncio.run(memory_job_throughput(f"sqlite:///{folder}/memory.db", args.messages))
    finally:
        postgres.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
