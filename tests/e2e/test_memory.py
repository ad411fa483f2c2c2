"""The memory job end to end: the fake model answers it, and what it made reaches the next prompts."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.e2e.conftest import ALICE, BOB, GENERAL, ON_BOTH_DATABASES, BotProcess, wait_until
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.fakes.memory_model import is_channels_request, is_memory_request, remember
from tests.fakes.openai_server import Error, Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

ALICE_DM = "DALICE"
SECRET_ROOM = "GSECRET"


def responder(request: dict[str, Any]):  # type: ignore[no-untyped-def]
    return remember(request) if is_memory_request(request) else Text("Sure thing.")


def memories(bot: BotProcess) -> dict[tuple[str, str], list[str]]:
    rows = bot.rows("SELECT scope, term, bullets FROM memories")
    return {(scope, term): [b["text"] for b in json.loads(bullets)] for scope, term, bullets in rows}


def profiled(bot: BotProcess, user_id: str) -> bool:
    return bool(bot.rows("SELECT 1 FROM profiles WHERE user_id = :user_id", user_id=user_id))


def answer_prompts(llm) -> list[str]:  # type: ignore[no-untyped-def]
    return [prompt_text(r) for r in llm.requests if not is_memory_request(r)]


@pytest.fixture
def memory_bot(bot: BotProcess, slack: FakeSlack, llm) -> BotProcess:  # type: ignore[no-untyped-def]
    slack.add_channel(ALICE_DM, ALICE, is_im=True, members=[ALICE])
    slack.add_channel(SECRET_ROOM, "secret-room", is_private=True, members=[ALICE, BOB])
    llm.set_responder(responder)
    bot.settings["memory.update_interval_seconds"] = 0.5
    return bot


@ON_BOTH_DATABASES
def test_summaries_reach_the_next_prompt_and_a_dm_memory_never_reaches_a_channel(
    memory_bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot = memory_bot.start()
    slack.post_message(GENERAL, ALICE, "the release moves to friday")
    parent = slack.post_message(GENERAL, BOB, "who writes the notes?")
    slack.post_message(GENERAL, ALICE, "I will write the release notes", thread_ts=parent)
    slack.post_message(SECRET_ROOM, ALICE, "canary-secret surprise party for Bob")
    slack.post_message(ALICE_DM, ALICE, "canary-dm I am nervous about my exam")
    slack.wait_for(lambda: any(p["channel"] == ALICE_DM for p in slack.posted), what="the DM answered")

    def made() -> bool:
        found = memories(bot)
        return all(
            key in found and found[key]
            for key in (
                (f"channel:{GENERAL}", "long"),
                (f"thread:{GENERAL}:{parent}", "short"),
                (f"channel:{ALICE_DM}", "long"),
                (f"channel:{SECRET_ROOM}", "long"),
                ("workspace", "long"),
            )
        )

    wait_until(made, what="the memory job to make every memory")
    found = memories(bot)
    assert "remembered: the release moves to friday" in found[(f"channel:{GENERAL}", "long")]
    assert found[(f"thread:{GENERAL}:{parent}", "short")] == ["thread talk: I will write the release notes"]
    assert not any("canary" in text for text in found[("workspace", "long")])

    # From here on the memory model fails, so the memories stay as made: a round reading a mention below (every
    # 0.5 s) before its answer's prompt is read would remake the thread's memory from the mention alone.
    llm.set_responder(lambda request: Error(400, "down") if is_memory_request(request) else responder(request))
    slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> what is the plan?", thread_ts=parent)
    slack.wait_for(lambda: len(replies_in(slack, parent)) >= 1, what="the answer in the thread")
    prompt = next(p for p in answer_prompts(llm) if "what is the plan?" in p)
    assert "thread talk: I will write the release notes" in prompt  # the thread's memory
    assert "remembered: the release moves to friday" in prompt  # the channel's long-term memory
    assert "lately: remembered: the release moves to friday" in prompt  # its short-term memory
    assert "workspace knows: remembered: the release moves to friday" in prompt  # the workspace's
    assert "canary" not in prompt  # nothing of the DM or the private channel

    slack.post_message(ALICE_DM, ALICE, "do you remember what worried me?")
    slack.wait_for(lambda: len([p for p in slack.posted if p["channel"] == ALICE_DM]) >= 2, what="the second DM answer")
    dm_prompt = next(p for p in answer_prompts(llm) if "do you remember what worried me?" in p)
    assert "remembered: canary-dm I am nervous about my exam" in dm_prompt
    assert "canary-secret" not in dm_prompt
    assert bot.stop() == 0


def test_a_quiet_workspace_costs_no_memory_calls_and_a_restart_redoes_nothing(
    memory_bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot = memory_bot.start()
    slack.post_message(GENERAL, ALICE, "the release moves to friday")
    wait_until(lambda: profiled(bot, ALICE), what="the first round, Alice's profile last")
    calls = len([r for r in llm.requests if is_memory_request(r)])
    assert bot.stop() == 0

    bot.start()
    slack.post_message(GENERAL, BOB, "ok")  # not a change the job has seen yet: one channel + workspace + Bob
    wait_until(lambda: len([r for r in llm.requests if is_memory_request(r)]) >= calls + 3, what="the round")
    time.sleep(1.5)  # three more rounds with nothing new
    assert len([r for r in llm.requests if is_memory_request(r)]) == calls + 3
    assert memories(bot)[(f"channel:{GENERAL}", "long")] == [
        "remembered: the release moves to friday",
        "remembered: ok",
    ]
    assert bot.stop() == 0


def test_the_first_memory_round_reads_everything_the_start_up_catch_up_brings(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    plans = "CPLANS"
    slack.add_channel(plans, "plans", members=[ALICE, BOB])
    llm.set_responder(responder)
    bot.settings["memory.update_interval_seconds"] = 0.2
    slack.post_message(GENERAL, ALICE, "lunch at noon today")
    slack.post_message(plans, BOB, "the merger with acme is on")
    slack.inject_delay("conversations.history", 1.0, times=2)  # each channel's history arrives a second late
    bot.start()
    wait_until(lambda: any(is_channels_request(r) for r in llm.requests), what="the channels' round")
    reading = [prompt_text(r) for r in llm.requests if is_memory_request(r) and "lunch at noon" in prompt_text(r)]
    assert len(reading) == 1 and "merger with acme" in reading[0]  # both channels, in one call
    assert bot.stop() == 0


def test_half_an_emoji_in_the_memory_models_answer_is_remembered_as_text_the_database_takes(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    def halved(value: Any) -> Any:
        """`value` with half an emoji after every note's text (JSON escapes it: "\\ud83c")."""
        if isinstance(value, dict):
            return {k: v + " \ud83c" if k == "text" else halved(v) for k, v in value.items()}
        return [halved(item) for item in value] if isinstance(value, list) else value

    def answer(request: dict[str, Any]):  # type: ignore[no-untyped-def]
        if not is_memory_request(request):
            return Text("Sure thing.")
        calls = remember(request)
        return ToolCalls([ToolCall(call.name, halved(call.arguments)) for call in calls.calls])

    llm.set_responder(answer)
    bot.settings["memory.update_interval_seconds"] = 0.5
    bot.start()
    slack.post_message(GENERAL, ALICE, "lunch plans at noon")

    wait_until(lambda: memories(bot).get((f"channel:{GENERAL}", "long")), what="the channel's memory made")
    assert memories(bot)[(f"channel:{GENERAL}", "long")] == ["remembered: lunch plans at noon \ufffd"]
    assert bot.stop() == 0
