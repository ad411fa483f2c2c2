"""The search index and the search use case over a real database, SQLite and PostgreSQL (a hashed-terms embedder stands in for the model)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from sqlalchemy import text

from myao2.application.search import Search, SearchError
from myao2.domain.conversation import Channel, ChannelKind, Message
from myao2.domain.memo import MemoChanges, MemoDraft, MemoError, Origin
from myao2.domain.visibility import WORKSPACE_VIEW
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.search import index as index_module
from myao2.infrastructure.search import vectors
from myao2.infrastructure.search.index import SearchIndex, keyword_bonus
from myao2.infrastructure.search.keywords import Reach, Within, keyword_table
from myao2.infrastructure.search.text import content_terms, fts_query, terms
from myao2.infrastructure.search.words import WORDS_FILE, WordVectors
from tests.clocks import ManualClock
from tests.fakes.embedder import HashEmbedder

PUBLIC = Origin("C1", user_id="U1")
OTHER_PUBLIC = Origin("C2", user_id="U2")
PRIVATE = Origin("D1", channel_private=True, user_id="U1")
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class World:
    """A database with both stores, an index and the search over them."""

    def __init__(self, url: str, embedder: HashEmbedder | None = None) -> None:
        self.engine = open_database(url)
        self.clock = ManualClock(START)
        self.memos = SqlMemoStore(self.engine, self.clock)
        self.conversations = SqlConversationStore(self.engine, self.clock)
        self.embedder = embedder or HashEmbedder()
        self.index = SearchIndex(self.engine, self.embedder, self.memos, self.conversations)
        self.search = Search(self.index, self.memos, self.conversations)
        for channel_id, kind in (("C1", ChannelKind.PUBLIC), ("C2", ChannelKind.PUBLIC), ("D1", ChannelKind.IM)):
            self.conversations.save_channel(Channel(channel_id, channel_id.lower(), kind))

    def close(self) -> None:
        self.engine.dispose()

    def memo(self, name: str, content: str, origin: Origin = PUBLIC) -> None:
        self.memos.add(MemoDraft.create(name, content, 3), origin, "test")
        self.clock.advance(60)

    def message(self, channel: str, text: str, at: datetime, thread_ts: str | None = None) -> Message:
        message = Message(channel, f"{at.timestamp():.6f}", "U1", text, "Alice", thread_ts=thread_ts)
        self.conversations.save_message(message)
        return message

    def memo_names(self, query: str, reader: str | None = None, before: datetime | None = None, limit: int = 5) -> list[str]:
        return [hit.memo.name for hit in self.search.memos(query, reader, before, limit)]

    def message_texts(
        self, query: str, reader: str | None = None, before: datetime | None = None, channel: str | None = None, limit: int = 5
    ) -> list[str]:
        return [hit.message.text for hit in self.search.messages(query, reader, before, channel, limit)]


@pytest.fixture
def world(database_url: str) -> Iterator[World]:
    world = World(database_url)
    yield world
    world.close()


def counted_clusterings(monkeypatch: pytest.MonkeyPatch) -> list[None]:
    """Collections past 5 rows are clustered and searched through their clusters; the list returned gains an entry
    per clustering built."""
    monkeypatch.setattr(vectors, "EXACT_ROWS", 5)
    monkeypatch.setattr(vectors, "_PROBE_MIN", 0)
    builds: list[None] = []
    build = vectors.Clustering.build

    def counted(clustering: vectors.Clustering) -> None:
        builds.append(None)
        build(clustering)

    monkeypatch.setattr(vectors.Clustering, "build", counted)
    return builds


# -- keyword terms -----------------------------------------------------------------


def test_japanese_is_split_into_bigrams_and_english_into_words() -> None:
    assert terms("明日の会議") == ["明日", "日の", "の会", "会議"]
    assert terms("Tanaka's RAMEN, 2 bowls") == ["tanaka", "s", "ramen", "2", "bowls"]
    assert terms("味") == ["味"]
    assert terms("ＡＢＣで会議") == ["abc", "で会", "会議"]  # full-width letters are folded
    assert terms("!!! ... ") == []


def test_a_question_s_content_terms_leave_out_the_hiragana_grammar_around_them() -> None:
    assert content_terms("もうすぐ結婚する人は？") == ["結婚"]
    assert content_terms("佐藤さんの好物は？") == ["佐藤", "好物"]
    assert content_terms("Wi-Fi パスワード") == ["wi", "fi", "パス", "スワ", "ワー", "ード"]
    assert content_terms("会議 会議") == ["会議"]
    assert content_terms("すし") == ["すし"]  # nothing else to go by: every term is kept


def test_a_memo_holding_part_of_a_query_gains_far_less_than_one_holding_all_of_it() -> None:
    assert keyword_bonus("memo", 1.0) == pytest.approx(4 * keyword_bonus("memo", 0.5))
    assert keyword_bonus("memo", 0.0) == 0.0


def test_a_query_is_quoted_so_fts_syntax_in_it_is_plain_text() -> None:
    assert fts_query(['a"b', "or", "a\"b"]) == '"a""b" OR "or"'
    assert fts_query([]) is None


def test_warming_the_memos_loads_the_word_vectors_so_no_memo_search_waits_for_them(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # They loaded on the first Japanese memo search (~0.3 s inside a person's first answer); the warm-up the index
    # worker runs at start loads them instead, off the event loop.
    monkeypatch.setattr(index_module, "word_vectors", functools.cache(WordVectors))  # none loaded yet
    loads: list[object] = []
    load = np.load
    monkeypatch.setattr(np, "load", lambda path, *args, **kwargs: loads.append(path) or load(path, *args, **kwargs))
    world.memo("welcome-party", "新入社員の歓迎会は金曜日")

    world.index.warm(["memo"])
    assert loads == [WORDS_FILE]
    assert world.memo_names("新人の歓迎会") == ["welcome-party"]
    assert loads == [WORDS_FILE]


def test_two_character_japanese_words_are_found_by_keyword(world: World) -> None:
    world.memo("meeting", "明日の会議は十時から")
    world.memo("miso", "味噌汁を作った")
    world.memo("other", "今日は晴れて暖かい")
    assert world.memo_names("会議", limit=1) == ["meeting"]
    assert world.memo_names("味噌", limit=1) == ["miso"]
    world.index.sync()
    with world.engine.connect() as connection:
        held, _, _ = keyword_table(world.engine).holders(connection, "会議", Reach((Within("memo", (), True, ("C1",), True, ()),)), 10)
    assert held == 1  # the keyword index itself matches the two-character word, and only there


class _Scripted:
    """An embedder whose cosine with the query is set per text (by a word it holds): the others' all equal."""

    model_id = "fake/scripted"

    def __init__(self, query: str, closer: dict[str, float]) -> None:
        self._query = query
        self._closer = closer

    def passages(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.query(t) for t in texts])

    def query(self, text: str) -> np.ndarray:
        if text == self._query:
            return np.array([1.0, 0.0], dtype=np.float32)
        cosine = next((c for word, c in self._closer.items() if word in text), 0.9)
        return np.array([cosine, (1 - cosine**2) ** 0.5], dtype=np.float32)


