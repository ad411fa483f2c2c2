"""HistorySync: the fake Slack's history into a real SQLite conversation store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from myao2.application.history_sync import LEFT_CHANNELS_ASKED_PER_SYNC, THREADS_ASKED_PER_SYNC, HistorySync
from myao2.domain.conversation import Channel, ChannelKind, Message, Person
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.slack import gateway as gateway_module
from myao2.infrastructure.slack.gateway import SlackGateway, make_web_client
from tests.fakes.slack_server import FakeSlack
from tests.stored import stored_message

DAY = 86400


@pytest.fixture
def fake():
    with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", real_name="Bob Builder")
        slack.add_channel("C1", "general", members=["U1", "U2"])
        slack.add_channel("D1", "dm", is_im=True, members=["U2"])
        yield slack


@pytest.fixture
def store(tmp_path: Path) -> SqlConversationStore:
    return SqlConversationStore(open_database(f"sqlite:///{tmp_path}/c.db"))


@pytest.fixture
def gateway(fake: FakeSlack) -> SlackGateway:
    return SlackGateway(make_web_client(fake.bot_token, fake.base_url))


@pytest.fixture
def history(fake: FakeSlack, gateway: SlackGateway, store: SqlConversationStore) -> HistorySync:
    return HistorySync(gateway, store, SystemClock(), fake.bot_user_id, max_age_seconds=DAY, limit=100)


async def test_missed_messages_are_stored_with_names_and_threads(
    fake: FakeSlack, gateway: SlackGateway, store: SqlConversationStore, history: HistorySync
) -> None:
    fake.post_message("C1", "U1", "long ago", ts=f"{time.time() - 2 * DAY:.6f}", emit=False)
    parent = fake.post_message("C1", "U1", "anyone? <@UBOT>", emit=False)
    reply = fake.post_message("C1", "U2", "me", thread_ts=parent, emit=False)
    own = await gateway.post("C1", "and me", parent)
    dm = fake.post_message("D1", "U2", "psst", emit=False)

    new = await history.sync()

    assert [(m.channel_id, m.ts) for m in new] == [("C1", parent), ("C1", reply), ("D1", dm)]
    assert [(m.ts, m.user_name, m.text) for m in store.thread_messages("C1", parent, 10)] == [
        (parent, "Alice", "anyone? <@UBOT>"),
        (reply, "Bob Builder", "me"),
        (own, "bot", "and me"),
    ]
    assert [m.ts for m in store.channel_messages("C1", 10)] == [parent]
    assert stored_message(store, "C1", parent).mentions == ("UBOT",)
    assert store.get_channel("D1") == Channel("D1", "Bob Builder", ChannelKind.IM)
    assert store.people()["U1"] == Person("U1", "Alice")
    assert store.people()["U2"] == Person("U2", "Bob Builder")


async def test_a_second_sync_finds_nothing_new(fake: FakeSlack, history: HistorySync) -> None:
    parent = fake.post_message("C1", "U1", "hi", emit=False)
    fake.post_message("C1", "U2", "hello", thread_ts=parent, emit=False)
    assert len(await history.sync()) == 2

    assert await history.sync() == []

    late = fake.post_message("C1", "U2", "and later", thread_ts=parent, emit=False)
    assert [m.ts for m in await history.sync()] == [late]


async def test_a_channel_that_fails_is_skipped(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync, caplog: pytest.LogCaptureFixture
) -> None:
    fake.post_message("C1", "U1", "lost for now", emit=False)
    dm = fake.post_message("D1", "U2", "still here", emit=False)
    fake.inject_error("conversations.history", "not_in_channel")

    new = await history.sync()

    assert [(m.channel_id, m.ts) for m in new] == [("D1", dm)]
    assert store.channel_messages("C1", 10) == []
    assert "C1" in caplog.text and "not_in_channel" in caplog.text


async def test_what_the_listing_says_of_a_conversation_is_stored_though_its_history_cannot_be_read(
    fake: FakeSlack, gateway: SlackGateway, store: SqlConversationStore, history: HistorySync
) -> None:
    """A channel shared outside since, and a DM stored as one of the workspace's (before migration 0032, say) whose
    other person the listing finds of another organisation, read from outside though Slack refused their history
    this time (a rate limit outlasting the retries, say): their messages can wait for the next sync, not that."""
    fake.add_user("U9", "pat", team_id="TOTHER")
    fake.add_channel("D9", "dm-partner", is_im=True, members=["U9"])
    store.save_channel(Channel("C1", "general"))
    store.save_channel(Channel("D9", "pat", ChannelKind.IM))
    fake.share_externally("C1")
    await gateway.auth()
    fake.inject_error("conversations.history", "not_in_channel", times=3)

    assert await history.sync() == []

    assert store.get_channel("C1").kind is ChannelKind.SHARED  # type: ignore[union-attr]
    assert store.get_channel("D9").ext_shared  # type: ignore[union-attr]


async def test_a_surrogate_message_is_stored_cleaned_and_the_other_channels_too(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync
) -> None:
    bad = fake.post_message("C1", "U1", "broken \ud83d emoji", emit=False)
    dm = fake.post_message("D1", "U2", "still here", emit=False)

    new = await history.sync()

    assert {(m.channel_id, m.ts) for m in new} == {("C1", bad), ("D1", dm)}
    assert stored_message(store, "C1", bad).text == "broken \ufffd emoji"


async def test_a_channel_that_cannot_be_stored_is_skipped_without_quoting_it(
    fake: FakeSlack, store: SqlConversationStore, gateway: SlackGateway, caplog: pytest.LogCaptureFixture
) -> None:
    class RefusingGeneral:
        """The real store, except that storing #general's history fails."""

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(store, name)

        def reconcile(self, history, fetched_at):  # type: ignore[no-untyped-def]
            if history.messages and history.messages[0].channel_id == "C1":
                raise ValueError("cannot store 'top secret text'")
            return store.reconcile(history, fetched_at)

    fake.post_message("C1", "U1", "top secret text", emit=False)
    dm = fake.post_message("D1", "U2", "still here", emit=False)
    sync = HistorySync(gateway, RefusingGeneral(), SystemClock(), fake.bot_user_id, max_age_seconds=DAY, limit=100)  # type: ignore[arg-type]

    new = await sync.sync()

    assert [(m.channel_id, m.ts) for m in new] == [("D1", dm)]
    assert "C1" in caplog.text and "ValueError" in caplog.text
    assert "top secret" not in caplog.text


