"""The ``ActivityStore`` of a store that one process holds (memory, JSON
file): the figures in memory, as the database stores keep them in tables.
They last as long as the process (a JSON file keeps jobs, not figures)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable

from jobq.activity import (
    BUCKETS,
    GONE_KEPT,
    KEPT,
    Beat,
    DepthSample,
    MinuteOutcomes,
    ProcessInfo,
    TaskError,
    TaskOutcomes,
    minute_of,
    minute_totals,
    newer,
)


def merged(old: TaskOutcomes | None, new: TaskOutcomes) -> TaskOutcomes:
    """``new`` added to ``old`` (same minute and task): counts and buckets
    summed, the newer error kept (a store's row, as ``ActivityStore.beat``
    adds a tally)."""
    if old is None:
        return new
    return old._replace(
        succeeded=old.succeeded + new.succeeded,
        failed=old.failed + new.failed,
        dead=old.dead + new.dead,
        cancelled=old.cancelled + new.cancelled,
        error=newer(old.error, new.error),
        durations=tuple(
            a + b
            for a, b in zip(
                _buckets(old.durations), _buckets(new.durations), strict=True
            )
        ),
    )


def error_from(at: float | None, job: int | None, text: str | None) -> TaskError | None:
    """A table row's error columns as a ``TaskError`` (all ``NULL``: none)."""
    if at is None or job is None or text is None:
        return None
    return TaskError(at, job, text)


def _buckets(durations: Iterable[int]) -> tuple[int, ...]:
    """``durations`` as exactly ``BUCKETS`` counts (cut, or padded with 0)."""
    counts = tuple(durations)[:BUCKETS]
    return counts + (0,) * (BUCKETS - len(counts))


def gone(info: ProcessInfo, gone_after: float, now: float) -> ProcessInfo:
    """``info`` marked ``gone`` once ``gone_after`` seconds passed unseen."""
    is_gone = now > info.seen + gone_after
    return info if info.gone == is_gone else dataclasses.replace(info, gone=is_gone)


class ActivityInMemory:
    """``ActivityStore`` members for a store's class: rows kept in this
    object's memory, guarded by a lock of their own."""

    _activity_lock: threading.Lock
    _processes: dict[str, tuple[ProcessInfo, float]]
    _outcomes: dict[tuple[float, str | None], TaskOutcomes]
    _samples: dict[float, DepthSample]

    def _clear_activity(self) -> None:
        self._activity_lock = threading.Lock()
        self._processes = {}
        self._outcomes = {}
        self._samples = {}

    def beat(self, beat: Beat, now: float) -> None:
        with self._activity_lock:
            if beat.process is not None:
                self._processes[beat.process.id] = (beat.process, beat.gone_after)
            for row in beat.outcomes:
                key = (row.minute, row.task)
                self._outcomes[key] = merged(self._outcomes.get(key), row)
            sample = beat.sample
            if sample is not None:
                self._samples.setdefault(sample.minute, sample)
            self._drop_old(now)

    def _drop_old(self, now: float) -> None:
        """Figures older than ``KEPT``, processes gone for ``GONE_KEPT``."""
        oldest = minute_of(now - KEPT)
        for key in [key for key in self._outcomes if key[0] < oldest]:
            del self._outcomes[key]
        for minute in [minute for minute in self._samples if minute < oldest]:
            del self._samples[minute]
        for process_id, (info, gone_after) in list(self._processes.items()):
            if now > info.seen + gone_after + GONE_KEPT:
                del self._processes[process_id]

    def leave(self, process_id: str) -> None:
        with self._activity_lock:
            self._processes.pop(process_id, None)

    def processes(self, now: float) -> list[ProcessInfo]:
        with self._activity_lock:
            rows = list(self._processes.values())
        return sorted(
            (gone(info, gone_after, now) for info, gone_after in rows),
            key=lambda info: (info.host, info.started, info.id),
        )

    def outcomes(self, since: float, now: float) -> list[TaskOutcomes]:
        first, last = minute_of(since), minute_of(now)
        with self._activity_lock:
            rows = [
                row for key, row in self._outcomes.items() if first <= key[0] <= last
            ]
        return sorted(rows, key=lambda row: (row.minute, row.task or ""))

    def minute_outcomes(self, since: float, now: float) -> list[MinuteOutcomes]:
        return minute_totals(self.outcomes(since, now))

    def samples(self, since: float, now: float) -> list[DepthSample]:
        first, last = minute_of(since), minute_of(now)
        with self._activity_lock:
            rows = [s for minute, s in self._samples.items() if first <= minute <= last]
        return sorted(rows)
