import math
import unicodedata

from myao2.domain.tokens import estimate_tokens


def test_english_is_about_four_characters_a_token() -> None:
    assert estimate_tokens("a" * 400) == 100


def test_japanese_counts_a_token_per_character() -> None:
    assert estimate_tokens("会議は明日です") == 7


def test_mixed_text_adds_both() -> None:
    assert estimate_tokens("明日 meeting") == 2 + 2


def test_empty_text_is_free() -> None:
    assert estimate_tokens("") == 0


def test_every_wide_character_counts_as_unicode_says() -> None:
    # Halfwidth katakana and the ideographic space take the width Unicode gives them,
    # also when a character comes back (its width is then remembered).
    text = "ｶﾀｶﾅ　全角ＡＢ é ü 漢字 ｶ 漢"
    wide = sum(1 for ch in text if unicodedata.east_asian_width(ch) in ("W", "F"))
    assert wide == 8
    for _ in range(2):
        assert estimate_tokens(text) == wide + math.ceil((len(text) - wide) / 4)
