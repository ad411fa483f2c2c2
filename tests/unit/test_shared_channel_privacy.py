"""A channel shared with another organisation (Slack Connect) reads nothing kept for the workspace nor of another
conversation: its prompts (memos, pinned ones included, memories, news of other channels, facts about people), its
memo tools, its searches, an MCP client and a preview for it show only what is its own. People of another
organisation read it: the workspace's internal talk is not theirs."""

from __future__ import annotations

import asyncio
import json
from datetime import date
from typing import Any

import pytest
from strands.types.events import ToolResultEvent

from myao2.application.channels import ChannelLifecycle
from myao2.application.notebook import Actor, Notebook
from myao2.application.search import SearchError
from myao2.composition import Application
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import Origin
from myao2.domain.memory import WORKSPACE_SCOPE, Bullet, Digest, Memory, Scope, Stage, Term
from myao2.domain.profile import Fact, Profile
from myao2.domain.visibility import WORKSPACE, Audience, Reader
from myao2.infrastructure.llm.memo_tools import SCOPE_KEY, MemoToolScope, edit_memo, get_memo, list_memo, list_memo_tags, remove_memo
from myao2.infrastructure.llm.prompts import PromptRenderer
from myao2.mcp_server import Scope as McpScope
from myao2.preview import PreviewError, Previewer
from tests.unit.test_mcp_server import call
from tests.unit.test_preview import BOT, DM, GENERAL, T0, app  # noqa: F401  (a fixture)

PARTNERS = Channel("CPARTNERS", "partners", ChannelKind.SHARED)
RANDOM = Channel("CRANDOM", "random")
DAY = date(2023, 11, 14)
ASKED = f"{T0 + 10}.000000"
WORKSPACE_TEXT = "canary"
"""Begins every piece of the workspace's text below: none of it may reach what #partners reads."""


@pytest.fixture
def shared(app: Application) -> Application:  # noqa: F811
    """The `app` of the preview tests, with #partners shared outside and the workspace's text of every kind."""
    store = app.conversations
    store.save_channel(PARTNERS)
    store.save_channel(RANDOM)
    store.save_message(Message(GENERAL, f"{T0 + 4}.000000", "UBOB", "canary-plan: we buy acme", "Bob"))
    store.save_message(Message(PARTNERS.id, f"{T0 + 5}.000000", "UALICE", "welcome, partners", "Alice"))
    store.save_message(Message(PARTNERS.id, ASKED, "UALICE", "<@UBOT> what do you know?", "Alice"))
    notebook = Notebook(app.memos, Actor.CLI)
    notebook.add("canary-rule", "canary-rule: call the CEO by her first name", 3)
    notebook.pin("canary-rule")
    notebook.add("canary-memo", "canary-memo: the budget is 2M", 5, tags=["canary-tag"])
    notebook.add("partners-memo", "partners meet on Mondays", 5, tags=["meetings"], audience=Audience(PARTNERS.id))
    app.memories.save(
        [
            Memory(WORKSPACE_SCOPE, Term.LONG, WORKSPACE, (Bullet(1, "canary-workspace: layoffs in May", DAY, ("1.0",)),)),
            Memory(Scope(RANDOM.id), Term.SHORT, WORKSPACE, (Bullet(1, "canary-news: the office moves", DAY, ("1.0",)),), label="#random"),
            Memory(Scope(PARTNERS.id), Term.LONG, Audience(PARTNERS.id), (Bullet(1, "partners ship in June", DAY, ("1.0",)),), label="#partners"),
        ]
    )
    for channel, audience, line in ((GENERAL, WORKSPACE, "canary-digest: the merger talk"), (PARTNERS.id, Audience(PARTNERS.id), "partners digest: kickoff")):
        app.memories.save_digest(Digest(channel, DAY, Stage.DIGEST, audience, (line,), f"{T0 - 90000}.0", f"{T0 - 80000}.0"))
    learnt = Fact(1, "canary-fact: Alice is job hunting", 0.9, 0, GENERAL, WORKSPACE, DAY, ("1.0",))
    own = Fact(2, "Alice leads the partners project", 0.9, 0, PARTNERS.id, Audience(PARTNERS.id), DAY, ("2.0",))
    app.profiles.save([Profile("UALICE", (learnt, own))])
    return app


