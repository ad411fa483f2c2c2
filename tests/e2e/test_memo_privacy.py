"""Memos and privacy end to end: no edit or removal from a private conversation reaches a wider audience,
and nothing the bot says in one conversation depends on memos it cannot see there."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import ALICE, BOB, GENERAL, ON_BOTH_DATABASES, BotProcess
from tests.fakes.openai_server import Text, ToolCall, ToolCalls
from tests.fakes.slack_server import FakeSlack

DM = "DALICE"
SECRET_ROOM = "GSECRET"
GROUP_DM = "GGROUPDM"
SECRET = "Bob's surprise party is on Friday"


class Talk:
    """Mentions whose replies call memo tools, with the tool results the model got back."""

    def __init__(self, slack: FakeSlack, llm: Any) -> None:
        self.slack = slack
        self.llm = llm

    def __call__(self, channel: str, text: str, *calls: ToolCall) -> list[str]:
        """Post `text` in `channel`; the model makes `calls`, then answers. The calls' results."""
        self.llm.script(ToolCalls(list(calls)), Text("ok"))
        seen = len(self.llm.requests)
        posts = len(self.slack.posted)
        body = text if channel == DM else f"<@{self.slack.bot_user_id}> {text}"
        self.slack.post_message(channel, ALICE, body)
        self.slack.wait_for(lambda: len(self.slack.posted) > posts, what=f"the reply in {channel}")
        second = self.llm.requests[seen + 1]
        return [
            m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
            for m in second["messages"]
            if m["role"] == "tool"
        ][-len(calls) :]


def memo_rows(bot: BotProcess) -> list[tuple[Any, ...]]:
    return bot.rows("SELECT * FROM memos ORDER BY id") + bot.rows("SELECT * FROM memo_revisions ORDER BY id")


def add_private_rooms(slack: FakeSlack) -> None:
    slack.add_channel(DM, ALICE, is_im=True, members=[ALICE])
    slack.add_channel(SECRET_ROOM, "secret-room", is_private=True, members=[ALICE, BOB])
    slack.add_channel(GROUP_DM, "mpdm-alice--bob", is_mpim=True, members=[ALICE, BOB])


@ON_BOTH_DATABASES
def test_an_edit_or_removal_from_any_private_conversation_of_a_workspace_memo_is_refused(
    bot: BotProcess, slack: FakeSlack, llm
) -> None:
    add_private_rooms(slack)
    bot.start()
    talk = Talk(slack, llm)
    added = talk(GENERAL, "lunch is on fridays", ToolCall("add_memo", {"name": "team-lunch", "content": "Lunch on Fridays", "priority": 4, "tags": ["food"]}))
    assert added == ['Added memo "team-lunch" (priority 4, tags: food).']
    before = memo_rows(bot)

    edits = [
        {"content": SECRET},
        {"detail": SECRET},
        {"tags": ["surprise-party"]},
        {"new_name": "bob-surprise-party"},
    ]
    for room in (DM, SECRET_ROOM, GROUP_DM):
        results = talk(room, SECRET, *(ToolCall("edit_memo", {"memo_name": "team-lunch", **edit}) for edit in edits))
        assert len(results) == 4
        for result in results:
            assert 'The memo "team-lunch" is seen more widely than this conversation' in result
            assert "Add a memo for this conversation instead" in result
    assert memo_rows(bot) == before
    assert SECRET not in bot.log() and "Lunch on Fridays" not in bot.log()  # logged at INFO

    shown = talk(GENERAL, "what about lunch?", ToolCall("get_memo", {"memo_name": "team-lunch"}), ToolCall("list_memo_tags", {}))
    assert "Lunch on Fridays" in shown[0]
    assert "surprise" not in "".join(shown).lower()

    # nor is a removal: the memo's vanishing from every channel would tell them what was said here
    for room in (DM, SECRET_ROOM, GROUP_DM):
        removed = talk(room, "forget lunch", ToolCall("remove_memo", {"memo_name": "team-lunch"}))
        assert len(removed) == 1 and 'The memo "team-lunch" is seen more widely than this conversation' in removed[0]
    assert memo_rows(bot) == before
    assert bot.stop() == 0


@pytest.mark.parametrize("room", [DM, SECRET_ROOM], ids=["dm", "private-channel"])
def test_no_answer_in_a_public_channel_depends_on_a_private_memo(bot: BotProcess, slack: FakeSlack, llm, room: str) -> None:
    add_private_rooms(slack)
    bot.start()
    talk = Talk(slack, llm)
    # the private conversation takes a name and uses up all 20 tag kinds
    private_tags = [f"hush{i:02}" for i in range(20)]
    calls = [
        ToolCall("add_memo", {"name": f"surprise{i}" if i else "surprise", "content": SECRET, "priority": 5, "tags": private_tags[i * 3 : i * 3 + 3]})
        for i in range(7)
    ]
    assert all(r.startswith("Added memo") for r in talk(room, SECRET, *calls))

    # tool calls of one model turn run concurrently: each step is a turn of its own
    reads = talk(
        GENERAL,
        "what do you know?",
        ToolCall("get_memo", {"memo_name": "surprise"}),
        ToolCall("list_memo_tags", {}),
        ToolCall("list_memo", {}),
    )
    assert reads == [
        'There is no memo named "surprise". Use list_memo to find the exact name.',
        "No tags yet.",
        "No memos yet.",
    ]
    added = talk(GENERAL, "note this", ToolCall("add_memo", {"name": "surprise", "content": "We like surprises", "priority": 3, "tags": ["fun"]}))
    assert added == ['Added memo "surprise" (priority 3, tags: fun).']
    shown = talk(GENERAL, "show it", ToolCall("get_memo", {"memo_name": "surprise"}))
    assert "We like surprises" in shown[0]
    edited = talk(GENERAL, "tag it", ToolCall("edit_memo", {"memo_name": "surprise", "tags": ["fun", "games"]}))
    assert edited == ['Updated memo "surprise".']
    again = talk(GENERAL, "once more", ToolCall("add_memo", {"name": "surprise", "content": "again", "priority": 3}))
    assert again == ['A memo named "surprise" already exists. Update it with edit_memo, or choose another name.']
    for result in reads + added + shown + edited + again:
        assert "hush" not in result and SECRET not in result

    # in the private conversation the name still means its own memo
    own = talk(room, "and here?", ToolCall("get_memo", {"memo_name": "surprise"}))
    assert SECRET in own[0]
    assert SECRET not in bot.log() and "We like surprises" not in bot.log()  # logged at INFO
    assert bot.stop() == 0
