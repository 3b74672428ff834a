"""The values jobq hands to handlers and callers: frozen, slotted, typed."""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, NamedTuple, TypeVar

P = TypeVar("P")

#: The ``meta`` of a job enqueued without one: shared, read-only, free.
NO_META: Mapping[str, str] = MappingProxyType({})


def _no_meta() -> Mapping[str, str]:
    return NO_META


class JobState(enum.StrEnum):
    """Where a job stands; a finished job is gone unless kept
    (``keep_completed``, ``keep_cancelled``)."""

    PENDING = "pending"
    RUNNING = "running"
    DEAD = "dead"
    COMPLETED = "completed"
    #: Stopped on request (``cancel``), never run again: pending when asked,
    #: or running and then stopped (its attempt failed or was abandoned).
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What ``enqueue`` returns: the job's id, and whether a keyed job held it."""

    id: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class Job(Generic[P]):
    """What a handler (and each middleware) receives. ``attempt`` is 1 on the
    first try; ``task`` is the name of a named task's job (its payload is
    then ``{"args": [...], "kwargs": {...}}``), ``None`` for a plain job.
    ``meta`` holds the string headers given at enqueue (read-only, empty if
    none), the same for every attempt; ``timeout`` is the job's time limit
    in seconds, or ``None`` (see the README's section "Time limits")."""

    id: int
    payload: P
    attempt: int
    key: str | None
    task: str | None = None
    meta: Mapping[str, str] = field(default_factory=_no_meta)
    timeout: float | None = None


@dataclass(frozen=True, slots=True)
class AttemptError:
    """One failed attempt: exception type name, message, traceback text, epoch time."""

    type: str
    message: str
    traceback: str
    at: float


@dataclass(frozen=True, slots=True)
class Cancellation:
    """A request to cancel a job: when it was made (epoch seconds), by whom
    (``cancel(by=...)``: "jobq cancel", "dashboard", a host and pid by
    default), and the attempt it stopped (``None``: the job was pending, no
    attempt ran). Kept with the job, so it survives restarts: a running job
    carries it until it stops (``JobRecord.stopping``)."""

    at: float
    by: str
    attempt: int | None


@dataclass(frozen=True, slots=True)
class JobRecord(Generic[P]):
    """A stored job as ``get`` and ``dead_jobs`` show it.

    ``attempts`` counts failed attempts; ``errors`` keeps the newest 20 of them,
    oldest first; times are epoch seconds. ``started_at`` and ``finished_at``
    describe the job's last attempt: when it was claimed, and when its outcome
    was recorded (``None`` while it runs, and both ``None`` before the first
    attempt); revive keeps them. ``meta`` holds the string headers given at
    enqueue (read-only, empty if none); ``timeout`` is the stored timeout in
    seconds, or ``None``. ``cancellation``: the request that cancelled it
    (``cancelled``), or that a running job still has to obey (``stopping``).
    """

    id: int
    payload: P
    attempts: int
    state: JobState
    run_at: float
    created_at: float
    last_error: str | None
    key: str | None
    priority: int
    result: Any
    task: str | None
    errors: tuple[AttemptError, ...]
    max_attempts: int
    started_at: float | None = None
    finished_at: float | None = None
    timeout: float | None = None
    meta: Mapping[str, str] = field(default_factory=_no_meta)
    cancellation: Cancellation | None = None

    @property
    def stopping(self) -> bool:
        """Running, and asked to stop: it ends cancelled unless its handler
        returns normally."""
        return self.state is JobState.RUNNING and self.cancellation is not None


@dataclass(frozen=True, slots=True)
class Stats:
    """``pending`` (delayed included), ``running`` and ``dead`` as stored, across
    processes; ``completed``, ``retried`` and ``abandoned`` (worker threads
    given up at a time limit) counted by this queue object; ``delayed``: the
    pending jobs not due yet, and ``kept``: the completed jobs kept with their
    results (``keep_completed``) and not expired, both as stored across
    processes (0 from a store written before them); ``cancelled``: the
    cancelled jobs kept (``keep_cancelled``), as stored."""

    pending: int
    running: int
    dead: int
    completed: int
    retried: int
    abandoned: int = 0
    delayed: int = 0
    kept: int = 0
    cancelled: int = 0


class FinishedMinute(NamedTuple):
    """Jobs whose last attempt ended in one minute, as the store holds them
    (every process's): ``start`` of the minute (epoch seconds, a multiple of
    60), kept ``completed`` jobs (not expired) and jobs that ``died``."""

    start: float
    completed: int
    died: int


@dataclass(frozen=True, slots=True)
class Schedule:
    """A periodic job's schedule, as ``JobQueue.schedules()`` shows it.

    ``expression``: "every 600s" or the cron text; ``tz``: the IANA zone its
    slots are computed in. ``next_slot``: when the next slot falls due
    (``None`` for an orphan, or if it cannot be computed: after the year
    9999); ``last_slot`` and ``last_job_id``: the latest slot enqueued (or
    skipped) by any process, and its job (aware datetimes; ``None`` before
    the first slot). ``orphaned``: kept by the
    store but no longer declared in the code, so it never runs.
    """

    name: str
    expression: str
    tz: str
    next_slot: dt.datetime | None
    last_slot: dt.datetime | None
    last_job_id: int | None
    orphaned: bool = False


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """``queue.worker_stats()``: this process's worker threads running a
    handler now (``busy``) and waiting for a job (``idle``)."""

    busy: int
    idle: int
