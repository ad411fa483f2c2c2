"""Replay a synthetic multi-channel Slack conversation against the real bot and count what it costs.

    .venv/bin/python bench/autonomous_replay.py [--messages N] [--seed S] [--restart]

FakeSlack and FakeOpenAI run in this process on 127.0.0.1; the bot runs as a subprocess
(`python -m myao2 run`, no health server). Four channels get lively exchanges, monologues,
thread discussions and questions nobody answers (top level and in threads), at accelerated
speed: a 1.5 s wait, a check every 0.3 s. The fake judge says yes exactly when the newest
message it is shown is a person's question; every other judgment is a confident no.

Printed per 100 human messages: judgment calls, generation calls, estimated prompt tokens
(characters / 4 of the request messages, as the fake's usage reports them) and replies
posted; then whether every unanswered question got its reply, and signs of waste.
With `--restart` the bot is stopped and started again once half the messages are replayed:
the judgments after it of conversations unchanged since their last one show as re-judged.
The run stops by itself within two minutes.
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import re
import resource
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import BotProcess  # noqa: E402
from tests.fakes import PROXY_VARIABLES  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, Reply, Text, ToolCall, ToolCalls  # noqa: E402
from tests.fakes.slack_server import FakeSlack  # noqa: E402

MIN_WAIT = 1.5
CHECK_INTERVAL = 0.3
QUIET_AFTER_QUESTION = 3.5  # how long nobody speaks after an unanswered top-level question
DRAIN_SECONDS = 6.0  # after the last message: time for the last questions to be answered
RUN_LIMIT_SECONDS = 110.0

PEOPLE = {"UALICE": "Alice", "UBOB": "Bob", "UCAROL": "Carol", "UDAVE": "Dave"}
CHANNELS = {"CGENERAL": "general", "CDEV": "dev", "CFOOD": "food", "CGAMES": "games"}
TOPICS = ["the release", "lunch", "the new keyboard", "the weekend", "the standup", "the coffee machine",
          "that bug", "the offsite", "the football match", "the book club", "the deploy", "the rain"]
STATEMENTS = ["I think {t} went fine", "honestly {t} was fun", "no news on {t} yet", "{t} is next on my list",
              "I'm still thinking about {t}", "agreed about {t}", "ha, {t} again", "{t} looks good to me",
              "I'll handle {t} later", "same here with {t}", "let's not worry about {t}", "noted, {t} it is"]
QUESTIONS = ["does anyone know when {t} happens?", "who is looking after {t}?", "any thoughts on {t}?",
             "is {t} still on?", "can someone help me with {t}?", "where did we land on {t}?"]
ANSWERS = ["tomorrow I think", "Dave is, I believe", "it's fine by me", "yes, still on", "sure, ping me",
           "we agreed on Friday"]


@dataclass
class Event:
    at: float
    channel: str
    user: str
    text: str
    parent: int | None = None  # index of the thread parent event
    index: int = 0


@dataclass
class Question:
    """A question nobody answers: the bot should reply in its conversation."""

    event: int
    channel: str
    thread_parent: int | None


@dataclass
class Script:
    events: list[Event] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def build_script(total: int, rng: random.Random) -> Script:
    """Four channels' worth of episodes, about `total` human messages, merged by time."""
    script = Script()
    per_channel = total // len(CHANNELS)
    for channel in CHANNELS:
        clock = rng.uniform(0.0, 1.0)
        count = 0
        while count < per_channel:
            kind = rng.choices(["lively", "monologue", "thread", "question", "thread_question"], [4, 2, 2, 1, 1.5])[0]
            clock, added = _episode(script, kind, channel, clock, rng, per_channel - count)
            count += added
            clock += rng.uniform(0.2, 0.6)
    script.events.sort(key=lambda e: e.at)
    order = {id(e): i for i, e in enumerate(script.events)}
    old_to_new = {e.index: order[id(e)] for e in script.events}
    for event in script.events:
        event.index = old_to_new[event.index]
        if event.parent is not None:
            event.parent = old_to_new[event.parent]
    for question in script.questions:
        question.event = old_to_new[question.event]
        if question.thread_parent is not None:
            question.thread_parent = old_to_new[question.thread_parent]
    return script


