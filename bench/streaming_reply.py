"""How fast a streamed answer shows its first words, and how many Web API calls it costs.

Run from the repository root::

    .venv/bin/python bench/streaming_reply.py [--mentions N] [--chars C]

The bot runs as ``python -m myao2 run`` against the fake Slack and a fake model
that writes slowly: its first token 0.3 s after the request, then C characters
over 5 s. For each of N sequential mentions it prints the time from the model's
first token to the first words in the thread (chat.startStream arriving at the
fake; goal <= 0.5 s) and the Web API calls of the streamed answer, scaled to
1,000 characters (goal <= ~10). Both fakes run in this process, on one clock.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Text  # noqa: E402
from tests.fakes.slack_server import FakeSlack  # noqa: E402

FIRST_TOKEN_SECONDS = 0.3
WRITING_SECONDS = 5.0
PIECES = 100
STREAM_METHODS = ("chat.startStream", "chat.appendStream", "chat.stopStream")


class _TimedModel(FakeOpenAI):
    """The fake model, noting when each streamed answer's first token goes out."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.first_tokens: list[float] = []

    async def _stream(self, request, body, reply):  # type: ignore[no-untyped-def]
        self.first_tokens.append(time.time())  # the role chunk and the first piece go out now
        return await super()._stream(request, body, reply)


def run(mentions: int, chars: int) -> None:
    words = (" ".join(f"word{i:04d}" for i in range(chars // 9 + 1)))[:chars]
    interval = WRITING_SECONDS / PIECES
    with FakeSlack(bot_name="myao") as slack, _TimedModel(api_key="sk-e2e-secret-key") as llm:
        slack.add_user(ALICE, "alice", display_name="Alice")
        slack.add_user(BOB, "bob", display_name="Bob")
        slack.add_channel(GENERAL, "general", members=[ALICE, BOB])
        llm.set_responder(lambda request: Text(words, delay=FIRST_TOKEN_SECONDS, pieces=PIECES, interval=interval))
        with tempfile.TemporaryDirectory(prefix="myao2-bench-") as tmp:
            bot = BotProcess(Path(tmp), slack, llm)
            bot.settings.update({"response.check_interval_seconds": 3600, "response.history_sync_interval_seconds": 3600})
            bot.start()
            try:
                delays, calls = [], []
                for i in range(mentions):
                    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> story {i}, please")
                    stream = slack.wait_for(
                        lambda: next((s for s in slack.streams if s["thread_ts"] == ts and not s["streaming"]), None),
                        timeout=30,
                        what="the streamed answer",
                    )
                    delays.append(stream["calls"][0]["time"] - llm.first_tokens[-1])
                    calls.append(len(stream["calls"]) * 1000 / max(1, len(words)))
                    print(
                        f"mention {i + 1}: first words {delays[-1] * 1000:.0f} ms after the first token, "
                        f"{len(stream['calls'])} stream calls for {len(words)} characters"
                    )
            finally:
                bot.stop()
    print(f"first token -> first streamed words: p50 {statistics.median(delays) * 1000:.0f} ms, "
          f"max {max(delays) * 1000:.0f} ms (goal <= 500 ms)")
    print(f"Web API calls per 1,000 streamed characters: {statistics.mean(calls):.1f} (goal <= ~10)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mentions", type=int, default=3)
    parser.add_argument("--chars", type=int, default=1000)
    args = parser.parse_args(argv)
    run(args.mentions, args.chars)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