def test_a_memo_whose_words_mean_what_the_query_s_do_ranks_above_one_the_model_reads_a_little_closer(
    database_url: str,
) -> None:
    query = "犬を飼っている"
    world = World(database_url, _Scripted(query, {"会議": 0.905}))  # type: ignore[arg-type]
    try:
        world.memo("meeting", "会議の資料を作る")
        world.memo("pet", "ペットの世話をする")  # shares no character with the query
        assert world.memo_names(query) == ["pet", "meeting"]
    finally:
        world.close()


def test_a_japanese_query_s_words_never_push_down_a_memo_written_in_english(database_url: str) -> None:
    query = "犬を飼っている"
    world = World(database_url, _Scripted(query, {"notes": 0.905}))  # type: ignore[arg-type]
    try:
        world.memo("meeting", "会議の資料を作る")
        world.memo("english", "Meeting notes go in the shared folder")
        assert world.memo_names(query) == ["english", "meeting"]
    finally:
        world.close()


# -- visibility ----------------------------------------------------------------------


def test_a_private_memo_is_found_only_in_its_own_conversation(world: World) -> None:
    world.memo("secret", "the surprise party is on friday", PRIVATE)
    world.memo("public", "the team lunch is on friday", PUBLIC)
    assert world.memo_names("surprise party friday", reader="C1") == ["public"]
    assert world.memo_names("surprise party friday", reader="C2") == ["public"]
    assert world.memo_names("surprise party friday", reader="D1")[0] == "secret"
    assert set(world.memo_names("surprise party friday", reader=None)) == {"secret", "public"}


