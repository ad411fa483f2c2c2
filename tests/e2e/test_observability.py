"""Observability end to end: what the running bot records shows in `myao2 stats`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tests.e2e.conftest import ALICE, CLI_SECONDS, GENERAL, BotProcess, wait_until
from tests.e2e.test_autonomous import FAST, judgment, responder
from tests.e2e.test_mentions import replies_in
from tests.e2e.test_search import seed
from tests.fakes.openai_server import Error, FakeOpenAI, Text, ToolCall, ToolCalls
from tests.fakes.otlp_server import FakeCollector
from tests.fakes.slack_server import FakeSlack


def stats(bot: BotProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "myao2", "stats", "--config", str(bot.config_path), *args],
        cwd=bot.tmp_path,
        env=bot.environment(),
        capture_output=True,
        text=True,
        timeout=CLI_SECONDS,
    )


def test_stats_count_the_answer_the_judgment_the_unasked_reply_and_price_the_calls(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    llm.set_responder(responder(lambda r: judgment(True, 0.9), lambda r: Text("Ramen on 5th street.")))
    bot.settings.update(FAST)
    bot.settings["stats.prices"] = {"fake": {"input": 1.0, "output": 2.0}}
    bot.start()
    mention = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> a ramen place?")
    slack.wait_for(lambda: any(p.get("thread_ts") == mention for p in slack.posted), what="the answer")
    slack.post_message(GENERAL, ALICE, "anyone else hungry for secret-sauce noodles?")
    slack.wait_for(lambda: any(p.get("thread_ts") is None for p in slack.posted), what="the unasked reply")
    assert bot.stop() == 0

    result = stats(bot, "--since", "1d", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["messages_stored"] >= 4  # two of Alice's, two of the bot's
    assert figures["replies_posted"] == {"answer": 1, "unasked": 1, "total": 2}
    assert figures["judgments"]["respond"] == 1
    roles = {r["role"]: r for r in figures["model_calls"]}
    assert roles["response"]["calls"] == 2 and roles["judgment"]["calls"] == 1
    tokens = sum(r["input_tokens"] + r["output_tokens"] for r in figures["model_calls"])
    assert tokens > 0
    assert figures["estimated_cost"]["total"] > 0 and figures["estimated_cost"]["unpriced_models"] == []
    assert "secret-sauce" not in result.stdout

    text = stats(bot)
    assert text.returncode == 0 and "Replies posted:   2 (1 answers, 1 unasked)" in text.stdout


def test_an_answer_cut_short_by_the_bot_stopping_still_counts_its_model_call(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    llm.script(Text("The first words, then a pause far past the grace period", pieces=2, interval=120))
    bot.start()
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> tell me a long story")
    slack.wait_for(lambda: any(s["thread_ts"] == ts for s in slack.streams), what="the answer streaming")
    assert bot.stop() == 0  # the grace period ends the answer, not the model's 120 s

    figures = json.loads(stats(bot, "--json").stdout)
    [response] = [r for r in figures["model_calls"] if r["role"] == "response"]
    assert (response["calls"], response["failed"], response["aborted"]) == (1, 0, 1)
    assert "model call cut short: role=response" in bot.log()


def test_an_invalid_price_table_exits_2_naming_the_key(bot: BotProcess) -> None:
    bot.settings["stats.prices"] = {"fake": {"input": "cheap", "output": 1}}
    bot.write_config()
    result = stats(bot)
    assert result.returncode == 2
    assert "stats.prices.fake.input" in result.stderr and "Traceback" not in result.stderr


def ready(bot: BotProcess) -> tuple[int, dict]:
    """/ready's status and JSON body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{bot.health_port}/ready", timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_ready_names_the_model_while_it_fails_and_recovers_with_it(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.start()
    assert wait_until(lambda: ready(bot)[0] == 200, what="/ready 200")
    llm.set_responder(lambda request: Error(500, "model down", headers={"retry-after-ms": "1"}))
    slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> are you there?")

    status, body = wait_until(lambda: (r := ready(bot))[0] == 503 and r, what="/ready 503")
    assert body["ready"] is False and body["not_ready"] == ["model"]
    assert body["checks"]["slack"] == {"ready": True} and body["checks"]["database"] == {"ready": True}
    assert "HTTP 500" in body["checks"]["model"]["reason"]

    time.sleep(1)
    assert ready(bot)[0] == 503, "no model call succeeded yet"

    llm.set_responder(lambda request: Text("Back now."))
    again = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> and now?")
    slack.wait_for(lambda: replies_in(slack, again), what="the answer once the model is back")
    assert wait_until(lambda: ready(bot)[0] == 200, what="/ready back at 200")
    assert bot.stop() == 0


