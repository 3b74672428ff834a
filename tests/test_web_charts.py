"""The overview's charts as geometry: bins of minutes, the scale's top, bars
stacked to scale, lines that skip unsampled minutes, and the summaries a
screen reader hears."""

from __future__ import annotations

import pytest

from jobq.activity import ActivityMinute
from jobq.web.charts import (
    HEIGHT,
    WIDTH,
    Bin,
    bins,
    depth_chart,
    latency_chart,
    outcomes_chart,
    scale_top,
)

T0 = 1_800_000_000.0


def minute(
    k: int, succeeded: int = 0, failed: int = 0, **depth: float
) -> ActivityMinute:
    return ActivityMinute(T0 + 60 * k, succeeded, failed, 0, 0, **depth)  # type: ignore[arg-type]


def test_bins_sum_their_counts_and_keep_the_last_sample() -> None:
    minutes = [
        minute(0, 1, 0, pending=9, running=1, waiting=0, latency=2.0),
        minute(1, 2, 3),
        minute(2, 0, 1, pending=4, running=2, waiting=0, latency=None),
        minute(3, 5),
    ]

    assert bins(minutes, 2) == [
        Bin(T0, 3, 3, 0, 0, 9, 1, 2.0),
        Bin(T0 + 120, 5, 1, 0, 0, 4, 2, None),
    ]
    assert bins(minutes, 1)[1] == Bin(T0 + 60, 2, 3, 0, 0, None, None, None)


@pytest.mark.parametrize(
    ("largest", "top"),
    [(0, 1), (1, 1), (3, 5), (7, 10), (10, 10), (11, 20), (0.3, 0.5), (999, 1000)],
)
def test_the_scale_tops_at_one_two_or_five_times_a_power_of_ten(
    largest: float, top: float
) -> None:
    assert scale_top(largest) == pytest.approx(top)


def test_outcome_bars_are_stacked_to_scale() -> None:
    shown = bins([minute(0, 6, 2), minute(1), minute(2, 0, 10)], 1)

    chart = outcomes_chart(shown)

    assert chart.top == "10"
    assert [(r.kind, r.height, r.y, r.title) for r in chart.rects] == [
        ("succeeded", HEIGHT * 0.6, HEIGHT * 0.4, "6 succeeded"),
        ("failed", HEIGHT * 0.2, HEIGHT * 0.2, "2 failed"),
        ("failed", HEIGHT, 0.0, "10 failed"),
    ]
    assert [r.x for r in chart.rects] == [0.0, 0.0, WIDTH * 2 / 3]
    assert chart.label == "Attempts: 6 succeeded, 12 failed"


def test_depth_and_latency_lines_skip_the_minutes_nobody_sampled() -> None:
    shown = bins(
        [
            minute(0, pending=10, running=4, waiting=0, latency=0.5),
            minute(1),
            minute(2, pending=5, running=0, waiting=0, latency=None),
        ],
        1,
    )

    depth = depth_chart(shown)
    latency = latency_chart(shown)

    pending, running = depth.lines
    assert (pending.kind, pending.points) == (
        "pending",
        f"100.0,0.0 500.0,{HEIGHT / 2}",
    )
    assert running.points == f"100.0,{HEIGHT * 0.6} 500.0,{HEIGHT}"
    assert depth.label == "Depth: 5 pending, 0 running when last sampled"
    assert (latency.lines[0].points, latency.top) == ("100.0,0.0", "0.5 s")
    assert latency.label == "Latency: at most 0.5 s"


def test_charts_of_nothing_say_so() -> None:
    shown = bins([minute(0), minute(1)], 1)

    assert outcomes_chart(shown).rects == ()
    assert depth_chart(shown).label == "Depth: not sampled (no process ran workers)"
    assert latency_chart(shown).label == "Latency: nothing due when sampled"
