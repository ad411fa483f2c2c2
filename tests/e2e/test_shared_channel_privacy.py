"""A channel shared with another organisation (Slack Connect) end to end: a mention there sends the model nothing of
the workspace (its memos, its memory, news of other channels, facts learnt about people elsewhere), while the same
mention in a public channel does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.conftest import ALICE, BOB, GENERAL, BotProcess, wait_until
from tests.e2e.test_mentions import prompt_text, replies_in
from tests.e2e.test_profiles import facts
from tests.fakes import memory_model
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

PARTNERS = "CPARTNERS"
RANDOM = "CRANDOM"
PARTNER_DM, ALICE_DM = "DPARTNER", "DALICE"
PAT, PAT_DM, GROUP_DM = "UPAT", "DPAT", "GALICEPAT"
"""Pat is of another organisation (another team), in a DM and a group DM Slack does not say are shared."""
CANARY = "canary"
"""Begins every piece of the workspace's text: none of it may reach a prompt in #partners."""


def responder(request: dict[str, Any]):  # type: ignore[no-untyped-def]
    """The fake memory model; an answer asked to note the budget adds a memo first."""
    if memory_model.is_memory_request(request):
        return memory_model.remember(request)
    asked = "note the budget" in prompt_text(request)
    if asked and not any(m["role"] == "tool" for m in request["messages"]):
        memo = {"name": "canary-budget", "content": "canary-budget: 2M for acme", "priority": 5}
        return ToolCalls([ToolCall("add_memo", memo)])
    return Text("Sure thing.")


def start_with_workspace_text(bot: BotProcess, slack: FakeSlack, llm) -> None:  # type: ignore[no-untyped-def]
    """Start the bot and let it keep the workspace's text of each kind, every piece beginning with `CANARY`: a memo
    noted in #general, a fact about Alice learnt there, the workspace memory."""
    llm.set_responder(responder)
    bot.settings["memory.update_interval_seconds"] = 0.5
    bot.start()
    ask = slack.post_message(GENERAL, BOB, f"<@{slack.bot_user_id}> note the budget")
    slack.wait_for(lambda: replies_in(slack, ask), what="the reply that noted the budget")
    slack.post_message(GENERAL, ALICE, "I like canary-tea")
    wait_until(lambda: "likes canary-tea" in facts(bot, ALICE), what="Alice's fact learnt in #general")
    wait_until(
        lambda: any(CANARY in json.dumps(b) for (b,) in bot.rows("SELECT bullets FROM memories WHERE scope = 'workspace'")),
        what="the workspace memory",
    )


def answering(llm, question: str) -> str:  # type: ignore[no-untyped-def]
    """The text of the model's requests (the memory's aside) that answered `question`."""
    answers = [r for r in llm.requests if not memory_model.is_memory_request(r)]
    return "\n".join(prompt_text(r) for r in answers if question in prompt_text(r))


@pytest.mark.parametrize("private", [False, True], ids=["public", "private"])
def test_a_mention_in_a_shared_channel_sends_the_model_nothing_of_the_workspace(
    bot: BotProcess, slack: FakeSlack, llm, private: bool
) -> None:
    """A private channel shared outside too: its people of another organisation read it alike."""
    slack.add_channel(PARTNERS, "partners", is_private=private, members=[ALICE, BOB])
    slack.share_externally(PARTNERS)  # conversations.info: is_ext_shared
    slack.add_channel(RANDOM, "random", members=[ALICE, BOB])
    start_with_workspace_text(bot, slack, llm)

    def prompt(channel: str, question: str) -> str:
        """The text of the requests that answered `question`, asked by Alice in `channel`."""
        ts = slack.post_message(channel, ALICE, f"<@{slack.bot_user_id}> {question}")
        slack.wait_for(lambda: replies_in(slack, ts), what=f"the reply in {channel}")
        return answering(llm, question)

    public = prompt(RANDOM, "what do you know about us?")
    for canary in ("canary-budget", "likes canary-tea", "I like canary-tea"):
        assert canary in public  # the memo, the fact about Alice, and #general's news or the workspace memory
    shared = prompt(PARTNERS, "what do you know about your company?")
    assert "what do you know about your company?" in shared
    assert CANARY not in shared
    assert bot.rows("SELECT kind FROM channels WHERE id = :id", id=PARTNERS) == [("shared",)]
    assert bot.stop() == 0


