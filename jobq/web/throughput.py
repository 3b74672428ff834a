"""Recent throughput per minute: succeeded and failed attempts counted from
the events of this process's queue (a standalone dashboard runs no jobs, so
it counts none), beside what the store tells of every process's jobs where
it can (``JobQueue.finished_per_minute``: jobs completed, when results are
kept, and jobs that died)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from jobq.events import Event, EventKind
from jobq.types import FinishedMinute

#: Minutes kept (and shown).
MINUTES = 10

_FAILED = (EventKind.RETRYING, EventKind.DEAD)


class Throughput:
    """Counts per minute; subscribe it with ``queue.subscribe``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._minutes: OrderedDict[int, list[int]] = OrderedDict()

    def __call__(self, event: Event) -> None:
        if event.kind is EventKind.SUCCEEDED:
            column = 0
        elif event.kind in _FAILED:
            column = 1
        else:
            return
        minute = int(event.at // 60)
        with self._lock:
            counts = self._minutes.get(minute)
            if counts is None:
                counts = self._minutes[minute] = [0, 0]
                while len(self._minutes) > MINUTES:
                    self._minutes.popitem(last=False)
            counts[column] += 1

    def recent(self, now: float) -> list[tuple[int, int, int]]:
        """(minute start, succeeded, failed) for the last ``MINUTES``
        minutes up to ``now``'s, oldest first."""
        last = int(now // 60)
        with self._lock:
            return [
                (m * 60, *self._minutes.get(m, (0, 0)))
                for m in range(last - MINUTES + 1, last + 1)
            ]


def table(
    recent: list[tuple[int, int, int]],
    stored: list[FinishedMinute] | None,
    keeps_results: bool,
) -> tuple[list[str], list[list[int]]]:
    """The overview's table: its columns after the minute, and its rows
    (minute start, then a count per column), oldest first. The store's
    columns only where it tells (``stored``), its completed jobs only where
    the queue keeps them (else none are there to count)."""
    columns = ["Succeeded", "Failed"]
    if stored is not None:
        columns += ["Completed", "Died"] if keeps_results else ["Died"]
    by_minute = {int(m.start): m for m in stored or ()}
    rows = []
    for minute, succeeded, failed in recent:
        row = [minute, succeeded, failed]
        found = by_minute.get(minute)
        if stored is not None:
            completed, died = (found.completed, found.died) if found else (0, 0)
            row += [completed, died] if keeps_results else [died]
        rows.append(row)
    return columns, rows
