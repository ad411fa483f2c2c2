"""Two bot processes sharing one PostgreSQL and one Slack app (Slack spreads the events over both connections)."""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.conftest import ALICE, BOB, GENERAL, START_SECONDS, BotProcess, wait_until, workspace
from tests.e2e.test_answers_exactly_once import answers_to
from tests.e2e.test_autonomous import is_judgment, judgment
from tests.e2e.test_postgres import rows
from tests.e2e.test_streaming import finished, streams_in
from tests.fakes.memory_model import is_memory_request, remember
from tests.fakes.openai_server import FakeOpenAI, Text
from tests.fakes.slack_server import FakeSlack
from tests.postgres import PostgresServer

MENTIONS = 40
LEASE_SECONDS = 4
"""Short, for a quick takeover, but long enough that a replica starved of CPU on a busy machine is not taken for dead."""
REPLICA_SETTINGS = {
    "memory.update_interval_seconds": 1,
    "response.history_sync_interval_seconds": 1,
    "response.answer_retry_seconds": [1, 1, 1],
    "response.check_interval_seconds": 0.5,
    "response.min_wait_seconds": 0.5,
    "response.jitter_ratio": 0,
    "response.dynamic_wait": {"enabled": False},
}
JOBS = ("history", "autonomous", "memory")


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with workspace(spread_events=True) as fake:
        yield fake


@pytest.fixture
def database(postgres: PostgresServer) -> Iterator[str]:
    with postgres.database(migrated=False) as url:  # the replicas migrate it, both at once
        yield url


@pytest.fixture
def replicas(tmp_path: Path, slack: FakeSlack, llm: FakeOpenAI, database: str) -> Iterator[list[BotProcess]]:
    processes = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        process = BotProcess(tmp_path / name, slack, llm)
        process.settings.update({"memory.database_url": database, "memory.replica_lease_seconds": LEASE_SECONDS})
        processes.append(process)
    yield processes
    for process in processes:
        if process.process is not None and process.process.poll() is None:
            process.stop()


def replica_name(bot: BotProcess) -> str:
    found = wait_until(lambda: re.search(r"running as (replica-\w+)", bot.log()), what="the replica's name")
    return found.group(1)


def start_and_mention(replicas: list[BotProcess], slack: FakeSlack) -> tuple[dict[str, BotProcess], str]:
    """Start both replicas (an unanswered mention retried every second) and mention the bot once they are
    connected: the replicas by name, and the mention's ts."""
    for bot in replicas:
        bot.settings["response.answer_retry_seconds"] = [1, 1, 1]
        bot.start(wait_connected=False)
    slack.wait_for(lambda: slack.open_connections == 2, what="both replicas connected")  # two starts at once
    names = {replica_name(bot): bot for bot in replicas}
    return names, slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> tell me something")


@contextmanager
def frozen(names: dict[str, BotProcess], database: str, ts: str) -> Iterator[BotProcess]:
    """The replica that claimed mention `ts`, taken out of `names` and stopped (SIGSTOP) for the block."""
    [(holder,)] = rows(database, f"SELECT holder FROM claims WHERE ts = '{ts}'")
    stalled = names.pop(str(holder))
    assert stalled.process is not None
    stalled.process.send_signal(signal.SIGSTOP)
    try:
        yield stalled
    finally:
        stalled.process.send_signal(signal.SIGCONT)


def unsettled_claims(database: str, holder: str) -> int:
    [(count,)] = rows(database, f"SELECT count(*) FROM claims WHERE holder = '{holder}' AND settled_at IS NULL")
    return int(count)  # type: ignore[call-overload]


def job_holders(database: str) -> dict[str, str]:
    return {str(name): str(holder) for name, holder in rows(database, "SELECT name, holder FROM leases") if name in JOBS}


def responder(request: dict):  # type: ignore[no-untyped-def]
    if is_memory_request(request):
        return remember(request)
    if is_judgment(request):
        return judgment(False)
    return Text("Here I am.", delay=0.4, pieces=3, interval=0.1)


