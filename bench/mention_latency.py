"""Mention latency, CPU cost and start-up time of the real bot process against the fakes.

Run from the repository root::

    .venv/bin/python bench/mention_latency.py [--mentions N] [--messages M] [--concurrent K] [--streamed S]

The bot runs as ``python -m myao2 run`` (the e2e harness's `BotProcess`); the fake
Slack and the fake LLM run in processes of their own, so their CPU is never
counted against the bot. Everything stays on 127.0.0.1. Figures:

* start-up: process start to the fake accepting the Socket Mode connection,
  then the latency of a mention sent at that moment (and the bot's CPU until it was
  answered, a figure a loaded machine moves less): on a new database, which the bot
  migrates (its first start), and again at the end on the same database (every later start).
  Start-up is CPU-bound (its wall time is about the bot's CPU time on an idle machine), so the
  machine's load average at launch is printed beside it: other processes on the cores stretch it;
* N sequential mentions: latency from the mention's ts (the moment the fake
  stored it and sent its events) to the ts of the bot's threaded reply (the
  moment the fake received chat.postMessage), and the bot's CPU per mention;
* M plain messages: the bot's CPU per message until all are in its database;
* K simultaneous mentions in K threads: all answered, and the latency spread;
* with a streaming model (first token at 0.3 s, then 5 s of text), measured by
  ``bench/streaming_reply.py``: time to the first visible text, Web API calls
  per streamed answer, and the ack latency p99 while K answers stream at once.

``--profile DIR`` profiles the N sequential mentions in every thread of the bot (``bench/profiling``) and prints
where the CPU went, by package, in the event loop thread and in the others (the search index left out). cProfile
inflates code of many small calls several times over, so the CPU figures of such a run are not the bot's: read its
table as shares.

CPU is read from /proc/<pid>/stat (utime + stime, every thread of the bot). The
search index worker (its thread and the embedding engine's, named ``search-index``)
embeds every stored message and memo in the background; its
CPU is shown apart, and the per-mention and per-message targets are for the rest, itself split
into the main thread's (the event loop: Slack, the model client, strands) and the other threads': the worker threads
(named ``worker``: the event loop's default executor, where the stores' reads and writes run) and the rest (the
health server, the replica leases).
The bot's periodic jobs are pushed out of the run (`BOT_SETTINGS`). On a busy machine
the figures move by a few ms: run it more than once.
"""

from __future__ import annotations

import argparse
import compileall
import collections
import json
import marshal
import os
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import closing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import streaming_reply  # noqa: E402
from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess  # noqa: E402
from tests.fakes import PROXY_VARIABLES  # noqa: E402
from tests.fakes.slack_server import FakeSlack  # noqa: E402
from myao2.infrastructure.search.setup import THREAD_NAME as INDEX_THREAD  # noqa: E402
from myao2.infrastructure.threads import WORKER_THREADS as WORKER_THREAD  # noqa: E402

BOT_USER_ID = "UBOT"
REPLY_TIMEOUT = 15.0
CLOCK_TICK = 1.0 / os.sysconf("SC_CLK_TCK")
IDLE_SECONDS = 3.0

# Periodic jobs (history sync, autonomous check) are pushed out of the run, so
# the figures show the mention and ingest paths only.
BOT_SETTINGS = {
    "response.check_interval_seconds": 3600,
    "response.history_sync_interval_seconds": 3600,
}


# ---------------------------------------------------------------------- the fake Slack process


class _ReportingSlack(FakeSlack):
    """A FakeSlack that reports connections and the bot's posts on stdout, one JSON line each."""

    def _record_post(self, method: str, ch: Any, msg: dict[str, Any], markdown: bool) -> None:
        super()._record_post(method, ch, msg, markdown)
        _line({"post": {"method": method, "ts": msg["ts"], "thread_ts": msg.get("thread_ts")}})

    async def _write_loop(self, conn: Any) -> None:
        _line({"connected": self.connection_count, "t": time.time()})
        await super()._write_loop(conn)