def test_a_private_channel_message_is_found_only_there_and_an_unknown_channel_nowhere(world: World) -> None:
    world.message("D1", "my bank pin is 4321", START)
    world.message("C1", "the bank is closed on sunday", START)
    world.message("CUNKNOWN", "bank holiday plans", START)
    assert world.message_texts("bank", reader="C1") == ["the bank is closed on sunday"]
    assert "my bank pin is 4321" in world.message_texts("bank", reader="D1")
    assert "bank holiday plans" not in world.message_texts("bank", reader="C1")
    assert "bank holiday plans" not in world.message_texts("bank", reader="D1")


def test_a_channel_turned_private_stops_showing_its_messages_elsewhere(world: World) -> None:
    world.message("C2", "the budget is ten thousand", START)
    assert world.message_texts("budget", reader="C1") == ["the budget is ten thousand"]
    world.conversations.save_channel(Channel("C2", "c2", ChannelKind.PRIVATE))
    assert world.message_texts("budget", reader="C1") == []


def _search_unmoved_by(world: World, hide: Callable[[], None]) -> None:
    """A search from #c1 and from the workspace view finds the same memos and messages, with the same scores, once
    `hide` stored what they may not read, the query's words in it many times."""
    world.memo("ramen-shop", "the ramen shop near the station", PUBLIC)
    world.memo("tokyo-trip", "our trip to tokyo next month", PUBLIC)
    world.memo("ramen-tokyo", "the best ramen in tokyo", OTHER_PUBLIC)
    world.message("C1", "ramen for lunch?", START)
    world.message("C1", "tokyo is far from here", START + timedelta(minutes=1))
    world.message("C2", "the ramen in tokyo was great", START + timedelta(minutes=2))
    world.message("C2", "see you at the station", START + timedelta(minutes=3))

    def seen(reader: str) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        memos = [(hit.memo.name, hit.score) for hit in world.search.memos("ramen station tokyo", reader, None, 5)]
        messages = [(hit.message.text, hit.score) for hit in world.search.messages("ramen station tokyo", reader, None, None, 5)]
        return memos, messages

    world.index.sync()
    world.index.warm()  # as the background does: every kind's vectors loaded, among which the weights are counted
    readers = ("C1", WORKSPACE_VIEW.conversation_id)
    before = {reader: seen(reader) for reader in readers}
    hide()
    assert {reader: seen(reader) for reader in readers} == before


def _japanese_memo_search_unmoved_by(world: World, hide: Callable[[], None]) -> None:
    """A memo search in Japanese from #c1 and from the workspace view finds the same memos, with the same scores (as
    an MCP client is shown them, 4 decimals: a float32 product over a larger matrix differs in its last bits), once
    `hide` stored memos they may not read, nearer the query than any."""
    world.memo("sato-lunch", "佐藤さんは担々麺に目がない", PUBLIC)
    world.memo("sato-desk", "佐藤さんの席は窓際", PUBLIC)
    world.memo("sato-english", "Sato likes noodles", PUBLIC)  # as near as the others are on average
    world.memo("suzuki-lunch", "鈴木さんは毎日お弁当を持ってくる", OTHER_PUBLIC)
    world.index.sync()
    world.index.warm()

    def seen(reader: str) -> list[tuple[str, float]]:
        return [(hit.memo.name, round(hit.score, 4)) for hit in world.search.memos("佐藤さんの好物は？", reader, None, 5)]

    readers = ("C1", WORKSPACE_VIEW.conversation_id)
    before = {reader: seen(reader) for reader in readers}
    hide()
    assert {reader: seen(reader) for reader in readers} == before


def test_what_a_dm_holds_changes_no_rank_nor_score_of_a_search_elsewhere(world: World) -> None:
    # The keyword weights (how rare each word of the query is) were counted over every document, a DM's too: how
    # often a word was said in DMs moved the scores (and ranks) a search elsewhere showed, e.g. to an MCP client.
    def hide() -> None:
        for number in range(6):
            world.memo(f"dm-{number}", f"ramen ramen number {number}", PRIVATE)
            world.message("D1", f"ramen again, number {number}", START + timedelta(hours=1, minutes=number))
        world.conversations.save_channel(Channel("C3", "c3", ChannelKind.PUBLIC))
        world.message("C3", "ramen station ramen", START + timedelta(hours=2))
        world.conversations.leave_channel("C3")  # nor what a channel the bot has left holds

    _search_unmoved_by(world, hide)
    assert world.memo_names("ramen", reader="D1")[0].startswith("dm-")  # the DM's own search finds its own


