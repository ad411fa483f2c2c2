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


def test_a_long_text_is_counted_but_not_remembered() -> None:
    # Cutting a long Japanese text to a budget counts about twenty of its beginnings: remembering
    # them would keep thousands of long strings alive in a long-running bot.
    from myao2.domain import tokens
    from myao2.domain.budget import cut_text

    tokens._mixed_tokens.cache_clear()
    text = "会議" * 5000
    assert estimate_tokens(text) == 10_000
    cut_text(text, 3000, lambda left: f"…（{left}字略）")
    remembered = tokens._mixed_tokens.cache_info().currsize
    estimate_tokens("会議は明日です")
    assert tokens._mixed_tokens.cache_info().currsize == remembered + 1  # a short line is remembered
    assert remembered <= 2  # the markers, nothing of the long text