def test_two_replicas_answer_every_mention_once_and_the_survivor_of_a_kill_takes_over(
    replicas: list[BotProcess], slack: FakeSlack, llm: FakeOpenAI, database: str
) -> None:
    llm.set_responder(responder)
    doomed, survivor = replicas
    for bot in replicas:
        bot.settings.update(REPLICA_SETTINGS)
        bot.start(wait_connected=False)
    slack.wait_for(lambda: slack.open_connections == 2, what="both replicas connected")  # two starts at once
    doomed_name, survivor_name = replica_name(doomed), replica_name(survivor)

    mentions: list[str] = []

    def mention() -> None:
        mentions.append(slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> question {len(mentions)}"))
        time.sleep(0.05)

    for _ in range(MENTIONS // 2):
        mention()
    # SIGKILL the doomed replica while it holds a mention it has not answered yet. Slack sends each mention to
    # both replicas (as message and as app_mention) and the first claim wins, so the other replica may win a
    # whole batch (a replica still warming up on a busy machine does): mention on until the doomed one holds one.
    deadline = time.monotonic() + START_SECONDS
    while not unsettled_claims(database, doomed_name):
        assert time.monotonic() < deadline, "the doomed replica never claimed a mention"
        mention()
        time.sleep(0.2)
    doomed.kill()
    killed_at = len(slack.web_calls)
    for _ in range(MENTIONS // 2):
        mention()

    slack.wait_for(
        lambda: all(answers_to(slack, ts) for ts in mentions), what="an answer to every mention"
    )
    time.sleep(LEASE_SECONDS)  # a lease period and retry rounds more: room for a second answer to show up
    assert [len(answers_to(slack, ts)) for ts in mentions] == [1] * len(mentions)
    wait_until(  # each claim is settled after its answer is posted
        lambda: rows(database, "SELECT count(*) FROM claims WHERE settled_at IS NOT NULL") == [(len(mentions),)],
        what="every claim settled",
    )
    assert len([n for n, count in slack.deliveries.items() if count]) >= 2  # events went to both replicas

    # The periodic jobs all run on the survivor now.
    wait_until(lambda: set(job_holders(database).values()) == {survivor_name}, what="the jobs on the survivor")
    assert set(job_holders(database)) == set(JOBS)
    asked = len(llm.requests)
    slack.post_message(GENERAL, BOB, "anyone up for lunch?")
    wait_until(lambda: any(is_judgment(r) for r in llm.requests[asked:]), what="the autonomous check")
    wait_until(lambda: any(is_memory_request(r) for r in llm.requests[asked:]), what="the memory job")
    assert any(method == "users.conversations" for method, _ in slack.web_calls[killed_at:])  # history sync
    assert survivor.process is not None and survivor.process.poll() is None
    assert doomed_name not in {holder for (holder,) in rows(database, "SELECT holder FROM leases")}  # forgotten


def test_an_answer_a_killed_replica_left_half_streamed_is_ended_by_the_other_not_answered_twice(
    replicas: list[BotProcess], slack: FakeSlack, llm: FakeOpenAI, database: str
) -> None:
    llm.script(Text("This answer is cut short by a crash, sadly", pieces=20, interval=0.5))
    llm.set_responder(lambda request: Text("A second answer that must not appear."))
    names, ts = start_and_mention(replicas, slack)
    slack.wait_for(lambda: streams_in(slack, ts), what="the stream to start")
    [(holder,)] = wait_until(
        lambda: rows(database, f"SELECT holder FROM claims WHERE ts = '{ts}' AND answer_ts IS NOT NULL"),
        what="the stream's ts recorded",
    )
    names.pop(str(holder)).kill()  # the replica writing the answer dies mid-stream

    slack.wait_for(lambda: finished(slack, ts), what="the other replica to end the stream")
    time.sleep(LEASE_SECONDS)  # a lease period and retry rounds more: room for a second answer to show up
    [stream] = streams_in(slack, ts)
    text = slack.messages(GENERAL)[-1]["text"]
    assert text.startswith("Thi") and text.endswith("Could you ask me again in a little while?")
    assert "second answer" not in text and not [p for p in slack.posted if p["method"] == "chat.postMessage"]
    [survivor] = names
    wait_until(
        lambda: rows(database, f"SELECT answer_ts, holder FROM claims WHERE ts = '{ts}' AND settled_at IS NOT NULL")
        == [(stream["ts"], survivor)],
        what="the claim settled by the survivor",
    )


def test_a_replica_stalled_beyond_its_lease_gives_the_answer_up_quietly_to_the_one_that_took_it_over(
    replicas: list[BotProcess], slack: FakeSlack, llm: FakeOpenAI, database: str
) -> None:
    written = threading.Event()
    llm.script(Text("The stalled replica's answer, which must not appear.", hold=written))
    llm.set_responder(lambda request: Text("The answer."))
    names, ts = start_and_mention(replicas, slack)
    wait_until(lambda: llm.requests, what="the model asked for the answer")
    with frozen(names, database, ts) as stalled:  # while the model writes, for longer than its lease
        written.set()  # the answer reaches the replica while it is stopped
        slack.wait_for(lambda: answers_to(slack, ts), what="the other replica taking the answer over")

    wait_until(
        lambda: "taken over by another replica" in stalled.log() or len(answers_to(slack, ts)) > 1,
        what="the stalled replica going on",
    )
    time.sleep(LEASE_SECONDS)  # room for a second answer to show up
    [answer] = answers_to(slack, ts)
    assert "taken over by another replica" in stalled.log()
    assert "must not appear" not in str(answer) and "must not appear" not in str(slack.messages(GENERAL))
    [survivor] = names
    wait_until(
        lambda: rows(database, f"SELECT holder FROM claims WHERE ts = '{ts}' AND settled_at IS NOT NULL") == [(survivor,)],
        what="the claim settled by the survivor",
    )


def test_a_replica_stalled_while_writing_an_answer_posted_whole_leaves_no_second_answer(
    replicas: list[BotProcess], slack: FakeSlack, llm: FakeOpenAI, database: str
) -> None:
    slack.refuse_streaming("not_allowed")  # answers are posted once complete
    llm.script(Text("The stalled replica's answer, which must not appear.", pieces=12, interval=0.8))
    llm.set_responder(lambda request: Text("The answer."))
    names, ts = start_and_mention(replicas, slack)
    wait_until(lambda: llm.requests, what="the model asked for the answer")
    time.sleep(1.5)  # its first words written (nothing shows before the whole answer is posted)
    with frozen(names, database, ts) as stalled:  # mid-answer, for longer than its lease
        slack.wait_for(lambda: "The answer." in str(answers_to(slack, ts)), what="the other replica's answer")

    wait_until(lambda: "taken over by another replica" in stalled.log(), what="the stalled replica giving up")
    time.sleep(LEASE_SECONDS)  # room for a second answer to show up
    [answer] = answers_to(slack, ts)
    assert "must not appear" not in str(slack.messages(GENERAL))