async def test_a_message_deleted_while_away_is_deleted_from_the_store(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync
) -> None:
    secret = fake.post_message("C1", "U1", "my password is hunter2", emit=False)
    parent = fake.post_message("C1", "U1", "thread", emit=False)
    reply = fake.post_message("C1", "U2", "the key is 1234", thread_ts=parent, emit=False)
    kept = fake.post_message("C1", "U2", "lunch?", emit=False)
    await history.sync()
    assert stored_message(store, "C1", secret) is not None

    fake.delete_message("C1", secret, emit=False)
    fake.delete_message("C1", reply, emit=False)
    await history.sync()

    assert stored_message(store, "C1", secret) is None
    assert stored_message(store, "C1", reply) is None
    assert [m.ts for m in store.channel_messages("C1", 10)] == [parent, kept]


async def test_replies_under_a_thread_started_before_the_span_are_stored_and_their_deletion_applied(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync
) -> None:
    parent = fake.post_message("C1", "U1", "an old plan", ts=f"{time.time() - 2 * DAY:.6f}", emit=False)
    gone = fake.post_message("C1", "U2", "the key is 1234", thread_ts=parent, emit=False)
    kept = fake.post_message("C1", "U2", f"<@{fake.bot_user_id}> still on?", thread_ts=parent, emit=False)
    assert [m.ts for m in await history.sync()] == [gone, kept]
    assert stored_message(store, "C1", kept).mentions == (fake.bot_user_id,)

    fake.delete_message("C1", gone, emit=False)
    await history.sync()

    assert stored_message(store, "C1", gone) is None
    assert stored_message(store, "C1", kept) is not None
    assert stored_message(store, "C1", parent) is None  # older than the span: not stored again