def _line(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def serve_slack() -> None:
    """Child mode: serve the reporting fake Slack until SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with _ReportingSlack(bot_name="myao", bot_user_id=BOT_USER_ID) as fake:
        _line({"base_url": fake.base_url, "bot_token": fake.bot_token, "app_token": fake.app_token})
        while not stop.wait(0.5):
            pass


class SlackProcess:
    """The parent's handle on the fake Slack child: control over HTTP, events from its stdout."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve-slack"],
            cwd=ROOT,
            env=_clean_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        first = json.loads(self.process.stdout.readline())
        self.base_url: str = first["base_url"]
        self.bot_token: str = first["bot_token"]
        self.app_token: str = first["app_token"]
        self.connection_count = 0
        self.connected_at: float | None = None
        self._replies: dict[str, str] = {}  # thread ts -> first reply ts
        self._changed = threading.Condition()
        threading.Thread(target=self._read, name="slack-events", daemon=True).start()

    def _read(self) -> None:
        for raw in self.process.stdout:
            data = json.loads(raw)
            with self._changed:
                if "connected" in data:
                    self.connection_count = data["connected"]
                    self.connected_at = data["t"]
                elif data["post"]["method"] in ("chat.postMessage", "chat.stopStream") and data["post"]["thread_ts"]:
                    self._replies.setdefault(data["post"]["thread_ts"], data["post"]["ts"])
                self._changed.notify_all()

    def call(self, method: str, **kwargs: Any) -> Any:
        url = self.base_url.replace("/api/", f"/_fake/{method}")
        request = urllib.request.Request(
            url, data=json.dumps(kwargs).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())["result"]

    def wait_connected(self, count: int, timeout: float) -> float:
        with self._changed:
            if not self._changed.wait_for(lambda: self.connection_count >= count, timeout):
                raise TimeoutError("the bot did not connect")
            assert self.connected_at is not None
            return self.connected_at

    def wait_replies(self, thread_ts: list[str], timeout: float) -> dict[str, str]:
        """The first reply ts of each thread answered within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._changed.wait_for(
                lambda: all(t in self._replies for t in thread_ts), max(0.0, deadline - time.monotonic())
            )
            return {t: self._replies[t] for t in thread_ts if t in self._replies}

    def stop(self) -> None:
        _terminate(self.process)


class LlmProcess:
    """The fake OpenAI server as a child process, answering every request at once."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.openai_server", "--text", "Sure, here you go!"],
            cwd=ROOT,
            env=_clean_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        self.base_url = self.process.stdout.readline().strip()

    def stop(self) -> None:
        _terminate(self.process)


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _terminate(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


# ---------------------------------------------------------------------- measuring the bot


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of a process, all its threads included."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) * CLOCK_TICK, int(fields[12]) * CLOCK_TICK


def cpu_seconds(pid: int) -> float:
    return sum(cpu_times(pid))


def named_cpu_seconds(pid: int, name: str) -> float:
    """CPU seconds of the bot's live threads named `name` (in /proc: ``search-index``, ``worker``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text(encoding="ascii").strip() != name:
                continue
            fields = (task / "stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        total += int(fields[11]) + int(fields[12])
    return total * CLOCK_TICK


def indexing_cpu_seconds(pid: int) -> float:
    """CPU seconds of the bot's search index worker threads."""
    return named_cpu_seconds(pid, INDEX_THREAD)


def loop_cpu_seconds(pid: int) -> float:
    """CPU seconds of the bot's main thread, which runs its event loop (the rest: worker threads, indexing)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * CLOCK_TICK


def indexing_started(pid: int, timeout: float = 30.0) -> None:
    """Wait until the search index worker runs: it starts a second after the models have loaded, and its
    start (numpy, the embedding model) is not idle time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                if (task / "comm").read_text(encoding="ascii").strip() == INDEX_THREAD:
                    return
            except OSError:  # the thread ended meanwhile
                continue
        time.sleep(0.05)
    raise TimeoutError("the search index worker did not start")


def settle(pid: int, quiet: float = 1.0, timeout: float = 20.0) -> float:
    """Wait until the process used no CPU for `quiet` seconds; returns its CPU seconds then."""
    deadline = time.monotonic() + timeout
    last, since = cpu_seconds(pid), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = cpu_seconds(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


def stored_messages(database: Path) -> int:
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as db:
        return db.execute("SELECT count(*) FROM messages").fetchone()[0]


def latency_ms(mention_ts: str, reply_ts: str) -> float:
    return (float(reply_ts) - float(mention_ts)) * 1000


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def profiled(bot: BotProcess, directory: Path) -> None:
    """Have the bot started next profile its threads (`bench/profiling`) into `directory`, once told to."""
    directory.mkdir(parents=True, exist_ok=True)
    bot.env_overrides["MYAO2_BENCH_PROFILE"] = str(directory)
    bot.env_overrides["PYTHONPATH"] = os.pathsep.join([str(ROOT / "bench" / "profiling"), str(ROOT / "src")])


def write_profiles(pid: int, directory: Path) -> None:
    """Have the bot write what its threads' profiles counted, and wait until it has."""
    (directory / "DONE").unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not (directory / "DONE").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def package_of(filename: str, function: str) -> str:
    """What a profiled function belongs to: its installed package, myao2's subpackage, the standard library's module,
    or, for a builtin, the type of its method."""
    if filename == "~":
        return "builtin " + (function.split(" of ")[-1].strip("'>") if " of " in function else function)
    for pattern, prefix in ((r"site-packages/([^/]+)", ""), (r"src/(myao2/[^/.]+(?:/[^/.]+)?)", ""), (r"python3\.\d+/([^/.]+)", "std ")):
        if found := re.search(pattern, filename):
            return prefix + found.group(1)
    return filename


def print_profiles(directory: Path, mentions: int) -> None:
    """Where the profiled CPU went per mention, by package: the event loop thread's, then the other threads'."""
    for title, pick in (("event loop thread", lambda name: name.startswith("MainThread")),
                        ("other threads", lambda name: not name.startswith(("MainThread", INDEX_THREAD)))):
        seconds: collections.Counter[str] = collections.Counter()
        calls: collections.Counter[str] = collections.Counter()
        for path in directory.glob("*.pstats"):
            if not pick(path.stem):
                continue
            for (filename, _, function), (_, count, own, _, _) in marshal.loads(path.read_bytes()).items():
                seconds[package_of(filename, function)] += own
                calls[package_of(filename, function)] += count
        total = sum(seconds.values()) or 1.0
        print(f"  profile, {title}: {total / mentions * 1000:.1f} ms and {sum(calls.values()) / mentions:.0f} calls "
              "per mention as profiled (shares of the profiled time, calls per mention):")
        for package, spent in seconds.most_common(12):
            print(f"    {spent / total * 100:5.1f}%  {calls[package] / mentions:7.0f}  {package}")


def mention(slack: SlackProcess, text: str = "what do you think?", user: str = ALICE) -> str:
    return slack.call("post_message", channel=GENERAL, user=user, text=f"<@{BOT_USER_ID}> {text}")


# ---------------------------------------------------------------------- the run


def launch(bot: BotProcess, slack: SlackProcess, what: str) -> bool:
    """Start the bot; print when it connected and how fast it answered a mention sent then. False if it did not."""
    connections = slack.connection_count
    load = os.getloadavg()[0]
    started = time.time()
    bot.start(wait_connected=False)
    assert bot.process is not None
    pid = bot.process.pid
    try:
        connected = slack.wait_connected(connections + 1, timeout=30)
    except TimeoutError:
        print(f"{what}: the bot did not connect; its log:\n{bot.log()}")
        return False
    print(f"{what}: Socket Mode connected {(connected - started) * 1000:.0f} ms after launch "
          f"(bot CPU {cpu_seconds(pid) * 1000:.0f} ms; machine load average {load:.1f} on {os.cpu_count()} cores "
          "at launch)")
    # A mention at once: it may wait for what the bot loads once connected, and is
    # the first model call, users.info and conversations.info.
    ts = mention(slack, "hello there")
    reply = slack.wait_replies([ts], REPLY_TIMEOUT).get(ts)
    if reply is None:
        print("  mention sent on connection: NOT ANSWERED")
        return False
    print(f"  mention sent on connection: {latency_ms(ts, reply):.1f} ms, answered "
          f"{(float(reply) - started) * 1000:.0f} ms after launch (bot CPU {cpu_seconds(pid) * 1000:.0f} ms; "
          "target: ready, connected and answering within 0.3 s, 1500 ms after launch)")
    return True


def run(args: argparse.Namespace, tmp: Path) -> int:
    # The bot's own modules as installed (pip compiles them): this environment may set
    # PYTHONDONTWRITEBYTECODE, which would leave the bot compiling them at every start.
    compileall.compile_dir(ROOT / "src" / "myao2", quiet=1)
    slack = SlackProcess()
    llm = LlmProcess()
    bot: BotProcess | None = None
    failed = False
    try:
        slack.call("add_user", user_id=ALICE, name="alice", display_name="Alice")
        slack.call("add_user", user_id=BOB, name="bob", display_name="Bob")
        slack.call("add_channel", channel_id=GENERAL, name="general", members=[ALICE, BOB])
        slack.call("post_message", channel=GENERAL, user=BOB, text="good morning, everyone")

        # BotProcess reads only the tokens, URLs and connection_count of the fakes.
        bot = BotProcess(tmp, slack, llm)  # type: ignore[arg-type]
        bot.settings.update(BOT_SETTINGS)
        # A new database, as at the bot's first start: an empty file, which BotProcess leaves to the bot (where
        # there is none it copies one migrated already).
        bot.database.touch()
        if args.profile:
            profiled(bot, args.profile)
        if not launch(bot, slack, "start-up on a new database"):
            return 1
        assert bot.process is not None
        pid = bot.process.pid

        indexing_started(pid)
        settle(pid)
        idle_start, idle_cpu = time.monotonic(), cpu_seconds(pid)
        time.sleep(IDLE_SECONDS)
        idle_rate = (cpu_seconds(pid) - idle_cpu) / (time.monotonic() - idle_start)

        # N sequential mentions.
        settle(pid)
        user_before, system_before = cpu_times(pid)
        indexing_before, loop_before = indexing_cpu_seconds(pid), loop_cpu_seconds(pid)
        workers_before = named_cpu_seconds(pid, WORKER_THREAD)
        if args.profile:
            os.kill(pid, signal.SIGUSR1)  # what the profiles counted so far is cleared
        latencies: list[float] = []
        unanswered = 0
        for i in range(args.mentions):
            ts = mention(slack, f"question number {i}?")
            reply = slack.wait_replies([ts], REPLY_TIMEOUT).get(ts)
            if reply is None:
                unanswered += 1
                continue
            latencies.append(latency_ms(ts, reply))
        settle(pid)
        user_after, system_after = cpu_times(pid)
        indexing = (indexing_cpu_seconds(pid) - indexing_before) / args.mentions
        loop = (loop_cpu_seconds(pid) - loop_before) / args.mentions
        workers = (named_cpu_seconds(pid, WORKER_THREAD) - workers_before) / args.mentions
        user = (user_after - user_before) / args.mentions
        system = (system_after - system_before) / args.mentions
        if latencies:
            print(
                f"{args.mentions} sequential mentions: latency p50 {percentile(latencies, 50):.1f} ms, "
                f"p90 {percentile(latencies, 90):.1f} ms, p99 {percentile(latencies, 99):.1f} ms, "
                f"max {max(latencies):.1f} ms, mean {statistics.fmean(latencies):.1f} ms "
                "(targets p50 <= 30, p99 <= 100)"
            )
        print(f"  bot CPU per mention: {(user + system - indexing) * 1000:.1f} ms (target <= 7; event loop thread "
              f"{loop * 1000:.1f}, other threads {(user + system - indexing - loop) * 1000:.1f}: worker threads "
              f"{workers * 1000:.1f}, the rest {(user + system - indexing - loop - workers) * 1000:.1f}) + search indexing "
              f"{indexing * 1000:.1f} ms = {(user + system) * 1000:.1f} ms (user {user * 1000:.1f} + system "
              f"{system * 1000:.1f}); idle {idle_rate * 1000:.1f} ms/s")
        if args.profile:
            write_profiles(pid, args.profile)
            print_profiles(args.profile, args.mentions)
        if unanswered:
            print(f"  UNANSWERED: {unanswered}")
            failed = True

        # M plain messages.
        stored = stored_messages(bot.database)
        before, indexing_before, loop_before = settle(pid), indexing_cpu_seconds(pid), loop_cpu_seconds(pid)
        for i in range(args.messages):
            slack.call("post_message", channel=GENERAL, user=(ALICE, BOB)[i % 2], text=f"just chatting, line {i}")
        deadline = time.monotonic() + 30
        while stored_messages(bot.database) < stored + args.messages and time.monotonic() < deadline:
            time.sleep(0.02)
        missing = stored + args.messages - stored_messages(bot.database)
        after = settle(pid)
        indexing = (indexing_cpu_seconds(pid) - indexing_before) / args.messages
        loop = (loop_cpu_seconds(pid) - loop_before) / args.messages
        total = (after - before) / args.messages
        print(f"{args.messages} plain messages: bot CPU per message {(total - indexing) * 1000:.2f} ms (target <= 1.2; "
              f"event loop thread {loop * 1000:.2f}, other threads {(total - indexing - loop) * 1000:.2f}) "
              f"+ search indexing {indexing * 1000:.2f} ms = {total * 1000:.2f} ms"
              + (f"; {missing} NOT STORED" if missing > 0 else ""))
        failed |= missing > 0

        # K simultaneous mentions, each in a thread of its own.
        before = settle(pid)
        posted = [mention(slack, f"all at once, number {i}") for i in range(args.concurrent)]
        replies = slack.wait_replies(posted, REPLY_TIMEOUT * 2)
        after = settle(pid)
        spread = [latency_ms(ts, replies[ts]) for ts in posted if ts in replies]
        answered = len(replies)
        summary = f"{args.concurrent} simultaneous mentions: {answered}/{args.concurrent} answered"
        if spread:
            summary += (
                f", latency min {min(spread):.1f} ms, median {statistics.median(spread):.1f} ms, "
                f"max {max(spread):.1f} ms"
            )
        print(summary + f", bot CPU per mention {(after - before) / max(1, args.concurrent) * 1000:.1f} ms")
        failed |= answered < args.concurrent

        status = bot.stop()
        print(f"bot exit status: {status}")
        failed |= status != 0
        failed |= not launch(bot, slack, "restart (database at the newest migration)")
        failed |= bot.stop() != 0
        return 1 if failed else 0
    finally:
        if bot is not None and bot.process is not None and bot.process.poll() is None:
            bot.stop()
        slack.stop()
        llm.stop()


def at_least_one(text: str) -> int:
    """A count the per-mention and per-message figures divide by."""
    count = int(text)
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {count}")
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mentions", type=at_least_one, default=200, help="sequential mentions (default 200)")
    parser.add_argument("--messages", type=at_least_one, default=300, help="plain messages ingested (default 300)")
    parser.add_argument("--concurrent", type=int, default=10, help="simultaneous mentions (default 10)")
    parser.add_argument("--streamed", type=int, default=3, help="sequential streamed answers (default 3)")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="profile the sequential mentions into DIR")
    parser.add_argument("--serve-slack", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_slack:
        serve_slack()
        return 0
    with tempfile.TemporaryDirectory(prefix="myao2-bench-") as tmp:
        status = run(args, Path(tmp))
    if args.streamed:
        streaming_reply.run(args.streamed, 1000, args.concurrent)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
