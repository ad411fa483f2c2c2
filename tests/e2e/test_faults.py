"""Faults end to end: what happened while the bot was down, Slack unreachable, bad tokens, dropped sockets."""

from __future__ import annotations

from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess, wait_until
from tests.e2e.test_conversations import stored_text
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.fakes.openai_server import Text
from tests.fakes.slack_server import FakeSlack


def test_a_secret_deleted_while_the_bot_was_down_is_gone_after_the_next_sync(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot.start()
    secret = slack.post_message(GENERAL, ALICE, "oops, the vault code is 7291")
    redacted = slack.post_message(GENERAL, BOB, "my token is xoxb-live-123")
    wait_until(lambda: stored_text(bot, GENERAL, redacted), what="the messages stored")
    assert bot.stop() == 0

    slack.delete_message(GENERAL, secret)  # nobody is connected: the events are lost
    slack.edit_message(GENERAL, redacted, "my token is [redacted]")
    bot.start()
    wait_until(lambda: stored_text(bot, GENERAL, secret) is None, what="the deletion found by the sync")
    wait_until(lambda: stored_text(bot, GENERAL, redacted) == "my token is [redacted]", what="the edit found")

    llm.script(Text("Nothing to see here."))
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> what did we say today?")
    slack.wait_for(lambda: replies_in(slack, ts), timeout=30, what="the reply")  # the first loads the model libraries
    prompt = prompt_text(llm.requests[-1])
    assert "what did we say today?" in prompt and "[redacted]" in prompt
    assert "7291" not in prompt and "xoxb-live-123" not in prompt
    assert bot.stop() == 0
