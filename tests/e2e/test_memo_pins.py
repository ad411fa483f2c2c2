"""A memo a person pinned from the command line: in every prompt, and the model's tools cannot change it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from tests.e2e.conftest import ALICE, CLI_SECONDS, GENERAL, BotProcess
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack


def myao2(bot: BotProcess, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "myao2", *argv, "--config", str(bot.config_path)],
        env=bot.environment(),
        capture_output=True,
        text=True,
        timeout=CLI_SECONDS,
    )


def test_a_pinned_memo_is_in_the_prompt_and_the_model_cannot_edit_or_remove_it(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot.start()
    llm.script(
        ToolCalls([ToolCall("add_memo", {"name": "no-spoilers", "content": "Never spoil endings", "priority": 3})]),
        Text("Noted."),
    )
    first = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> please never spoil endings")
    slack.wait_for(lambda: replies_in(slack, first), what="the first answer")

    pinned = myao2(bot, "memo", "pin", "no-spoilers")
    assert pinned.returncode == 0, pinned.stderr

    llm.script(
        ToolCalls([ToolCall("edit_memo", {"memo_name": "no-spoilers", "content": "Spoilers are fine now"})]),
        ToolCalls([ToolCall("remove_memo", {"memo_name": "no-spoilers"})]),
        Text("I can't change that one."),
    )
    second = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> forget the spoiler rule")
    slack.wait_for(lambda: replies_in(slack, second), what="the second answer")

    requests = [r for r in llm.requests if "forget the spoiler rule" in prompt_text(r)]
    assert "Rules people set" in prompt_text(requests[0]) and "no-spoilers: Never spoil endings" in prompt_text(requests[0])
    refusals = [m for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert len(refusals) == 2 and all("rule a person set" in prompt_text({"messages": [m]}) for m in refusals)
    with sqlite3.connect(bot.database) as db:
        assert db.execute("SELECT content, removed_at FROM memos WHERE name = 'no-spoilers'").fetchall() == [
            ("Never spoil endings", None)
        ]
    assert bot.stop() == 0
