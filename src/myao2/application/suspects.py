"""What the batch jobs remember of the model calls that failed, so that one member the model refuses for good (a
content filter, say) holds back no other for ever.

A member is what a call reads about: a channel, a person. After a failed call the next rounds begin after its
first member (`LastFailure`); the jobs that read many members in one call also read those of failed calls last,
each in calls of their own, until read (`Suspects`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")


class LastFailure:
    """The first member of the last call that failed: the next rounds read those after it first."""

    def __init__(self) -> None:
        self._first = ""

    def failed(self, members: Sequence[str]) -> None:
        """A call reading `members` (one at least) failed."""
        self._first = members[0]

    def rotated(self, items: Iterable[T], member: Callable[[T], str]) -> list[T]:
        """`items` with those whose member comes after the last failed call's first before the others, each part
        in its order."""
        return sorted(items, key=lambda item: member(item) <= self._first)


class Suspects(LastFailure):
    """And the members of failed calls not read since (suspects): they are read last, each in calls of its own."""

    def __init__(self) -> None:
        super().__init__()
        self._suspects: set[str] = set()

    def __contains__(self, member: str) -> bool:
        return member in self._suspects

    def failed(self, members: Sequence[str]) -> None:
        super().failed(members)
        self._suspects.update(members)

    def read(self, members: Iterable[str]) -> None:
        """A call reading `members` succeeded: they are suspects no more."""
        self._suspects.difference_update(members)

    def apart(self, member: str, other: str) -> bool:
        """Whether two members are read in separate calls: they differ, and one is a suspect."""
        return member != other and (member in self._suspects or other in self._suspects)

    def order(self, items: Iterable[T], member: Callable[[T], str]) -> list[T]:
        """`items` in their order but for the suspects' last: those after the last failed call's first member
        first, then by member (each member's items in their order)."""

        def place(item: T) -> tuple[bool, bool, str]:
            of = member(item)
            return (True, of <= self._first, of) if of in self._suspects else (False, False, "")

        return sorted(items, key=place)

    def calls(
        self,
        items: Iterable[T],
        member: Callable[[T], str],
        cost: Callable[[T], int],
        max_tokens: int,
        most: int | None = None,
    ) -> list[list[T]]:
        """`items` in `order`, in consecutive calls of at most `max_tokens` of their cost (one item at least) and
        `most` items, those of a suspect in calls of its own."""
        calls: list[list[T]] = []
        size = 0
        for item in self.order(items, member):
            item_cost = cost(item)
            if (
                not calls
                or size + item_cost > max_tokens
                or (most is not None and len(calls[-1]) >= most)
                or self.apart(member(calls[-1][0]), member(item))
            ):
                calls.append([])
                size = 0
            calls[-1].append(item)
            size += item_cost
        return calls
