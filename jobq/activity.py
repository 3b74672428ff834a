"""What a queue did over time, and which processes serve it: figures read
from the store, the same whichever process asks.

Every process that runs workers tallies its outcomes in memory (a few
counters per task, no write on the job's path) and, every ``BEAT`` seconds,
hands the tally to the store in one write with its own row in the registry
of processes (``ProcessInfo``) and, once a minute, a sample of the queue's
depth (``DepthSample``). Sidekiq keeps its figures the same way. The store
adds each tally to the minute of the write, keeps a day of them
(``KEPT``), and drops a process's row an hour after it was last seen.

A tally that a process had not handed over when it died is lost (at most
``BEAT`` seconds of counts); a job's outcome itself never is.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

#: Seconds between a process's writes of its tally and its registry row.
BEAT = 5.0
#: Seconds of figures a store keeps: a day.
KEPT = 86_400.0
#: Seconds a gone process's row is kept (shown as gone) before it is dropped.
GONE_KEPT = 3_600.0

#: The upper bounds (seconds) of the buckets attempts' durations are counted
#: in: 1 ms, 2 ms, 4 ms, ... 524 s; one more bucket holds the longer ones.
DURATION_BOUNDS: tuple[float, ...] = tuple(0.001 * 2**k for k in range(20))
BUCKETS = len(DURATION_BOUNDS) + 1


def bucket_of(seconds: float) -> int:
    """The bucket an attempt of ``seconds`` is counted in."""
    return bisect.bisect_left(DURATION_BOUNDS, seconds)


def percentile(durations: Sequence[int], fraction: float) -> float | None:
    """The duration below which ``fraction`` of the counted attempts ended,
    as the upper bound of its bucket (so within a factor of two); ``None``
    if none was counted. The last bucket's has no bound: ``inf``."""
    total = sum(durations)
    if not total:
        return None
    wanted = fraction * total
    seen = 0
    for bound, count in zip((*DURATION_BOUNDS, math.inf), durations, strict=False):
        seen += count
        if count and seen >= wanted:
            return bound
    return math.inf


class TaskError(NamedTuple):
    """The error of a task's newest failed attempt (retried or dead, not
    cancelled): when it ended (``at``, epoch seconds), its ``job`` (its id)
    and ``text``, the job's ``last_error`` ("Type: message") cut to
    ``ERROR_CHARS``."""

    at: float
    job: int
    text: str


#: The most characters of an error's text the figures keep.
ERROR_CHARS = 300


def newer(old: TaskError | None, new: TaskError | None) -> TaskError | None:
    """The later of two errors (on a tie, ``old``: the one written first)."""
    if old is None or (new is not None and new.at > old.at):
        return new
    return old


class TaskOutcomes(NamedTuple):
    """What one task's attempts did in one minute, as a store keeps it:
    ``minute`` (epoch seconds, a multiple of 60), ``task`` (``None``: plain
    jobs), attempts that ``succeeded``, attempts that ``failed`` (retried or
    not), jobs that ended ``dead`` and ``cancelled``, ``durations``: the
    attempts counted per bucket of ``DURATION_BOUNDS`` (``BUCKETS`` items),
    and ``error``: the newest failed attempt's in it (``None``: none
    failed). Recorded on the failure path only: a success costs nothing."""

    minute: float
    task: str | None
    succeeded: int
    failed: int
    dead: int
    cancelled: int
    durations: tuple[int, ...]
    error: TaskError | None = None


class MinuteOutcomes(NamedTuple):
    """The tasks' outcomes of one minute summed (``ActivityStore.
    minute_outcomes``): what the charts of the whole queue read."""

    minute: float
    succeeded: int
    failed: int
    dead: int
    cancelled: int


class DepthSample(NamedTuple):
    """The queue as one process saw it once in a minute: ``pending`` jobs
    (delayed included), ``running``, ``waiting`` for a parent, and
    ``latency``: how long the job claimed next has waited since it was due
    (``None``: nothing due)."""

    minute: float
    pending: int
    running: int
    waiting: int
    latency: float | None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job a process runs now: its ``id``, ``task`` and when its attempt
    ``started`` (epoch seconds)."""

    id: int
    task: str | None
    started: float


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A process serving the queue, as its last beat left it in the store:
    ``id`` (host, pid and a nonce), ``host``, ``pid``, when it ``started``
    and was last ``seen`` (epoch seconds), its ``workers`` (threads) and how
    many are ``busy``, the jobs it runs (``running``) and ``gone``: not seen
    for longer than its lease (or three beats), so it stopped or died
    without saying so. A gone process is dropped an hour later."""

    id: str
    host: str
    pid: int
    started: float
    seen: float
    workers: int
    busy: int
    running: tuple[RunningJob, ...] = ()
    gone: bool = False

    @property
    def idle(self) -> int:
        return max(self.workers - self.busy, 0)


class Beat(NamedTuple):
    """One process's write (``ActivityStore.beat``): its registry row
    (``None``: a process that runs no workers, handing over a tally only),
    the tally since its last beat (each row added to its minute's) and, once
    a minute, the queue's depth; ``gone_after``: seconds after
    ``process.seen`` when others should count it gone."""

    process: ProcessInfo | None
    outcomes: Sequence[TaskOutcomes]
    sample: DepthSample | None
    gone_after: float


