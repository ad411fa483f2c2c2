"""A channel changing under the bot, end to end: turned private, shared outside, the bot removed and back."""

from __future__ import annotations

import asyncio
import sqlite3
import sys

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from sqlalchemy import create_engine, text

from tests.e2e.conftest import ALICE, BOB, GENERAL, ON_BOTH_DATABASES, BotProcess, wait_until
from tests.e2e.test_autonomous import FAST, judgment, judgments, responder
from tests.e2e.test_memo_pins import myao2
from tests.e2e.test_memory import memories
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.e2e.test_search import tool_results
from tests.fakes.memory_model import is_memory_request, remember
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

PLANS = "CPLANS"
RANDOM = "CRANDOM"
AWAY = 600.0
"""The wait before a judgment in the test of a channel the bot was removed from: longer than the test."""


def query(bot: BotProcess, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(bot.database) as db:
        return db.execute(sql, params).fetchall()


def left_at(bot: BotProcess) -> list[tuple]:
    return query(bot, "SELECT left_at FROM channels WHERE id = ?", GENERAL)


def plan_a_party_in_a_public_channel(bot: BotProcess, slack: FakeSlack, llm) -> None:  # type: ignore[no-untyped-def]
    """Start the bot; in the public #plans, the model notes the surprise party for Bob as a workspace memo."""
    slack.add_channel(PLANS, "plans", members=[ALICE, BOB])
    bot.start()
    llm.script(
        ToolCalls([ToolCall("add_memo", {"name": "bob-party", "content": "Surprise party for Bob on Friday", "priority": 5})]),
        Text("Noted."),
    )
    ts = slack.post_message(PLANS, ALICE, f"<@{slack.bot_user_id}> we plan a surprise party for Bob on Friday")
    slack.wait_for(lambda: replies_in(slack, ts), what="the reply in #plans")


@pytest.mark.parametrize(("change", "kind"), [("convert_to_private", "private"), ("share_externally", "shared")])
def test_a_channel_that_stops_being_the_workspaces_keeps_its_memos_to_itself(
    bot: BotProcess, slack: FakeSlack, llm, change: str, kind: str
) -> None:
    plan_a_party_in_a_public_channel(bot, slack, llm)
    assert query(bot, "SELECT visibility FROM memos") == [("workspace",)]

    getattr(slack, change)(PLANS)
    wait_until(lambda: query(bot, "SELECT visibility FROM memos") == [("conversation",)], what="the memo narrowed")
    assert query(bot, "SELECT kind FROM channels WHERE id = ?", PLANS) == [(kind,)]
    assert query(bot, "SELECT action, actor FROM memo_revisions ORDER BY id") == [("add", "tool:add_memo"), ("narrow", "slack")]

    llm.script(
        ToolCalls([ToolCall("list_memo", {}), ToolCall("get_memo", {"name": "bob-party"})]),
        Text("Nothing planned that I know of."),
    )
    public = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> anything planned for me on Friday?")
    slack.wait_for(lambda: replies_in(slack, public), what="the reply in #general")
    for request in llm.requests[-2:]:
        assert "Surprise party" not in prompt_text(request)

    llm.script(Text("The party, of course."))
    inside = slack.post_message(PLANS, ALICE, f"<@{slack.bot_user_id}> what are we planning?")
    slack.wait_for(lambda: replies_in(slack, inside), what="the reply in the narrowed channel")
    assert "Surprise party" in prompt_text(llm.requests[-1])
    assert bot.stop() == 0


def test_a_memo_of_a_channel_stored_as_private_leaves_every_other_prompt_and_tool_before_the_narrowing(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    """The kind is stored first and the memos narrowed after it (after a crash, only when `reconcile` runs): the
    state such a crash leaves, the kind stored and the memo still kept for the workspace, is made here."""
    plan_a_party_in_a_public_channel(bot, slack, llm)

    def ask_in_general(*calls: ToolCall) -> tuple[str, list[str]]:
        """A mention in #general whose model makes `calls`: its prompts, and the calls' results."""
        llm.script(ToolCalls(list(calls)), Text("Nothing planned that I know of."))
        seen = len(llm.requests)
        ts = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> anything planned for me on Friday?")
        slack.wait_for(lambda: replies_in(slack, ts), what="the reply in #general")
        asked = llm.requests[seen:]
        return "\n".join(prompt_text(r) for r in asked), [t for r in asked for t in tool_results(r)]

    # The start-up catch-up reads each channel from Slack (and stores its kind): done with them before the kind is
    # changed below, it cannot store #plans as public again
    wait_until(
        lambda: {p.get("channel") for m, p in slack.web_calls if m == "conversations.history"} >= {GENERAL, PLANS},
        what="the start-up catch-up",
    )
    search = ToolCall("search_memo", {"query": "surprise party for Bob"})
    prompt, (found,) = ask_in_general(search)
    assert "Surprise party" in prompt and "Surprise party" in found  # while #plans is public, the workspace's
    engine = create_engine(bot.database_url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE channels SET kind = 'private' WHERE id = :id"), {"id": PLANS})
    engine.dispose()

    prompt, results = ask_in_general(ToolCall("list_memo", {}), ToolCall("get_memo", {"memo_name": "bob-party"}), search)
    assert len(results) == 3 and "Surprise party" not in prompt and not any("Surprise party" in r for r in results)
    assert bot.rows("SELECT visibility FROM memos") == [("workspace",)]  # not narrowed yet

    add = ToolCall("add_memo", {"name": "bob-party", "content": "Bob's birthday lunch", "priority": 3})
    prompt, (added,) = ask_in_general(add)
    assert "Surprise party" not in prompt + added and "bob-party" in added
    memos = bot.rows("SELECT channel_id, visibility, content FROM memos ORDER BY id")
    assert memos == [  # the name was free to #general: the narrowing reached #plans' memo first
        (PLANS, "conversation", "Surprise party for Bob on Friday"),
        (GENERAL, "workspace", "Bob's birthday lunch"),
    ]
    assert bot.stop() == 0


def test_a_channel_turned_private_while_the_bot_was_away_keeps_its_memos_to_itself_once_it_is_back(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    plan_a_party_in_a_public_channel(bot, slack, llm)
    assert bot.stop() == 0

    slack.convert_to_private(PLANS)  # nobody connected: the event is lost; only the channel's info tells
    llm.script(ToolCalls([ToolCall("list_memo", {})]), Text("Nothing planned that I know of."))
    public = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> anything planned for me on Friday?")
    bot.start()
    slack.wait_for(lambda: replies_in(slack, public), what="the reply in #general, found by the catch-up")
    assert query(bot, "SELECT visibility FROM memos") == [("conversation",)]
    assert query(bot, "SELECT kind FROM channels WHERE id = ?", PLANS) == [("private",)]
    for request in llm.requests[-2:]:
        assert "Surprise party" not in prompt_text(request)
    assert bot.stop() == 0


def test_a_channel_turned_private_while_the_bot_was_out_of_it_is_narrowed_when_the_bot_is_invited_back(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    plan_a_party_in_a_public_channel(bot, slack, llm)
    slack.remove_member(PLANS, slack.bot_user_id)
    wait_until(lambda: query(bot, "SELECT left_at FROM channels WHERE id = ?", PLANS) != [(None,)], what="the bot out")
    slack.convert_to_private(PLANS)  # the bot is not in it: no event

    slack.add_member(PLANS, slack.bot_user_id)
    wait_until(lambda: query(bot, "SELECT visibility FROM memos") == [("conversation",)], what="the memo narrowed")
    assert query(bot, "SELECT kind FROM channels WHERE id = ?", PLANS) == [("private",)]
    assert bot.stop() == 0


def test_a_channel_turned_private_after_the_bot_was_removed_keeps_what_was_said_there_to_itself_from_the_next_sync(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    bot.settings["response.history_sync_interval_seconds"] = 2
    plan_a_party_in_a_public_channel(bot, slack, llm)
    slack.remove_member(PLANS, slack.bot_user_id)
    wait_until(lambda: query(bot, "SELECT left_at FROM channels WHERE id = ?", PLANS) != [(None,)], what="the bot out")
    slack.convert_to_private(PLANS)  # the bot is not in it: no event, and Slack no longer shows it the channel

    wait_until(lambda: query(bot, "SELECT visibility FROM memos") == [("conversation",)], what="the memo narrowed")
    assert query(bot, "SELECT kind FROM channels WHERE id = ?", PLANS) == [("private",)]
    llm.script(
        ToolCalls([ToolCall("list_memo", {}), ToolCall("recall", {"query": "surprise party for Bob"})]),
        Text("Nothing planned that I know of."),
    )
    public = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> anything planned for me on Friday?")
    slack.wait_for(lambda: replies_in(slack, public), what="the reply in #general")
    for request in llm.requests[-2:]:
        assert "urprise party" not in prompt_text(request)
    assert bot.stop() == 0


def test_a_public_channel_deleted_after_the_bot_was_removed_keeps_what_was_said_there_the_workspaces(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    # Slack answers channel_not_found about a deleted channel as about a private one the bot is out of: taken for
    # one turned private, the channel's memos would be narrowed and the workspace memory made again. What was said
    # there was public when it was said; the bot keeps what the workspace learnt from it, as from a channel it left.
    plan_a_party_in_a_public_channel(bot, slack, llm)  # no sync meets the deletion: the next is the restart's
    slack.remove_member(PLANS, slack.bot_user_id)
    wait_until(lambda: query(bot, "SELECT left_at FROM channels WHERE id = ?", PLANS) != [(None,)], what="the bot out")
    slack.delete_channel(PLANS)
    wait_until(lambda: query(bot, "SELECT deleted_at FROM channels WHERE id = ?", PLANS) != [(None,)], what="deleted")
    assert bot.stop() == 0
    ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> still there?", emit=False)
    llm.set_responder(lambda request: Text("Here."))
    asked = len(slack.web_calls)

    bot.start()  # the start-up sync, then the narrowing of what turned private, then the mention found
    slack.wait_for(lambda: replies_in(slack, ts), what="the mention answered after the start-up sync")
    assert query(bot, "SELECT kind FROM channels WHERE id = ?", PLANS) == [("public",)]
    assert query(bot, "SELECT visibility FROM memos") == [("workspace",)]
    assert [p for name, p in slack.web_calls[asked:] if name == "conversations.info" and p["channel"] == PLANS] == []
    assert bot.stop() == 0


def test_a_channel_the_bot_was_removed_from_is_no_longer_judged_until_it_is_back(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    llm.set_responder(responder(lambda request: judgment(False), lambda request: Text("unused")))
    # Nothing falls due by the wall clock: the bot's clock is moved past the wait once the bot is out.
    bot.settings.update({**FAST, "response.min_wait_seconds": AWAY})
    bot.shift_clock(0)
    slack.add_channel(RANDOM, "random", members=[ALICE, BOB])
    bot.start()
    ts = slack.post_message(GENERAL, ALICE, "what a quiet day")
    wait_until(lambda: query(bot, "SELECT ts FROM messages WHERE ts = ?", ts), what="the message stored")
    wait_until(lambda: left_at(bot) == [(None,)], what="the channel stored")
    slack.remove_member(GENERAL, slack.bot_user_id)
    wait_until(lambda: left_at(bot) != [(None,)], what="the bot's leaving recorded")
    lunch = slack.post_message(RANDOM, BOB, "anyone up for lunch?")
    wait_until(lambda: query(bot, "SELECT ts FROM messages WHERE ts = ?", lunch), what="#random's message stored")

    bot.shift_clock(AWAY)  # both messages due
    slack.wait_for(lambda: judged(llm, "anyone up for lunch?"), what="#random judged")
    slack.post_message(RANDOM, BOB, "no one?")  # judged by a check after the one that judged #random
    slack.wait_for(lambda: judged(llm, "no one?"), what="#random judged again")
    assert not judged(llm, "what a quiet day")

    slack.add_member(GENERAL, slack.bot_user_id)
    wait_until(lambda: left_at(bot) == [(None,)], what="the bot back in the channel")
    slack.wait_for(lambda: judged(llm, "what a quiet day"), what="the conversation judged again")
    assert bot.stop() == 0


def judged(llm, text: str) -> list[dict]:  # type: ignore[no-untyped-def]
    """The judgments whose prompt shows `text`."""
    return [r for r in judgments(llm) if text in prompt_text(r)]


def test_what_the_bot_learnt_about_someone_in_a_channel_turned_private_leaves_every_other_prompt(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    from tests.e2e.test_retention import responder

    slack.add_channel(PLANS, "plans", members=[ALICE, BOB])
    llm.set_responder(responder)
    bot.settings["memory.update_interval_seconds"] = 0.5
    bot.start()

    slack.post_message(PLANS, ALICE, "I like canary-opera")

    def workspace_memory_holds_it() -> bool:
        return any("canary-opera" in text for text in memories(bot).get(("workspace", "long")) or ())

    wait_until(
        lambda: any("canary-opera" in facts for (facts,) in query(bot, "SELECT facts FROM profiles")),
        what="the fact learnt in #plans",
    )
    wait_until(workspace_memory_holds_it, what="the workspace memory made from #plans")

    def general_prompt() -> str:
        """What the model was asked in #general about a new mention there (the memory job's own requests aside)."""
        seen = len(llm.requests)
        ts = slack.post_message(GENERAL, ALICE, f"<@{slack.bot_user_id}> hello again")
        slack.wait_for(lambda: replies_in(slack, ts), what="the reply in #general")
        asked = [r for r in llm.requests[seen:] if not is_memory_request(r) and "hello again" in prompt_text(r)]
        assert asked, "no prompt in #general"
        return "\n".join(prompt_text(r) for r in asked)

    before = general_prompt()  # while #plans is public, #general knows it: the fact and the workspace memory
    assert "likes canary-opera" in before
    assert any("workspace knows: " in line and "canary-opera" in line for line in before.splitlines())

    slack.convert_to_private(PLANS)
    wait_until(lambda: query(bot, "SELECT kind FROM channels WHERE id = ?", PLANS) == [("private",)], what="#plans private")
    # From then on #general is shown nothing of it, whether the narrowing has reached the profiles and the
    # workspace memory yet or not
    assert "canary-opera" not in general_prompt()
    wait_until(lambda: f'"audience": "{PLANS}"' in query(bot, "SELECT facts FROM profiles")[0][0], what="the fact narrowed")

    # The profile facts are narrowed before the memories: the workspace memory, made while #plans was public, still
    # holds the fact until the narrowing drops it or a memory round saves it again without it (a round that read
    # it before may still be asking the model). Once it no longer holds it, no round that read it is left.
    def workspace_memory_without_it() -> bool:
        texts = memories(bot).get(("workspace", "long"))
        return texts is not None and not any("canary-opera" in text for text in texts)

    wait_until(workspace_memory_without_it, what="the workspace memory made again without #plans")
    assert "canary-opera" not in general_prompt()
    assert bot.stop() == 0


@ON_BOTH_DATABASES
def test_a_public_channel_the_bot_was_removed_from_is_neither_news_nor_recalled_elsewhere_until_it_is_back(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    slack.add_channel(PLANS, "plans", members=[ALICE, BOB])

    def answer(request: dict) -> object:
        if is_memory_request(request):
            return remember(request)
        recalls = any(t["function"]["name"] == "recall" for t in request.get("tools") or [])
        if recalls and not tool_results(request):
            return ToolCalls([ToolCall("recall", {"query": "canary-plans launch moves"})])
        return Text("Sure thing.")

    llm.set_responder(answer)
    bot.settings["memory.update_interval_seconds"] = 0.5
    bot.start()
    slack.post_message(PLANS, ALICE, "canary-plans the launch moves to June")
    wait_until(
        lambda: all(memories(bot).get((f"channel:{PLANS}", term)) for term in ("long", "short")),
        what="#plans remembered",
    )

    def asked_in_general() -> tuple[str, str]:
        """The prompt of a mention in #general, and what recall told the model there."""
        seen = len(llm.requests)
        ts = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> any news on the launch?")
        slack.wait_for(lambda: replies_in(slack, ts), what="the reply in #general")
        answering = [r for r in llm.requests[seen:] if not is_memory_request(r) and "any news on the launch?" in prompt_text(r)]
        first, second = answering[:2]
        return prompt_text(first), "\n".join(tool_results(second))

    prompt, recalled = asked_in_general()
    assert "#plans: - " in prompt  # other public channels' news
    assert "#plans" in recalled and "canary-plans" in recalled  # its message and its memory

    slack.remove_member(PLANS, slack.bot_user_id)
    wait_until(lambda: bot.rows("SELECT left_at FROM channels WHERE id = :id", id=PLANS) != [(None,)], what="the bot out")
    prompt, recalled = asked_in_general()
    assert "#plans" not in prompt
    assert "#plans" not in recalled

    slack.add_member(PLANS, slack.bot_user_id)
    wait_until(lambda: bot.rows("SELECT left_at FROM channels WHERE id = :id", id=PLANS) == [(None,)], what="the bot back")
    prompt, recalled = asked_in_general()
    assert "#plans: - " in prompt and "#plans" in recalled
    assert bot.stop() == 0


def test_a_public_channel_the_bot_was_removed_from_has_no_prompt_to_preview_and_shows_nothing_of_itself(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    # The preview (command line and MCP) and `memory show --channel` agree: nothing said there is shown as the
    # channel's own until the bot joins it again; what it remembers of it is kept (`memory show` shows it).
    slack.add_channel(PLANS, "plans", members=[ALICE, BOB])
    llm.set_responder(lambda request: remember(request) if is_memory_request(request) else Text("Sure thing."))
    bot.settings["memory.update_interval_seconds"] = 0.5
    bot.start()
    slack.post_message(PLANS, ALICE, "canary-plans the launch moves to June")
    wait_until(lambda: memories(bot).get((f"channel:{PLANS}", "long")), what="#plans remembered")
    before = myao2(bot, "preview", "response", "--channel", PLANS)
    assert before.returncode == 0 and "canary-plans" in before.stdout, before.stderr

    slack.remove_member(PLANS, slack.bot_user_id)
    wait_until(lambda: bot.rows("SELECT left_at FROM channels WHERE id = :id", id=PLANS) != [(None,)], what="the bot out")
    assert bot.stop() == 0

    preview = myao2(bot, "preview", "response", "--channel", PLANS)
    assert preview.returncode == 2 and f"the bot is no longer in {PLANS}" in preview.stderr
    assert "canary" not in preview.stdout + preview.stderr and "Traceback" not in preview.stderr

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "myao2", "mcp", "--config", str(bot.config_path)], env=bot.environment()
    )

    async def previewed() -> tuple[bool, str]:
        async with Client(params) as client:
            result = await client.call_tool("preview", {"role": "response", "channel": PLANS})
        return result.is_error, result.content[0].text

    failed, refusal = asyncio.run(previewed())
    assert failed and f"the bot is no longer in {PLANS}" in refusal and "canary" not in refusal

    shown = myao2(bot, "memory", "show", "--channel", PLANS)
    assert shown.returncode == 0 and f"#plans ({PLANS})" not in shown.stdout  # its memories and digests
    assert f"the bot is no longer in {PLANS}" in shown.stderr
    assert f"#plans ({PLANS}): long-term" in myao2(bot, "memory", "show").stdout  # kept for when it joins again
