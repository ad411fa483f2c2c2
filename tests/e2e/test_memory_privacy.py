"""Privacy of what the memory job writes when it reads several public channels in one model call, end to end."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess, wait_until
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.fakes import memory_model
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

PLANS = "CPLANS"


def mixing(request: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The fake memory model, except that reading several channels at once it writes each channel's notes
    from every channel's new messages (citing only the channel's own): the mix-up batching allows."""
    if not memory_model.is_channels_request(request):
        return memory_model.remember(request) if memory_model.is_memory_request(request) else Text("Sure thing.")
    (call,) = memory_model.remember(request).calls
    channels = call.arguments["channels"]
    everything = " / ".join(note["text"] for c in channels for note in c["long_term"])
    for channel in channels:
        own = [ts for note in channel["long_term"] for ts in note["ts"]]
        channel["long_term"] = channel["short_term"] = [{"text": everything, "ts": own}] if own else []
    return ToolCalls([ToolCall(memory_model.CHANNELS_TOOL, {"channels": channels})])


def memories_holding(bot: BotProcess, text: str) -> list[str]:
    return sorted(
        f"{scope}/{term}"
        for scope, term, bullets in bot.rows("SELECT scope, term, bullets FROM memories")
        if any(text in b["text"] for b in json.loads(bullets))
    )


def test_a_channel_read_together_with_another_takes_its_words_back_when_it_turns_private(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel(PLANS, "plans", members=[ALICE, BOB])
    llm.set_responder(mixing)
    bot.settings["memory.update_interval_seconds"] = 0.5
    slack.post_message(GENERAL, ALICE, "lunch at noon today")
    slack.post_message(PLANS, BOB, "the canary-merger with acme is on")
    bot.start()  # both caught up at once: the first round reads them in one call
    wait_until(lambda: f"channel:{GENERAL}/long" in memories_holding(bot, "canary-merger"), what="the mix-up")

    def general_prompt(question: str) -> str:
        """The text of the prompts that read `question`, asked in #general now (a memory round under way may still
        send the model what it read before, a question asked earlier with it: each question is asked once)."""
        seen = len(llm.requests)
        ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> {question}")
        slack.wait_for(lambda: replies_in(slack, ts), what="the reply in #general")
        return "\n".join(prompt_text(r) for r in llm.requests[seen:] if question in prompt_text(r))

    assert "canary-merger" in general_prompt("what is new?")  # while #plans is public, #general may know it

    slack.convert_to_private(PLANS)
    wait_until(
        lambda: memories_holding(bot, "canary-merger") == [f"channel:{PLANS}/long", f"channel:{PLANS}/short"],
        what="#plans' words kept only in its own memories",
    )
    assert "canary-merger" not in general_prompt("anything else?")
    assert bot.stop() == 0


def test_raw_text_outlives_its_day_while_the_memory_model_fails_and_goes_once_the_memory_job_has_read_it(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    from tests.e2e.test_retention import FACT, Days, digests, responder, rows, tables_holding
    from tests.fakes.openai_server import Error

    def memory_model_down(request: dict[str, Any]):  # type: ignore[no-untyped-def]
        if memory_model.is_memory_request(request):
            return Error(400, "the memory model cannot answer")
        return responder(request)

    llm.set_responder(memory_model_down)
    bot.settings["memory.update_interval_seconds"] = 0.5
    days = Days(bot, slack)
    bot.start()
    days.post(GENERAL, BOB, FACT)
    wait_until(
        lambda: rows(bot, "SELECT count(*) FROM messages WHERE text = :text", text=FACT) == [(1,)], what="the fact stored"
    )

    days.move_to(15)
    wait_until(lambda: digests(bot, GENERAL), what="the digest of day 0, made all the same")
    rounds = len(llm.requests)
    wait_until(lambda: len(llm.requests) >= rounds + 4, what="more rounds with the memory model down")
    assert "messages" in tables_holding(bot, "blue flowerpot")  # not read into memory yet: kept

    llm.set_responder(responder)
    wait_until(lambda: "messages" not in tables_holding(bot, "blue flowerpot"), what="the raw text deleted once read")
    assert {"memories", "digests"} <= tables_holding(bot, "blue flowerpot")
    # the activity log (never pruned) holds no text: counts, times and ids only
    assert not tables_holding(bot, "blue flowerpot") & {"model_calls", "judgments", "replies"}
    assert rows(bot, "SELECT count(*) FROM model_calls") != [(0,)]
    assert bot.stop() == 0


def test_a_message_deleted_in_slack_leaves_the_memory_and_the_next_prompts(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    llm.set_responder(mixing)
    bot.settings["memory.update_interval_seconds"] = 0.5
    bot.start()
    slack.post_message(GENERAL, ALICE, "lunch at noon today")
    gone = slack.post_message(GENERAL, BOB, "oops, the canary-password is hunter2")
    wait_until(lambda: f"channel:{GENERAL}/long" in memories_holding(bot, "canary-password"), what="it remembered")

    slack.delete_message(GENERAL, gone)
    wait_until(lambda: memories_holding(bot, "canary-password") == [], what="the notes made from it dropped")
    # A round that read it before the deletion may still be asking the model with prompts read then (the
    # workspace memory, the profiles), and saving what they bring. Rounds run one at a time: once the workspace
    # memory holds a message posted now, the round that read it began after the deletion, and the one before
    # is over (its saves left the deleted message's notes out).
    slack.post_message(GENERAL, ALICE, "dessert at three")
    wait_until(lambda: "workspace/long" in memories_holding(bot, "dessert at three"), what="a round begun since")
    assert memories_holding(bot, "canary-password") == []

    seen = len(llm.requests)
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what is new?")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply in #general")
    later = [r for i, r in enumerate(llm.requests) if i >= seen or "dessert at three" in prompt_text(r)]
    assert all("canary-password" not in prompt_text(r) for r in later)
    assert bot.stop() == 0