@dataclass(frozen=True, slots=True)
class ActivityMinute:
    """One minute of the queue, from every process: attempts that
    ``succeeded`` and ``failed``, jobs that ended ``dead`` and ``cancelled``,
    and the depth sampled in it (``None`` where no process sampled that
    minute: none was running workers). ``start``: epoch seconds."""

    start: float
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    cancelled: int = 0
    pending: int | None = None
    running: int | None = None
    waiting: int | None = None
    latency: float | None = None


@dataclass(frozen=True, slots=True)
class TaskActivity:
    """One task over some minutes (``queue.task_activity``): its attempts
    that ``succeeded`` and ``failed``, jobs ``dead`` and ``cancelled``, the
    median and 95th percentile of its attempts' durations (seconds, within
    a factor of two; ``None`` if none ended), ``last_error``: its newest
    failed attempt's (``None`` if none failed), and ``failure_rate``:
    failed attempts over all attempts (``None`` if none)."""

    task: str | None
    succeeded: int
    failed: int
    dead: int
    cancelled: int
    p50: float | None
    p95: float | None
    last_error: TaskError | None = None

    @property
    def failure_rate(self) -> float | None:
        attempts = self.succeeded + self.failed
        return self.failed / attempts if attempts else None


def minute_of(at: float) -> float:
    """The start of the minute ``at`` falls in."""
    return float(int(at // 60) * 60)


def minute_totals(outcomes: Iterable[TaskOutcomes]) -> list[MinuteOutcomes]:
    """The outcomes summed over the tasks of each minute, in the order of
    each minute's first row (``ActivityStore.minute_outcomes``)."""
    totals: dict[float, list[int]] = {}
    for row in outcomes:
        counts = totals.setdefault(row.minute, [0, 0, 0, 0])
        counts[0] += row.succeeded
        counts[1] += row.failed
        counts[2] += row.dead
        counts[3] += row.cancelled
    return [MinuteOutcomes(minute, *counts) for minute, counts in totals.items()]


def by_minute(
    outcomes: Iterable[MinuteOutcomes],
    samples: Iterable[DepthSample],
    since: float,
    now: float,
) -> list[ActivityMinute]:
    """Every minute from ``since``'s to ``now``'s, oldest first: its
    outcomes (a count below zero shown as zero: an attempt refused by the
    store is taken back in a later beat than the one that counted it, maybe
    a later minute) and the depth sampled in it."""
    counted = {int(row.minute): row for row in outcomes}
    sampled = {int(sample.minute): sample for sample in samples}
    found = []
    for start in range(int(minute_of(since)), int(minute_of(now)) + 1, 60):
        row, sample = counted.get(start), sampled.get(start)
        succeeded, failed, dead, cancelled = (
            (0, 0, 0, 0) if row is None else (max(n, 0) for n in row[1:])
        )
        found.append(
            ActivityMinute(
                float(start), succeeded, failed, dead, cancelled,
                *((None, None, None, None) if sample is None else sample[1:]),
            )
        )  # fmt: skip
    return found


def by_task(outcomes: Iterable[TaskOutcomes]) -> list[TaskActivity]:
    """The outcomes summed per task, by name (plain jobs, ``None``, first)."""
    totals = TaskTotals()
    for row in outcomes:
        totals.add_row(row)
    return totals.report()


def counts_of(row: TaskOutcomes) -> tuple[int, ...]:
    """A row's counts as ``TaskTotals.add`` takes them: succeeded, failed,
    dead, cancelled, then exactly ``BUCKETS`` durations (cut or padded)."""
    buckets = row.durations[:BUCKETS]
    return (row.succeeded, row.failed, row.dead, row.cancelled, *buckets,
            *(0,) * (BUCKETS - len(buckets)))  # fmt: skip


class TaskTotals:
    """Tasks' outcomes summed over minutes, and each one's newest error:
    what ``by_task`` reports."""

    def __init__(self) -> None:
        self._counts: dict[str | None, list[int]] = {}
        self._errors: dict[str | None, TaskError | None] = {}

    def add_row(self, row: TaskOutcomes) -> None:
        self.add(row.task, counts_of(row), row.error)

    def add(
        self, task: str | None, counts: Sequence[int], error: TaskError | None
    ) -> None:
        """``counts`` (as ``counts_of`` gives them) added to ``task``'s."""
        summed = self._counts.get(task)
        self._counts[task] = (
            list(counts) if summed is None else list(map(operator.add, summed, counts))
        )
        self._errors[task] = newer(self._errors.get(task), error)

    def report(self) -> list[TaskActivity]:
        """One ``TaskActivity`` per task, by name (plain jobs first); a count
        below zero shown as zero (see ``by_minute``)."""
        found = []
        for task in sorted(
            self._counts, key=lambda name: (name is not None, name or "")
        ):
            counts = self._counts[task]
            succeeded, failed, dead, cancelled = (max(n, 0) for n in counts[:4])
            buckets = counts[4:]
            found.append(
                TaskActivity(task, succeeded, failed, dead, cancelled,
                             percentile(buckets, 0.5), percentile(buckets, 0.95),
                             self._errors[task])
            )  # fmt: skip
        return found
