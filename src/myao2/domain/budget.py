"""Fitting what a prompt shows into a token budget, leaving a visible marker where something was left out.

Any prompt section that can grow (the conversation, memory summaries, search hits)
fits itself with these two helpers; tokens are counted with `estimate_tokens`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from myao2.domain.tokens import estimate_tokens

T = TypeVar("T")


def cut_text(text: str, max_tokens: int, marker: Callable[[int], str]) -> str:
    """`text` if it fits in `max_tokens`, else its beginning followed by `marker(characters left out)`.

    The result fits in `max_tokens` whenever the marker alone does; a budget
    smaller than the marker gives the marker alone.
    """
    if estimate_tokens(text) <= max_tokens:
        return text
    room = max_tokens - estimate_tokens(marker(len(text)))  # the longest count the marker can show
    keep = _prefix_within(text, room)
    return text[:keep] + marker(len(text) - keep)


def _prefix_within(text: str, max_tokens: int) -> int:
    """The length of the longest beginning of `text` whose estimate is at most `max_tokens`."""
    if max_tokens <= 0:
        return 0
    low, high = 0, min(len(text), 4 * max_tokens)  # no character costs less than a quarter token
    while low < high:  # the estimate only grows with the length: search for the longest that fits
        middle = (low + high + 1) // 2
        if estimate_tokens(text[:middle]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return low


def fit_items(
    items: Sequence[T],
    max_tokens: int,
    cost: Callable[[T], int],
    *,
    drop: Literal["first", "last"] = "first",
    keep: Callable[[T], bool] | None = None,
    marker: Callable[[int], T] | None = None,
) -> list[T]:
    """`items` in their order, whole ones dropped from the `drop` end until the rest cost at most `max_tokens`.

    Items for which `keep` is true are never dropped, so the result can still be
    over budget when they alone are. When anything is dropped, `marker(count
    dropped)` stands where the first dropped item stood, and its own cost counts
    against the budget.
    """
    costs = [cost(item) for item in items]
    total = sum(costs)
    if total <= max_tokens:
        return list(items)
    order = range(len(items)) if drop == "first" else range(len(items) - 1, -1, -1)
    dropped: list[int] = []
    for index in order:
        marker_cost = cost(marker(len(dropped))) if marker is not None and dropped else 0
        if total + marker_cost <= max_tokens:
            break
        if keep is not None and keep(items[index]):
            continue
        dropped.append(index)
        total -= costs[index]
    if not dropped:
        return list(items)
    gone = set(dropped)
    result: list[T] = []
    for index, item in enumerate(items):
        if index == dropped[0] and marker is not None:
            result.append(marker(len(dropped)))
        if index not in gone:
            result.append(item)
    return result
