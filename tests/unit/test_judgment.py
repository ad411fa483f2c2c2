"""The wait before joining, how long a judgment stands, and how lively a channel is."""

from __future__ import annotations

from datetime import timedelta

import pytest

from myao2.domain.judgment import Judgment, SkipPolicy, WaitPolicy, messages_per_minute

THRESHOLDS = [(1.0, 0.2), (0.5, 0.4), (0.1, 0.7)]  # the shipped defaults


def policy(
    base: float = 300.0,
    jitter: float = 0.0,
    dynamic: bool = True,
    floor: float = 0.0,
    thresholds: list[tuple[float, float]] = THRESHOLDS,
) -> WaitPolicy:
    return WaitPolicy(
        min_wait_seconds=base, jitter_ratio=jitter, dynamic=dynamic, thresholds=thresholds, floor_seconds=floor
    )


def seconds(wait: timedelta) -> float:
    return wait.total_seconds()


class TestWaitPolicy:
    def test_without_jitter_the_wait_is_the_configured_one(self) -> None:
        assert seconds(policy(jitter=0).wait(0.0, "C1/None/1.0")) == 300

    def test_jitter_stays_within_the_ratio_and_reaches_both_sides(self) -> None:
        waits = [seconds(policy(jitter=0.3).wait(0.0, f"C1/None/{i}.000100")) for i in range(500)]
        assert all(210 <= w <= 390 for w in waits)
        assert min(waits) < 230 and max(waits) > 370, "jitter should spread over the whole range"
        assert len(set(waits)) > 400

    def test_jitter_is_stable_for_one_seed_and_differs_between_seeds(self) -> None:
        wait = policy(jitter=0.3)
        first = wait.wait(0.0, "C1/1700000000.000100/1700000001.000200")
        assert all(wait.wait(0.0, "C1/1700000000.000100/1700000001.000200") == first for _ in range(20))
        assert wait.wait(0.0, "C1/1700000000.000100/1700000002.000300") != first

    @pytest.mark.parametrize(
        ("rate", "expected"),
        [
            (0.0, 300),
            (0.09, 300),
            (0.1, 210),  # 0.7 at exactly the lowest threshold
            (0.49, 210),
            (0.5, 120),  # 0.4
            (0.99, 120),
            (1.0, 60),  # 0.2
            (30.0, 60),
        ],
    )
    def test_each_threshold_applies_its_multiplier(self, rate: float, expected: float) -> None:
        assert seconds(policy().wait(rate, "seed")) == pytest.approx(expected)

    def test_threshold_order_in_the_config_does_not_matter(self) -> None:
        shuffled = policy(thresholds=[(0.1, 0.7), (1.0, 0.2), (0.5, 0.4)])
        for rate in (0.0, 0.1, 0.5, 1.0, 2.0):
            assert shuffled.wait(rate, "s") == policy().wait(rate, "s")

    def test_the_floor_stops_the_shortening(self) -> None:
        floored = policy(base=300, floor=100)
        assert seconds(floored.wait(1.0, "s")) == 100  # 60 would be below the floor
        assert seconds(floored.wait(0.5, "s")) == 120  # above the floor: untouched
        assert seconds(floored.wait(0.0, "s")) == 300

    def test_a_configured_wait_below_the_floor_is_used_as_it_is(self) -> None:
        short = policy(base=30, floor=60)
        assert seconds(short.wait(0.0, "s")) == 30
        assert seconds(short.wait(1.0, "s")) == 30  # not shortened to 6, not raised to 60

    def test_disabled_dynamic_wait_ignores_liveliness(self) -> None:
        static = policy(dynamic=False)
        assert static.multiplier(10.0) == 1.0
        assert seconds(static.wait(10.0, "s")) == 300


class TestSkipPolicy:
    SKIP = SkipPolicy(
        thresholds=[(0.7, timedelta(hours=1)), (0.9, timedelta(hours=12))],
        default=timedelta(minutes=10),
    )

    @pytest.mark.parametrize(
        ("confidence", "holds"),
        [
            (1.0, timedelta(hours=12)),
            (0.9, timedelta(hours=12)),
            (0.89, timedelta(hours=1)),
            (0.7, timedelta(hours=1)),
            (0.69, timedelta(minutes=10)),
            (0.0, timedelta(minutes=10)),
        ],
    )
    def test_surer_judgments_hold_longer(self, confidence: float, holds: timedelta) -> None:
        assert self.SKIP.holds_for(confidence) == holds

    def test_without_thresholds_everything_holds_for_the_default(self) -> None:
        assert SkipPolicy(thresholds=[], default=timedelta(seconds=5)).holds_for(1.0) == timedelta(seconds=5)


class TestMessagesPerMinute:
    def test_is_the_rate_over_thirty_minutes(self) -> None:
        assert messages_per_minute(30) == pytest.approx(1.0)
        assert messages_per_minute(1) == pytest.approx(1 / 30)

    def test_a_quiet_channel_is_zero(self) -> None:
        assert messages_per_minute(0) == 0.0


def test_an_invalid_judgment_is_a_no_with_no_confidence() -> None:
    judgment = Judgment.invalid("no structured answer")
    assert judgment.should_respond is False
    assert judgment.confidence == 0.0
    assert "no structured answer" in judgment.reason
