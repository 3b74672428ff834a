"""Recent throughput: succeeded and failed attempts per minute, counted from
the events of this process's queue (a standalone dashboard runs no jobs, so
it shows none: see the README)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from jobq.events import Event, EventKind

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