def _episode(script: Script, kind: str, channel: str, clock: float, rng: random.Random, room: int) -> tuple[float, int]:
    people = list(PEOPLE)
    topic = rng.choice(TOPICS)

    def add(user: str, text: str, parent: int | None = None) -> int:
        index = len(script.events)
        script.events.append(Event(clock, channel, user, text, parent, index))
        return index

    def statement() -> str:
        return rng.choice(STATEMENTS).format(t=topic)

    def question() -> str:
        return rng.choice(QUESTIONS).format(t=topic)

    def gap() -> float:
        return rng.uniform(0.1, 0.5)

    added = 0
    if kind in ("lively", "monologue"):
        speakers = rng.sample(people, 3 if kind == "lively" else 1)
        for i in range(rng.randint(5, 10) if kind == "lively" else rng.randint(3, 5)):
            if added >= room:
                break
            user = speakers[i % len(speakers)]
            if kind == "lively" and i % 3 == 1 and added + 2 <= room:
                add(user, question())  # asked and answered at once
                clock += gap()
                add(speakers[(i + 1) % len(speakers)], rng.choice(ANSWERS))
                added += 2
            else:
                add(user, statement())
                added += 1
            clock += gap()
        return clock, added
    if kind == "question":
        index = add(rng.choice(people), question())
        script.questions.append(Question(index, channel, None))
        return clock + QUIET_AFTER_QUESTION, 1
    # a thread: a parent and replies; for "thread_question" the last reply is a question left hanging
    parent = add(rng.choice(people), statement())
    added = 1
    clock += gap()
    replies = min(room - 1, rng.randint(2, 5))
    for i in range(replies):
        last = i == replies - 1
        if last and kind == "thread_question":
            index = add(rng.choice(people), question(), parent)
            script.questions.append(Question(index, channel, parent))
        else:
            add(rng.choice(people), statement(), parent)
        added += 1
        clock += gap()
    return clock, added


# ---------------------------------------------------------------- the fake LLM


@dataclass
class Call:
    at: float
    kind: str  # "judgment" | "generation"
    prompt_tokens: int
    state: tuple[str, str] | None = None  # (where, conversation) shown to the judge
    newest_is_bot: bool = False
    said_yes: bool = False