MARKS = ("Zanzibar", "Quetzal", "Wombatique", "Okapiberry")
"""Words that appear only in what people, memos and the model wrote: never in a span unless debugging."""


def traced_bot(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI, collector: FakeCollector) -> tuple[str, str]:
    """Run the bot through an answer with a memo search, an unasked reply and a memory round; stop it.

    Returns the ts of the mention and of the message answered unasked.
    """
    seed(bot, memos=[("alice-snack", f"Alice snacks on {MARKS[0]} figs")])
    bot.env_overrides.update(OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint, OTEL_BSP_SCHEDULE_DELAY="200")
    bot.settings.update(FAST)
    bot.settings["memory.update_interval_seconds"] = 1
    # The mention must be answered from its event, in the event's trace: the start-up catch-up, still reading
    # history when it is posted, would otherwise find it first and answer it in a trace of its own.
    bot.settings["response.mention_catchup_seconds"] = 0
    mention_reply = [ToolCalls([ToolCall("search_memo", {"query": f"{MARKS[1]} snack"})]), Text(f"{MARKS[2]} figs!")]

    def write(request: dict) -> Text | ToolCalls:
        if "JudgmentOutput" in json.dumps(request.get("tools") or []):
            return judgment(True, 0.9)
        if any(t["function"]["name"] == "MemoryUpdateOutput" for t in request.get("tools") or []):
            return ToolCalls([ToolCall("MemoryUpdateOutput", {"long_term": [], "short_term": [], "threads": []})])
        return mention_reply.pop(0) if mention_reply else Text(f"Me too, {MARKS[3]}.")

    llm.set_responder(write)
    bot.start()
    mention = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what is my {MARKS[1]} snack?")
    slack.wait_for(lambda: replies_in(slack, mention), what="the answer")
    unasked = slack.post_message(GENERAL, ALICE, f"I could eat {MARKS[3]} all day")
    slack.wait_for(lambda: any(p.get("thread_ts") is None for p in slack.posted), what="the unasked reply")
    wait_until(lambda: collector.named("memory.round"), what="a memory round's span")
    assert bot.stop() == 0  # the spans still waiting are sent at exit
    return mention, unasked


def test_spans_arrive_over_otlp_with_ids_and_no_text(bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI) -> None:
    with FakeCollector() as collector:
        mention, unasked = traced_bot(bot, slack, llm, collector)
    spans = collector.spans
    assert {span.service for span in spans} == {"myao2"}

    events = [s for s in collector.named("slack.event") if s.attributes.get("slack.message_ts") == mention]
    assert events and {s.attributes["slack.channel_id"] for s in events} == {GENERAL}
    assert {s.attributes["slack.event_type"] for s in events} <= {"message", "app_mention"}

    (answer,) = [s for s in collector.named("answer") if s.attributes.get("slack.message_ts") == mention]
    assert answer.attributes["slack.channel_id"] == GENERAL and answer.attributes["myao2.answer.attempt"] == 1
    assert answer.parent_span_id in {s.span_id for s in events}, "the answer belongs to its event's trace"
    in_answer = [s for s in spans if s.trace_id == answer.trace_id]
    names = {s.name for s in in_answer}
    assert {"execute_tool search_memo", "chat", "search.memos"} <= names
    assert any(name.startswith("invoke_agent") for name in names)
    (search,) = [s for s in in_answer if s.name == "search.memos"]
    assert search.attributes == {"myao2.search.reader": GENERAL, "myao2.search.hits": 1}
    chat = next(s for s in in_answer if s.name == "chat")
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0

    judged = [s for s in collector.named("judgment") if s.attributes.get("slack.message_ts") == unasked]
    assert judged and judged[0].attributes["slack.channel_id"] == GENERAL
    assert judged[0].attributes["myao2.judgment.outcome"] == "respond"
    assert judged[0].attributes["myao2.judgment.confidence"] == 0.9

    rounds = collector.named("memory.round")
    assert any(r.attributes["myao2.memory.calls"] >= 1 for r in rounds)
    channel_rounds = collector.named("memory.channel")
    assert channel_rounds and {s.attributes["slack.channel_id"] for s in channel_rounds} == {GENERAL}

    assert all(not s.events for s in spans), "events (prompts, replies, exceptions) are taken off"
    sent = b"".join(collector.bodies)
    for mark in MARKS:
        assert mark.encode() not in sent, f"{mark} reached the collector"


def test_with_debug_llm_messages_the_model_messages_go_out_too(
    bot: BotProcess, slack: FakeSlack, llm: FakeOpenAI
) -> None:
    bot.settings["logging.debug_llm_messages"] = True
    with FakeCollector() as collector:
        traced_bot(bot, slack, llm, collector)
    sent = b"".join(collector.bodies)
    assert MARKS[1].encode() in sent and MARKS[2].encode() in sent
