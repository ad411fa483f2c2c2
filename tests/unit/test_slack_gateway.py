"""SlackGateway against the fake Slack server."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
import traceback
from decimal import Decimal

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from slack_sdk.errors import SlackClientError
from slack_sdk.http_retry import HttpRequest, RetryState
from slack_sdk.http_retry.builtin_async_handlers import AsyncConnectionErrorRetryHandler

from myao2.domain.answers import words_digest
from myao2.domain.conversation import BotIdentity, Channel, ChannelKind, Person
from myao2.domain.ports import ConversationClosed
from myao2.infrastructure.slack import gateway as gateway_module
from myao2.infrastructure.slack.gateway import (
    MICROSECOND,
    PAGE_SIZE,
    SlackAuthError,
    SlackGateway,
    make_web_client,
    web_session,
)
from tests.fakes.slack_server import FakeSlack



@pytest.fixture
def fake():
    with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice", real_name="Alice Liddell")
        slack.add_user("U2", "bob", real_name="Bob Builder")
        slack.add_channel("C1", "general", members=["U1", "U2"])
        slack.add_channel("G1", "secret", is_private=True, members=["U1"])
        slack.add_channel("D1", "dm", is_im=True, members=["U1"])
        slack.add_channel("C9", "elsewhere", members=["U1"], bot_member=False)
        yield slack


@pytest.fixture
def gateway(fake: FakeSlack) -> SlackGateway:
    return SlackGateway(make_web_client(fake.bot_token, fake.base_url), ttl=60)


def calls(fake: FakeSlack, method: str) -> list[dict]:
    return [params for name, params in fake.web_calls if name == method]


async def test_post_returns_the_ts_and_replies_in_threads(fake: FakeSlack, gateway: SlackGateway) -> None:
    parent = await gateway.post("C1", "hello", None)
    reply = await gateway.post("C1", "again", parent)

    assert [(p["ts"], p["text"], p["thread_ts"]) for p in fake.posted] == [
        (parent, "hello", None),
        (reply, "again", parent),
    ]


async def test_react_adds_once_and_swallows_errors(
    fake: FakeSlack, gateway: SlackGateway, caplog: pytest.LogCaptureFixture
) -> None:
    ts = fake.post_message("C1", "U1", "hi", emit=False)

    await gateway.react("C1", ts, ":eyes:")
    await gateway.react("C1", ts, "eyes")  # already_reacted: silent
    await gateway.react("C1", "1.000000", "eyes")  # message_not_found: a warning

    assert fake.reactions == [("C1", ts, "eyes")]
    assert [r.levelno for r in caplog.records if "message_not_found" in r.getMessage()] == [logging.WARNING]


async def test_person_is_looked_up_once_while_cached(fake: FakeSlack, gateway: SlackGateway) -> None:
    first = await gateway.person("U1")
    together = await asyncio.gather(gateway.person("U2"), gateway.person("U2"), gateway.person("U2"))
    again = await gateway.person("U1")

    assert first == again == Person("U1", "Alice")
    assert set(together) == {Person("U2", "Bob Builder")}
    assert [c["user"] for c in calls(fake, "users.info")] == ["U1", "U2"]


async def test_person_is_refreshed_after_the_ttl(fake: FakeSlack) -> None:
    now = [0.0]  # the gateway's clock, moved by hand: a busy machine's pause is no TTL's end
    gateway = SlackGateway(make_web_client(fake.bot_token, fake.base_url), ttl=60, clock=lambda: now[0])
    await gateway.person("U1")
    fake.add_user("U1", "alice", display_name="Alice II")
    now[0] += 59.9
    assert (await gateway.person("U1")).display_name == "Alice"

    now[0] += 0.2

    assert (await gateway.person("U1")).display_name == "Alice II"
    assert len(calls(fake, "users.info")) == 2


async def test_unknown_users_and_bots_are_named_by_their_id(fake: FakeSlack, gateway: SlackGateway) -> None:
    assert await gateway.person("U404") == Person("U404", "U404")
    assert await gateway.person("B77") == Person("B77", "B77", is_bot=True)
    assert await gateway.person("UBOT") == Person("UBOT", "bot", is_bot=True)
    assert [c["user"] for c in calls(fake, "users.info")] == ["U404", "UBOT"]


async def test_channel_names_a_dm_after_the_other_person(gateway: SlackGateway) -> None:
    assert await gateway.channel("C1") == Channel("C1", "general", ChannelKind.PUBLIC)
    assert await gateway.channel("G1") == Channel("G1", "secret", ChannelKind.PRIVATE)
    assert await gateway.channel("D1") == Channel("D1", "Alice", ChannelKind.IM)


async def test_member_channels_reads_every_page(
    fake: FakeSlack, gateway: SlackGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    fake.add_channel("M1", "mpdm-alice--bob", is_mpim=True, members=["U1", "U2"])
    fake.add_channel("C2", "random")

    channels = await gateway.member_channels()

    assert channels == [
        Channel("C1", "general", ChannelKind.PUBLIC),
        Channel("G1", "secret", ChannelKind.PRIVATE),
        Channel("D1", "Alice", ChannelKind.IM),
        Channel("M1", "mpdm-alice--bob", ChannelKind.MPIM),
        Channel("C2", "random", ChannelKind.PUBLIC),
    ]
    assert len(calls(fake, "users.conversations")) == 3
    assert calls(fake, "users.conversations")[0]["types"] == "public_channel,private_channel,mpim,im"


async def test_fetch_history_reads_pages_and_threads(
    fake: FakeSlack, gateway: SlackGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    now = time.time()
    oldest = f"{now - 3600:.6f}"
    fake.post_message("C1", "U1", "too old", ts=f"{now - 7200:.6f}", emit=False)
    parent = fake.post_message("C1", "U1", "a thread <@U2>", emit=False)
    fake.post_message("C1", "U2", "joined", subtype="channel_join", emit=False)
    replies = [fake.post_message("C1", "U2", f"reply {i}", thread_ts=parent, emit=False) for i in range(3)]
    broadcast = fake.post_message(
        "C1", "U1", "also here", thread_ts=parent, subtype="thread_broadcast", emit=False
    )
    later = [fake.post_message("C1", "U2", f"later {i}", emit=False) for i in range(3)]

    history = await gateway.fetch_history("C1", oldest, 100)
    messages = history.messages

    assert [m.ts for m in messages] == [parent, *replies, broadcast, *later]
    assert history.complete_after == oldest and parent in history.threads
    alice, bob = "Alice", "Bob Builder"
    assert [m.user_name for m in messages] == [alice, bob, bob, bob, alice, bob, bob, bob]
    assert messages[0].mentions == ("U2",) and messages[0].thread_ts is None
    assert {m.thread_ts for m in messages[1:5]} == {parent}
    assert len(calls(fake, "conversations.history")) > 1
    assert len(calls(fake, "conversations.replies")) > 1
    assert len(calls(fake, "users.info")) == 2


async def test_fetch_history_keeps_the_newest_when_cut(fake: FakeSlack, gateway: SlackGateway) -> None:
    posted = [fake.post_message("C1", "U1", f"m{i}", emit=False) for i in range(5)]

    history = await gateway.fetch_history("C1", "0", 3)

    assert [m.ts for m in history.messages] == posted[-3:]
    assert Decimal(posted[1]) < Decimal(history.complete_after) < Decimal(posted[2])


async def test_fetch_history_cut_by_replies_is_complete_only_from_the_oldest_kept(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    parent = fake.post_message("C1", "U1", "thread", emit=False)
    replies = [fake.post_message("C1", "U2", f"r{i}", thread_ts=parent, emit=False) for i in range(4)]

    history = await gateway.fetch_history("C1", "0", 3)

    assert [m.ts for m in history.messages] == replies[-3:]
    assert Decimal(replies[0]) < Decimal(history.complete_after) < Decimal(replies[1])


async def test_fetch_history_finds_replies_in_its_span_under_a_thread_started_before_it(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    # conversations.history lists only the parents posted in the span: a reply posted now under a thread started
    # days ago, its event lost, must be found all the same (from its parent's latest_reply), or a mention there
    # goes unanswered.
    now = time.time()
    oldest = f"{now - 3600:.6f}"
    parent = fake.post_message("C1", "U1", "an old plan", ts=f"{now - 3 * 86400:.6f}", emit=False)
    fake.post_message("C1", "U2", "an old reply", thread_ts=parent, ts=f"{now - 2 * 86400:.6f}", emit=False)
    quiet = fake.post_message("C1", "U1", "an old thread, quiet since", ts=f"{now - 86400:.6f}", emit=False)
    fake.post_message("C1", "U2", "its old reply", thread_ts=quiet, ts=f"{now - 86000:.6f}", emit=False)
    reply = fake.post_message("C1", "U2", f"<@{fake.bot_user_id}> is it still on?", thread_ts=parent, emit=False)

    history = await gateway.fetch_history("C1", oldest, 100)

    assert [(m.ts, m.thread_ts) for m in history.messages] == [(reply, parent)]
    assert history.complete_after == oldest and {parent, quiet} <= history.threads
    assert [params["ts"] for params in calls(fake, "conversations.replies")] == [parent]  # not the quiet one
    assert len(calls(fake, "conversations.history")) == 1  # a quiet channel: one page holds the span and before


async def test_fetch_history_looks_for_replies_under_the_parents_of_the_pages_its_span_needs_only(
    fake: FakeSlack, gateway: SlackGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Finding threads by their parents costs a history page per PAGE_SIZE parents: the search looks among the
    # top-level messages of the pages the span needs (the first one at least), not further back.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    now = time.time()
    parents = [fake.post_message("C1", "U1", f"p{i}", ts=f"{now - 86400 + i:.6f}", emit=False) for i in range(6)]
    replies = [fake.post_message("C1", "U2", f"r{i}", thread_ts=p, emit=False) for i, p in enumerate(parents)]
    spoken = [fake.post_message("C1", "U1", f"s{i}", ts=f"{now - 60 + i:.6f}", emit=False) for i in range(3)]

    history = await gateway.fetch_history("C1", f"{now - 3600:.6f}", 100)

    # pages: s2 s1 | s0 p5: the span ends on the second page, whose older parent is looked at too
    assert sorted(m.ts for m in history.messages) == sorted(spoken + replies[5:])
    assert len(calls(fake, "conversations.history")) == 2


async def test_fetch_history_of_a_quiet_channel_with_many_old_messages_reads_one_history_page(
    fake: FakeSlack, gateway: SlackGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A channel where nothing was said in the span costs one conversations.history call each sync however many
    # top-level messages it holds (Tier 3, ~50 a minute, shared by every channel the sync reads); a reply under
    # a thread among its newest page of top-level messages is found all the same.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 10)
    now = time.time()
    old = [fake.post_message("C1", "U1", f"old {i}", ts=f"{now - 86400 + i:.6f}", emit=False) for i in range(60)]
    reply = fake.post_message("C1", "U2", "a late reply", thread_ts=old[-1], emit=False)

    history = await gateway.fetch_history("C1", f"{now - 3600:.6f}", 100)

    assert [m.ts for m in history.messages] == [reply]
    assert len(calls(fake, "conversations.history")) == 1


async def test_fetch_history_reads_the_newest_replies_of_a_long_thread_not_the_whole_thread(
    fake: FakeSlack, gateway: SlackGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # conversations.replies lists a thread oldest first: reading a thread of thousands of replies whole, page by
    # page, to keep the newest `limit` costs a call per page. Only the newest are read.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 10)
    now = time.time()
    parent = fake.post_message("C1", "U1", "a busy thread", ts=f"{now - 3000:.6f}", emit=False)
    replies = [
        fake.post_message("C1", "U2", f"r{i}", thread_ts=parent, ts=f"{now - 2000 + 10 * i:.6f}", emit=False)
        for i in range(200)
    ]

    history = await gateway.fetch_history("C1", f"{now - 3600:.6f}", 10)

    assert [m.ts for m in history.messages] == replies[-10:]
    assert Decimal(replies[-11]) <= Decimal(history.complete_after) < Decimal(replies[-10])
    reads = calls(fake, "conversations.replies")
    assert all(int(params["limit"]) <= 10 for params in reads)
    assert len(reads) <= 6  # reading the thread whole takes 21 pages


async def test_fetch_history_reads_a_long_thread_posted_in_a_burst_in_few_calls(
    fake: FakeSlack, gateway: SlackGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 10)
    start = Decimal(f"{time.time():.6f}")
    parent = fake.post_message("C1", "U1", "a burst", ts=f"{start:.6f}", emit=False)
    replies = [
        fake.post_message("C1", "U2", f"r{i}", thread_ts=parent, ts=f"{start + i * MICROSECOND:.6f}", emit=False)
        for i in range(1, 401)
    ]

    history = await gateway.fetch_history("C1", "0", 10)

    assert [m.ts for m in history.messages] == replies[-10:]
    assert len(calls(fake, "conversations.replies")) <= 6  # reading it whole takes 41


async def test_fetch_thread_reads_the_newest_replies_of_one_thread_and_tells_nothing_of_the_top_level(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    parent = fake.post_message("C1", "U1", "an old plan", ts=f"{time.time() - 3 * 86400:.6f}", emit=False)
    replies = [fake.post_message("C1", "U2", f"r{i}", thread_ts=parent, emit=False) for i in range(4)]
    fake.post_message("C1", "U1", "top-level, not asked about", emit=False)

    history = await gateway.fetch_thread("C1", parent, f"{time.time() - 3600:.6f}", 3)

    assert [(m.ts, m.thread_ts, m.user_name) for m in history.messages] == [(r, parent, "Bob Builder") for r in replies[1:]]
    assert Decimal(replies[0]) <= Decimal(history.complete_after) < Decimal(replies[1])
    assert history.threads == {parent} and not history.top_level
    assert calls(fake, "conversations.history") == []


@pytest.mark.parametrize("method", ["users.conversations", "conversations.history", "conversations.replies"])
async def test_a_cursor_that_leads_back_fails_the_reading_instead_of_going_round_for_ever(
    fake: FakeSlack, gateway: SlackGateway, method: str
) -> None:
    # Slack answering a page with a cursor it gave before would have the reading go round for ever: no history
    # sync, and with it no catch-up of mentions, would ever end. Nor may the pages read before count as all there
    # is: channels left out would count as left, messages left out as deleted.
    parent = fake.post_message("C1", "U1", "a thread", emit=False)
    fake.post_message("C1", "U2", "a reply", thread_ts=parent, emit=False)
    fake.inject_cursor_loop(method, times=50)

    with pytest.raises(SlackClientError, match="gave a cursor it gave before"):
        await (gateway.member_channels() if method == "users.conversations" else gateway.fetch_history("C1", "0", 100))

    assert len(calls(fake, method)) == 2  # the second page gave the first one's cursor again


async def test_a_rate_limit_is_waited_out(fake: FakeSlack, gateway: SlackGateway) -> None:
    fake.inject_rate_limit("chat.postMessage", times=1, retry_after=1)

    ts = await gateway.post("C1", "patience", None)

    assert [p["ts"] for p in fake.posted] == [ts]
    assert len(calls(fake, "chat.postMessage")) == 2


async def test_auth_names_the_bot(fake: FakeSlack) -> None:
    gateway = SlackGateway(make_web_client(fake.bot_token, fake.base_url.rstrip("/")))

    assert await gateway.auth() == BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


async def test_auth_failure_says_what_to_set_without_the_token(fake: FakeSlack) -> None:
    token = "xoxb-not-the-right-secret"
    gateway = SlackGateway(make_web_client(token, fake.base_url))

    with pytest.raises(SlackAuthError) as caught:
        await gateway.auth()

    message = str(caught.value)
    assert "invalid_auth" in message
    assert "SLACK_BOT_TOKEN" in message and "SLACK_APP_TOKEN" in message and "chat:write" in message
    assert token not in "".join(traceback.format_exception(caught.value))


async def test_a_channel_shared_outside_is_never_the_workspaces(fake: FakeSlack, gateway: SlackGateway) -> None:
    fake.add_channel("C7", "partners", members=["U1"])
    fake.add_channel("G7", "partners-private", is_private=True, members=["U1"])
    fake.add_channel("C8", "left-behind", members=["U1"], bot_member=False)
    fake.share_externally("C7")
    fake.share_externally("G7")

    assert await gateway.channel("C7") == Channel("C7", "partners", ChannelKind.SHARED)
    assert (await gateway.channel("C7")).is_private
    assert await gateway.channel("G7") == Channel("G7", "partners-private", ChannelKind.SHARED)  # private, shared too
    assert await gateway.channel("C8") == Channel("C8", "left-behind", is_member=False)


async def test_a_dm_with_people_of_another_organisation_stays_a_dm_read_by_them(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    fake.add_channel("D7", "dm-partner", is_im=True, members=["U1"], is_ext_shared=True)
    fake.add_channel("G7", "mpdm-partners", is_mpim=True, members=["U1", "U2"], is_ext_shared=True)
    fake.add_channel("D8", "dm-colleague", is_im=True, members=["U1"])

    dm, group = await gateway.channel("D7"), await gateway.channel("G7")
    assert (dm.kind, dm.ext_shared) == (ChannelKind.IM, True)
    assert (group.kind, group.ext_shared) == (ChannelKind.MPIM, True)
    assert not (await gateway.channel("D8")).ext_shared
    listed = {c.id: c.ext_shared for c in await gateway.member_channels()}
    assert (listed["D7"], listed["G7"], listed["D8"]) == (True, True, False)


async def test_a_dm_with_someone_of_another_organisation_reads_as_one_whatever_the_conversation_says(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    """Slack's conversation objects may not say `is_ext_shared` of a DM (a listing's item carries few fields): the
    other person's team (users.info), not the bot's (auth.test), says it; in a group DM, any member's."""
    fake.add_user("U9", "pat", team_id="TOTHER")
    fake.add_channel("D9", "dm-partner", is_im=True, members=["U9"])
    fake.add_channel("G9", "mpdm-alice--pat", is_mpim=True, members=["U1", "U9"])
    fake.add_channel("G8", "mpdm-alice--bob", is_mpim=True, members=["U1", "U2"])
    await gateway.auth()

    assert (await gateway.channel("D9")).ext_shared
    assert (await gateway.channel("G9")).ext_shared
    assert not (await gateway.channel("G8")).ext_shared
    assert not (await gateway.channel("D1")).ext_shared
    listed = {c.id: c.ext_shared for c in await gateway.member_channels()}
    assert (listed["D9"], listed["G9"], listed["G8"], listed["D1"]) == (True, True, False, False)
    # A group DM's people never change: asked once.
    assert sorted(c["channel"] for c in calls(fake, "conversations.members")) == ["G8", "G9"]


