"""Conversations: people a prompt mentions are named (looked up once when not stored yet); the bot's posts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from myao2.application.conversations import Conversations
from myao2.application.reply_stream import PublishedReply, ReplyDone, TextDelta
from myao2.domain.conversation import BotIdentity, Channel, Message, Person, clean_text, neutralise_broadcasts
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from tests.clocks import ManualClock
from tests.stored import stored_message

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


class FakeChat:
    """Answers `person` from a directory; records every lookup; ids in `failing` raise."""

    def __init__(self, directory: dict[str, str], failing: frozenset[str] = frozenset()) -> None:
        self.directory = directory
        self.failing = failing
        self.lookups: list[str] = []

        self.posts: list[str] = []

    async def post(self, channel_id: str, text: str, thread_ts: str | None, answering: str | None = None) -> str:
        self.posts.append(text)
        return f"{len(self.posts)}.000000"

    async def person(self, user_id: str) -> Person:
        self.lookups.append(user_id)
        if user_id in self.failing:
            raise ConnectionError("users.info failed")
        return Person(user_id, self.directory.get(user_id, user_id))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlConversationStore]:
    engine = open_database(f"sqlite:///{tmp_path}/c.db")
    yield SqlConversationStore(engine, ManualClock())
    engine.dispose()


def mentioning(*user_ids: str) -> list[Message]:
    return [Message("C1", "1.0", "UALICE", " ".join(f"<@{u}>" for u in user_ids), "Alice")]


async def test_a_never_seen_mentioned_person_is_looked_up_once_and_stored(store) -> None:
    store.save_person(Person("UBOB", "Bob"))
    chat = FakeChat({"UCAROL": "Carol"})
    conversations = Conversations(store, chat, BOT, "myao")  # type: ignore[arg-type]

    names = await conversations.names(mentioning("UBOB", "UCAROL", "UBOT"))
    again = await conversations.names(mentioning("UCAROL"))

    assert names == {"UBOB": "Bob", "UCAROL": "Carol", "UBOT": "myao"}
    assert again == {"UCAROL": "Carol", "UBOT": "myao"}
    assert chat.lookups == ["UCAROL"]
    assert store.people(["UCAROL"]) == {"UCAROL": Person("UCAROL", "Carol")}


async def test_a_failed_lookup_leaves_the_person_unnamed_and_the_others_named(store) -> None:
    chat = FakeChat({"UCAROL": "Carol"}, failing=frozenset({"UDAVE"}))
    conversations = Conversations(store, chat, BOT, "myao")  # type: ignore[arg-type]

    names = await conversations.names(mentioning("UDAVE", "UCAROL"))

    assert names == {"UCAROL": "Carol", "UBOT": "myao"}
    assert store.people(["UDAVE"]) == {}


async def test_a_user_slack_does_not_know_is_not_stored(store) -> None:
    chat = FakeChat({})
    conversations = Conversations(store, chat, BOT, "myao")  # type: ignore[arg-type]

    assert await conversations.names(mentioning("UGONE")) == {"UBOT": "myao"}
    assert store.people() == {}


async def test_a_post_notifies_nobody_by_default_and_is_stored_as_posted(store) -> None:
    chat = FakeChat({})
    conversations = Conversations(store, chat, BOT, "myao")  # type: ignore[arg-type]

    reply = await conversations.post("C1", "<!channel> <!subteam^S1|@devs> lunch \ud800 now", None)

    assert chat.posts == ["@\u200bchannel @\u200bdevs lunch \ufffd now"]
    assert reply.text == chat.posts[0]
    assert stored_message(store, "C1", reply.ts).text == chat.posts[0]


async def test_broadcasts_go_out_when_allowed(store) -> None:
    chat = FakeChat({})
    conversations = Conversations(store, chat, BOT, "myao", allow_broadcasts=True)  # type: ignore[arg-type]

    await conversations.post("C1", "<!here> the build is broken", None)

    assert chat.posts == ["<!here> the build is broken"]


class FakePublisher:
    """Publishes every reply as ts 5.0 with the reply's final text."""

    async def publish(self, channel, thread_ts, recipient_user_id, reply, apology, **marks):  # type: ignore[no-untyped-def]
        text = ""
        async for event in reply:
            if isinstance(event, ReplyDone):
                text = event.text
        return PublishedReply("5.0", text)


async def reply_of(text: str):  # type: ignore[no-untyped-def]
    yield TextDelta(text)
    yield ReplyDone(text)


async def test_a_published_reply_is_stored_once_with_its_ts_and_final_text(store) -> None:
    store.save_message(Message("C1", "1.0", "UALICE", "hi", "Alice"))
    conversations = Conversations(store, FakeChat({}), BOT, "myao", FakePublisher())  # type: ignore[arg-type]

    reply = await conversations.publish(Channel("C1", "general"), "1.0", "UALICE", reply_of("Hello!"), "Sorry")

    assert (reply.ts, reply.text) == ("5.0", "Hello!")
    stored = stored_message(store, "C1", "5.0")
    assert stored is not None and (stored.text, stored.thread_ts, stored.is_bot) == ("Hello!", "1.0", True)


async def test_a_half_written_copy_stored_by_a_sync_gets_the_final_text(store) -> None:
    store.save_message(Message("C1", "1.0", "UALICE", "hi", "Alice"))
    store.save_message(Message("C1", "5.0", "UBOT", "Hel", "myao", is_bot=True, thread_ts="1.0"))
    conversations = Conversations(store, FakeChat({}), BOT, "myao", FakePublisher())  # type: ignore[arg-type]

    await conversations.publish(Channel("C1", "general"), "1.0", "UALICE", reply_of("Hello!"), "Sorry")

    assert stored_message(store, "C1", "5.0").text == "Hello!"
    assert [m.ts for m in store.thread_messages("C1", "1.0", 10)] == ["1.0", "5.0"]


class RecordingPublisher(FakePublisher):
    """Also records the text deltas it was given."""

    def __init__(self) -> None:
        self.deltas: list[str] = []

    async def publish(self, channel, thread_ts, recipient_user_id, reply, apology, **marks):  # type: ignore[no-untyped-def]
        text = ""
        async for event in reply:
            if isinstance(event, TextDelta):
                self.deltas.append(event.text)
            elif isinstance(event, ReplyDone):
                text = event.text
        return PublishedReply("5.0", "".join(self.deltas) or text)


async def deltas_of(*pieces: str):  # type: ignore[no-untyped-def]
    for piece in pieces:
        yield TextDelta(piece)
    yield ReplyDone("".join(pieces))


@pytest.mark.parametrize(
    "pieces",
    [
        ("Hey <!chan", "nel> look", " at this"),
        ("Hey @chan", "nel look", " at this"),
        ("Hey <!subteam^S1|", "@devs> and ", "@", "here too", " \ud800"),
        ("mail me at a@here", ".com please"),
    ],
)
async def test_a_streamed_reply_notifies_nobody_even_split_across_deltas(store, pieces) -> None:
    publisher = RecordingPublisher()
    conversations = Conversations(store, FakeChat({}), BOT, "myao", publisher)  # type: ignore[arg-type]

    reply = await conversations.publish(Channel("C1", "general"), None, "UALICE", deltas_of(*pieces), "Sorry")

    whole = "".join(pieces)
    safe = neutralise_broadcasts(clean_text(whole))
    assert "".join(publisher.deltas) == safe == reply.text
    assert all("<!" not in delta and "@channel" not in delta and "@here " not in delta for delta in publisher.deltas)
    assert len(publisher.deltas) >= 2  # still streamed in pieces
