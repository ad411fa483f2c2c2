"""Recall over digests and long-term memories: found with their dates, within visibility, never past the cutoff (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from myao2.application.search import Search, SearchError
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import MemoDraft, Origin
from myao2.domain.memory import Bullet, Digest, Memory, Scope, Stage, Term
from myao2.domain.visibility import WORKSPACE, Audience
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.db.memory_store import SqlMemoryStore
from myao2.infrastructure.search.index import SearchIndex
from myao2.infrastructure.llm.search_messages import recall_message
from tests.clocks import ManualClock
from tests.fakes.embedder import HashEmbedder
from tests.postgres import fresh_database

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
DAY = timedelta(days=1)


def ts(moment: datetime) -> str:
    return f"{moment.timestamp():.6f}"


class Notes:
    def __init__(self, url: str) -> None:
        self.engine = open_database(url)
        clock = ManualClock(START)
        self.memos = SqlMemoStore(self.engine, clock)
        self.conversations = SqlConversationStore(self.engine, clock)
        self.memories = SqlMemoryStore(self.engine, clock)
        for channel_id, kind in (("C1", ChannelKind.PUBLIC), ("C2", ChannelKind.PUBLIC), ("G1", ChannelKind.PRIVATE)):
            self.conversations.save_channel(Channel(channel_id, channel_id.lower(), kind))
        self.index = SearchIndex(self.engine, HashEmbedder(), self.memos, self.conversations, self.memories)
        self.search = Search(self.index, self.memos, self.conversations, self.memories)

    def digest(self, channel: str, day: int, *lines: str, private: bool = False) -> None:
        first = START + day * DAY + timedelta(hours=9)
        self.memories.save_digest(
            Digest(
                channel_id=channel,
                day=first.date(),
                stage=Stage.DIGEST,
                audience=Audience.of(channel, private),
                lines=lines,
                first_ts=ts(first),
                last_ts=ts(first + timedelta(hours=8)),
                label=f"#{channel.lower()}",
            )
        )

    def found(self, query: str, reader: str | None, before: datetime | None = None, channel: str | None = None):
        return self.search.notes(query, reader, before, channel, 5)


@pytest.fixture
def notes(database_url: str) -> Iterator[Notes]:
    notes = Notes(database_url)
    yield notes
    notes.engine.dispose()


def test_a_digest_is_found_with_its_date_after_its_messages_are_gone(notes: Notes) -> None:
    notes.digest("C1", 0, "Alice said the office moves to Osaka in May.")
    notes.digest("C1", 1, "Bob bought a new laptop.")
    [hit, *_] = notes.found("where is the office moving", "C2")
    assert hit.digest is not None and hit.digest.day == date(2026, 1, 1)
    text = recall_message([], notes.found("office Osaka", "C2"), "en", timezone.utc)
    assert "- [2026-01-01] Alice said the office moves to Osaka in May." in text


def test_a_private_digest_is_found_only_in_its_own_conversation(notes: Notes) -> None:
    notes.digest("G1", 0, "canary-secret surprise party", private=True)
    assert notes.found("surprise party canary-secret", "C1") == []
    assert notes.found("surprise party canary-secret", None) != []
    assert [h.digest.channel_id for h in notes.found("surprise party canary-secret", "G1")] == ["G1"]


def test_a_digest_narrowed_when_its_channel_turns_private_is_no_longer_found_elsewhere(notes: Notes) -> None:
    notes.digest("C1", 0, "canary-general plans for the launch")
    assert notes.found("launch plans", "C2") != []
    notes.conversations.set_channel_kind("C1", ChannelKind.PRIVATE)
    notes.memories.narrow("C1")
    assert notes.found("launch plans", "C2") == []
    assert notes.found("launch plans", "C1") != []


def test_the_channel_filter_keeps_to_that_channel(notes: Notes) -> None:
    notes.digest("C1", 0, "ramen lunch in general")
    notes.digest("C2", 0, "ramen lunch in random")
    assert [h.digest.channel_id for h in notes.found("ramen lunch", "C1", channel="C2")] == ["C2"]


def test_the_channel_filter_finds_the_channels_notes_however_many_of_other_channels_rank_above_them(notes: Notes) -> None:
    # The index was asked for four times the notes wanted, of every channel, and those of the channel kept: more
    # notes elsewhere that matched better left out the channel's own.
    for day in range(5):
        notes.digest("C2", day, f"ramen lunch, ramen lunch again {day}")
    notes.digest("C1", 0, "we had ramen once")
    bullets = (Bullet(1, "Alice had ramen", START.date(), (ts(START + timedelta(hours=1)),)),)
    notes.memories.save([Memory(Scope("C1"), Term.LONG, WORKSPACE, bullets, label="#c1")])
    for day in range(5):
        bullet = Bullet(1, f"ramen lunch, ramen lunch again {day}", START.date(), (ts(START + timedelta(hours=2)),))
        notes.memories.save([Memory(Scope("C2", f"{day}.0"), Term.LONG, WORKSPACE, (bullet,), label="#c2")])
    assert [hit.label for hit in notes.search.notes("ramen lunch", "C2", None, "C1", 1)] == ["#c1"]
    assert [hit.label for hit in notes.search.notes("ramen lunch", "C2", None, "C1", 2)] == ["#c1", "#c1"]


def test_long_term_memories_are_found_bullet_by_bullet_up_to_the_cutoff(notes: Notes) -> None:
    bullets = tuple(
        Bullet(i + 1, text, (START + i * DAY).date(), (ts(START + i * DAY + timedelta(hours=1)),))
        for i, text in enumerate(["Alice likes green tea", "Bob moved to Sapporo", "Alice adopted a cat"])
    )
    notes.memories.save([Memory(Scope("C1"), Term.LONG, WORKSPACE, bullets, label="#c1")])
    [hit] = notes.found("Alice cat", "C2")
    assert "Alice adopted a cat" in [b.text for b in hit.bullets]
    [hit] = notes.found("Alice cat", "C2", before=START + DAY + timedelta(hours=2))
    assert [b.text for b in hit.bullets if "cat" in b.text] == []  # the cat came after the cutoff
    assert notes.found("Alice cat", "C2", before=START) == []


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def standups(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Notes]:
    with contextmanager(fresh_database)(request, tmp_path_factory.mktemp("n")) as url:
        notes = Notes(url)
        for day in range(7):
            notes.digest("C1", day, f"daily standup notes number {day}")
        yield notes
        notes.engine.dispose()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.floats(min_value=-1, max_value=8), later=st.floats(min_value=0, max_value=3))
def test_nothing_made_from_messages_after_the_cutoff_is_returned_and_results_grow_with_it(
    standups: Notes, first: float, later: float
) -> None:
    def days(cutoff: datetime) -> set[date]:
        hits = standups.search.notes("daily standup notes", "C1", cutoff, None, 20)
        for hit in hits:
            assert float(hit.digest.last_ts) <= cutoff.timestamp()
        return {hit.digest.day for hit in hits}

    early, late = START + first * DAY, START + (first + later) * DAY
    assert days(early) <= days(late)


def test_deleted_digests_leave_the_index(notes: Notes) -> None:
    notes.digest("C1", 0, "canary-gone text")
    assert notes.found("canary-gone", "C1") != []
    with notes.engine.begin() as connection:
        connection.execute(text("DELETE FROM digests"))
    assert notes.found("canary-gone", "C1") == []
    with notes.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM search_docs WHERE text LIKE '%canary-gone%'")).scalar_one() == 0


def test_nothing_of_a_channel_the_bot_has_left_is_recalled_elsewhere_until_it_joins_again(notes: Notes) -> None:
    notes.digest("C1", 0, "canary-left the launch moves to June")
    bullets = (Bullet(1, "canary-left Alice adopted a cat", START.date(), (ts(START + timedelta(hours=1)),)),)
    notes.memories.save([Memory(Scope("C1"), Term.LONG, WORKSPACE, bullets, label="#c1")])
    notes.conversations.save_message(Message("C1", ts(START + timedelta(hours=2)), "U1", "canary-left ramen at noon", "Alice"))
    notes.digest("C2", 0, "the launch moves to July")

    def recalled(reader: str | None) -> tuple[list[str], list[str], str | None]:
        found = notes.search.notes("canary-left launch cat", reader, None, None, 20)
        messages = notes.search.messages("canary-left ramen", reader, None, None, 20)
        try:
            named = notes.search.channel_named("c1", reader)
        except SearchError:
            named = None
        return sorted(h.label for h in found), [m.message.channel_id for m in messages], named

    assert recalled("C2") == (["#c1", "#c1", "#c2"], ["C1"], "C1")
    notes.conversations.leave_channel("C1")
    assert recalled("C2") == (["#c2"], [], None)
    assert recalled(None) == (["#c1", "#c1", "#c2"], ["C1"], "C1")  # a person's own view (the command line)
    notes.conversations.save_channel(Channel("C1", "c1"))  # invited back
    assert recalled("C2") == (["#c1", "#c1", "#c2"], ["C1"], "C1")


def test_nothing_of_a_channel_never_stored_is_recalled_elsewhere_as_its_messages_are_not(notes: Notes) -> None:
    # What was said in a conversation never stored counts as not public (the safe side). Its messages were found
    # there alone, but its digests and memories kept for the workspace were judged by their audience alone and
    # recalled in every conversation.
    notes.digest("C9", 0, "canary-unknown the launch moves to June")
    bullets = (Bullet(1, "canary-unknown Alice adopted a cat", START.date(), (ts(START + timedelta(hours=1)),)),)
    notes.memories.save([Memory(Scope("C9"), Term.LONG, WORKSPACE, bullets, label="#c9")])
    notes.conversations.save_message(Message("C9", ts(START + timedelta(hours=2)), "U1", "canary-unknown ramen", "Alice"))

    def recalled(reader: str | None) -> tuple[list[str], list[str]]:
        found = notes.search.notes("canary-unknown launch cat", reader, None, None, 20)
        messages = notes.search.messages("canary-unknown ramen", reader, None, None, 20)
        return sorted(h.label for h in found), [m.message.channel_id for m in messages]

    assert recalled("C2") == ([], [])
    # Nor in C9 itself, read as one people of another organisation may read (`Reader.of`): its own audience alone.
    assert recalled("C9") == ([], ["C9"])
    assert recalled(None) == (["#c9", "#c9"], ["C9"])  # a person's own view (the command line)


def test_what_a_channel_stored_as_private_said_is_recalled_from_the_workspace_memory_only_there(notes: Notes) -> None:
    # The workspace memory keeps what #c1 said until the narrowing reaches it: between storing the channel as
    # private and that, a recall elsewhere showed it.
    day = START.date()
    bullets = (
        Bullet(1, "Alice likes green tea", day, (ts(START + timedelta(hours=1)),), heard_in=("C2",)),
        Bullet(2, "canary-heard Alice adopted a cat", day, (ts(START + timedelta(hours=2)),), heard_in=("C1", "C2")),
    )
    notes.memories.save([Memory(Scope(), Term.LONG, WORKSPACE, bullets)])

    def recalled(reader: str | None) -> list[str]:
        return [b.text for hit in notes.search.notes("Alice cat tea", reader, None, None, 20) for b in hit.bullets]

    assert sorted(recalled("C2")) == ["Alice likes green tea", "canary-heard Alice adopted a cat"]
    notes.conversations.set_channel_kind("C1", ChannelKind.PRIVATE)
    assert recalled("C2") == ["Alice likes green tea"]
    assert sorted(recalled("C1")) == ["Alice likes green tea", "canary-heard Alice adopted a cat"]
    assert sorted(recalled(None)) == ["Alice likes green tea", "canary-heard Alice adopted a cat"]


def test_a_search_elsewhere_ranks_the_workspace_memory_by_what_it_may_read_while_not_narrowed_yet(notes: Notes) -> None:
    # Until the narrowing reaches it, the workspace memory keeps what #c1 (stored as private) said, and the index its
    # words: a search from #c2 for them ranked the memory first, showing only #c2's bullet, which told that the
    # hidden one matched.
    day = START.date()
    heard_in_c1 = Bullet(1, "canary-plans rocket launch moves to Friday", day, (ts(START + timedelta(hours=1)),), heard_in=("C1",))
    heard_in_c2 = Bullet(2, "Alice likes green tea", day, (ts(START + timedelta(hours=2)),), heard_in=("C2",))
    models = Bullet(1, "Bob builds rocket models", day, (ts(START + timedelta(hours=3)),), heard_in=("C2",))
    notes.memories.save(
        [
            Memory(Scope(), Term.LONG, WORKSPACE, (heard_in_c1, heard_in_c2)),
            Memory(Scope("C2"), Term.LONG, WORKSPACE, (models,), label="#c2"),
        ]
    )
    notes.conversations.set_channel_kind("C1", ChannelKind.PRIVATE)

    def top(query: str, reader: str) -> list[tuple[str, list[str]]]:
        return [(hit.label, [b.text for b in hit.bullets]) for hit in notes.search.notes(query, reader, None, None, 1)]

    both = [heard_in_c1.text, heard_in_c2.text]
    assert top("canary-plans rocket launch", "C2") == [("#c2", [models.text])]
    assert top("green tea", "C2") == [("", [heard_in_c2.text])]
    assert top("canary-plans rocket launch", "C1") == [("", both)]
    assert top("green tea", "C1") == [("", both)]

    def score(reader: str) -> float:
        [found] = [hit.score for hit in notes.search.notes("canary-plans rocket launch", reader, None, None, 5) if not hit.label]
        return found

    # Scored exactly as the workspace memory holding only what #c2 may read is.
    while_hidden = score("C2")
    notes.memories.save([Memory(Scope(), Term.LONG, WORKSPACE, (heard_in_c2,))])
    assert while_hidden == pytest.approx(score("C2"), abs=1e-6)


def test_a_digest_of_a_channel_stored_as_private_makes_room_for_the_next_while_not_narrowed_yet(notes: Notes) -> None:
    # Left out of a search from #c2, #c1's digest (kept for the workspace until the narrowing reaches it) took the
    # one place asked for: the empty result told that something hidden matched.
    notes.digest("C1", 0, "canary-plans rocket launch moves to Friday")
    notes.digest("C2", 0, "Bob builds rocket models")
    notes.conversations.set_channel_kind("C1", ChannelKind.PRIVATE)

    def top(reader: str) -> list[str]:
        return [hit.label for hit in notes.search.notes("canary-plans rocket launch", reader, None, None, 1)]

    assert top("C2") == ["#c2"]
    assert top("C1") == ["#c1"]


def _bullet(number: int, text: str, hours: int) -> Bullet:
    return Bullet(number, text, START.date(), (ts(START + timedelta(hours=hours)),))


def _recall_unmoved_by(notes: Notes, hide: Callable[[], None]) -> None:
    """A recall from #c2 finds the same, with the same scores, once `hide` stored what it may not read, the query's
    words in it many times."""
    notes.digest("C1", 0, "ramen for lunch near the station")
    notes.digest("C2", 1, "the trip to tokyo is next month")
    notes.memories.save(
        [
            Memory(Scope("C1"), Term.LONG, WORKSPACE, (_bullet(1, "Alice loves ramen", 1), _bullet(2, "Bob lives in tokyo", 2)), label="#c1"),
            Memory(Scope("C2"), Term.LONG, WORKSPACE, (_bullet(1, "the station is being rebuilt", 3),), label="#c2"),
        ]
    )
    for minute, text in enumerate(["ramen at noon?", "tokyo is far", "meet at the station", "the ramen in tokyo was great"]):
        notes.conversations.save_message(Message("C1", ts(START + timedelta(minutes=minute)), "U1", text, "Alice"))

    def recalled(reader: str) -> tuple[str, list[float]]:
        messages = notes.search.messages("ramen station tokyo", reader, None, None, 5)
        found = notes.search.notes("ramen station tokyo", reader, None, None, 5)
        return recall_message(messages, found, "en", timezone.utc), [h.score for h in [*messages, *found]]

    notes.index.sync()
    notes.index.warm()  # as the background does: every kind's vectors loaded, among which the weights are counted
    before = recalled("C2")
    hide()
    assert recalled("C2") == before


def _workspace_notes_of_c3(notes: Notes) -> None:
    """Digests and a long-term memory of a public channel C3, kept for the workspace, the query's words in them."""
    notes.conversations.save_channel(Channel("C3", "c3", ChannelKind.PUBLIC))
    for number in range(6):
        notes.digest("C3", 2 + number, f"ramen ramen, said {number} times")
    notes.memories.save(
        [Memory(Scope("C3"), Term.LONG, WORKSPACE, tuple(_bullet(n, f"ramen {n}", 6) for n in range(1, 5)), label="#c3")]
    )