def test_a_dm_with_someone_of_another_organisation_sends_the_model_nothing_of_the_workspace(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    """conversations.info says `is_ext_shared` of the DM (Slack Connect): it stays a DM (answered without a mention,
    not in a thread) read as a channel shared outside; an ordinary DM reads the workspace's text."""
    slack.add_channel(PARTNER_DM, "partner", is_im=True, members=[ALICE], is_ext_shared=True)
    slack.add_channel(ALICE_DM, "alice", is_im=True, members=[ALICE])
    start_with_workspace_text(bot, slack, llm)

    def prompt(channel: str, question: str) -> str:
        """The text of the requests that answered `question`, said by Alice in DM `channel` (no mention)."""
        slack.post_message(channel, ALICE, question)
        slack.wait_for(lambda: any(p["channel"] == channel for p in slack.posted), what=f"the answer in {channel}")
        return answering(llm, question)

    ordinary = prompt(ALICE_DM, "what do you know about us?")
    for canary in ("canary-budget", "likes canary-tea"):
        assert canary in ordinary  # the workspace's memo and the fact about Alice learnt in #general
    outside = prompt(PARTNER_DM, "what do you know about your company?")
    assert "what do you know about your company?" in outside
    assert CANARY not in outside
    assert not any(p.get("thread_ts") for p in slack.posted if p["channel"] == PARTNER_DM)
    assert bot.rows("SELECT kind FROM channels WHERE id = :id", id=PARTNER_DM) == [("im",)]
    assert bot.stop() == 0


@pytest.mark.parametrize("pat", ["another-team", "not-shown", "not-found", "guest"])
def test_a_dm_or_group_dm_with_someone_of_another_team_sends_the_model_nothing_of_the_workspace(
    bot: BotProcess, slack: FakeSlack, llm, pat: str
) -> None:
    """Slack does not say `is_ext_shared` of these conversations here: the other person's team (users.info), not the
    bot's, tells that people of another organisation read them, as does users.info refusing to show them
    (`user_not_visible`) or not finding them (`user_not_found`), or their being a guest of the workspace (who reads
    only the channels they are invited to); an ordinary DM reads the workspace's text."""
    if pat == "guest":
        slack.add_user(PAT, "pat", display_name="Pat", guest="single")
    elif pat != "not-found":  # never registered: users.info answers user_not_found
        slack.add_user(PAT, "pat", display_name="Pat", team_id="TPARTNER", visible=pat == "another-team")
    slack.add_channel(PAT_DM, "pat", is_im=True, members=[PAT])
    slack.add_channel(GROUP_DM, "mpdm-alice--pat", is_mpim=True, members=[ALICE, PAT])
    slack.add_channel(ALICE_DM, "alice", is_im=True, members=[ALICE])
    start_with_workspace_text(bot, slack, llm)

    def prompt(channel: str, author: str, question: str, mention: str = "") -> str:
        """The text of the requests that answered `question`, said by `author` in `channel` after `mention`."""
        slack.post_message(channel, author, mention + question)
        slack.wait_for(lambda: any(p["channel"] == channel for p in slack.posted), what=f"the answer in {channel}")
        return answering(llm, question)

    ordinary = prompt(ALICE_DM, ALICE, "what do you know about us?")
    for canary in ("canary-budget", "likes canary-tea"):
        assert canary in ordinary  # the workspace's memo and the fact about Alice learnt in #general
    outside = prompt(PAT_DM, PAT, "what do you know about your company?")
    assert "what do you know about your company?" in outside
    assert CANARY not in outside
    group = prompt(GROUP_DM, ALICE, "what do you know about me?", mention=f"<@{slack.bot_user_id}> ")
    assert "what do you know about me?" in group
    assert CANARY not in group
    stored = "SELECT id, kind, ext_shared FROM channels WHERE id IN (:dm, :group) ORDER BY id"
    assert bot.rows(stored, dm=PAT_DM, group=GROUP_DM) == [(PAT_DM, "im", True), (GROUP_DM, "mpim", True)]
    assert bot.stop() == 0


def test_a_new_group_dm_whose_people_slack_would_not_tell_at_first_sends_the_model_nothing_of_the_workspace(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    """A group DM with someone of another team, opened after the start: Slack fails to list its people when its first
    message arrives (internal_error, past the retries). It is not stored as one of the workspace's meanwhile: the
    answer waits for a lookup that tells it."""
    slack.add_user(PAT, "pat", display_name="Pat", team_id="TPARTNER")
    start_with_workspace_text(bot, slack, llm)
    slack.add_channel(GROUP_DM, "mpdm-alice--pat", is_mpim=True, members=[ALICE, PAT])
    slack.inject_error("conversations.members", "internal_error", times=4)  # the call and its three retries

    question = "what do you know about me?"
    slack.post_message(GROUP_DM, ALICE, f"<@{slack.bot_user_id}> {question}")
    slack.wait_for(lambda: any(p["channel"] == GROUP_DM for p in slack.posted), what="the answer in the group DM")

    assert question in answering(llm, question)
    assert CANARY not in answering(llm, question)
    assert bot.rows("SELECT ext_shared FROM channels WHERE id = :id", id=GROUP_DM) == [(True,)]
    assert bot.stop() == 0