def prompt_of(app: Application, channel: Channel) -> str:
    """The text of the response's and the judgment's prompts in `channel` answering Alice, in both languages."""
    messages = [Message(channel.id, ASKED, "UALICE", "<@UBOT> what do you know?", "Alice")]
    context = asyncio.run(app.contexts.build(channel, messages))
    return "\n".join(
        "\n".join(PromptRenderer(language).render(kind, part, context, elapsed="1 minute") for part in ("system", "query"))
        for language in ("en", "ja")
        for kind in ("response", "judgment")
    )


def test_a_shared_channels_prompt_shows_its_own_and_nothing_of_the_workspace(shared: Application) -> None:
    shown = prompt_of(shared, PARTNERS)

    assert WORKSPACE_TEXT not in shown
    for own in ("partners meet on Mondays", "partners ship in June", "partners digest: kickoff", "Alice leads the partners project"):
        assert own in shown
    public = prompt_of(shared, Channel(GENERAL, "general"))
    for canary in ("canary-rule", "canary-memo", "canary-workspace", "canary-news", "canary-fact"):
        assert canary in public  # the same text, in a public channel
    assert "partners" not in public


async def tool(memo_tool: Any, app: Application, **tool_input: Any) -> tuple[str, str]:
    """The status and text of a memo tool called in #partners."""
    origin = Origin.of(PARTNERS, "UALICE", ASKED)
    state = {"agent": None, SCOPE_KEY: MemoToolScope(app.memos, origin, "en")}
    events = [e async for e in memo_tool.stream({"toolUseId": "1", "name": memo_tool.tool_name, "input": tool_input}, state)]
    assert isinstance(events[-1], ToolResultEvent)
    result = events[-1].tool_result
    return result["status"], without_asked(result["content"][0]["text"], tool_input)


def without_asked(text: str, arguments: dict[str, Any]) -> str:
    """`text` without the memo name the caller asked for (a refusal names it: the caller's own word)."""
    return text.replace(arguments["memo_name"], "<asked>") if "memo_name" in arguments else text


def test_the_memo_tools_of_a_shared_channel_read_and_change_no_workspace_memo(shared: Application) -> None:
    async def run() -> None:
        listed = await tool(list_memo, shared)
        tags = await tool(list_memo_tags, shared)
        assert "partners-memo" in listed[1] and "meetings" in tags[1]
        for status, text in (listed, tags, await tool(get_memo, shared, memo_name="canary-memo")):
            assert WORKSPACE_TEXT not in text, text
        for status, text in (
            await tool(get_memo, shared, memo_name="canary-memo"),
            await tool(edit_memo, shared, memo_name="canary-memo", content="changed from outside"),
            await tool(remove_memo, shared, memo_name="canary-memo"),
            await tool(edit_memo, shared, memo_name="canary-rule", content="changed from outside"),
        ):
            assert status == "error" and WORKSPACE_TEXT not in text, text

    asyncio.run(run())
    memo = shared.memos.get("canary-memo", None)
    assert memo.content == "canary-memo: the budget is 2M" and not memo.removed


def test_a_shared_channels_searches_find_nothing_of_the_workspace_nor_of_other_channels(shared: Application) -> None:
    search = shared.search
    for query in ("canary-memo budget", "canary-plan acme", "canary-digest merger", "canary-workspace layoffs"):
        found = [
            *search.memos(query, PARTNERS.id, None, 20),
            *search.messages(query, PARTNERS.id, None, None, 20),
            *search.notes(query, PARTNERS.id, None, None, 20),
        ]
        assert WORKSPACE_TEXT not in repr(found), query
        assert WORKSPACE_TEXT in repr(search.memos(query, DM, None, 20) + search.messages(query, DM, None, None, 20) + search.notes(query, DM, None, None, 20))
    assert [hit.memo.name for hit in search.memos("partners Mondays", PARTNERS.id, None, 20)] == ["partners-memo"]
    with pytest.raises(SearchError):
        search.channel_named("general", PARTNERS.id)
    assert search.channel_named("general", DM) == GENERAL


