"""The MCP server in process (the SDK's in-memory client), on SQLite and PostgreSQL: what each scope may see, preview and search included."""

from __future__ import annotations

import asyncio
import json
from datetime import date
from typing import Any

import pytest
from mcp.client import Client

from myao2.application.notebook import Actor, Notebook
from myao2.composition import Application
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import MemoChanges, MemoDraft, Origin
from myao2.domain.memory import Bullet, Digest, Memory, Stage, Term
from myao2.domain.memory import Scope as Scope_
from myao2.domain.profile import NewFact, Profile
from myao2.domain.visibility import Audience, Reader
from myao2.cli import build_parser
from myao2.mcp_server import Scope, build_server, memo_uri, scope_of
from myao2.preview import Previewer
from tests.unit.test_preview import BOT, DM, GENERAL, T0, app  # noqa: F401  (a fixture)

THREAD = f"{T0 + 1}.000000"


def call(app: Application, scope: Scope, tool: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
    server = build_server(app, scope, BOT, None, "127.0.0.1", 8765)

    async def session() -> tuple[bool, Any]:
        async with Client(server) as client:
            result = await client.call_tool(tool, arguments)
        text = result.content[0].text
        return result.is_error, text if result.is_error else json.loads(text)

    return asyncio.run(session())


def test_a_workspace_client_previews_public_channels_only(app: Application) -> None:  # noqa: F811
    failed, shown = call(app, Scope(), "preview", {"role": "response", "channel": GENERAL})
    assert not failed and "Team lunch is on Fridays" in shown["query"] and "surprise" not in json.dumps(shown)

    failed, refusal = call(app, Scope(), "preview", {"role": "response", "channel": DM})
    assert failed and "--conversation" in refusal and "secret" not in refusal


def test_a_public_channels_memos_of_its_own_are_shown_by_no_tool_of_a_client_not_started_for_it(
    app: Application,  # noqa: F811
) -> None:
    # A memo kept for #general alone (e.g. added by a client started for it) was in a workspace client's preview
    # of #general, while its get_memo refused the same memo: what a client previews is now what it may read.
    Notebook(app.memos, Actor.CLI).add("house-style", "canary-style: casual here", 4, audience=Audience(GENERAL))

    for scope in (Scope(), Scope(DM)):
        failed, refusal = call(app, scope, "get_memo", {"memo_name": "house-style"})
        assert failed and "canary" not in refusal
        failed, refusal = call(app, scope, "preview", {"role": "response", "channel": GENERAL})
        assert failed and f"--conversation {GENERAL}" in refusal and "canary" not in refusal
    failed, shown = call(app, Scope(GENERAL), "preview", {"role": "response", "channel": GENERAL})
    assert not failed and "canary-style" in shown["query"]
    failed, memo = call(app, Scope(GENERAL), "get_memo", {"memo_name": "house-style"})
    assert not failed and memo["kept_for"] == GENERAL


@pytest.mark.parametrize("kept", ["note", "thread note", "digest", "fact"])
def test_what_the_bot_remembers_of_a_public_channel_for_it_alone_is_previewed_by_no_client_not_started_for_it(
    app: Application, kept: str  # noqa: F811
) -> None:
    # Notes, digests and facts about people kept for #general alone (learnt, say, while it was private) were in a
    # workspace client's preview of #general, as its memos were before: the preview shows them to no one else.
    own, day = Audience(GENERAL), date(2023, 11, 14)
    if kept == "note":
        app.memories.save([Memory(Scope_(GENERAL), Term.LONG, own, (Bullet(1, "canary-note: Bob naps", day, ("1.0",)),))])
    if kept == "thread note":
        app.conversations.save_message(Message(GENERAL, f"{T0 + 5}.000000", "UALICE", "naps?", "Alice", thread_ts=THREAD))
        app.memories.save(
            [Memory(Scope_(GENERAL, THREAD), Term.SHORT, own, (Bullet(1, "canary-thread: Bob naps", day, ("1.0",)),))]
        )
    if kept == "digest":
        app.memories.save_digest(Digest(GENERAL, day, Stage.DIGEST, own, ("canary-digest: Bob naps",), "1.0", "2.0"))
    if kept == "fact":
        app.profiles.save([Profile("UALICE").learn(own, [(NewFact("canary-fact: naps", 0.9, ("2.0",)), GENERAL, day)], [])])
    thread = {"thread": THREAD} if kept == "thread note" else {}

    failed, shown = call(app, Scope(GENERAL), "preview", {"role": "response", "channel": GENERAL, **thread})
    assert not failed and "canary-" in shown["query"]
    for scope in (Scope(), Scope(DM)):
        failed, refusal = call(app, scope, "preview", {"role": "response", "channel": GENERAL, **thread})
        assert failed and f"--conversation {GENERAL}" in refusal and "canary" not in refusal, refusal
        failed, refusal = call(app, scope, "preview", {"role": "judgment", "channel": GENERAL, **thread})
        assert failed and "canary" not in refusal, refusal


@pytest.mark.parametrize("kind", [ChannelKind.SHARED, ChannelKind.PRIVATE])
def test_a_memory_preview_shows_notes_kept_for_a_channel_alone_to_no_client_not_started_for_it(
    app: Application, kind: ChannelKind  # noqa: F811
) -> None:
    # #plans' notes narrowed to it while it was shared outside (or private), #plans public again: the memory role's
    # preview skipped the check the other roles make, and the job read those notes as a public channel's, so a
    # workspace client's memory preview of #plans, or of #general read in the same call, showed them.
    app.conversations.save_channel(Channel("CPLANS", "plans"))
    day = date(2023, 11, 14)
    app.memories.save([Memory(Scope_("CPLANS"), Term.LONG, Audience(), (Bullet(1, "canary-note: plans merge", day, ("1.0",)),))])
    app.conversations.set_channel_kind("CPLANS", kind)
    app.memories.narrow("CPLANS")
    app.conversations.set_channel_kind("CPLANS", ChannelKind.PUBLIC)
    app.conversations.save_message(Message("CPLANS", f"{T0 + 4}.000000", "UBOB", "the offsite is in May", "Bob"))

    for scope in (Scope(), Scope(DM), Scope(GENERAL)):
        failed, refusal = call(app, scope, "preview", {"role": "memory", "channel": "CPLANS"})
        assert failed and "--conversation CPLANS" in refusal and "canary" not in refusal, refusal
        failed, shown = call(app, scope, "preview", {"role": "memory", "channel": GENERAL})
        assert not failed and "pizza for me" in shown["query"] and "canary" not in json.dumps(shown), shown
    failed, shown = call(app, Scope("CPLANS"), "preview", {"role": "memory", "channel": "CPLANS"})
    assert not failed and "canary-note" in shown["query"] and "the offsite is in May" in shown["query"]


def test_control_characters_of_a_previewed_prompt_reach_the_client_as_their_pictures(app: Application) -> None:  # noqa: F811
    # A terminal client (Claude Code) prints tool results: an escape sequence in a Slack message (OSC 52 sets the
    # clipboard; the C1 CSI clears the screen) reached its user's terminal, as it did the command line's before 01753ad.
    said = "copy \x1b]52;c;ZWNobyBoaQ==\x07 then \x9b2J\x7f"
    app.conversations.save_message(Message(GENERAL, f"{T0 + 5}.000000", "UALICE", said, "Alice"))

    failed, shown = call(app, Scope(), "preview", {"role": "response", "channel": GENERAL})

    assert not failed and "copy ␛]52;c;ZWNobyBoaQ==␇ then \ufffd2J␡" in shown["query"]
    assert not any(ch in json.dumps(shown, ensure_ascii=False) for ch in "\x1b\x07\x9b\x7f")
    assert said in asyncio.run(Previewer(app, BOT).preview("response", GENERAL)).prompt.query  # the model's, as sent


def test_a_private_conversation_a_client_may_not_read_is_refused_as_one_the_bot_never_saw(
    app: Application,  # noqa: F811
) -> None:
    # "CNOWHERE: not seen" against "DALICE: private, not this server's", and "the bot is no longer in" a private
    # channel it left: a client could tell which ids are private conversations of the workspace, and which the bot
    # left. Slack's own answer to both is channel_not_found.
    app.conversations.save_channel(Channel("GLEFT", "left-behind", ChannelKind.PRIVATE))
    app.conversations.leave_channel("GLEFT")

    def refusal(scope: Scope, channel: str, role: str) -> str:
        failed, said = call(app, scope, "preview", {"role": role, "channel": channel})
        assert failed, said
        return said.replace(channel, "<id>")

    for role in ("response", "memory"):
        for scope in (Scope(), Scope(GENERAL)):
            assert refusal(scope, DM, role) == refusal(scope, "GLEFT", role) == refusal(scope, "CNOWHERE", role)
        assert "--conversation <id>" in refusal(Scope(), "CNOWHERE", role)
    assert "no longer in" in refusal(Scope("GLEFT"), "GLEFT", "response")  # its own: told why


def test_a_public_channel_the_bot_has_left_is_previewed_by_no_client(app: Application) -> None:  # noqa: F811
    # Nothing said there reaches a conversation until the bot joins it again (`can_read_conversation`): not even its own.
    app.conversations.leave_channel(GENERAL)

    for scope in (Scope(), Scope(GENERAL)):
        failed, refusal = call(app, scope, "preview", {"role": "response", "channel": GENERAL})
        assert failed and f"the bot is no longer in {GENERAL}" in refusal and "pizza" not in refusal


def test_a_client_started_for_a_dm_previews_it(app: Application) -> None:  # noqa: F811
    failed, shown = call(app, Scope(DM), "preview", {"role": "response", "channel": DM})
    assert not failed and "Alice plans a surprise party for Bob" in shown["query"]


def test_a_dm_memo_is_not_found_by_a_workspace_client(app: Application) -> None:  # noqa: F811
    failed, refusal = call(app, Scope(), "get_memo", {"memo_name": "surprise"})
    assert failed and "surprise party" not in refusal
    failed, history = call(app, Scope(), "memo_history", {"memo_name": "surprise"})
    assert failed
    failed, history = call(app, Scope(DM), "memo_history", {"memo_name": "surprise"})
    assert not failed and history["revisions"][0]["actor"] == "user:cli"


def test_search_finds_a_dm_memo_only_for_a_client_started_for_that_dm(app: Application) -> None:  # noqa: F811
    failed, found = call(app, Scope(), "search_memo", {"query": "surprise party", "limit": 5})
    assert not failed and [m["name"] for m in found["memos"]] == ["lunch-day"]
    failed, found = call(app, Scope(DM), "search_memo", {"query": "surprise party", "limit": 5})
    assert not failed and found["memos"][0]["name"] == "surprise"


def test_a_search_holding_half_an_emoji_is_searched_as_cleaned(app: Application) -> None:  # noqa: F811
    # A client's JSON may escape a lone surrogate ("\\ud83c"), which neither the embedder nor the database takes.
    failed, found = call(app, Scope(), "search_memo", {"query": "lunch \ud83c", "limit": 5})
    assert not failed and [m["name"] for m in found["memos"]][:1] == ["lunch-day"]


def test_a_name_no_memo_could_bear_is_an_unknown_memo_for_every_tool(app: Application) -> None:  # noqa: F811
    # half an emoji escaped in the client's JSON: SQL cannot take it, and the answer was the codec's error
    for tool in ("get_memo", "memo_history", "restore_memo", "remove_memo", "edit_memo"):
        arguments = {"memo_name": "lunch-day\ud83c", **({"priority": 2} if tool == "edit_memo" else {})}
        failed, refusal = call(app, Scope(), tool, arguments)
        assert failed and "codec" not in refusal and "surrogate" not in refusal, (tool, refusal)
        assert 'no memo named "lunch-day\ufffd"' in refusal, (tool, refusal)


def test_a_client_started_for_a_dm_cannot_edit_a_workspace_memo_as_the_bots_tools_there_cannot(
    app: Application,  # noqa: F811
) -> None:
    leak = {"memo_name": "lunch-day", "content": "Alice plans a surprise party for Bob"}
    failed, refusal = call(app, Scope(DM), "edit_memo", leak)
    assert failed and "surprise" not in refusal
    assert "conversation" in refusal  # the bot's own wording for a change that would reach a wider audience
    failed, renamed = call(app, Scope(DM), "edit_memo", {"memo_name": "lunch-day", "new_name": "bob-surprise"})
    assert failed
    assert "surprise" not in app.memos.get("lunch-day", Reader(GENERAL)).content

    failed, edited = call(app, Scope(DM), "edit_memo", {"memo_name": "surprise", "priority": 5})
    assert not failed and edited["priority"] == 5  # its own memos, as ever
    failed, edited = call(app, Scope(), "edit_memo", {"memo_name": "lunch-day", "priority": 4})
    assert not failed and edited["priority"] == 4  # a workspace client writes the workspace's


def test_a_client_started_for_a_dm_cannot_remove_a_workspace_memo_as_the_bots_tools_there_cannot(
    app: Application,  # noqa: F811
) -> None:
    revisions = len(app.memos.history("lunch-day"))
    failed, refusal = call(app, Scope(DM), "remove_memo", {"memo_name": "lunch-day"})
    assert failed and "seen more widely than this conversation" in refusal, refusal
    assert app.memos.get("lunch-day", Reader(GENERAL)).content == "Team lunch is on Fridays"
    assert len(app.memos.history("lunch-day")) == revisions

    failed, removed = call(app, Scope(DM), "remove_memo", {"memo_name": "surprise"})
    assert not failed and removed["removed"] == "surprise"  # its own memos, as ever
    failed, removed = call(app, Scope(), "remove_memo", {"memo_name": "lunch-day"})
    assert not failed and removed["removed"] == "lunch-day"  # a workspace client removes the workspace's


@pytest.mark.parametrize("conversation", [DM, "GSECRET"])
def test_a_client_started_for_a_private_conversation_cannot_restore_a_workspace_memo_as_it_cannot_remove_it(
    app: Application, conversation: str  # noqa: F811
) -> None:
    app.conversations.save_channel(Channel("GSECRET", "secret", ChannelKind.PRIVATE))
    Notebook(app.memos, Actor.CLI).remove("lunch-day")
    revisions = len(app.memos.history("lunch-day"))
    failed, refusal = call(app, Scope(conversation), "restore_memo", {"memo_name": "lunch-day"})
    # the refusal of the memo the name means there, not the conversation's own "no removed memo"
    assert failed and "seen more widely than this conversation" in refusal, refusal
    assert app.memos.list(Reader(GENERAL), removed=True).total == 1 and len(app.memos.history("lunch-day")) == revisions

    failed, refusal = call(app, Scope(conversation), "restore_memo", {"memo_name": "no-such-memo"})
    assert failed and 'There is no removed memo named "no-such-memo"' in refusal, refusal
    failed, restored = call(app, Scope(), "restore_memo", {"memo_name": "lunch-day"})
    assert not failed and restored["kept_for"] == "workspace"  # a workspace client restores the workspace's


def test_a_client_started_for_a_dm_restores_the_dms_own_memo(app: Application) -> None:  # noqa: F811
    Notebook(app.memos, Actor.CLI).remove("surprise", audience=Audience(DM))
    failed, restored = call(app, Scope(DM), "restore_memo", {"memo_name": "surprise"})
    assert not failed and restored["kept_for"] == DM


def test_a_list_offset_past_the_largest_is_refused_by_the_tools_schema(app: Application) -> None:  # noqa: F811
    failed, refusal = call(app, Scope(), "list_memo", {"offset": 10**33})
    assert failed and "1000000" in refusal and "OverflowError" not in refusal
    failed, page = call(app, Scope(), "list_memo", {"offset": 1_000_000})
    assert not failed and page["memos"] == []


def test_a_memo_of_a_channel_stored_as_private_is_that_channels_alone_before_the_narrowing(
    app: Application,  # noqa: F811
) -> None:
    plans = Origin("CPLANS", channel_private=False)
    app.conversations.save_channel(Channel("CPLANS", "plans"))
    app.memos.add(MemoDraft.create("offsite", "canary-offsite in Hakone", 5), plans, "test")
    app.memos.add(MemoDraft.create("launch", "canary-launch in June", 5), plans, "test")
    app.memos.remove("launch", None, "test")
    app.conversations.set_channel_kind("CPLANS", ChannelKind.PRIVATE)  # its memos not narrowed yet

    for tool, arguments in [
        ("get_memo", {"memo_name": "offsite"}),
        ("list_memo", {}),
        ("list_memo", {"removed": True}),
        ("search_memo", {"query": "canary offsite Hakone", "limit": 5}),
        ("memo_history", {"memo_name": "offsite"}),
        ("memo_history", {"memo_name": "launch"}),
        ("restore_memo", {"memo_name": "launch"}),
    ]:
        for scope in (Scope(), Scope(DM)):
            _, shown = call(app, scope, tool, arguments)
            assert "canary" not in json.dumps(shown), (tool, arguments, scope)
    failed, added = call(app, Scope(), "add_memo", {"name": "offsite", "content": "the workspace's offsite", "priority": 3})
    assert not failed and "canary" not in json.dumps(added)
    failed, shown = call(app, Scope("CPLANS"), "get_memo", {"memo_name": "offsite"})
    assert not failed and shown["content"] == "canary-offsite in Hakone"
    failed, history = call(app, Scope("CPLANS"), "memo_history", {"memo_name": "launch"})
    assert not failed and "canary-launch in June" in json.dumps(history)
    failed, refusal = call(app, Scope("CPLANS"), "restore_memo", {"memo_name": "launch"})
    assert failed and "seen more widely" in refusal  # kept for the workspace until the narrowing, as offsite's edit


def test_search_memo_shows_a_client_elsewhere_the_same_whatever_a_dm_holds(app: Application) -> None:  # noqa: F811
    # Its scores (4 decimals) came from keyword weights counted over every memo, a DM's too: a client could tell
    # how often a word was written down in DMs.
    notebook = Notebook(app.memos, Actor.CLI)
    notebook.add("lunch-place", "Lunch is at the ramen shop near the station", 3)
    notebook.add("party-room", "The party room is on the third floor", 3)
    query = {"query": "lunch party room", "limit": 5}
    before = {scope: call(app, scope, "search_memo", query) for scope in (Scope(), Scope(GENERAL))}
    for number in range(6):
        notebook.add(f"dm-lunch-{number}", f"lunch lunch lunch, note {number}", 3, audience=Audience(DM))
    assert {scope: call(app, scope, "search_memo", query) for scope in (Scope(), Scope(GENERAL))} == before


def test_a_preview_of_ids_no_conversation_could_have_is_refused_as_unknown_not_a_crash(
    app: Application,  # noqa: F811
) -> None:
    # A lone surrogate (half an emoji escaped in the client's JSON) or a NUL, which SQLite's codec or PostgreSQL refused:
    # the tool crashed ("Error executing tool preview", a traceback in the server's log), or echoed the surrogate.
    for arguments, needle in [
        ({"channel": "C\ud83c"}, "the bot has not seen a conversation C\ufffd"),
        ({"channel": "C\x00"}, "the bot has not seen a conversation C\ufffd"),
        ({"channel": GENERAL, "as_user": "U\ud83c"}, "U\ufffd has no message in this conversation"),
        ({"channel": GENERAL, "as_user": "U\x00"}, "U\ufffd has no message in this conversation"),
    ]:
        failed, refusal = call(app, Scope(), "preview", {"role": "response", **arguments})
        assert failed and needle in refusal, (arguments, refusal)
    for thread in ("1\ud83c", "1\x00"):
        failed, shown = call(app, Scope(), "preview", {"role": "response", "channel": GENERAL, "thread": thread})
        assert not failed and shown["thread"] == "1\ufffd", shown


def test_a_name_with_spaces_around_it_means_the_same_memo_to_every_tool(app: Application) -> None:  # noqa: F811
    # get_memo found " lunch-day " (a name is read stripped) while edit_memo and remove_memo, writing by the raw
    # name, said there was no such memo
    assert call(app, Scope(), "get_memo", {"memo_name": " lunch-day "})[1]["name"] == "lunch-day"
    failed, edited = call(app, Scope(), "edit_memo", {"memo_name": " lunch-day ", "priority": 2})
    assert not failed and edited["priority"] == 2, edited
    failed, removed = call(app, Scope(), "remove_memo", {"memo_name": "lunch-day\n"})
    assert not failed and removed["removed"] == "lunch-day", removed


def test_an_edit_made_from_a_revision_the_bot_has_changed_since_is_refused(app: Application) -> None:  # noqa: F811
    # An agent reads a memo, the bot changes it in a conversation meanwhile, the agent's edit of what it read
    # replaced the bot's change without a word; given the revision it read, it is told to read the memo again.
    read = call(app, Scope(), "get_memo", {"memo_name": "lunch-day"})[1]
    app.memos.edit("lunch-day", MemoChanges.create(content="Team lunch moved to Thursdays"), Origin(GENERAL), "bot")

    stale = {"memo_name": "lunch-day", "content": "Team lunch is on Fridays at noon", "revision": read["revision"]}
    failed, refusal = call(app, Scope(), "edit_memo", stale)
    assert failed and "changed meanwhile" in refusal, refusal
    assert app.memos.get("lunch-day", Reader(GENERAL)).content == "Team lunch moved to Thursdays"

    fresh = call(app, Scope(), "get_memo", {"memo_name": "lunch-day"})[1]
    failed, edited = call(app, Scope(), "edit_memo", {**stale, "revision": fresh["revision"]})
    assert not failed and edited["content"] == "Team lunch is on Fridays at noon"
    assert edited["revision"] == fresh["revision"] + 1


def test_started_for_the_workspace_by_name_a_client_writes_the_workspaces_memos(app: Application) -> None:  # noqa: F811
    # `--conversation workspace`, as the memo commands take it: the server took "workspace" for a conversation's id
    # and kept the memos it added for that conversation, which no prompt ever shows
    scope = scope_of(build_parser().parse_args(["mcp", "--conversation", "workspace"]))
    failed, added = call(app, scope, "add_memo", {"name": "offsite", "content": "The offsite is in Hakone"})
    assert not failed and app.memos.get("offsite", Reader(GENERAL)).audience.is_workspace
    assert scope_of(build_parser().parse_args(["mcp", "--conversation", DM])) == Scope(DM)


def test_a_memo_resource_the_client_may_not_read_is_refused_as_an_unknown_memo(app: Application) -> None:  # noqa: F811
    # The refusal reached the client as "Error creating resource from template ..." (a crash, its traceback in the
    # server's log), not as the tools' reason.
    server = build_server(app, Scope(), BOT, None, "127.0.0.1", 8765)

    async def read(uri: str) -> str:
        async with Client(server) as client:
            try:
                return (await client.read_resource(uri)).contents[0].text
            except Exception as exc:  # noqa: BLE001 - the client's error is what is asserted
                return f"refused: {exc}"

    assert "Team lunch is on Fridays" in asyncio.run(read(memo_uri("lunch-day")))
    for name in ("surprise", "nowhere"):
        refusal = asyncio.run(read(memo_uri(name)))
        assert refusal.startswith("refused") and f'no memo named "{name}"' in refusal, refusal
        assert "surprise party" not in refusal
