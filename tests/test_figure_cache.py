"""The figures a queue holds of the minutes that ended (``jobq._figure_cache``):
the same figures as the store's, read once, then only the last two minutes;
a count written late to a held minute shown once ``REFRESH`` passed."""

from __future__ import annotations

import random
from typing import Any

from jobq._figure_cache import REFRESH, FigureCache
from jobq.activity import (
    BUCKETS,
    Beat,
    DepthSample,
    TaskError,
    TaskOutcomes,
    by_minute,
    by_task,
    minute_of,
)
from jobq.stores import MemoryStore
from jobq.testing.clock import T0

MINUTE = minute_of(T0)


class CountingStore(MemoryStore):
    """A memory store that notes the minutes each figures read asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, float, float]] = []

    def outcomes(self, since: float, now: float) -> Any:
        self.reads.append(("outcomes", minute_of(since), minute_of(now)))
        return super().outcomes(since, now)

    def minute_outcomes(self, since: float, now: float) -> Any:
        self.reads.append(("minute_outcomes", minute_of(since), minute_of(now)))
        return super().minute_outcomes(since, now)

    def samples(self, since: float, now: float) -> Any:
        self.reads.append(("samples", minute_of(since), minute_of(now)))
        return super().samples(since, now)


def row(minute: float, task: str | None, n: int, error: TaskError | None = None) -> Any:
    durations = [0] * BUCKETS
    durations[n % BUCKETS] = n
    return TaskOutcomes(minute, task, n, n % 3, n % 2, 0, tuple(durations), error)


def write(store: MemoryStore, now: float, *rows: TaskOutcomes) -> None:
    sample = DepthSample(minute_of(now), int(now) % 97, 1, 0, None)
    store.beat(Beat(None, rows, sample, 15.0), now)


def uncached(store: MemoryStore, since: float, now: float) -> tuple[Any, Any]:
    """The figures as read from the store with nothing held."""
    minutes = by_minute(
        store.minute_outcomes(since, now), store.samples(since, now), since, now
    )
    return minutes, by_task(store.outcomes(since, now))


def test_held_figures_are_the_stores_as_minutes_pass_and_ranges_change() -> None:
    store, cache, draw = MemoryStore(), FigureCache(), random.Random(26)
    now = T0
    for step in range(400):
        now += draw.choice((7.0, 31.0, 59.0, 61.0, 200.0, 3000.0))
        for task in draw.sample(("a", "b", None), draw.randint(0, 3)):
            error = TaskError(now, step, f"E{step}") if draw.random() < 0.3 else None
            write(store, now, row(minute_of(now), task, draw.randint(1, 9), error))
        minutes = draw.choice((1, 2, 3, 60, 61, 1440))
        since = minute_of(now) - 60 * (minutes - 1)

        expected = uncached(store, since, now)
        assert (
            cache.activity(store, since, now),
            cache.task_activity(store, since, now),
        ) == expected


def test_the_minutes_held_are_read_once_then_only_the_last_two() -> None:
    store, cache = CountingStore(), FigureCache()
    now = T0 + 30
    since = minute_of(now) - 60 * 1439
    cache.task_activity(store, since, now)
    store.reads.clear()

    now += 60
    cache.task_activity(store, since + 60, now)
    cache.activity(store, since + 60, now)

    assert {(first, last) for _, first, last in store.reads} == {
        (MINUTE - 60, MINUTE - 60),  # the minute that settled since
        (MINUTE, MINUTE + 60),  # the last two minutes: read at each call
    }


def test_a_count_written_late_to_a_held_minute_shows_once_the_refresh_passed() -> None:
    store, cache = MemoryStore(), FigureCache()
    now = T0 + 300
    since = MINUTE
    write(store, now, row(MINUTE, "a", 1))
    assert cache.task_activity(store, since, now)[0].succeeded == 1

    late = row(MINUTE, "a", 5, TaskError(T0, 9, "late"))  # a beat given back, say
    write(store, now + 1, late)
    assert cache.task_activity(store, since, now + 1)[0].succeeded == 1

    later = now + REFRESH
    (task,) = cache.task_activity(store, since, later)
    assert (task.succeeded, task.last_error) == (6, TaskError(T0, 9, "late"))


def test_a_clock_gone_back_reads_the_minutes_again() -> None:
    store, cache = MemoryStore(), FigureCache()
    write(store, T0 + 600, row(MINUTE, "a", 1))
    cache.activity(store, MINUTE, T0 + 600)
    write(store, T0 + 601, row(MINUTE, "a", 2))

    (first, *_) = cache.activity(store, MINUTE, T0 + 590)
    assert first.succeeded == 3


def test_minutes_older_than_a_day_are_forgotten() -> None:
    store, cache = MemoryStore(), FigureCache()
    now = T0
    for step in range(420):  # 28 hours, a call every 4 minutes (within REFRESH)
        now += 240
        write(store, now, row(minute_of(now), "a", 1))
        since = minute_of(now) - 60 * 1439
        found = cache.task_activity(store, since, now)
        if step % 20 == 0:
            assert found == uncached(store, since, now)[1]

    assert len(cache._minutes) <= 1440
    assert all(len(rows.minutes) <= 361 for rows in cache._tasks.values())