class Recorder:
    """The fake model: judges yes for a person's question left as the newest message; records calls."""

    CONVERSATION = re.compile(r"## Conversation[^\n]*\n(.*?)\n\n## ", re.S)
    WHERE = re.compile(r"Where: (\S+)")

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply:
        text = "\n".join(_message_text(m) for m in request["messages"])
        tokens = max(1, len(text) // 4)
        tools = {t["function"]["name"] for t in request.get("tools") or []}
        if "JudgmentOutput" not in tools:
            self._record(Call(time.time(), "generation", tokens))
            return Text("Good question! Let me think... I'd say go for it.")
        conversation = self.CONVERSATION.search(text)
        lines = [line for line in (conversation.group(1) if conversation else "").splitlines() if line.strip()]
        newest = lines[-1] if lines else ""
        speaker, _, said = newest.partition("] ")[2].partition(": ")
        where = self.WHERE.search(text)
        state = (where.group(1) if where else "?", "\n".join(lines))
        respond = speaker in PEOPLE.values() and said.rstrip().endswith("?")
        self._record(Call(time.time(), "judgment", tokens, state, speaker == "myao", respond))
        arguments = {
            "should_respond": respond,
            "reason": "an unanswered question" if respond else "nothing for me here",
            "confidence": 0.9 if respond else 0.95,
        }
        return ToolCalls([ToolCall("JudgmentOutput", arguments)])

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


# ---------------------------------------------------------------- the run


def replay(total: int, seed: int, judgment_skip: bool = True, restart: bool = False) -> int:
    started = time.monotonic()
    for name in PROXY_VARIABLES:
        os.environ.pop(name, None)
    script = build_script(total, random.Random(seed))
    recorder = Recorder()
    human_ts: list[float] = []
    posted_ts: dict[int, str] = {}
    with FakeSlack(bot_name="myao") as slack, FakeOpenAI() as llm, tempfile.TemporaryDirectory() as tmp:
        for user, name in PEOPLE.items():
            slack.add_user(user, name.lower(), display_name=name)
        for channel, name in CHANNELS.items():
            slack.add_channel(channel, name, members=list(PEOPLE))
        llm.set_responder(recorder)
        bot = BotProcess(Path(tmp), slack, llm)
        bot.settings.update(
            {
                "health_check.port": None,
                "logging.level": "WARNING",
                "response.check_interval_seconds": CHECK_INTERVAL,
                "response.min_wait_seconds": MIN_WAIT,
                "response.jitter_ratio": 0.2,
                "response.dynamic_wait": {"enabled": False},  # accelerated replay inflates messages/minute
                "response.response_interval": {"min": 0.1, "max": 0.3},
                "response.max_autonomous_replies_per_hour": 1000,
                "response.judgment_skip": {"enabled": judgment_skip},
            }
        )
        bot.start()
        try:
            t0 = time.monotonic()
            for event in script.events:
                if restart and event.index == len(script.events) // 2:
                    bot.stop()
                    bot.start()
                if time.monotonic() - started > RUN_LIMIT_SECONDS - DRAIN_SECONDS:
                    print("run time limit reached while replaying; stopping early", file=sys.stderr)
                    break
                delay = t0 + event.at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                thread_ts = posted_ts[event.parent] if event.parent is not None else None
                ts = slack.post_message(event.channel, event.user, event.text, thread_ts=thread_ts)
                posted_ts[event.index] = ts
                human_ts.append(float(ts))
            replayed = time.monotonic() - t0
            deadline = min(time.monotonic() + DRAIN_SECONDS, started + RUN_LIMIT_SECONDS)
            while time.monotonic() < deadline and not _all_answered(script, posted_ts, slack.posted):
                time.sleep(0.2)
            time.sleep(min(1.0, max(0.0, started + RUN_LIMIT_SECONDS - time.monotonic())))  # late extras show up
        finally:
            status = bot.stop()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime
        report(script, posted_ts, human_ts, recorder.snapshot(), slack.posted, replayed, status, bot.log(), cpu)
    print(f"\nwall time: {time.monotonic() - started:.1f} s")
    return 0


def _answer_to(question: Question, script: Script, posted_ts: dict[int, str], posts: list[dict]) -> dict | None:
    """The bot's post answering `question`: in its thread, or top level before the next top-level message."""
    ts = posted_ts.get(question.event)
    if ts is None:
        return None
    if question.thread_parent is not None:
        parent = posted_ts[question.thread_parent]
        return next((p for p in posts if p["thread_ts"] == parent and float(p["ts"]) > float(ts)), None)
    later = [
        float(posted_ts[e.index])
        for e in script.events
        if e.channel == question.channel and e.parent is None and e.index in posted_ts
        and float(posted_ts[e.index]) > float(ts)
    ]
    until = min(later, default=float("inf"))
    return next(
        (
            p
            for p in posts
            if p["channel"] == question.channel and p["thread_ts"] is None and float(ts) < float(p["ts"]) < until
        ),
        None,
    )


def _all_answered(script: Script, posted_ts: dict[int, str], posts: list[dict]) -> bool:
    asked = [q for q in script.questions if q.event in posted_ts]
    return all(_answer_to(q, script, posted_ts, posts) for q in asked)


def report(
    script: Script,
    posted_ts: dict[int, str],
    human_ts: list[float],
    calls: list[Call],
    posts: list[dict],
    replayed: float,
    status: int,
    log: str,
    cpu_seconds: float,
) -> None:
    humans = len(human_ts)
    buckets = max(1, -(-humans // 100))

    def bucket(moment: float) -> int:
        return min(bisect.bisect_right(human_ts, moment) // 100, buckets - 1) if humans else 0

    rows = [Counter() for _ in range(buckets)]
    for call in calls:
        row = rows[bucket(call.at)]
        row[call.kind] += 1
        row[f"{call.kind}_tokens"] += call.prompt_tokens
    for post in posts:
        rows[bucket(float(post["ts"]))]["replies"] += 1

    asked = [q for q in script.questions if q.event in posted_ts]
    answered = [q for q in asked if _answer_to(q, script, posted_ts, posts)]
    expected = {id(a) for q in asked if (a := _answer_to(q, script, posted_ts, posts))}
    extra = [p for p in posts if id(p) not in expected]
    latencies = [
        float(a["ts"]) - float(posted_ts[q.event]) for q in answered if (a := _answer_to(q, script, posted_ts, posts))
    ]
    judgments = [c for c in calls if c.kind == "judgment"]
    states = Counter(c.state for c in judgments)
    rejudged = sum(n - 1 for n in states.values())

    print(f"replayed {humans} human messages in {len(CHANNELS)} channels in {replayed:.1f} s "
          f"(min_wait {MIN_WAIT} s, check every {CHECK_INTERVAL} s)")
    print()
    print(f"{'human messages':>16} | {'judgment calls':>14} | {'generation calls':>16} | "
          f"{'est. prompt tokens':>18} | {'  of which judgment':>19} | {'replies posted':>14}")
    print("-" * 112)
    for i, row in enumerate(rows):
        label = f"{i * 100 + 1}-{min((i + 1) * 100, humans)}" + (" + drain" if i == buckets - 1 else "")
        tokens = row["judgment_tokens"] + row["generation_tokens"]
        print(f"{label:>16} | {row['judgment']:>14} | {row['generation']:>16} | {tokens:>18} | "
              f"{row['judgment_tokens']:>19} | {row['replies']:>14}")
    total = sum(rows, Counter())
    print("-" * 112)
    print(f"{'total':>16} | {total['judgment']:>14} | {total['generation']:>16} | "
          f"{total['judgment_tokens'] + total['generation_tokens']:>18} | {total['judgment_tokens']:>19} | "
          f"{total['replies']:>14}")
    per100 = 100 / humans if humans else 0
    print(f"{'per 100 messages':>16} | {total['judgment'] * per100:>14.1f} | {total['generation'] * per100:>16.1f} | "
          f"{(total['judgment_tokens'] + total['generation_tokens']) * per100:>18.0f} | "
          f"{total['judgment_tokens'] * per100:>19.0f} | {total['replies'] * per100:>14.1f}")
    print()
    print(f"unanswered questions answered: {len(answered)} of {len(asked)} "
          f"({sum(q.thread_parent is not None for q in asked)} in threads)"
          + ("" if len(answered) == len(asked) else "   <-- MISSED"))
    if latencies:
        median = sorted(latencies)[len(latencies) // 2]
        print(f"question -> reply latency: median {median:.2f} s, max {max(latencies):.2f} s")
    print(f"replies not answering one of those questions: {len(extra)}")
    print(f"judgments: {len(judgments)} ({sum(c.said_yes for c in judgments)} yes); "
          f"on {len(states)} distinct conversation states; "
          f"re-judged unchanged states: {rejudged}")
    print(f"judgment calls where the newest message was the bot's own: {sum(c.newest_is_bot for c in judgments)}")
    print(f"bot exit status: {status}; myao2 warnings in its log: {log.count(' WARNING myao2')}, "
          f"tracebacks: {log.count('Traceback')}; bot CPU time: {cpu_seconds:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300, help="human messages to replay (default 300)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the synthetic conversation")
    parser.add_argument(
        "--no-judgment-skip", action="store_true", help="disable standing judgments (shows what they save)"
    )
    parser.add_argument("--restart", action="store_true", help="restart the bot halfway through the replay")
    args = parser.parse_args(argv)
    return replay(max(4, args.messages), args.seed, judgment_skip=not args.no_judgment_skip, restart=args.restart)


if __name__ == "__main__":
    sys.exit(main())