async def test_a_thread_whose_parent_lists_no_latest_reply_is_read_not_emptied(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync
) -> None:
    parent = fake.post_message("C1", "U1", "thread", emit=False)
    reply = fake.post_message("C1", "U2", "first reply", thread_ts=parent, emit=False)
    fake.post_message("C1", "U2", "later, in the channel", emit=False)
    await history.sync()

    late = fake.post_message("C1", "U2", "late reply <@UBOT>", thread_ts=parent, emit=False)
    with fake._lock:  # Slack's thread summary without its latest_reply
        fake._find_message(fake._get_channel("C1"), parent).pop("latest_reply")
    new = await history.sync()

    assert stored_message(store, "C1", reply) is not None
    assert [m.ts for m in new] == [late]


async def test_a_message_edited_while_away_is_updated(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync
) -> None:
    ts = fake.post_message("C1", "U1", "token xoxb-123 <@UBOT>", emit=False)
    await history.sync()

    fake.edit_message("C1", ts, "token [redacted]", emit=False)
    await history.sync()

    stored = stored_message(store, "C1", ts)
    assert stored.text == "token [redacted]" and stored.mentions == ()


async def test_a_sync_leaves_alone_what_it_did_not_read(
    fake: FakeSlack, store: SqlConversationStore, gateway: SlackGateway
) -> None:
    old_parent = fake.post_message("C1", "U1", "old thread", ts=f"{time.time() - 2 * DAY:.6f}", emit=False)
    old_reply = fake.post_message("C1", "U2", "late reply", thread_ts=old_parent, emit=False)
    cut = [fake.post_message("C1", "U1", f"m{i}", emit=False) for i in range(4)]
    for ts, text, thread in [(old_parent, "old thread", None), (old_reply, "late reply", old_parent)]:
        store.save_message(Message("C1", ts, "U1", text, "Alice", thread_ts=thread))
    sync = HistorySync(gateway, store, SystemClock(), fake.bot_user_id, max_age_seconds=DAY, limit=2)

    await sync.sync()
    await sync.sync()

    assert stored_message(store, "C1", old_parent) is not None  # older than the span
    assert stored_message(store, "C1", old_reply) is not None  # its thread was not read
    assert [m.ts for m in store.channel_messages("C1", 10)] == [old_parent, *cut[-2:]]
    assert stored_message(store, "C1", cut[0]) is None and stored_message(store, "C1", cut[1]) is None  # never stored


async def test_a_deletion_during_a_fetch_is_not_undone(
    fake: FakeSlack, store: SqlConversationStore, gateway: SlackGateway, history: HistorySync
) -> None:
    ts = fake.post_message("C1", "U1", "oops, a secret", emit=False)
    fetched_at = SystemClock().now()
    fetched = await gateway.fetch_history("C1", "0", 100)
    store.delete_message("C1", ts)  # the message_deleted event lands while the fetch is on its way

    assert store.reconcile(fetched, fetched_at) == []
    assert stored_message(store, "C1", ts) is None


async def test_messages_posted_while_a_fetch_reads_threads_are_not_taken_for_deleted(
    fake: FakeSlack, store: SqlConversationStore, gateway: SlackGateway
) -> None:
    # A fetch lists the channel, then reads its threads one call after another: what was posted after the listing
    # (or after its thread was read) is missing from what it returned, yet older than a reply a later call read.
    first = fake.post_message("C1", "U1", "first thread", emit=False)
    fake.post_message("C1", "U2", "a reply", thread_ts=first, emit=False)
    second = fake.post_message("C1", "U1", "second thread", emit=False)
    fake.post_message("C1", "U2", "another reply", thread_ts=second, emit=False)
    posted: list[Message] = []
    replies = gateway._client.conversations_replies
    read: list[str] = []

    async def meanwhile(**arguments):  # type: ignore[no-untyped-def]
        read.append(arguments["ts"])
        if read == [second, first]:  # the second thread read first (its reply is newer), the first one next
            for text, thread in [("said meanwhile", None), ("answered meanwhile", second), ("late", first)]:
                ts = fake.post_message("C1", "U1", text, thread_ts=thread, emit=False)
                posted.append(Message("C1", ts, "U1", text, "Alice", thread_ts=thread))
        return await replies(**arguments)

    gateway._client.conversations_replies = meanwhile  # type: ignore[method-assign]
    fetched_at = SystemClock().now()
    fetched = await gateway.fetch_history("C1", "0", 100)
    store.save_messages(posted[:2])  # their events land while the fetch is on its way

    store.reconcile(fetched, fetched_at)

    assert [m.text for m in fetched.messages][-1] == "late"
    assert stored_message(store, "C1", posted[0].ts) is not None  # posted after the listing
    assert stored_message(store, "C1", posted[1].ts) is not None  # posted after its thread was read


