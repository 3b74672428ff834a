"""The retry policy on its own: a pure object, no threads, no clock."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from jobq import RetryPolicy

ALMOST_ONE = math.nextafter(1.0, 0.0)


def constant(draw: float) -> Callable[[], float]:
    return lambda: draw


def no_jitter(base_delay: float, max_delay: float) -> RetryPolicy:
    return RetryPolicy(base_delay=base_delay, max_delay=max_delay, jitter=False)


@pytest.mark.parametrize(
    ("retry", "expected"), [(1, 2.0), (2, 4.0), (3, 8.0), (6, 64.0)]
)
def test_retry_n_waits_base_delay_doubled_n_minus_one_times(
    retry: int, expected: float
) -> None:
    assert no_jitter(base_delay=2.0, max_delay=1000.0).delay(retry) == expected


def test_backoff_is_capped_at_max_delay() -> None:
    policy = no_jitter(base_delay=2.0, max_delay=10.0)

    assert [policy.delay(n) for n in range(1, 6)] == [2.0, 4.0, 8.0, 10.0, 10.0]


@pytest.mark.parametrize("retry", [1_100, 10**6, 10**18])
def test_a_huge_retry_number_waits_max_delay_without_overflow(retry: int) -> None:
    assert no_jitter(base_delay=1.0, max_delay=3600.0).delay(retry) == 3600.0


def test_a_huge_base_delay_is_capped_without_overflow() -> None:
    assert no_jitter(base_delay=1e300, max_delay=60.0).delay(10**6) == 60.0


def test_jitter_with_the_lowest_draw_waits_20_percent_less() -> None:
    policy = RetryPolicy(base_delay=10.0, max_delay=100.0, jitter=True)

    assert policy.delay(1, draw=lambda: 0.0) == pytest.approx(8.0)


def test_jitter_with_a_draw_near_one_waits_almost_20_percent_more() -> None:
    policy = RetryPolicy(base_delay=10.0, max_delay=100.0, jitter=True)

    delay = policy.delay(1, draw=lambda: ALMOST_ONE)

    assert delay == pytest.approx(12.0)
    assert delay <= 12.0


def test_jitter_spreads_the_delay_linearly_with_the_draw() -> None:
    policy = RetryPolicy(base_delay=10.0, max_delay=100.0, jitter=True)

    delays = [policy.delay(2, draw=constant(d)) for d in (0.0, 0.25, 0.5, 0.75)]

    assert delays == pytest.approx([16.0, 18.0, 20.0, 22.0])


def test_jitter_applies_to_the_capped_delay() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=100.0, jitter=True)

    low = policy.delay(10**6, draw=lambda: 0.0)
    high = policy.delay(10**6, draw=lambda: ALMOST_ONE)

    assert low == pytest.approx(80.0)
    assert high == pytest.approx(120.0)


def test_jitter_with_the_default_random_draw_stays_within_20_percent() -> None:
    policy = RetryPolicy(base_delay=10.0, max_delay=100.0, jitter=True)

    delays = {policy.delay(1) for _ in range(200)}

    assert all(8.0 <= d <= 12.0 for d in delays)
    assert len(delays) > 100  # spread, not one fixed value


def test_without_jitter_the_draw_is_ignored() -> None:
    policy = no_jitter(base_delay=10.0, max_delay=100.0)

    assert policy.delay(1, draw=lambda: 0.0) == 10.0
    assert policy.delay(1, draw=lambda: ALMOST_ONE) == 10.0


def test_jitter_is_on_by_default() -> None:
    policy = RetryPolicy(base_delay=10.0)

    assert policy.delay(1, draw=lambda: 0.0) != policy.delay(1, draw=lambda: 0.9)


@pytest.mark.parametrize("max_attempts", [0, -1])
def test_fewer_than_one_attempt_is_rejected(max_attempts: int) -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=max_attempts)


@pytest.mark.parametrize("field", ["base_delay", "max_delay"])
@pytest.mark.parametrize("value", [-1.0, math.inf, math.nan])
def test_a_negative_or_infinite_delay_is_rejected(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]
