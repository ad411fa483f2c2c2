"""Japanese word vectors (words.py): words found by the longest match, and nearness of words sharing no character."""

from __future__ import annotations

import pytest

from myao2.infrastructure.search.words import word_vectors


def test_a_text_is_split_into_the_longest_words_of_the_vocabulary() -> None:
    words = word_vectors()
    (whole,) = words.words("新入社員")
    assert words.words("新入社員に教える")[0] == whole  # not 新入 and 社員
    assert words.words("新入") + words.words("社員") != (whole,)


def test_only_words_in_japanese_script_count() -> None:
    words = word_vectors()
    assert words.words("Who plays shogi? 123") == ()
    assert words.closeness("Who plays shogi?", ["将棋をする", "shogi"]) == [None, None]
    assert words.closeness("将棋", ["shogi", "将棋"]) == [None, pytest.approx(1.0, abs=1e-5)]


def test_a_text_with_a_word_of_like_meaning_is_nearer_than_one_without() -> None:
    near, far = word_vectors().closeness("犬を飼っている", ["ペットの世話をする", "会議の資料を作る"])
    assert near > far + 0.2


def test_a_text_holding_the_query_s_very_words_is_nearest() -> None:
    assert word_vectors().closeness("会議の資料", ["明日の会議の資料を作る"]) == [pytest.approx(1.0, abs=1e-5)]
