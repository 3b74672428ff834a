"""The figures of minutes that have ended, kept by the queue that read them
(``JobQueue.activity``, ``task_activity``): a day's charts and tasks are
read from the store once, then only the minutes since.

A beat adds its tally to the minute of its write, so a minute's figures
stop changing once it has ended, but for two late writes: the counts of a
beat that failed, written by the next one, and the beats of a process whose
clock is behind this one's. So a minute is held once it ended a minute ago
(``SETTLE``): the current and the previous minutes are read at each call,
and the held ones are read again every ``REFRESH`` seconds, so that a count
written late shows within that time.
"""

from __future__ import annotations

import bisect
import operator
import threading
from array import array
from collections.abc import Iterable

from jobq.activity import (
    BUCKETS,
    KEPT,
    ActivityMinute,
    TaskActivity,
    TaskError,
    TaskTotals,
    by_minute,
    counts_of,
    minute_of,
    minute_totals,
)
from jobq.stores.base import ActivityStore

#: Seconds after a minute's end from which its figures are held.
SETTLE = 60.0
#: Seconds after which the held minutes are read from the store again.
REFRESH = 300.0
#: Counts per row of a task: succeeded, failed, dead, cancelled, buckets.
WIDTH = 4 + BUCKETS


class TaskRows:
    """One task's held minutes, oldest first: the minutes it has a row in,
    each row's error, and the running sums of their counts (``sums``:
    ``WIDTH`` numbers for nothing, then for the first row, the first two,
    and so on), so that any range of them is summed by one subtraction."""

    __slots__ = ("errors", "minutes", "sums")

    def __init__(self) -> None:
        self.minutes: list[float] = []
        self.errors: list[TaskError | None] = []
        self.sums = array("q", bytes(8 * WIDTH))

    def append(
        self, minute: float, counts: Iterable[int], error: TaskError | None
    ) -> None:
        self.minutes.append(minute)
        self.errors.append(error)
        self.sums.extend(map(operator.add, self._summed(len(self.minutes) - 1), counts))

    def _summed(self, k: int) -> array[int]:
        """The sums of the first ``k`` rows."""
        return self.sums[k * WIDTH : (k + 1) * WIDTH]

    def rows(self) -> Iterable[tuple[float, list[int], TaskError | None]]:
        """Each row back from the sums: (minute, counts, error)."""
        for k, (minute, error) in enumerate(
            zip(self.minutes, self.errors, strict=True)
        ):
            counts = list(map(operator.sub, self._summed(k + 1), self._summed(k)))
            yield minute, counts, error

    def drop_before(self, minute: float) -> None:
        """Forget the rows of the minutes before ``minute``."""
        k = bisect.bisect_left(self.minutes, minute)
        if k:
            del self.minutes[:k], self.errors[:k], self.sums[: k * WIDTH]

    def add_to(
        self, totals: TaskTotals, task: str | None, since: float, until: float
    ) -> None:
        """This task's rows of the minutes from ``since`` to before
        ``until`` added to ``totals``."""
        i = bisect.bisect_left(self.minutes, since)
        j = bisect.bisect_left(self.minutes, until)
        if i == j:
            return
        errors = [error for error in self.errors[i:j] if error is not None]
        newest = max(errors, key=operator.attrgetter("at"), default=None)
        counts = list(map(operator.sub, self._summed(j), self._summed(i)))
        totals.add(task, counts, newest)


class FigureCache:
    """The held minutes' figures of one queue: per minute, summed over the
    tasks (``activity``), and per task (``task_activity``). Thread-safe:
    a lock guards the held minutes and their reads from the store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._forget(0.0)

    def _forget(self, now: float) -> None:
        self._read_at = self._latest = now
        self._first = 0.0  # the held minutes: from ``_first``, one per minute
        self._minutes: list[ActivityMinute] = []
        self._tasks: dict[str | None, TaskRows] = {}

    def activity(
        self, store: ActivityStore, since: float, now: float
    ) -> list[ActivityMinute]:
        """``by_minute`` of the minutes from ``since``'s to ``now``'s."""
        split = max(settled(now), since)
        with self._lock:
            self._hold(store, since, split, now)
            start = int((since - self._first) // 60)
            held = self._minutes[start : start + int((split - since) // 60)]
        outcomes = store.minute_outcomes(split, now)
        return held + by_minute(outcomes, store.samples(split, now), split, now)

    def task_activity(
        self, store: ActivityStore, since: float, now: float
    ) -> list[TaskActivity]:
        """``by_task`` of the minutes from ``since``'s to ``now``'s."""
        split = max(settled(now), since)
        totals = TaskTotals()
        with self._lock:
            self._hold(store, since, split, now)
            for task, rows in self._tasks.items():
                rows.add_to(totals, task, since, split)
        for row in store.outcomes(split, now):
            totals.add_row(row)
        return totals.report()

    def _hold(
        self, store: ActivityStore, since: float, until: float, now: float
    ) -> None:
        """Hold the minutes from ``since`` to before ``until`` (settled),
        reading those not held yet; all read again once ``REFRESH`` passed
        (or the clock went back), those older than a day forgotten."""
        if now < self._latest or now >= self._read_at + REFRESH:
            self._forget(now)
        self._latest = now
        if since >= until:
            return
        if not self._minutes:
            self._first = since
            self._minutes, self._tasks = self._read(store, since, until)
            return
        held_until = self._first + 60 * len(self._minutes)
        if until > held_until:
            minutes, tasks = self._read(store, held_until, until)
            self._minutes += minutes
            for task, rows in tasks.items():
                held = self._tasks.setdefault(task, TaskRows())
                for row in rows.rows():
                    held.append(*row)
        if since < self._first:
            minutes, tasks = self._read(store, since, self._first)
            for task, rows in self._tasks.items():
                joined = tasks.setdefault(task, TaskRows())
                for row in rows.rows():
                    joined.append(*row)
            self._first, self._minutes = since, minutes + self._minutes
            self._tasks = tasks
        self._drop_before(minute_of(now - KEPT))

    def _drop_before(self, oldest: float) -> None:
        """Forget the minutes before ``oldest``: the store has dropped them."""
        if oldest <= self._first:
            return
        del self._minutes[: int((oldest - self._first) // 60)]
        self._first = oldest
        for task, rows in list(self._tasks.items()):
            rows.drop_before(oldest)
            if not rows.minutes:
                del self._tasks[task]

    @staticmethod
    def _read(
        store: ActivityStore, since: float, until: float
    ) -> tuple[list[ActivityMinute], dict[str | None, TaskRows]]:
        """The minutes from ``since`` to before ``until`` from the store."""
        last = until - 60
        outcomes = store.outcomes(since, last)
        minutes = by_minute(
            minute_totals(outcomes), store.samples(since, last), since, last
        )
        tasks: dict[str | None, TaskRows] = {}
        for row in outcomes:
            tasks.setdefault(row.task, TaskRows()).append(
                row.minute, counts_of(row), row.error
            )
        return minutes, tasks


def settled(now: float) -> float:
    """The start of the first minute not held at ``now``: the one before
    now's (it ended less than ``SETTLE`` ago)."""
    return minute_of(now - SETTLE)