async def test_a_group_dm_whose_people_cannot_be_read_is_listed_all_the_same_and_asked_about_again(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    """One conversation Slack will not tell about stops no history sync's listing; a stored `ext_shared` is for good,
    so a group DM not read is not taken for one with people of another organisation, only asked about again."""
    fake.add_user("U9", "pat", team_id="TOTHER")
    fake.add_channel("G9", "mpdm-alice--pat", is_mpim=True, members=["U1", "U9"])
    await gateway.auth()
    fake.inject_error("conversations.members", "missing_scope")

    listed = {c.id: c.ext_shared for c in await gateway.member_channels()}
    assert listed["G9"] is False and listed["C1"] is False
    assert (await gateway.channel("G9")).ext_shared


async def test_a_group_dm_whose_people_cannot_be_read_is_not_looked_up_as_one_of_the_workspace(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    """conversations.info's group DM is stored by whoever asked (a new conversation's first message): one whose people
    Slack would not tell fails the lookup, to be asked again, rather than read as one of the workspace till a sync."""
    fake.add_user("U9", "pat", team_id="TOTHER")
    fake.add_channel("G9", "mpdm-alice--pat", is_mpim=True, members=["U1", "U9"])
    await gateway.auth()
    fake.inject_error("conversations.members", "missing_scope")

    with pytest.raises(SlackClientError):
        await gateway.channel("G9")
    assert (await gateway.channel("G9")).ext_shared


@pytest.mark.parametrize("visible", [False, None], ids=["user_not_visible", "user_not_found"])
async def test_someone_slack_will_not_show_the_bot_counts_as_of_another_organisation(
    fake: FakeSlack, gateway: SlackGateway, visible: bool | None
) -> None:
    """users.info's `user_not_visible` (the person is not visible to the bot, as someone of another organisation
    may not be) or `user_not_found` (Slack knows nobody of that id here): a DM or group DM with them reads as one
    with people of another organisation, and the history sync's listing goes on. They are named by their id."""
    if visible is not None:  # else never registered: users.info answers user_not_found
        fake.add_user("U9", "pat", team_id="TOTHER", visible=visible)
    await _reads_from_outside(fake, gateway)
    assert await gateway.person("U9") == Person(user_id="U9", display_name="U9")


@pytest.mark.parametrize("guest", ["multi", "single"])
async def test_a_guest_of_the_workspace_counts_as_of_another_organisation(
    fake: FakeSlack, gateway: SlackGateway, guest: str
) -> None:
    """A guest (`is_restricted`; single-channel: `is_ultra_restricted`) reads only the channels they are invited
    to: a DM or group DM with them reads nothing of the workspace's, though Slack gives them its team id."""
    fake.add_user("U9", "pat", display_name="Pat", guest=guest)
    await _reads_from_outside(fake, gateway)
    assert await gateway.workspace_of("U9") == fake.team_id  # their stream's recipient team is still the workspace


async def test_a_group_dm_whose_member_became_a_guest_reads_from_outside_once_their_lookup_is_refreshed(
    fake: FakeSlack,
) -> None:
    """A group DM's people never change, but whether one is a guest may (a member turned into one): the group DM
    is told by its people as looked up now (at most `ttl` old), as a DM is by its person; its members are asked
    once."""
    now = [0.0]
    gateway = SlackGateway(make_web_client(fake.bot_token, fake.base_url), ttl=60, clock=lambda: now[0])
    fake.add_user("U9", "pat")
    fake.add_channel("D9", "dm-pat", is_im=True, members=["U9"])
    fake.add_channel("G9", "mpdm-alice--pat", is_mpim=True, members=["U1", "U9"])
    await gateway.auth()
    assert not (await gateway.channel("D9")).ext_shared
    assert not (await gateway.channel("G9")).ext_shared

    fake.add_user("U9", "pat", guest="multi")
    now[0] += 61

    listed = {c.id: c.ext_shared for c in await gateway.member_channels()}
    assert (listed["D9"], listed["G9"], listed["C1"]) == (True, True, False)
    assert (await gateway.channel("G9")).ext_shared
    assert [c["channel"] for c in calls(fake, "conversations.members")] == ["G9"]


async def _reads_from_outside(fake: FakeSlack, gateway: SlackGateway) -> None:
    """A DM and a group DM with U9 read as conversations with someone of another organisation, when looked up and
    in the listing; an ordinary DM and channel do not."""
    fake.add_channel("D9", "dm-partner", is_im=True, members=["U9"])
    fake.add_channel("G9", "mpdm-alice--pat", is_mpim=True, members=["U1", "U9"])
    await gateway.auth()

    assert (await gateway.channel("D9")).ext_shared
    assert (await gateway.channel("G9")).ext_shared
    listed = {c.id: c.ext_shared for c in await gateway.member_channels()}
    assert (listed["D9"], listed["G9"], listed["C1"], listed["D1"]) == (True, True, False, False)


async def test_people_of_one_enterprise_grid_organisation_are_of_the_same_one(fake: FakeSlack) -> None:
    """In an Enterprise Grid organisation, someone of another of its workspaces (another team) is no outsider."""
    with FakeSlack(team_id="T1", enterprise_id="E1") as grid:
        grid.add_user("W2", "colleague", team_id="T2", enterprise_id="E1")
        grid.add_user("W3", "partner", team_id="T3", enterprise_id="E9")
        grid.add_channel("D2", "dm-colleague", is_im=True, members=["W2"])
        grid.add_channel("D3", "dm-partner", is_im=True, members=["W3"])
        gateway = SlackGateway(make_web_client(grid.bot_token, grid.base_url), ttl=60)
        await gateway.auth()

        assert not (await gateway.channel("D2")).ext_shared
        assert (await gateway.channel("D3")).ext_shared
    # Nor is someone of the bot's own workspace, whatever else Slack says of either.
    fake.add_user("W5", "neighbour", team_id=fake.team_id, enterprise_id="E1")
    fake.add_channel("D5", "dm-neighbour", is_im=True, members=["W5"])
    gateway = SlackGateway(make_web_client(fake.bot_token, fake.base_url), ttl=60)
    await gateway.auth()
    assert not (await gateway.channel("D5")).ext_shared


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway_module, "RETRY_DELAYS", (0.05, 0.05, 0.05))


async def test_an_answer_carries_metadata_and_is_found_after_its_message(fake: FakeSlack, gateway: SlackGateway) -> None:
    await gateway.auth()
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    other = fake.post_message("C1", "U1", "<@UBOT> another", emit=False)
    assert await gateway.answer_ts("C1", question, question) is None
    await gateway.post("C1", "not an answer", question)
    assert await gateway.answer_ts("C1", question, question) is None
    answer = await gateway.post("C1", "hello", question, answering=question)
    assert await gateway.answer_ts("C1", question, question) == answer
    assert await gateway.answer_ts("C1", other, other) is None
    assert fake.posted[-1]["metadata"] == {"event_type": "myao2_answer", "event_payload": {"answers": question}}


async def test_the_bots_posts_marked_as_no_answer_are_listed_oldest_first(fake: FakeSlack, gateway: SlackGateway) -> None:
    await gateway.auth()
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    early = await gateway.post("C1", "not an answer", question)
    later = fake.post_message("C1", "U1", "<@UBOT> and?", thread_ts=question, emit=False)
    unmarked = await gateway.post("C1", "not an answer either", question)
    await gateway.post("C1", "an answer", question, answering=question)
    fake.post_message("C1", "U1", "someone else", thread_ts=question, emit=False)
    started = await gateway._client.chat_startStream(
        channel="C1", thread_ts=question, recipient_user_id="U1", recipient_team_id="T1", markdown_text="Half"
    )
    posts = await gateway.unmarked_posts("C1", question, question)
    assert list(posts.items()) == [(early, "not an answer"), (unmarked, "not an answer either"), (started["ts"], "Half")]
    assert list(await gateway.unmarked_posts("C1", later, question)) == [unmarked, started["ts"]]

    await gateway.post("D1", "before", None)
    in_dm = fake.post_message("D1", "U1", "hi", emit=False)
    assert await gateway.unmarked_posts("D1", in_dm, None) == {}
    reply = await gateway.post("D1", "hello", None)
    assert await gateway.unmarked_posts("D1", in_dm, None) == {reply: "hello"}


async def test_the_text_of_the_bots_posts_is_read_back_as_sent_though_slack_shows_it_escaped(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    await gateway.auth()
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    sent = "a < b && c > d"
    post = await gateway.post("C1", sent, question)
    fake.edit_message("C1", post, "a &lt; b &amp;&amp; c &gt; d", emit=False)  # as Slack shows a message's text
    assert await gateway.posted_text("C1", post, question) == sent
    assert await gateway.unmarked_posts("C1", question, question) == {post: sent}


async def test_a_post_read_back_carries_nothing_a_digest_or_store_cannot_take(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    await gateway.auth()
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    post = await gateway.post("C1", "half", question)
    fake.edit_message("C1", post, "half \ud83c and \x00", emit=False)  # a cut emoji, a NUL: as JSON escapes carry them
    shown = await gateway.posted_text("C1", post, question)
    assert shown == "half \ufffd and \ufffd"
    assert await gateway.unmarked_posts("C1", question, question) == {post: shown}
    words_digest(shown)  # encodes


async def test_a_post_is_read_back_in_one_call_however_busy_the_conversation_has_been_since(
    fake: FakeSlack, gateway: SlackGateway
) -> None:
    await gateway.auth()
    post = await gateway.post("C1", "the bot's words", None)
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    in_thread = await gateway.post("C1", "in the thread", question)
    for n in range(PAGE_SIZE + 5):
        fake.post_message("C1", "U1", f"chatter {n}", emit=False)
        fake.post_message("C1", "U1", f"reply {n}", thread_ts=question, emit=False)
    before = len(fake.web_calls)
    assert await gateway.posted_text("C1", post, None) == "the bot's words"
    assert await gateway.posted_text("C1", in_thread, question) == "in the thread"
    assert await gateway.posted_text("C1", question, None) is None  # not the bot's
    assert len(fake.web_calls) - before == 3


@pytest.mark.parametrize("error", ["not_in_channel", "channel_not_found"])
async def test_looking_for_an_answer_where_the_bot_can_read_nothing_says_the_conversation_is_closed(
    fake: FakeSlack, gateway: SlackGateway, error: str
) -> None:
    await gateway.auth()
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    for method in ("conversations.replies", "conversations.history"):
        fake.inject_error(method, error)
    with pytest.raises(ConversationClosed):
        await gateway.answer_ts("C1", question, question)
    with pytest.raises(ConversationClosed):
        await gateway.unmarked_posts("C1", question, None)


async def test_an_answer_in_a_dm_is_found_in_the_history(fake: FakeSlack, gateway: SlackGateway) -> None:
    await gateway.auth()
    first = fake.post_message("D1", "U1", "hi", emit=False)
    second = fake.post_message("D1", "U1", "still there?", emit=False)
    answer = await gateway.post("D1", "yes", None, answering=second)
    assert await gateway.answer_ts("D1", first, None) is None
    assert await gateway.answer_ts("D1", second, None) == answer


async def test_an_answer_failing_with_500_after_it_landed_is_not_posted_twice(
    fake: FakeSlack, gateway: SlackGateway, quick_retries: None
) -> None:
    await gateway.auth()
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    fake.inject_server_error("chat.postMessage", 500, after=True)
    answer = await gateway.post("C1", "hello", question, answering=question)
    assert [p["ts"] for p in fake.posted] == [answer]


async def test_an_answer_whose_connection_dropped_after_it_landed_is_looked_up_not_posted_twice(
    fake: FakeSlack, gateway: SlackGateway, quick_retries: None
) -> None:
    await gateway.auth()
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    fake.inject_drop("chat.postMessage")  # stored, then the connection dropped before Slack answered
    answer = await gateway.post("C1", "hello", question, answering=question)
    assert [p["ts"] for p in fake.posted] == [answer]
    assert len(calls(fake, "chat.postMessage")) == 1  # found by the lookup, not sent again


async def test_the_client_resends_a_read_whose_connection_dropped_but_never_a_post_or_a_stream_call(
    fake: FakeSlack,
) -> None:
    client = make_web_client(fake.bot_token, fake.base_url)
    fake.inject_drop("conversations.info")
    assert (await client.conversations_info(channel="C1"))["channel"]["name"] == "general"
    assert len(calls(fake, "conversations.info")) == 2  # read again: reading twice changes nothing

    parent = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    recipient = {"recipient_user_id": "U1", "recipient_team_id": "T1"}
    stream = (await client.chat_startStream(channel="C1", thread_ts=parent, **recipient))["ts"]
    text = [{"type": "markdown_text", "text": "more"}]
    unsafe = {
        "chat.postMessage": lambda: client.chat_postMessage(channel="C1", text="once", thread_ts=parent),
        "chat.startStream": lambda: client.chat_startStream(channel="C1", thread_ts=parent, chunks=text, **recipient),
        "chat.appendStream": lambda: client.chat_appendStream(channel="C1", ts=stream, chunks=text),
        "chat.stopStream": lambda: client.chat_stopStream(channel="C1", ts=stream, chunks=text),
    }
    for method, call in unsafe.items():
        sent = len(calls(fake, method))
        fake.inject_drop(method)
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await call()
        assert len(calls(fake, method)) == sent + 1, method  # what Slack did is not done twice
    # the stream taking one append and its end, the post, the second stream
    assert [m["text"] for m in fake.messages("C1")][-3:] == ["moremore", "once", "more"]


async def test_the_client_resends_a_post_whose_connection_could_not_be_opened() -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused, and no one else takes the port
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientConnectorError) as refused:
                await session.post(f"http://127.0.0.1:{port}/api/chat.postMessage")
    client = make_web_client("xoxb-test", f"http://127.0.0.1:{port}/api/")
    [retry] = [h for h in client.retry_handlers if isinstance(h, AsyncConnectionErrorRetryHandler)]
    post = HttpRequest(method="POST", url=f"http://127.0.0.1:{port}/api/chat.postMessage", headers={})
    assert await retry.can_retry_async(state=RetryState(), request=post, error=refused.value)  # nothing was sent
    assert not await retry.can_retry_async(state=RetryState(), request=post, error=aiohttp.ServerDisconnectedError())


async def test_an_answer_is_retried_after_errors_and_six_429s(
    fake: FakeSlack, gateway: SlackGateway, quick_retries: None
) -> None:
    await gateway.auth()
    question = fake.post_message("C1", "U1", "<@UBOT> hi", emit=False)
    fake.inject_error("chat.postMessage", "internal_error")
    fake.inject_rate_limit("chat.postMessage", times=6, retry_after=0)
    await gateway.post("C1", "hello", question, answering=question)
    assert [p["text"] for p in fake.posted] == ["hello"]
    assert len(calls(fake, "chat.postMessage")) == 8


async def test_a_plain_post_is_not_retried(fake: FakeSlack, gateway: SlackGateway, quick_retries: None) -> None:
    fake.inject_server_error("chat.postMessage", 500, after=True)
    with pytest.raises(Exception):
        await gateway.post("C1", "hello", None)
    assert len(fake.posted) == 1


async def test_lookups_are_retried_but_not_refusals(fake: FakeSlack, gateway: SlackGateway, quick_retries: None) -> None:
    fake.inject_server_error("conversations.info", 503, times=2)
    fake.inject_error("users.info", "internal_error", times=3)
    assert (await gateway.channel("C1")).name == "general"
    assert (await gateway.person("U1")).display_name == "Alice"
    fake.inject_error("conversations.info", "channel_not_found")
    with pytest.raises(Exception):
        await gateway.channel("C1")
    assert len(calls(fake, "conversations.info")) == 4


async def test_a_reaction_that_keeps_failing_is_only_logged(
    fake: FakeSlack, gateway: SlackGateway, quick_retries: None
) -> None:
    ts = fake.post_message("C1", "U1", "hi", emit=False)
    fake.inject_server_error("reactions.add", 500, times=10)
    await gateway.react("C1", ts, "eyes")
    assert len(calls(fake, "reactions.add")) == 4


async def test_the_web_api_session_sends_no_cookie_slack_set_back() -> None:
    """Web API calls carry the token; a cookie Slack sets is never kept (nor parsed) for the next call."""
    cookies: list[str | None] = []

    async def api(request: web.Request) -> web.Response:
        cookies.append(request.headers.get("Cookie"))
        response = web.json_response({"ok": True, "user_id": "UBOT", "team_id": "T1"})
        response.set_cookie("b", "1", path="/")
        return response

    app = web.Application()
    app.router.add_post("/api/{method}", api)
    async with TestServer(app, host="localhost") as server, web_session() as session:  # a host name: IPs keep none
        client = make_web_client("xoxb-test", f"http://localhost:{server.port}/api/", session)
        await client.auth_test()
        await client.auth_test()

    assert cookies == [None, None]
