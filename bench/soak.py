"""Soak: many mentions against a flaky Slack, a flaky model and a bot killed now and then.

Run from the repository root::

    .venv/bin/python bench/soak.py [--mentions 1000] [--kill-every 100] [--rate 8] [--fault-rate 0.05]

The real bot process (`python -m myao2 run`, the e2e harness's `BotProcess`) talks
to the fake Slack and the fake LLM on 127.0.0.1. The fake Slack fails a random
`--fault-rate` of Web API calls with HTTP 500 or 429 (half of the failed
chat.postMessage calls store the post first, as a Slack that fails after doing the
work); the fake LLM fails a random `--llm-fault-rate` of requests with HTTP 500.
Mentions go to several channels (answered in threads) and DMs (answered inline);
every `--kill-every` mentions the bot gets SIGKILL and is started again, while
mentions keep coming. The bot runs with the shipped retry settings.

Figures: mentions sent, answered once, answered twice (or more), unanswered, how
many of the answers were apologies, restarts, and how long everything took. An
answer is a bot post marked (message metadata) as answering that mention; bot
posts without the mark are counted apart.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import BotProcess  # noqa: E402
from tests.fakes.openai_server import Error, FakeOpenAI, Text  # noqa: E402
from tests.fakes.slack_server import FakeSlack  # noqa: E402

CHANNELS = [f"CSOAK{i}" for i in range(8)]
PEOPLE = [f"USOAK{i}" for i in range(4)]
DMS = [f"DSOAK{i}" for i in range(len(PEOPLE))]
APOLOGY_MARK = "Sorry"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mentions", type=int, default=1000, help="mentions to send")
    parser.add_argument("--kill-every", type=int, default=100, help="SIGKILL and restart the bot every N mentions")
    parser.add_argument("--rate", type=float, default=8.0, help="mentions per second")
    parser.add_argument("--fault-rate", type=float, default=0.05, help="share of Slack Web API calls that fail")
    parser.add_argument("--llm-fault-rate", type=float, default=0.1, help="share of model requests that fail")
    parser.add_argument("--settle", type=float, default=300.0, help="seconds to wait for the last answers")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    llm_rng = random.Random(args.seed + 1)
    llm_failures = Counter[str]()

    def respond(request: dict[str, Any]) -> Any:
        if llm_rng.random() < args.llm_fault_rate:
            llm_failures["failed"] += 1
            return Error(500, "the model is overloaded")
        return Text("Here is my answer.")

    with tempfile.TemporaryDirectory(prefix="myao2-soak-") as tmp, FakeSlack(bot_name="myao") as slack, FakeOpenAI(
        api_key="sk-e2e-secret-key"
    ) as llm:
        for i, user in enumerate(PEOPLE):
            slack.add_user(user, f"person{i}", display_name=f"Person {i}")
            slack.add_channel(DMS[i], f"dm{i}", is_im=True, members=[user])
        for i, channel in enumerate(CHANNELS):
            slack.add_channel(channel, f"soak{i}", members=PEOPLE)
        llm.set_responder(respond)

        bot = BotProcess(Path(tmp), slack, llm)
        bot.settings.update(
            {
                "response.history_sync_interval_seconds": 30,
                "response.check_interval_seconds": 3600,
                "logging.level": "WARNING",
            }
        )
        bot.start()
        slack.set_chaos(args.fault_rate, seed=args.seed)

        started = time.monotonic()
        sent: list[str] = []
        restarts = 0
        for n in range(1, args.mentions + 1):
            person = rng.randrange(len(PEOPLE))
            if rng.random() < 0.25:
                sent.append(slack.post_message(DMS[person], PEOPLE[person], f"question {n}?"))
            else:
                channel = rng.choice(CHANNELS)
                sent.append(slack.post_message(channel, PEOPLE[person], f"<@{slack.bot_user_id}> question {n}?"))
            if n % args.kill_every == 0 and n < args.mentions:
                bot.kill()
                restarts += 1
                time.sleep(rng.uniform(0, 1))  # mentions sent meanwhile reach the bot only through the history
                bot.start()
            time.sleep(rng.expovariate(args.rate))
        sending = time.monotonic() - started

        def counts() -> Counter[str]:
            return Counter(
                (p.get("metadata") or {}).get("event_payload", {}).get("answers", "(unmarked)") for p in slack.posted
            )

        deadline = time.monotonic() + args.settle
        while time.monotonic() < deadline and any(counts()[ts] == 0 for ts in sent):
            time.sleep(1)
        time.sleep(5)  # room for late duplicates
        answers = counts()
        slack.set_chaos(0)
        bot.stop()

    answered = Counter(min(answers[ts], 2) for ts in sent)
    apologies = sum(1 for p in slack.posted if APOLOGY_MARK in p["text"])
    print(f"mentions sent       {len(sent)}")
    print(f"answered once       {answered[1]}")
    print(f"answered twice+     {answered[2]}")
    print(f"unanswered          {answered[0]}")
    print(f"apologies           {apologies}")
    print(f"unmarked bot posts  {answers['(unmarked)']}")
    print(f"restarts (SIGKILL)  {restarts}")
    print(f"model failures      {llm_failures['failed']} of {len(llm.requests)} requests")
    print(f"sending took        {sending:.0f} s; all settled after {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