def test_an_mcp_client_for_a_shared_channel_reads_nothing_of_the_workspace(shared: Application) -> None:
    scope = McpScope(PARTNERS.id)
    for tool_name, arguments in (
        ("list_memo", {}),
        ("list_memo_tags", {}),
        ("get_memo", {"memo_name": "canary-memo"}),
        ("search_memo", {"query": "canary-memo budget"}),
        ("memo_history", {"memo_name": "canary-memo"}),
        ("edit_memo", {"memo_name": "canary-memo", "content": "changed"}),
        ("preview", {"role": "response", "channel": PARTNERS.id}),
        ("preview", {"role": "response", "channel": GENERAL}),
    ):
        _, shown = call(shared, scope, tool_name, arguments)
        assert WORKSPACE_TEXT not in without_asked(json.dumps(shown), arguments), (tool_name, shown)
    failed, shown = call(shared, scope, "preview", {"role": "response", "channel": PARTNERS.id})
    assert not failed and "partners meet on Mondays" in shown["query"]
    failed, shown = call(shared, McpScope(), "list_memo", {})
    assert not failed and "canary-memo" in json.dumps(shown)


def test_a_preview_of_a_shared_channel_shows_the_prompt_it_gets_without_the_workspace(shared: Application) -> None:
    shown = asyncio.run(Previewer(shared, BOT).preview("response", PARTNERS.id)).prompt
    assert WORKSPACE_TEXT not in shown.system + shown.query and "partners meet on Mondays" in shown.query
    refused = Previewer(shared, BOT).preview("response", GENERAL, reader=Reader.of(PARTNERS.id, PARTNERS))
    with pytest.raises(PreviewError) as error:
        asyncio.run(refused)
    assert WORKSPACE_TEXT not in str(error.value)


def test_a_private_channel_shared_outside_reads_nothing_of_the_workspace_either(shared: Application) -> None:
    """Its people of another organisation read it as they read a public one shared: so too once converted to private
    while shared (the conversion's event comes, Slack still shares it)."""
    store = shared.conversations
    partners = Channel("GPARTNERS", "partners-private", ChannelKind.PRIVATE)
    store.save_channel(partners)

    async def refresh(channel_id: str) -> None:
        return None

    lifecycle = ChannelLifecycle(store, shared.memos, shared.memories, refresh, profiles=shared.profiles)
    asyncio.run(lifecycle.shared_outside(partners.id))
    assert WORKSPACE_TEXT not in prompt_of(shared, store.get_channel(partners.id))
    asyncio.run(lifecycle.became_private(PARTNERS.id))
    assert WORKSPACE_TEXT not in prompt_of(shared, store.get_channel(PARTNERS.id))


def test_a_fact_learnt_with_words_of_another_channel_in_sight_is_not_shown_in_a_channel_shared_since(
    shared: Application,
) -> None:
    """A call of the workspace read Alice's words in #general and in #partners while both were public: what it
    learnt was heard in both. Once #partners is shared, the narrowing makes it #partners' own (it may be of what it
    heard there), but it may be of #general's words too, which people of another organisation may not read."""
    heard = Fact(3, "canary-heard: Alice is job hunting", 0.9, 0, GENERAL, WORKSPACE, DAY, ("1.0",), heard_in=(GENERAL, PARTNERS.id))
    said = Fact(4, "Alice likes partners", 0.9, 0, PARTNERS.id, WORKSPACE, DAY, ("2.0",), heard_in=(PARTNERS.id,))
    shared.profiles.save([Profile("UALICE", (heard, said))])
    shared.profiles.narrow(PARTNERS.id)

    shown = prompt_of(shared, PARTNERS)
    assert "Alice likes partners" in shown
    assert WORKSPACE_TEXT not in shown