def test_what_a_dm_holds_in_japanese_changes_no_rank_nor_score_of_a_memo_search_elsewhere(world: World) -> None:
    # The best memos are reordered by how near their Japanese words are to the query's (WORD_WEIGHT): a DM's memos,
    # whose words are nearer still, must neither take part in that nor move what a search elsewhere shows.
    def hide() -> None:
        for number in range(3):
            world.memo(f"dm-{number}", f"佐藤さんの好物はラーメンと餃子 その{number}", PRIVATE)

    _japanese_memo_search_unmoved_by(world, hide)
    assert world.memo_names("佐藤さんの好物は？", reader="D1")[0].startswith("dm-")  # the DM's own search finds its own


def test_memos_of_a_channel_since_turned_private_change_no_rank_nor_score_of_a_search_elsewhere(world: World) -> None:
    # The index knew a memo's audience, not its channel: the workspace memos written in a channel since turned private
    # (hidden elsewhere until the narrowing reaches them) still counted in the keyword weights of a search elsewhere.
    def hide() -> None:
        world.conversations.save_channel(Channel("C3", "c3", ChannelKind.PUBLIC))
        for number in range(6):
            world.memo(f"c3-{number}", f"ramen ramen number {number}", Origin("C3", user_id="U1"))
        world.conversations.set_channel_kind("C3", ChannelKind.PRIVATE)  # the memos are not narrowed yet

    _search_unmoved_by(world, hide)
    assert world.memo_names("ramen", reader="C3")[0].startswith("c3-")  # the channel's own search finds them


def test_japanese_memos_of_a_channel_since_turned_private_change_no_rank_nor_score_of_a_memo_search_elsewhere(
    world: World,
) -> None:
    # Nor did they stay out of the word-vector reordering of the best memos (WORD_WEIGHT): more of them than it
    # reorders, nearer the query than any, left the memos a search elsewhere shows without it.
    def hide() -> None:
        world.conversations.save_channel(Channel("C3", "c3", ChannelKind.PUBLIC))
        for number in range(index_module.WORD_RERANKED + 1):
            world.memo(f"c3-{number}", f"佐藤さんの好物はラーメンと餃子 その{number}", Origin("C3", user_id="U1"))
        world.conversations.set_channel_kind("C3", ChannelKind.PRIVATE)

    _japanese_memo_search_unmoved_by(world, hide)
    assert world.memo_names("佐藤さんの好物は？", reader="C3")[0].startswith("c3-")


def test_a_search_counts_every_document_indexed_before_it_as_an_index_loaded_afresh_does(world: World) -> None:
    # Each kind's loaded vectors tell the keyword weights where its documents are (the scopes and channels listed in
    # the SQL) and how many there are: a kind not searched was known as of its own last search, so a message just
    # indexed (in a new channel or not) moved no weight of a memo search until a message search read it.
    world.memo("ramen-shop", "the ramen shop near the station", PUBLIC)
    world.memo("tokyo-trip", "our trip to tokyo next month", PUBLIC)
    world.message("C1", "ramen for lunch?", START)
    world.message("C2", "see you at the station", START + timedelta(minutes=1))
    world.index.sync()
    world.index.warm()
    query = "ramen station tokyo"

    def seen(search: Search) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        memos = [(hit.memo.name, round(hit.score, 4)) for hit in search.memos(query, "C1", None, 5)]
        messages = [(hit.message.text, round(hit.score, 4)) for hit in search.messages(query, "C1", None, None, 5)]
        return memos, messages

    seen(world.search)
    world.conversations.save_channel(Channel("C3", "c3", ChannelKind.PUBLIC))
    for number in range(3):
        world.message("C3", f"ramen in tokyo, day {number}", START + timedelta(hours=1, minutes=number))
        world.message("C1", f"ramen again, day {number}", START + timedelta(hours=2, minutes=number))
    world.memo("c3-ramen", "the ramen place c3 likes", Origin("C3", user_id="U1"))
    found = seen(world.search)
    afresh = SearchIndex(world.engine, world.embedder, world.memos, world.conversations)
    afresh.warm()
    assert found == seen(Search(afresh, world.memos, world.conversations))
    assert "ramen in tokyo, day 0" in [text for text, _ in found[1]]


