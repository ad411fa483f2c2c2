from myao2.domain.tokens import estimate_tokens


def test_english_is_about_four_characters_a_token() -> None:
    assert estimate_tokens("a" * 400) == 100


def test_japanese_counts_a_token_per_character() -> None:
    assert estimate_tokens("会議は明日です") == 7


def test_mixed_text_adds_both() -> None:
    assert estimate_tokens("明日 meeting") == 2 + 2


def test_empty_text_is_free() -> None:
    assert estimate_tokens("") == 0