def test_an_mcp_client_for_a_shared_channel_writes_as_the_bots_tools_there_knowing_no_workspace_memo(
    shared: Application,
) -> None:
    """Its add, edit and restore are refused or made as by a channel that reads no workspace memo: no refusal names
    one."""
    Notebook(shared.memos, Actor.CLI).add("canary-gone", "canary-gone: the old budget", 3)
    Notebook(shared.memos, Actor.CLI).remove("canary-gone")
    scope = McpScope(PARTNERS.id)

    failed, added = call(shared, scope, "add_memo", {"name": "canary-memo", "content": "partners' own", "priority": 3})
    assert not failed and added["kept_for"] == PARTNERS.id
    _, gone = call(shared, scope, "restore_memo", {"memo_name": "canary-gone"})
    _, never = call(shared, scope, "restore_memo", {"memo_name": "canary-never"})
    assert gone == never.replace("canary-never", "canary-gone")
    failed, renamed = call(shared, scope, "edit_memo", {"memo_name": "partners-memo", "new_name": "canary-rule"})
    assert not failed and renamed["name"] == "canary-rule"


def test_a_dm_with_people_of_another_organisation_is_read_as_outside_and_shows_nothing_of_the_workspace(
    shared: Application,
) -> None:
    """A DM or group DM with someone of another organisation (Slack Connect) keeps its kind and reads as a channel
    shared outside does; an ordinary DM reads the workspace's."""
    outside = Channel("DPARTNER", "partner", ChannelKind.IM, ext_shared=True)
    group = Channel("GPARTNERS", "mpdm-partners", ChannelKind.MPIM, ext_shared=True)
    ordinary = Channel("DALICE", "alice", ChannelKind.IM)
    for channel in (outside, group, ordinary):
        shared.conversations.save_channel(channel)

    assert Reader.of(outside.id, outside).outside and Reader.of(group.id, group).outside
    assert not Reader.of(ordinary.id, ordinary).outside
    assert WORKSPACE_TEXT not in prompt_of(shared, shared.conversations.get_channel(outside.id))
    assert WORKSPACE_TEXT not in prompt_of(shared, shared.conversations.get_channel(group.id))
    assert "canary-memo" in prompt_of(shared, shared.conversations.get_channel(ordinary.id))


NEVER_STORED = "CNEVER"
"""A conversation the bot never stored: an MCP client or a command may still name it."""


def test_a_conversation_never_stored_reads_as_one_with_people_of_another_organisation(shared: Application) -> None:
    """Nothing says who reads it: the safe side is that people of another organisation might, so it reads only what
    is its own (nothing), as an MCP client started for it, its search or a preview for it shows."""
    assert Reader.of(NEVER_STORED, None) == Reader(NEVER_STORED, outside=True)
    scope = McpScope(NEVER_STORED)
    for tool_name, arguments in (
        ("list_memo", {}),
        ("list_memo_tags", {}),
        ("get_memo", {"memo_name": "canary-memo"}),
        ("search_memo", {"query": "canary-memo budget"}),
        ("preview", {"role": "response", "channel": GENERAL}),
    ):
        _, shown = call(shared, scope, tool_name, arguments)
        assert WORKSPACE_TEXT not in without_asked(json.dumps(shown), arguments), (tool_name, shown)
    found = [
        *shared.search.memos("canary-memo budget", NEVER_STORED, None, 20),
        *shared.search.messages("canary-plan acme", NEVER_STORED, None, None, 20),
        *shared.search.notes("canary-digest merger", NEVER_STORED, None, None, 20),
    ]
    assert WORKSPACE_TEXT not in repr(found)
    failed, shown = call(shared, McpScope(DM), "list_memo", {})
    assert not failed and "canary-memo" in json.dumps(shown)  # a stored DM of the workspace's people reads it
