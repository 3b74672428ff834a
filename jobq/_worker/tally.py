"""This process's outcomes since its last beat, per task, in memory: what
``jobq.activity``'s beats hand to the store.

A job's path appends one item to a deque (thread-safe, no lock): its
attempt, with its duration's bucket and whether it returned. The store's
answer adds an item only where it is not the usual one: a job that ended
dead or cancelled, an outcome the store did not record, a failed attempt's
error. The beat, every few seconds, drains the deques and counts them in C
(``Counter``), keeping each task's newest error."""

from __future__ import annotations

import bisect
import functools
import itertools
import threading
from collections import Counter, deque
from collections.abc import Iterable
from typing import TypeVar

from jobq.activity import (
    BUCKETS,
    DURATION_BOUNDS,
    ERROR_CHARS,
    TaskError,
    TaskOutcomes,
    newer,
)
from jobq.stores._activity import merged

#: The counts of a row, in ``TaskOutcomes`` order; then the buckets.
SUCCEEDED, FAILED, DEAD, CANCELLED = range(4)
#: ``ended`` items that take back an attempt's count: the store did not
#: record its outcome (a stale claim, a store error).
UNRECORDED_SUCCESS, UNRECORDED_FAILURE = -1, -2

#: The bucket of an attempt's duration (``activity.bucket_of``), in C.
bucket = functools.partial(bisect.bisect_left, DURATION_BOUNDS)

T = TypeVar("T")


class Tally:
    """Counts per task: attempts that succeeded or failed, jobs that ended
    dead or cancelled, attempts' durations per bucket.

    ``attempts`` takes ``(task, bucket(seconds), returned)`` for each
    attempt; ``ended`` takes ``(task, DEAD | CANCELLED)`` for each job that
    ended so, and ``(task, UNRECORDED_SUCCESS | UNRECORDED_FAILURE)`` for an
    attempt whose outcome the store did not take; ``errors`` takes ``(task,
    error)`` for each failed attempt the store recorded. All are appended to
    from any thread; ``take`` drains them."""

    def __init__(self) -> None:
        self.attempts: deque[tuple[str | None, int, bool]] = deque()
        self.ended: deque[tuple[str | None, int]] = deque()
        self.errors: deque[tuple[str | None, TaskError]] = deque()
        self._lock = threading.Lock()  # ``take`` and ``give_back``: the beats'
        #: What a beat could not write, by (minute, task): written by the next.
        self._carried: dict[tuple[float, str | None], TaskOutcomes] = {}

    def count(self, task: str | None, what: int) -> None:
        """One more item of ``ended`` for ``task``."""
        self.ended.append((task, what))

    def take(self, minute: float) -> list[TaskOutcomes]:
        """What was counted since the last ``take``, as ``minute``'s (and
        what an earlier beat gave back, as its own minute's)."""
        with self._lock:
            rows: dict[str | None, list[int]] = {}
            for (task, index, returned), n in Counter(_drained(self.attempts)).items():
                row = _row(rows, task)
                row[SUCCEEDED if returned else FAILED] += n
                row[4 + index] += n
            for (task, what), n in Counter(_drained(self.ended)).items():
                row = _row(rows, task)
                if what < 0:  # taken back: the store did not record it
                    what = SUCCEEDED if what == UNRECORDED_SUCCESS else FAILED
                    n = -n
                row[what] += n
            errors: dict[str | None, TaskError | None] = {}
            for task, error in _drained(self.errors):
                _row(rows, task)
                errors[task] = newer(errors.get(task), error)
            carried, self._carried = self._carried, {}
        for task, row in rows.items():
            succeeded, failed, dead, cancelled = row[:4]
            fresh = TaskOutcomes(minute, task, succeeded, failed, dead, cancelled,
                                 tuple(row[4:]), _cut(errors.get(task)))  # fmt: skip
            carried[minute, task] = merged(carried.get((minute, task)), fresh)
        return list(carried.values())

    def give_back(self, outcomes: Iterable[TaskOutcomes]) -> None:
        """Counts a beat could not write: the next one writes them."""
        with self._lock:
            for row in outcomes:
                key = (row.minute, row.task)
                self._carried[key] = merged(self._carried.get(key), row)


def _cut(error: TaskError | None) -> TaskError | None:
    """``error`` with its text cut to ``ERROR_CHARS`` (once per task and
    beat, not per failure)."""
    if error is None or len(error.text) <= ERROR_CHARS:
        return error
    return error._replace(text=error.text[: ERROR_CHARS - 1] + "…")


def _row(rows: dict[str | None, list[int]], task: str | None) -> list[int]:
    row = rows.get(task)
    if row is None:
        row = rows[task] = [0] * (4 + BUCKETS)
    return row


def _drained(items: deque[T]) -> list[T]:
    """The items of ``items``, taken from the left (appends from other
    threads meanwhile are left for the next time); ``popleft`` called by C,
    with no bytecode per item (this drains one item per job)."""
    return list(itertools.islice(iter(items.popleft, None), len(items)))