async def test_an_edit_during_a_fetch_is_not_undone(
    fake: FakeSlack, store: SqlConversationStore, gateway: SlackGateway, history: HistorySync
) -> None:
    ts = fake.post_message("C1", "U1", "first", emit=False)
    await history.sync()
    fetched_at = SystemClock().now()
    fetched = await gateway.fetch_history("C1", "0", 100)
    store.edit_message("C1", ts, "second")  # the message_changed event lands meanwhile

    store.reconcile(fetched, fetched_at)

    assert stored_message(store, "C1", ts).text == "second"


@pytest.mark.parametrize(("change", "kind"), [("convert_to_private", "private"), ("share_externally", "shared")])
async def test_a_public_channel_the_bot_was_removed_from_is_known_to_have_turned_private_or_shared_at_the_next_sync(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync, change: str, kind: str
) -> None:
    # Removed first, then changed: the bot, no longer a member, gets no event, and a private channel's
    # conversations.info says channel_not_found to a bot outside it. What was said there while it was public must
    # stop being the workspace's all the same (the channel lifecycle narrows every channel stored as not public).
    fake.add_channel("C2", "plans", members=["U1"])
    fake.add_channel("C3", "still-public", members=["U1"])
    await history.sync()
    for channel in ("C2", "C3"):
        fake.remove_member(channel, fake.bot_user_id)
    await history.sync()
    assert not store.get_channel("C2").is_member

    getattr(fake, change)("C2")
    await history.sync()

    assert store.get_channel("C2") == Channel("C2", "plans", ChannelKind(kind), is_member=False)
    assert store.get_channel("C3") == Channel("C3", "still-public", ChannelKind.PUBLIC, is_member=False)


async def test_a_deleted_public_channel_the_bot_had_left_is_not_taken_for_one_turned_private(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync
) -> None:
    # Slack answers channel_not_found about a deleted channel as about a private one the bot is out of. Told of
    # the deletion (channel_deleted goes to every app of the workspace), the sync no longer asks: counted private,
    # what was said there while it was public would be narrowed to it and the workspace memory made again.
    fake.add_channel("C2", "plans", members=["U1"])
    await history.sync()
    fake.remove_member("C2", fake.bot_user_id)
    await history.sync()
    fake.delete_channel("C2")
    store.channel_deleted("C2")  # what the channel lifecycle does on channel_deleted

    calls = len(fake.web_calls)
    await history.sync()

    assert store.get_channel("C2") == Channel("C2", "plans", ChannelKind.PUBLIC, is_member=False, deleted=True)
    assert [params for method, params in fake.web_calls[calls:] if method == "conversations.info"] == []


async def test_public_channels_the_bot_is_out_of_are_asked_about_a_few_per_sync_in_turn(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync
) -> None:
    # A workspace may leave the bot in hundreds of archived or abandoned channels: asking about each at every sync
    # would run into Slack's rate limits. Each is asked about in turn, a bounded number per sync.
    left = [f"C{n:03d}" for n in range(LEFT_CHANNELS_ASKED_PER_SYNC + 5)]
    for channel in left:
        fake.add_channel(channel, channel.lower(), members=["U1"])
    await history.sync()
    for channel in left:
        fake.remove_member(channel, fake.bot_user_id)
    await history.sync()
    fake.convert_to_private(left[-1])

    asked: list[str] = []
    for _ in range(2):
        calls = len(fake.web_calls)
        await history.sync()
        infos = [params.get("channel") for method, params in fake.web_calls[calls:] if method == "conversations.info"]
        assert len(infos) <= LEFT_CHANNELS_ASKED_PER_SYNC
        asked += infos

    assert set(left) <= set(asked)
    assert store.get_channel(left[-1]).kind is ChannelKind.PRIVATE