def test_a_channel_filter_keeps_to_that_channel(world: World) -> None:
    world.message("C1", "deploy on monday", START)
    world.message("C2", "deploy on tuesday", START)
    assert world.message_texts("deploy", reader="C1", channel="C2") == ["deploy on tuesday"]
    assert world.search.channel_named("#c2", "C1") == "C2"
    with pytest.raises(SearchError):
        world.search.channel_named("d1", "C1")  # a DM is unknown from elsewhere, as if it did not exist


def test_a_channel_name_slack_gave_again_after_a_deletion_means_the_channel_bearing_it_now(world: World) -> None:
    # The deleted channel, stored first, was the one found by its name: `myao2 search --channel c2` searched it.
    world.conversations.channel_deleted("C2")
    world.conversations.save_channel(Channel("C9", "c2", ChannelKind.PUBLIC))
    assert world.search.channel_named("#c2", None) == "C9"
    assert world.search.channel_named("C2", None) == "C2"  # its id still names it


# -- time cutoff -----------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    offsets=st.lists(st.integers(0, 10_000), min_size=1, max_size=15),
    cutoffs=st.lists(st.integers(-100, 10_100), min_size=2, max_size=5),
)
def test_nothing_after_the_cutoff_is_returned_and_results_grow_with_it(
    new_database: Callable[[], str], offsets: list[int], cutoffs: list[int]
) -> None:
    world = World(new_database())
    posted = {}
    for index, offset in enumerate(offsets):
        at = START + timedelta(seconds=offset, microseconds=index)
        posted[f"note {index} about the release"] = at
        world.message("C1", f"note {index} about the release", at)
    previous: set[str] = set()
    for cutoff in sorted(cutoffs):
        before = START + timedelta(seconds=cutoff)
        found = set(world.message_texts("release", reader="C1", before=before, limit=20))
        assert all(posted[text] <= before for text in found)
        assert found == {text for text, at in posted.items() if at <= before}
        assert previous <= found
        previous = found
    world.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    histories=st.lists(
        st.lists(st.tuples(st.sampled_from(["edit", "toggle"]), st.integers(1, 500)), max_size=4),
        min_size=1,
        max_size=4,
    ),
    starts=st.lists(st.integers(0, 1000), min_size=4, max_size=4),
    cutoffs=st.lists(st.integers(-10, 3100), min_size=1, max_size=6),
)
def test_a_memo_is_shown_as_it_was_at_the_cutoff_and_nothing_written_later_is_returned(
    new_database: Callable[[], str],
    histories: list[list[tuple[str, int]]],
    starts: list[int],
    cutoffs: list[int],
) -> None:
    world = World(new_database())
    events = []  # (second, memo, action); each memo's own actions in order, after its add
    for memo, history in enumerate(histories):
        at = starts[memo]
        events.append((at, memo, "add"))
        for action, gap in history:
            at += gap
            events.append((at, memo, action))
    states: dict[str, list[tuple[int, str | None]]] = {}  # each memo's (second, content or None when removed)
    for second, memo, action in sorted(events):
        world.clock.current = START + timedelta(seconds=second)
        name, content = f"m{memo}", f"note m{memo} written{second}"
        if action == "add":
            world.memos.add(MemoDraft.create(name, content, 3), PUBLIC, "test")
        elif action == "edit" and states[name][-1][1] is not None:
            world.memos.edit(name, MemoChanges.create(content=content), None, "test")
        elif action == "toggle" and states[name][-1][1] is not None:
            world.memos.remove(name, None, "test")
            content = None
        elif action == "toggle":
            world.memos.restore(name, "test")
            content = next(c for _, c in reversed(states[name]) if c is not None)
        else:
            continue
        states.setdefault(name, []).append((second, content))
    for cutoff in cutoffs:
        before = START + timedelta(seconds=cutoff)
        found = {hit.memo.name: hit.memo.content for hit in world.search.memos("note", "C1", before, 20)}
        for content in found.values():
            assert int(content.rsplit("written", 1)[1]) <= cutoff  # nothing written after the cutoff
        expected = {}
        for name, history in states.items():
            then = [content for second, content in history if second <= cutoff]
            if then and then[-1] is not None and history[-1][1] is not None:  # live then, and not removed since
                expected[name] = then[-1]
        assert found == expected
    world.close()


