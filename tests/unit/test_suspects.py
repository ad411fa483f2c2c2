"""What the batch jobs remember of failed model calls: where the next rounds begin, and the suspects read last."""

from __future__ import annotations

from myao2.application.suspects import LastFailure, Suspects


def same(member: str) -> str:
    return member


def test_before_any_failure_the_order_is_kept() -> None:
    last, suspects = LastFailure(), Suspects()
    assert last.rotated(["a", "b", "c"], same) == ["a", "b", "c"]
    assert suspects.order(["c", "a", "b"], same) == ["c", "a", "b"]


def test_the_next_rounds_begin_after_the_first_member_of_the_last_failed_call() -> None:
    last = LastFailure()
    last.failed(["b", "a"])
    assert last.rotated(["a", "b", "c", "d"], same) == ["c", "d", "a", "b"]
    last.failed(["c"])
    assert last.rotated(["a", "b", "c", "d"], same) == ["d", "a", "b", "c"]


def test_the_members_of_a_failed_call_come_last_those_after_its_first_first() -> None:
    suspects = Suspects()
    suspects.failed(["c", "a", "d"])
    assert "a" in suspects and "b" not in suspects
    assert suspects.order(["e", "d", "c", "b", "a"], same) == ["e", "b", "d", "a", "c"]


def test_a_member_read_is_a_suspect_no_more_but_the_next_rounds_still_begin_after_the_failure() -> None:
    suspects = Suspects()
    suspects.failed(["b", "c"])
    suspects.read(["b"])
    assert "b" not in suspects and "c" in suspects
    assert suspects.order(["c", "b", "a"], same) == ["b", "a", "c"]
    assert suspects.rotated(["a", "b", "c"], same) == ["c", "a", "b"]


def test_a_suspect_is_kept_apart_from_every_other_member_but_not_from_itself() -> None:
    suspects = Suspects()
    suspects.failed(["s"])
    assert suspects.apart("s", "a") and suspects.apart("a", "s")
    assert not suspects.apart("s", "s")
    assert not suspects.apart("a", "b")


def test_calls_are_filled_up_to_the_budget_and_the_count_with_one_item_at_least() -> None:
    items = [("a", 3), ("b", 3), ("c", 5), ("d", 1), ("e", 1), ("f", 1)]
    calls = Suspects().calls(items, lambda item: item[0], lambda item: item[1], max_tokens=6, most=2)
    assert [[name for name, _ in call] for call in calls] == [["a", "b"], ["c", "d"], ["e", "f"]]
    big = Suspects().calls([("a", 9), ("b", 1)], lambda item: item[0], lambda item: item[1], max_tokens=6)
    assert [[name for name, _ in call] for call in big] == [["a"], ["b"]]


def test_a_suspects_items_share_calls_only_with_each_other_after_the_rest() -> None:
    suspects = Suspects()
    suspects.failed(["b"])
    items = [("a", 1), ("b", 1), ("b", 1), ("c", 1), ("b", 1)]
    calls = suspects.calls(items, lambda item: item[0], lambda item: item[1], max_tokens=2)
    assert [[name for name, _ in call] for call in calls] == [["a", "c"], ["b", "b"], ["b"]]
