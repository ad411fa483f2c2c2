"""How fast a streamed answer shows its first words, and how many Web API calls it costs.

Run from the repository root::

    .venv/bin/python bench/streaming_reply.py [--mentions N] [--chars C] [--concurrent K]

The bot runs as ``python -m myao2 run`` against the fake Slack and a fake model
that writes slowly: its first token 0.3 s after the request, then C characters
over 5 s. For each of N sequential mentions it prints the time from the model's
first token to the first words in the thread (chat.startStream arriving at the
fake; goal <= 0.5 s) and the Web API calls of the streamed answer, scaled to
1,000 characters (goal <= ~10). Then K answers stream at once while plain
messages keep arriving, and it prints the latency of the bot's Socket Mode acks
(goal p99 <= 20 ms). The fake Slack runs in this process; the fake model in a
child process of its own, so that writing K streams (~40% of a core in all)
does not hold the GIL the fake Slack needs to read the acks it times.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess  # noqa: E402
from tests.fakes import PROXY_VARIABLES  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Text  # noqa: E402
from tests.fakes.slack_server import FakeSlack  # noqa: E402

FIRST_TOKEN_SECONDS = 0.3
WRITING_SECONDS = 5.0
PIECES = 100
STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


class _TimedModel(FakeOpenAI):
    """The fake model, reporting on stdout when each streamed answer's first token goes out."""

    async def _stream(self, request, body, reply):  # type: ignore[no-untyped-def]
        _line({"first_token": time.time()})  # the role chunk and the first piece go out now
        return await super()._stream(request, body, reply)


def _line(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


def _answer(chars: int) -> str:
    return (" ".join(f"word{i:04d}" for i in range(chars // 9 + 1)))[:chars]


def serve_model(chars: int) -> None:
    """Child mode: serve the slowly writing fake model until SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    words, interval = _answer(chars), WRITING_SECONDS / PIECES
    with _TimedModel(api_key="sk-e2e-secret-key") as llm:
        llm.set_responder(lambda request: Text(words, delay=FIRST_TOKEN_SECONDS, pieces=PIECES, interval=interval))
        _line({"base_url": llm.base_url})
        while not stop.wait(0.5):
            pass


class _ModelProcess:
    """The parent's handle on the fake model child: its URL, and when each streamed answer's first token went out."""

    def __init__(self, chars: int) -> None:
        env = {k: v for k, v in os.environ.items() if k not in PROXY_VARIABLES}
        env["PYTHONPATH"] = str(ROOT)
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve-model", "--chars", str(chars)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.base_url: str = json.loads(self.process.stdout.readline())["base_url"]
        self.first_tokens: list[float] = []
        threading.Thread(target=self._read, name="model-events", daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.first_tokens.append(json.loads(raw)["first_token"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def run(mentions: int, chars: int, concurrent: int = 10) -> None:
    """Start the bot against the slow model and print the streaming figures."""
    words = _answer(chars)
    llm = _ModelProcess(chars)
    try:
        with FakeSlack(bot_name="myao") as slack:
            slack.add_user(ALICE, "alice", display_name="Alice")
            slack.add_user(BOB, "bob", display_name="Bob")
            slack.add_channel(GENERAL, "general", members=[ALICE, BOB])
            with tempfile.TemporaryDirectory(prefix="myao2-bench-") as tmp:
                bot = BotProcess(Path(tmp), slack, llm)  # type: ignore[arg-type]  # reads only base_url
                bot.settings.update(
                    {"response.check_interval_seconds": 3600, "response.history_sync_interval_seconds": 3600}
                )
                bot.start()
                try:
                    _sequential(slack, llm, mentions, words)
                    if concurrent:
                        _concurrent(slack, concurrent)
                finally:
                    bot.stop()
    finally:
        llm.stop()


def _finished_stream(slack: FakeSlack, ts: str) -> dict[str, Any] | None:
    return _finished(slack.streams, ts)


def _finished(streams: list[dict[str, Any]], ts: str) -> dict[str, Any] | None:
    return next((s for s in streams if s["thread_ts"] == ts and not s["streaming"]), None)


def _sequential(slack: FakeSlack, llm: _ModelProcess, mentions: int, words: str) -> None:
    delays, visible, calls = [], [], []
    for i in range(mentions):
        ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> story {i}, please")
        stream = slack.wait_for(lambda: _finished_stream(slack, ts), timeout=30, what="the streamed answer")
        delays.append(stream["calls"][0]["time"] - llm.first_tokens[-1])
        visible.append(stream["calls"][0]["time"] - float(ts))
        calls.append(len(stream["calls"]))
        print(
            f"mention {i + 1}: first words {visible[-1] * 1000:.0f} ms after the mention, "
            f"{delays[-1] * 1000:.0f} ms after the first token; {calls[-1]} stream calls for {len(words)} characters"
        )
    print(f"streaming model (first token at {FIRST_TOKEN_SECONDS:.1f} s): first visible text p50 "
          f"{statistics.median(visible) * 1000:.0f} ms after the mention; first token -> first streamed words p50 "
          f"{statistics.median(delays) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms (goal <= 500 ms)")
    print(f"Web API calls per streamed answer of {len(words)} characters: {statistics.mean(calls):.1f} "
          f"= {statistics.mean(calls) * 1000 / max(1, len(words)):.1f} per 1,000 characters (goal <= ~10)")


def _concurrent(slack: FakeSlack, streams: int) -> None:
    """`streams` answers streaming at once while people keep talking: how fast the bot acks events."""
    acked_before = len(slack.ack_latencies)
    posted = [slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> all at once {i}") for i in range(streams)]
    chatter = 0
    # One copy of the streams per look: the fake Slack shares this process (and its GIL), and copying them
    # for each of the answers took long enough to delay its reading of the acks being measured.
    while not all(_finished(streams, ts) for streams in [slack.streams] for ts in posted):
        slack.post_message(GENERAL, BOB, f"meanwhile, line {chatter}")
        chatter += 1
        time.sleep(0.1)
        if chatter > 600:
            raise TimeoutError("the concurrent streams did not finish")
    slack.wait_for(lambda: len(slack.acks) >= len(slack.envelopes), timeout=10, what="every ack")
    acks = [a * 1000 for a in slack.ack_latencies[acked_before:]]
    acks.sort()
    p99 = acks[min(len(acks) - 1, round(0.99 * len(acks) + 0.5) - 1)]
    print(f"{streams} answers streaming at once, {chatter} plain messages meanwhile: ack latency over {len(acks)} "
          f"events p50 {statistics.median(acks):.1f} ms, p99 {p99:.1f} ms, max {acks[-1]:.1f} ms (target p99 <= 20)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mentions", type=int, default=3)
    parser.add_argument("--chars", type=int, default=1000)
    parser.add_argument("--concurrent", type=int, default=10, help="answers streaming at once (0: skip)")
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_model:
        serve_model(args.chars)
        return 0
    run(args.mentions, args.chars, args.concurrent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
