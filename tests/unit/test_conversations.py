"""Conversations.names: people a prompt mentions are named, looked up once when not stored yet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from myao2.application.conversations import Conversations
from myao2.domain.conversation import BotIdentity, Message, Person
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from tests.clocks import ManualClock

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


class FakeChat:
    """Answers `person` from a directory; records every lookup; ids in `failing` raise."""

    def __init__(self, directory: dict[str, str], failing: frozenset[str] = frozenset()) -> None:
        self.directory = directory
        self.failing = failing
        self.lookups: list[str] = []

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