def test_what_a_private_channel_holds_changes_no_rank_nor_score_of_a_recall_elsewhere(notes: Notes) -> None:
    # The keyword weights were counted over every document, a private channel's too: how often a word was said
    # there moved the scores, and so the order, of what a recall elsewhere found.
    def hide() -> None:
        for number in range(6):
            notes.digest("G1", 2 + number, f"ramen ramen, said {number} times", private=True)
            notes.conversations.save_message(Message("G1", ts(START + timedelta(hours=5, minutes=number)), "U1", "ramen again", "Bob"))
        notes.memories.save(
            [Memory(Scope("G1"), Term.LONG, Audience("G1"), tuple(_bullet(n, f"ramen {n}", 6) for n in range(1, 5)), label="#g1")]
        )

    _recall_unmoved_by(notes, hide)


def test_what_a_channel_stored_as_private_holds_changes_no_rank_nor_score_of_a_recall_elsewhere(notes: Notes) -> None:
    # The index knew a note's audience, not its channel: the digests and memories of a channel now stored as private,
    # still kept for the workspace until the narrowing reaches them, counted in the keyword weights of a recall elsewhere.
    def hide() -> None:
        _workspace_notes_of_c3(notes)
        notes.conversations.set_channel_kind("C3", ChannelKind.PRIVATE)

    _recall_unmoved_by(notes, hide)


