"""The values jobq hands to handlers and callers: frozen, slotted, typed."""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Literal, NamedTuple, TypeVar

P = TypeVar("P")

#: The ``meta`` of a job enqueued without one: shared, read-only, free.
NO_META: Mapping[str, str] = MappingProxyType({})


def _no_meta() -> Mapping[str, str]:
    return NO_META


class JobState(enum.StrEnum):
    """Where a job stands; a finished job is gone unless kept
    (``keep_completed``, ``keep_cancelled``)."""

    PENDING = "pending"
    #: Added with ``after=`` and waiting for a parent to finish: never
    #: claimed, not counted as pending (see the README's "Workflows").
    WAITING = "waiting"
    RUNNING = "running"
    DEAD = "dead"
    COMPLETED = "completed"
    #: Stopped on request (``cancel``), never run again: pending when asked,
    #: or running and then stopped (its attempt failed or was abandoned).
    CANCELLED = "cancelled"


#: What a workflow's child does when a parent fails (ends dead or
#: cancelled): ``"wait"`` for a dead parent to be revived (the default),
#: ``"cancel"`` at once, or ``"run"`` anyway (see the README's "Workflows").
AfterFailure = Literal["wait", "cancel", "run"]

#: The ``after_failure`` values, in the order the README gives them.
AFTER_FAILURE_MODES: tuple[AfterFailure, ...] = ("wait", "cancel", "run")


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
    in seconds, or ``None`` (see the README's section "Time limits").
    ``parents``: the jobs it was added ``after=`` (in that order), with what
    each returned in ``parent_results`` (``None`` for a parent that failed:
    those are in ``failed_parents``, with ``after_failure="run"`` only); a
    job with parents is a ``StepJob``, which holds them.
    """

    id: int
    payload: P
    attempt: int
    key: str | None
    task: str | None = None
    meta: Mapping[str, str] = field(default_factory=_no_meta)
    timeout: float | None = None

    # Properties, not fields: a job without parents (the usual one) is
    # built without them, at no cost (a frozen dataclass sets each field).

    @property
    def parents(self) -> tuple[int, ...]:
        """The jobs this one was added after (``after=``), in that order."""
        return ()

    @property
    def parent_results(self) -> tuple[Any, ...]:
        """What each parent returned, in ``after`` order (``None``: failed)."""
        return ()

    @property
    def failed_parents(self) -> tuple[int, ...]:
        """The parents that failed (dead or cancelled), ``after_failure="run"``."""
        return ()


@dataclass(frozen=True, slots=True)
class StepJob(Job[P]):
    """The ``Job`` of a workflow's step (added ``after=`` others): its
    ``parents``, ``parent_results`` and ``failed_parents`` are its own."""

    step_parents: tuple[int, ...] = ()
    step_results: tuple[Any, ...] = ()
    step_failed: tuple[int, ...] = ()

    @property
    def parents(self) -> tuple[int, ...]:
        return self.step_parents

    @property
    def parent_results(self) -> tuple[Any, ...]:
        return self.step_results

    @property
    def failed_parents(self) -> tuple[int, ...]:
        return self.step_failed


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
    ``limits``: the limits it runs under; ``held_by``: the one holding it
    back while it waits, pending (see the README's section "Limits").
    ``parents``: the jobs it was added ``after=``, in that order;
    ``waiting_on``: those of them it still waits for (``waiting``);
    ``children``: the jobs added ``after=`` it, by id; ``after_failure``:
    what it does when a parent fails (``None`` without parents).
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
    #: The limits the job runs under (concrete names), and the one that
    #: holds it back now while it waits (``None``: none holds it).
    limits: tuple[str, ...] = ()
    held_by: str | None = None
    parents: tuple[int, ...] = ()
    waiting_on: tuple[int, ...] = ()
    children: tuple[int, ...] = ()
    after_failure: AfterFailure | None = None

    @property
    def stopping(self) -> bool:
        """Running, and asked to stop: it ends cancelled unless its handler
        returns normally."""
        return self.state is JobState.RUNNING and self.cancellation is not None


@dataclass(frozen=True, slots=True)
class Stats:
    """``pending`` (delayed included), ``running`` and ``dead`` as stored, across
    processes; ``completed`` and ``retried`` counted by this queue object,
    ``abandoned`` its worker threads given up at a time limit and still
    alive; ``delayed``: the
    pending jobs not due yet, and ``kept``: the completed jobs kept with their
    results (``keep_completed``) and not expired, both as stored across
    processes (0 from a store written before them); ``cancelled``: the
    cancelled jobs kept (``keep_cancelled``), as stored; ``waiting``: the
    jobs waiting for a parent (``after=``), as stored, in no other count;
    ``retrying``: the delayed jobs waiting to retry after a failed attempt
    (counted in ``delayed`` too, as ``delayed`` is in ``pending``: the
    never attempted ones are ``delayed - retrying``), as stored."""

    pending: int
    running: int
    dead: int
    completed: int
    retried: int
    abandoned: int = 0
    delayed: int = 0
    kept: int = 0
    cancelled: int = 0
    waiting: int = 0
    retrying: int = 0


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
    9999), and ``next_slots`` the next few (5; empty for an orphan);
    ``last_slot`` and ``last_job_id``: the latest slot enqueued (or
    skipped) by any process, and the latest job of it or run by hand
    (aware datetimes; ``None`` before the first slot). ``orphaned``: kept
    by the store but no longer declared in the code, so it never runs.
    ``paused_at`` and ``paused_by``: when and by whom it was paused
    (``None``: it runs); a paused schedule's slots are passed over.
    """

    name: str
    expression: str
    tz: str
    next_slot: dt.datetime | None
    last_slot: dt.datetime | None
    last_job_id: int | None
    orphaned: bool = False
    next_slots: tuple[dt.datetime, ...] = ()
    paused_at: dt.datetime | None = None
    paused_by: str | None = None

    @property
    def paused(self) -> bool:
        """Whether the schedule is paused: its slots are passed over."""
        return self.paused_at is not None or self.paused_by is not None


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """``queue.worker_stats()``: this process's worker threads running a
    handler now (``busy``) and waiting for a job (``idle``), and the
    workers its pool lacks (``lost``: abandoned at a time limit and not
    replaced, ``max_abandoned`` being reached; the pool is degraded while
    it is above 0)."""

    busy: int
    idle: int
    lost: int = 0

    @property
    def degraded(self) -> bool:
        """Whether the pool runs fewer threads than its workers."""
        return self.lost > 0


#: The periods a rate may be given in: ``"N/s"``, ``"N/m"``, ``"N/h"``.
RATE_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True, slots=True)
class Limit:
    """A limit as declared (``queue.limit``): its ``name`` (exact, or a
    family pattern ``"prefix:*"`` whose every key has these settings), at
    most ``concurrency`` attempts running at once, at most ``rate`` starts
    every ``per`` seconds (spaced evenly, ``burst`` of them at once: see the
    README's section "Limits"); ``None``: no such bound."""

    name: str
    concurrency: int | None = None
    rate: int | None = None
    per: float | None = None
    burst: int = 1

    @property
    def family(self) -> bool:
        """A pattern (``"account:*"``): each key it matches is limited alone."""
        return self.name.endswith(":*")

    @property
    def rate_text(self) -> str | None:
        """The rate as given: ``"10/s"``; ``None`` without one."""
        if self.rate is None or self.per is None:
            return None
        unit = next(u for u, seconds in RATE_PERIODS.items() if seconds == self.per)
        return f"{self.rate}/{unit}"

    @property
    def interval(self) -> float | None:
        """Seconds between evenly spaced starts (``per / rate``)."""
        if self.rate is None or self.per is None:
            return None
        return self.per / self.rate

    def matches(self, key: str) -> bool:
        """Whether the concrete limit ``key`` is this one or one of its family."""
        if self.family:
            prefix = self.name[:-1]
            return key.startswith(prefix) and len(key) > len(prefix)
        return key == self.name


@dataclass(frozen=True, slots=True)
class LimitUsage:
    """``queue.limits()``: a declared limit (as the store holds it) and how
    much of it is used now: attempts ``running`` under it and jobs
    ``waiting`` on it (held back), a family's summed over its keys."""

    name: str
    concurrency: int | None
    rate: str | None
    burst: int
    running: int
    waiting: int