def test_a_memo_narrowed_after_the_cutoff_is_not_shown_to_the_workspace_even_as_it_was(world: World) -> None:
    world.memo("plan", "the offsite is in hakone")
    cutoff = world.clock.now()
    world.clock.advance(60)
    world.memos.narrow("C1", "test")
    assert world.memo_names("offsite hakone", reader="C2", before=cutoff) == []
    assert world.memo_names("offsite hakone", reader="C1", before=cutoff) == ["plan"]


def test_the_messages_around_a_hit_stop_at_the_cutoff(world: World) -> None:
    for minute, text in enumerate(["one", "two", "the launch date is march", "four", "five"]):
        world.message("C1", text, START + timedelta(minutes=minute))
    hits = world.search.messages("launch date", "C1", START + timedelta(minutes=3), None, 1)
    assert [m.text for m in hits[0].context] == ["one", "two", "the launch date is march", "four"]


def test_the_messages_around_a_hit_are_those_of_its_own_flow(world: World) -> None:
    """A reply comes with its thread (the parent first), a top-level message with the channel's top level."""
    at = [START + timedelta(minutes=m) for m in range(8)]
    parent = world.message("C1", "who brings the cake", at[0], thread_ts=f"{at[0].timestamp():.6f}")
    world.message("C1", "top one", at[1])
    world.message("C1", "i will bring the strawberry cake", at[2], thread_ts=parent.ts)
    world.message("C1", "the budget review is on monday", at[3])
    world.message("C1", "great, thanks", at[4], thread_ts=parent.ts)
    world.message("C2", "elsewhere", at[5])
    world.message("C1", "top two", at[6])
    reply = world.search.messages("strawberry cake", "C1", None, None, 1)[0]
    assert [m.text for m in reply.context] == ["who brings the cake", "i will bring the strawberry cake", "great, thanks"]
    top = world.search.messages("budget review monday", "C1", None, None, 1)[0]
    assert [m.text for m in top.context] == ["who brings the cake", "top one", "the budget review is on monday", "top two"]


# -- index sync ---------------------------------------------------------------------------


def test_the_database_itself_queues_every_change_even_one_made_behind_the_stores_back(world: World) -> None:
    message = world.message("C1", "the quarterly numbers look fine", START)
    world.memo("tea", "alice drinks green tea")
    world.index.sync()
    assert world.index.pending() == 0
    world.conversations.edit_message("C1", message.ts, "the quarterly numbers were revised")
    world.memos.edit("tea", MemoChanges.create(content="alice drinks black coffee"), None, "test")
    with world.engine.connect() as connection:
        queued = connection.execute(text("SELECT kind FROM search_queue ORDER BY id")).scalars().all()
    assert queued == ["message", "memo"]
    assert world.message_texts("quarterly numbers revised") == ["the quarterly numbers were revised"]
    with world.engine.connect() as connection:
        memo_text = connection.execute(text("SELECT text FROM search_docs WHERE kind = 'memo'")).scalar_one()
    assert "black coffee" in memo_text and "green" not in memo_text
    with world.engine.begin() as connection:  # no store involved: the triggers still see it
        connection.execute(text("DELETE FROM messages"))
    assert world.index.pending() == 1
    assert world.message_texts("quarterly numbers revised") == []
    assert world.index.pending() == 0



WORDS = st.sampled_from(["ramen", "coffee", "会議", "味噌", "deploy", "猫", "friday", "budget"])