def test_what_a_channel_the_bot_has_left_holds_changes_no_rank_nor_score_of_a_recall_elsewhere(notes: Notes) -> None:
    # Nor did the notes of a channel the bot has left (hidden until it joins again).
    def hide() -> None:
        _workspace_notes_of_c3(notes)
        notes.conversations.leave_channel("C3")

    _recall_unmoved_by(notes, hide)


def test_what_a_channel_stored_as_private_said_in_memories_kept_for_the_workspace_moves_no_rank_nor_score_elsewhere(
    notes: Notes,
) -> None:
    # The workspace memory, and a channel's memory written while reading several channels at once, keep what #c3
    # (now stored as private) said until the narrowing reaches them; the index counted each as one document whose
    # terms held #c3's words too: how often #c3 had said a word moved the keyword weights of a search from #c1.
    notes.conversations.save_channel(Channel("C3", "c3", ChannelKind.PUBLIC))
    notes.digest("C1", 0, "ramen for lunch near the station")
    notes.digest("C2", 1, "the trip to tokyo is next month")
    notes.memos.add(MemoDraft.create("lunch", "ramen near the station", 3), Origin("C1", False, "U1"), "test")
    for minute, said in enumerate(["ramen at noon?", "tokyo is far", "meet at the station", "the ramen in tokyo was great"]):
        notes.conversations.save_message(Message("C1", ts(START + timedelta(minutes=minute)), "U1", said, "Alice"))

    def heard(number: int, text: str, *channels: str) -> Bullet:
        return replace(_bullet(number, text, number), heard_in=channels)

    def recalled(reader: str) -> tuple[str, list[tuple[str, float]]]:
        query = "ramen station tokyo"
        messages = notes.search.messages(query, reader, None, None, 5)
        found = notes.search.notes(query, reader, None, None, 5)
        memos = notes.search.memos(query, reader, None, 5)
        scores = [(h.memo.name, h.score) for h in memos] + [(h.message.text, h.score) for h in messages]
        return recall_message(messages, found, "en", timezone.utc), scores + [(h.label, h.score) for h in found]

    def remember(c3_said: str) -> None:
        """Remember, while #c3 is public, what it said, then store it as private (the narrowing not there yet)."""
        notes.conversations.set_channel_kind("C3", ChannelKind.PUBLIC)
        notes.memories.save(
            [
                Memory(Scope(), Term.LONG, WORKSPACE, (heard(1, "Bob lives in tokyo", "C1"), heard(2, c3_said, "C3"))),
                Memory(
                    Scope("C2"),
                    Term.LONG,
                    WORKSPACE,
                    (heard(1, "the station is being rebuilt", "C2"), heard(2, c3_said, "C2", "C3")),
                    label="#c2",
                ),
            ]
        )
        notes.conversations.set_channel_kind("C3", ChannelKind.PRIVATE)

    remember("a quiet week, nothing new")
    notes.index.sync()
    notes.index.warm()  # as the background does: every kind's vectors loaded, among which the weights are counted
    quiet = recalled("C1")
    remember("ramen ramen tokyo station ramen")
    assert recalled("C1") == quiet
    assert "ramen ramen" in recalled("C3")[0]  # still found where it may be read
