"""Messages are indexed with the message before them in their flow (their window), kept up to date,
never across channels; the neighbours of a hit lift it, never those posted after the cutoff."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from myao2.domain.conversation import Message
from tests.unit.test_search_index import START, World

FILLER = ["the printer is out of paper", "who took my stapler", "the blinds are stuck", "lights off at nine"]


def at(minute: int) -> datetime:
    return START + timedelta(minutes=minute)


def stored_text(world: World, message: Message) -> str:
    """What the index embedded for `message`."""
    world.index.sync()
    with world.engine.connect() as connection:
        return connection.execute(
            text(
                "SELECT d.text FROM search_docs d JOIN messages m ON m.id = d.ref_id AND d.kind = 'message' "
                "WHERE m.channel_id = :channel AND m.ts = :ts"
            ),
            {"channel": message.channel_id, "ts": message.ts},
        ).scalar_one()


def top(world: World, query: str, reader: str = "C1", limit: int = 2, before: datetime | None = None) -> set[str]:
    return {hit.message.text for hit in world.search.messages(query, reader, before, None, limit)}


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    world = World(database_url)
    yield world
    world.close()


@pytest.fixture
def chat(world: World) -> dict[str, Message]:
    """#c1: a question answered right after it, filler, then a genuine ramen mention and the reply to it."""
    messages = {}
    messages["question"] = world.message("C1", "ramen ramen ramen tonight?", at(0))
    messages["answer"] = world.message("C1", "sure, see you there", at(1))
    for minute, text in enumerate(FILLER, start=2):
        messages[text] = world.message("C1", text, at(minute))
    messages["mention"] = world.message("C1", "a new ramen noodle shop opened", at(10))
    messages["reply"] = world.message("C1", "nice", at(11))
    return messages


def test_a_reply_is_found_by_the_words_of_the_message_it_answers(world: World, chat: dict[str, Message]) -> None:
    assert stored_text(world, chat["answer"]) == "Alice: ramen ramen ramen tonight?\nAlice: sure, see you there"
    assert top(world, "ramen") == {"ramen ramen ramen tonight?", "sure, see you there"}


def test_editing_the_previous_message_re_indexes_the_next_one(world: World, chat: dict[str, Message]) -> None:
    world.index.sync()
    world.conversations.edit_message("C1", chat["question"].ts, "sushi sushi sushi tonight?")
    assert top(world, "sushi") == {"sushi sushi sushi tonight?", "sure, see you there"}
    # With the old window the answer would still outrank the genuine ramen mention's reply.
    assert top(world, "ramen") == {"a new ramen noodle shop opened", "nice"}
    assert "ramen" not in stored_text(world, chat["answer"])


def test_deleting_the_previous_message_leaves_its_words_out_of_the_next_ones_window(
    world: World, chat: dict[str, Message]
) -> None:
    world.index.sync()
    world.conversations.delete_message("C1", chat["question"].ts)
    assert top(world, "ramen") == {"a new ramen noodle shop opened", "nice"}
    assert stored_text(world, chat["answer"]) == "Alice: sure, see you there"  # first of its channel now


def test_a_message_stored_late_between_two_others_enters_the_next_ones_window(
    world: World, chat: dict[str, Message]
) -> None:
    world.index.sync()
    late = world.message("C1", "bring umbrellas", at(10) - timedelta(seconds=30))  # e.g. fetched by a history sync
    assert stored_text(world, chat["mention"]) == "Alice: bring umbrellas\nAlice: a new ramen noodle shop opened"
    assert stored_text(world, late) == f"Alice: {FILLER[-1]}\nAlice: bring umbrellas"


def test_a_window_never_holds_another_channels_message(world: World) -> None:
    world.message("C1", "a new ramen noodle shop opened", at(0))
    world.message("C1", "nice", at(1))
    for minute, text in enumerate(FILLER, start=2):
        world.message("C1", text, at(minute))
    world.message("D1", "ramen ramen ramen, just between us", at(10))
    first_after = world.message("C1", "see you tomorrow", at(11))
    assert stored_text(world, first_after) == f"Alice: {FILLER[-1]}\nAlice: see you tomorrow"
    assert top(world, "ramen") == {"a new ramen noodle shop opened", "nice"}


def test_a_thread_reply_is_windowed_with_its_thread_and_the_top_level_with_the_top_level(world: World) -> None:
    parent = world.message("C1", "who is buying the cake?", at(0))
    world.message("C1", "I will, chocolate", at(1), thread_ts=parent.ts)
    after = world.message("C1", "meeting moved to three", at(2))
    second_reply = world.message("C1", "make it vanilla", at(3), thread_ts=parent.ts)
    assert stored_text(world, after) == "Alice: who is buying the cake?\nAlice: meeting moved to three"
    assert stored_text(world, second_reply) == "Alice: I will, chocolate\nAlice: make it vanilla"
    world.conversations.edit_message("C1", parent.ts, "who is buying the pie?")
    assert "pie" in stored_text(world, after)


def test_a_message_is_found_first_by_its_exact_text_though_the_next_ones_window_repeats_it(world: World) -> None:
    world.message("C1", "lunch?", at(0))
    world.message("C1", "ramen at noon", at(1))
    world.message("C1", "ramen at noon sounds good", at(2))  # its window holds "ramen at noon" twice
    assert world.message_texts("ramen at noon", "C1")[0] == "ramen at noon"
    assert world.message_texts("ramen at noon sounds good", "C1")[0] == "ramen at noon sounds good"


# -- the time cutoff with neighbours ------------------------------------------------------------------

WORDS = st.sampled_from(["ramen", "deploy", "friday", "budget", "会議", "猫"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.lists(WORDS, min_size=1, max_size=3), min_size=2, max_size=10),
    cut=st.integers(0, 9),
    query=st.lists(WORDS, min_size=1, max_size=2),
)
def test_messages_after_the_cutoff_never_change_the_ranking(
    new_database: Callable[[], str], texts: list[list[str]], cut: int, query: list[str]
) -> None:
    """A world where the messages after the cutoff sit in another channel ranks exactly alike:
    the same documents and terms, only no neighbour after the cutoff to lean on."""
    cutoff = at(min(cut, len(texts) - 1)) + timedelta(seconds=30)
    rankings = []
    for moved in (False, True):
        world = World(new_database())
        for minute, words in enumerate(texts):
            channel = "C2" if moved and at(minute) > cutoff else "C1"
            world.message(channel, " ".join(words) + f" n{minute}", at(minute))
        hits = world.search.messages(" ".join(query), "C1", cutoff, "C1", 20)
        assert all(hit.message.posted_at <= cutoff for hit in hits)
        rankings.append([(hit.message.text, round(hit.score, 5)) for hit in hits])
        world.close()
    assert sorted(rankings[0], key=lambda h: (-h[1], h[0])) == sorted(rankings[1], key=lambda h: (-h[1], h[0]))
