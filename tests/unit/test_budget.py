from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from myao2.domain.budget import cut_text, fit_items
from myao2.domain.tokens import estimate_tokens


def cut_marker(count: int) -> str:
    return f"…[{count} more]"


def dropped_marker(count: int) -> str:
    return f"({count} left out)"


def test_a_text_within_budget_is_unchanged() -> None:
    assert cut_text("short text", 10, cut_marker) == "short text"


def test_a_long_text_is_cut_with_a_marker_counting_what_was_left_out() -> None:
    text = "a" * 40_000

    cut = cut_text(text, 100, cut_marker)

    assert cut.startswith("a" * 300)
    kept = cut.index("…")
    assert cut[kept:] == cut_marker(40_000 - kept)
    assert estimate_tokens(cut) <= 100


def test_japanese_is_cut_by_its_own_token_count() -> None:
    text = "会議は明日です。" * 1000

    cut = cut_text(text, 50, cut_marker)

    assert estimate_tokens(cut) <= 50
    assert cut.startswith("会議は明日です。")
    assert 40 < cut.index("…") < 50  # about a character a token, where English would keep ~200


def test_a_budget_smaller_than_the_marker_leaves_the_marker_alone() -> None:
    assert cut_text("x" * 100, 1, cut_marker) == cut_marker(100)


@given(st.text(), st.integers(min_value=0, max_value=200))
def test_a_cut_text_fits_whenever_the_marker_does(text: str, budget: int) -> None:
    cut = cut_text(text, budget, cut_marker)

    if estimate_tokens(text) <= budget:
        assert cut == text
    else:
        assert any(cut == text[:k] + cut_marker(len(text) - k) for k in range(len(text)))
        if estimate_tokens(cut_marker(len(text))) <= budget:
            assert estimate_tokens(cut) <= budget


def test_items_within_budget_are_all_kept() -> None:
    assert fit_items(["a", "b"], 10, len, marker=dropped_marker) == ["a", "b"]


def test_the_first_items_are_dropped_first_and_a_marker_stands_in_their_place() -> None:
    items = ["one" * 10, "two" * 10, "three", "four"]

    fitted = fit_items(items, 9 + len(dropped_marker(2)), len, marker=dropped_marker)

    assert fitted == [dropped_marker(2), "three", "four"]


def test_the_last_items_are_dropped_first_when_asked() -> None:
    items = ["a" * 30, "b" * 30, "c" * 30]

    fitted = fit_items(items, 30 + len(dropped_marker(2)), len, drop="last", marker=dropped_marker)

    assert fitted == ["a" * 30, dropped_marker(2)]


def test_kept_items_are_never_dropped_even_over_budget() -> None:
    items = ["old", "x" * 50, "pinned" * 10, "new"]

    fitted = fit_items(items, 10, len, keep=lambda item: item.startswith("pinned"), marker=dropped_marker)

    assert "pinned" * 10 in fitted
    assert fitted[0] == dropped_marker(3)
    assert fitted == [dropped_marker(3), "pinned" * 10]


def test_the_marker_costs_against_the_budget() -> None:
    items = ["aaaa", "bbbb", "cccc"]

    fitted = fit_items(items, 8, len, marker=lambda n: "m" * 4)

    # dropping one item would leave 8 plus a 4-long marker: a second one has to go
    assert fitted == ["mmmm", "cccc"]


def test_without_a_marker_items_are_just_dropped() -> None:
    assert fit_items(["aa", "bb", "cc"], 4, len) == ["bb", "cc"]


@given(
    st.lists(st.text(alphabet="abk ", max_size=30), max_size=20),
    st.integers(min_value=0, max_value=200),
    st.sampled_from(["first", "last"]),
)
def test_fitted_items_keep_their_order_and_fit_unless_only_kept_ones_remain(
    items: list[str], budget: int, drop: str
) -> None:
    def keep(item: str) -> bool:
        return item.startswith("k")

    fitted = fit_items(items, budget, len, drop=drop, keep=keep, marker=dropped_marker)  # type: ignore[arg-type]

    originals = [item for item in fitted if not item.endswith(" left out)")]
    remaining = iter(items)
    assert all(any(item == other for other in remaining) for item in originals)  # a subsequence
    assert [i for i in items if keep(i)] == [i for i in originals if keep(i)]
    if sum(map(len, fitted)) > budget:
        assert all(keep(item) for item in originals)