class IndexFollowsTheData(RuleBasedStateMachine):
    """After any sequence of changes, search never returns a removed memo or a deleted message,
    and finds every live one by its exact content, a DM's message only from that DM."""

    def __init__(self, new_database: Callable[[], str]) -> None:
        super().__init__()
        self.new_database = new_database

    @initialize()
    def setup(self) -> None:
        self.world = World(self.new_database())
        self.counter = 0
        self.live_memos: dict[str, str] = {}
        self.removed_memos: dict[str, str] = {}
        self.live_messages: dict[str, str] = {}
        self.deleted_messages: set[str] = set()
        self.channels: dict[str, str] = {}

    def _content(self, words: list[str]) -> str:
        self.counter += 1
        return " ".join(words) + f" item{self.counter}"

    @rule(words=st.lists(WORDS, max_size=3))
    def add_memo(self, words: list[str]) -> None:
        name = f"m{self.counter}"
        content = self._content(words)
        self.world.memo(name, content)
        self.live_memos[name] = content

    @rule(data=st.data(), words=st.lists(WORDS, max_size=3))
    def edit_memo(self, data: st.DataObject, words: list[str]) -> None:
        if not self.live_memos:
            return
        name = data.draw(st.sampled_from(sorted(self.live_memos)))
        content = self._content(words)
        self.world.memos.edit(name, MemoChanges.create(content=content), None, "test")
        self.live_memos[name] = content

    @rule(data=st.data())
    def remove_memo(self, data: st.DataObject) -> None:
        if not self.live_memos:
            return
        name = data.draw(st.sampled_from(sorted(self.live_memos)))
        self.world.memos.remove(name, None, "test")
        self.removed_memos[name] = self.live_memos.pop(name)

    @rule(data=st.data())
    def restore_memo(self, data: st.DataObject) -> None:
        if not self.removed_memos:
            return
        name = data.draw(st.sampled_from(sorted(self.removed_memos)))
        try:
            self.world.memos.restore(name, "test")
        except MemoError:
            return
        self.live_memos[name] = self.removed_memos.pop(name)

    @rule(channel=st.sampled_from(["C1", "D1"]), words=st.lists(WORDS, max_size=3))
    def save_message(self, channel: str, words: list[str]) -> None:
        text = self._content(words)
        message = self.world.message(channel, text, START + timedelta(seconds=self.counter))
        self.live_messages[message.ts] = text
        self.channels[message.ts] = channel

    @rule(data=st.data(), words=st.lists(WORDS, max_size=3))
    def edit_message(self, data: st.DataObject, words: list[str]) -> None:
        if not self.live_messages:
            return
        ts = data.draw(st.sampled_from(sorted(self.live_messages)))
        text = self._content(words)
        self.world.conversations.edit_message(self.channels[ts], ts, text)
        self.live_messages[ts] = text

    @rule(data=st.data())
    def delete_message(self, data: st.DataObject) -> None:
        if not self.live_messages:
            return
        ts = data.draw(st.sampled_from(sorted(self.live_messages)))
        self.world.conversations.delete_message(self.channels[ts], ts)
        del self.live_messages[ts]
        self.deleted_messages.add(ts)

    @rule()
    def sync_in_the_background(self) -> None:
        self.world.index.sync()

    def _found_first(self, ts: str, hits: list) -> None:
        """The message is found first, ahead of the message after it, whose window holds its text."""
        assert hits and hits[0].message.ts == ts

    @invariant()
    def nothing_gone_is_found_and_everything_live_is(self) -> None:
        if not hasattr(self, "world"):
            return
        for name, content in self.live_memos.items():
            found = self.world.memo_names(content, limit=20)
            assert found[0] == name
            assert not set(found) & set(self.removed_memos)
        for ts, text in self.live_messages.items():
            hits = self.world.search.messages(text, None, None, None, 20)
            self._found_first(ts, hits)
            assert not {hit.message.ts for hit in hits} & self.deleted_messages
            own = self.world.search.messages(text, self.channels[ts], None, None, 20)
            self._found_first(ts, own)  # found from its own conversation
            elsewhere = self.world.search.messages(text, "C2", None, None, 20)
            assert {hit.message.channel_id for hit in elsewhere} <= {"C1"}  # a DM's message never leaves it
        for content in self.removed_memos.values():
            assert not set(self.world.memo_names(content, limit=20)) & set(self.removed_memos)


    def teardown(self) -> None:
        if hasattr(self, "world"):
            self.world.close()


def test_the_index_follows_the_data(new_database: Callable[[], str]) -> None:
    run_state_machine_as_test(
        lambda: IndexFollowsTheData(new_database), settings=settings(max_examples=15, stateful_step_count=12, deadline=None)
    )


# -- rebuilding -----------------------------------------------------------------------------


def test_a_new_model_re_embeds_everything_by_itself(database_url: str) -> None:
    first = World(database_url, HashEmbedder("model-a"))
    first.memo("tea", "alice drinks green tea")
    first.message("C1", "hello there", START)
    first.index.sync()
    second = World(database_url, HashEmbedder("model-b"))
    assert second.memo_names("green tea") == ["tea"]  # by keyword meanwhile: a search waits for no re-embedding
    assert second.embedder.embedded == 0
    second.index.sync()  # the background's work
    assert second.embedder.embedded == 2
    with second.engine.connect() as connection:
        assert connection.execute(text("SELECT DISTINCT model FROM search_docs")).all() == [("model-b",)]
    first.close()
    second.close()