def parents_older_than_the_pages_read(fake: FakeSlack, count: int) -> list[str]:
    """`count` parents of threads posted two days ago, older than any history page of 2 (`PAGE_SIZE`) a sync
    reads: newer old messages come first."""
    now = time.time()
    parents = [
        fake.post_message("C1", "U1", f"plan {i}", ts=f"{now - 2 * DAY + i:.6f}", emit=False) for i in range(count)
    ]
    for i in range(3):
        fake.post_message("C1", "U1", f"quiet since {i}", ts=f"{now - 1.5 * DAY + i:.6f}", emit=False)
    return parents


def known_replies(fake: FakeSlack, store: SqlConversationStore, parents: list[str]) -> None:
    """A reply under each of `parents`, posted an hour ago or later (under the last one last) and stored, as its
    event does."""
    now = time.time()
    for i, parent in enumerate(parents):
        reply = fake.post_message("C1", "U2", f"on {i}", thread_ts=parent, ts=f"{now - 3600 + i:.6f}", emit=False)
        store.save_message(Message("C1", reply, "U2", f"on {i}", "Bob Builder", thread_ts=parent))


async def test_a_reply_under_a_thread_older_than_the_pages_read_is_stored_when_the_thread_is_known(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slack lists a thread's parent in the channel's history at its own ts: under a parent older than the history
    # pages a sync reads, a reply posted while the bot was away (its event lost) is found only by asking about the
    # thread, which the store knows of from a reply in the span.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    parents = parents_older_than_the_pages_read(fake, 1)
    known_replies(fake, store, parents)
    for i in range(3):
        fake.post_message("C1", "U1", f"meanwhile {i}", emit=False)
    late = fake.post_message("C1", "U2", f"<@{fake.bot_user_id}> and now?", thread_ts=parents[0], emit=False)

    new = await history.sync()

    assert late in [m.ts for m in new]
    assert stored_message(store, "C1", late).mentions == (fake.bot_user_id,)


async def test_a_reply_under_a_parent_in_the_span_beyond_the_limit_is_stored(
    fake: FakeSlack, gateway: SlackGateway, store: SqlConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The history pages read end once they hold more than `limit` messages of the span: a parent posted in the
    # span before the newest `limit` may be on none of them.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    sync = HistorySync(gateway, store, SystemClock(), fake.bot_user_id, max_age_seconds=DAY, limit=2)
    parent = fake.post_message("C1", "U1", "a plan", emit=False)
    fake.post_message("C1", "U2", "sounds good", thread_ts=parent, emit=False)
    await sync.sync()
    for i in range(4):
        fake.post_message("C1", "U1", f"meanwhile {i}", emit=False)
    late = fake.post_message("C1", "U2", f"<@{fake.bot_user_id}> still on?", thread_ts=parent, emit=False)

    new = await sync.sync()

    assert late in [m.ts for m in new]


async def test_a_reply_broadcast_to_the_channel_under_an_old_thread_is_stored(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slack lists a reply also sent to the channel (thread_broadcast) in the channel's history: found there, though
    # the thread is unknown and its parent on no page read.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    [parent] = parents_older_than_the_pages_read(fake, 1)
    for i in range(3):
        fake.post_message("C1", "U1", f"meanwhile {i}", emit=False)
    broadcast = fake.post_message(
        "C1", "U2", f"<@{fake.bot_user_id}> back on?", thread_ts=parent, subtype="thread_broadcast", emit=False
    )

    new = await history.sync()

    assert broadcast in [m.ts for m in new]
    stored = stored_message(store, "C1", broadcast)
    assert stored.thread_ts == parent and stored.mentions == (fake.bot_user_id,)


async def test_threads_whose_parents_are_not_listed_are_asked_about_a_few_per_sync_the_latest_replied_first(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync, monkeypatch: pytest.MonkeyPatch
) -> None:
    # conversations.replies is limited to about 50 calls a minute: a workspace may have hundreds of threads
    # replied to in the span whose parents are older than the history pages read.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    parents = parents_older_than_the_pages_read(fake, THREADS_ASKED_PER_SYNC + 3)
    known_replies(fake, store, parents)
    late = [fake.post_message("C1", "U2", "and now?", thread_ts=parent, emit=False) for parent in parents]
    calls = len(fake.web_calls)

    new = await history.sync()

    asked = {params["ts"] for method, params in fake.web_calls[calls:] if method == "conversations.replies"}
    assert sorted(asked) == parents[-THREADS_ASKED_PER_SYNC:]
    assert sorted(m.ts for m in new if m.thread_ts) == late[-THREADS_ASKED_PER_SYNC:]


async def test_a_reply_deleted_under_a_known_thread_whose_parent_is_not_listed_is_deleted_and_nothing_else(
    fake: FakeSlack, store: SqlConversationStore, gateway: SlackGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a read of a thread alone does not return is deleted only among the thread's replies: a top-level
    # message the channel's read left alone (older than the `limit` newest) is not taken for deleted.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    sync = HistorySync(gateway, store, SystemClock(), fake.bot_user_id, max_age_seconds=DAY, limit=2)
    [parent] = parents_older_than_the_pages_read(fake, 1)
    known_replies(fake, store, [parent])
    secret = fake.post_message("C1", "U2", "the key is 1234", thread_ts=parent, emit=False)
    fake.post_message("C1", "U1", "noted", thread_ts=parent, emit=False)
    earlier = fake.post_message("C1", "U1", "lunch?", ts=f"{time.time() - 60:.6f}", emit=False)
    store.save_message(Message("C1", earlier, "U1", "lunch?", "Alice"))  # by its event
    for i in range(2):
        fake.post_message("C1", "U1", f"later {i}", emit=False)
    await sync.sync()
    assert stored_message(store, "C1", secret) is not None

    fake.delete_message("C1", secret, emit=False)
    await sync.sync()

    assert stored_message(store, "C1", secret) is None
    assert stored_message(store, "C1", earlier) is not None


async def test_a_known_thread_deleted_whole_while_away_has_its_replies_deleted_and_is_not_asked_about_again(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slack answers thread_not_found for a thread whose parent and replies are all deleted: it has no reply left.
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    [parent] = parents_older_than_the_pages_read(fake, 1)
    known_replies(fake, store, [parent])
    [reply] = [m.ts for m in store.thread_messages("C1", parent, 10)]
    fake.delete_message("C1", reply, emit=False)
    fake.delete_message("C1", parent, emit=False)

    await history.sync()
    calls = len(fake.web_calls)
    await history.sync()

    assert stored_message(store, "C1", reply) is None
    assert [p for method, p in fake.web_calls[calls:] if method == "conversations.replies"] == []


async def test_a_thread_that_cannot_be_read_is_skipped_and_the_other_threads_are_read(
    fake: FakeSlack, store: SqlConversationStore, history: HistorySync, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway_module, "PAGE_SIZE", 2)
    monkeypatch.setattr(gateway_module, "RETRY_DELAYS", (0.01, 0.01, 0.01))  # Slack failed again at each retry
    parents = parents_older_than_the_pages_read(fake, 2)
    known_replies(fake, store, parents)
    late = [fake.post_message("C1", "U2", f"<@{fake.bot_user_id}> now?", thread_ts=p, emit=False) for p in parents]
    fake.inject_error("conversations.replies", "internal_error", times=len(gateway_module.RETRY_DELAYS) + 1)

    first = await history.sync()
    second = await history.sync()

    assert [m.ts for m in first] == [late[0]]  # the latest replied thread, asked first, could not be read
    assert [m.ts for m in second] == [late[1]]