def test_rebuild_re_embeds_everything_and_reports_progress(world: World) -> None:
    for index in range(40):
        world.memo(f"m{index}", f"memo number {index}")
    world.index.sync()
    reports: list[tuple[int, int]] = []
    assert world.index.rebuild(lambda done, total: reports.append((done, total))) == 40
    assert reports[-1] == (40, 40) and len(reports) == 3  # batches of 16
    assert world.memo_names("memo number 7", limit=1) == ["m7"]


def test_bad_requests_are_refused_without_searching(world: World) -> None:
    for query, limit in (("", 5), ("  ", 5), ("x" * 501, 5), (None, 5), ("ok", 0), ("ok", 21), ("ok", True), ("ok", "5")):
        with pytest.raises(SearchError):
            world.search.memos(query, None, None, limit)


# -- frequent terms ---------------------------------------------------------------------


def test_a_frequent_terms_share_is_measured_again_after_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(f"sqlite:///{tmp_path / 'memory.db'}")
    monkeypatch.setattr(index_module, "FREQUENT", 2)
    world.memo("a", "tea")
    world.memo("b", "tea")
    world.index.sync()
    measured: list[str] = []
    holders = world.index._keywords.holders

    def counted(connection: Any, term: str, reach: Reach, limit: int) -> tuple[int, int | None, int | None]:
        measured.append(term)
        return holders(connection, term, reach, limit)

    monkeypatch.setattr(world.index._keywords, "holders", counted)
    seconds = [1000.0]
    monkeypatch.setattr(index_module, "_monotonic", lambda: seconds[0])
    world.memo_names("tea")
    world.memo_names("tea")
    assert measured == ["tea"]  # kept
    seconds[0] += index_module.FREQUENT_SHARE_SECONDS + 1
    world.memo_names("tea")
    assert measured == ["tea", "tea"]  # measured again
    world.close()


def test_a_memo_search_does_not_wait_for_the_messages_vectors_to_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    world = World(f"sqlite:///{tmp_path / 'memory.db'}")
    world.memo("tea", "alice drinks green tea")
    world.message("C1", "hello there", START)
    world.index.sync()
    loading, loaded = threading.Event(), threading.Event()
    refreshed = world.index._refreshed

    def slow(kind: str) -> Any:
        if kind == "message":  # a million messages' vectors take a while
            loading.set()
            assert loaded.wait(120)
        return refreshed(kind)

    monkeypatch.setattr(world.index, "_refreshed", slow)
    warming = threading.Thread(target=world.index.warm)
    warming.start()
    assert loading.wait(10)
    found: list[list[str]] = []
    searching = threading.Thread(target=lambda: found.append(world.memo_names("green tea")))
    searching.start()
    searching.join(60)  # at once unless it waits for the messages' vectors: seconds are no bound on a busy machine
    answered_while_loading = found == [["tea"]]
    loaded.set()
    warming.join()
    searching.join()
    assert answered_while_loading
    world.close()


def test_numpys_blas_runs_on_one_thread_once_the_index_has_searched(tmp_path: Path) -> None:
    """The index imports numpy only when it first needs vectors, and from then on BLAS is single-threaded (in a
    process of its own: the limit is process-wide, and numpy may be loaded already here)."""
    code = f"""
import sys
from threadpoolctl import threadpool_info
from myao2.application.search import Search
from myao2.domain.conversation import Channel
from myao2.domain.memo import MemoDraft, Origin
from myao2.infrastructure.clock import SystemClock
from myao2.infrastructure.db.conversation_store import SqlConversationStore
from myao2.infrastructure.db.engine import open_database
from myao2.infrastructure.db.memo_store import SqlMemoStore
from myao2.infrastructure.search.index import SearchIndex
assert "numpy" not in sys.modules
from tests.fakes.embedder import HashEmbedder
engine = open_database({f"sqlite:///{tmp_path / 'blas.db'}"!r})
memos, conversations = SqlMemoStore(engine, SystemClock()), SqlConversationStore(engine, SystemClock())
conversations.save_channel(Channel("C1", "general"))
memos.add(MemoDraft.create("ramen", "ramen on friday", 3), Origin("C1", user_id="U1"), "test")
hits = Search(SearchIndex(engine, HashEmbedder(), memos, conversations), memos, conversations).memos("ramen", "C1", None)
assert [hit.memo.name for hit in hits] == ["ramen"]
print(sorted({{pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}}))
"""
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[1]"
