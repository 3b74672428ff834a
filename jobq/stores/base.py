"""The store protocol: everything the queue asks of the place where jobs live.

The queue never touches job state itself; it asks the store. Memory and JSON
keep the state in this process, guarded by the queue's lock (``Signal.lock``);
SQLite and PostgreSQL keep it in the database and use ``Signal`` only to wake
this process's idle workers. Payloads and results cross this boundary as JSON
text, so every store holds exactly what it was given and no caller can mutate
a stored job through a shared object.
"""

from __future__ import annotations

import inspect
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from jobq._json import decode
from jobq.errors import QueueFull
from jobq.types import AttemptError, Enqueued, JobRecord, JobState

logger = logging.getLogger(__name__)


#: Failed attempts kept per job in ``errors``.
ERRORS_KEPT = 20


def describe_error(error: AttemptError) -> str:
    """A job's ``last_error`` for a failed attempt: "Type: message" or "Type"."""
    return f"{error.type}: {error.message}" if error.message else error.type


def add_error(
    errors: tuple[AttemptError, ...], error: AttemptError
) -> tuple[AttemptError, ...]:
    """``errors`` with ``error`` appended, keeping the newest ``ERRORS_KEPT``."""
    return (*errors, error)[-ERRORS_KEPT:]


def log_dropped_dead(limit: int, job_id: int, last_error: str | None) -> None:
    """Say that the dead-letter limit dropped a job: nothing disappears silently."""
    logger.warning(
        "dead-letter limit %d reached: dropped dead job %d (%s)",
        limit,
        job_id,
        last_error,
    )


def log_recovered(job_ids: Iterable[int]) -> None:
    """Say which claims were recovered as failed attempts (their process died
    or stopped renewing their lease)."""
    for job_id in job_ids:
        logger.warning(
            "job %d was running in a process that died or stopped renewing its "
            "lease: recorded a failed attempt",
            job_id,
        )


def check_room(pending: int, adding: int, max_pending: int) -> None:
    """Raise ``QueueFull`` if ``adding`` new jobs would make more than
    ``max_pending`` pending; a store calls it before it changes anything.
    Duplicates of held keys are not new: they never count."""
    if adding and pending + adding > max_pending:
        raise QueueFull(
            f"the queue holds {pending} pending jobs and max_pending is "
            f"{max_pending}; {adding} more were not added"
        )


def batch_size(value: object) -> int:
    """``claim_batch``: an int >= 1, else ``TypeError`` or ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"claim_batch must be an int, not {value!r}")
    if value < 1:
        raise ValueError(f"claim_batch must be at least 1, not {value}")
    return value


def positive_seconds(value: object, name: str) -> float:
    """A store option in seconds: a finite number > 0, else ``TypeError`` or
    ``ValueError`` naming the option."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"{name} must be a finite number of seconds > 0, not {value!r}"
        )
    return float(value)


#: The states the database stores keep: a pending job is "scheduled" (due
#: later) or "ready" (due), so that a claim never walks past future rows.
DATABASE_STATES = {
    "scheduled": JobState.PENDING,
    "ready": JobState.PENDING,
    "running": JobState.RUNNING,
    "dead": JobState.DEAD,
    "completed": JobState.COMPLETED,
}


def record_from_row(
    row: Sequence[Any], errors: Iterable[Sequence[Any]]
) -> JobRecord[Any]:
    """A job as the database stores select it: (id, state, payload, attempts,
    run_at, created_at, last_error, key, priority, result, task, errors,
    max_attempts, ...), with ``errors`` already parsed."""
    (job_id, state, payload, attempts, run_at, created_at, last_error, key, priority,
     result, task, _, max_attempts) = row[:13]  # fmt: skip
    return JobRecord(
        id=job_id,
        payload=decode(payload),
        attempts=attempts,
        state=DATABASE_STATES[state],
        run_at=run_at,
        created_at=created_at,
        last_error=last_error,
        key=key,
        priority=priority,
        result=None if result is None else decode(result),
        task=task,
        errors=tuple(
            AttemptError(str(t), str(m), str(tb), float(at)) for t, m, tb, at in errors
        ),
        max_attempts=max_attempts,
    )


def process_died(at: float) -> AttemptError:
    """The failed attempt recorded for a job whose process died while it ran."""
    return AttemptError(
        type="ProcessDied",
        message="the process died while the job was running",
        traceback="",
        at=at,
    )


class NewJob(NamedTuple):
    """A job to add, already validated and serialized by the queue."""

    payload: str
    run_at: float
    key: str | None
    priority: int
    max_attempts: int
    task: str | None = None


class Claim(NamedTuple):
    """A running job, fenced by ``token``: only the current claim may end it.

    (Named tuples here, not dataclasses: these are built once per job on the
    hot path, and a tuple is built several times faster.)
    """

    id: int
    token: int
    payload: str
    attempt: int
    max_attempts: int
    key: str | None
    task: str | None


class Done(NamedTuple):
    """A claim whose handler returned, and its result as JSON text (or None)."""

    claim: Claim
    result: str | None


class Failure(NamedTuple):
    """A claim whose handler failed: the attempt's error, and when the job
    runs again (``None``: it is dead)."""

    claim: Claim
    error: AttemptError
    retry_at: float | None


@dataclass(frozen=True, slots=True)
class StoreStats:
    """The counts a store can answer in O(1) (memory, JSON) or one query."""

    pending: int
    running: int
    dead: int


class Signal:
    """Wakes this process's idle workers and ``join`` callers.

    Two conditions share one lock so that a new job wakes a worker, never a
    ``join`` caller, and a finished job wakes ``join`` callers, never a worker.
    ``generation`` grows with every new claimable job, so a worker that found
    nothing can tell whether something arrived before it went to sleep.
    ``clock`` is the queue's clock, for a store that needs the time outside a
    call that passes ``now`` (recovering a dead process's claims at ``open``).
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock: Callable[[], float] = clock or (lambda: time.time())
        self.lock = threading.RLock()
        self.work = threading.Condition(self.lock)
        self.settled = threading.Condition(self.lock)
        self.generation = 0
        self.idle_workers = 0
        self.joiners = 0

    def jobs_added_locked(self, count: int = 1) -> None:
        """New claimable jobs exist; call with ``lock`` held."""
        self.generation += 1
        if self.idle_workers:
            self.work.notify(count)

    def jobs_added(self, count: int = 1) -> None:
        """As ``jobs_added_locked``, for stores that do not hold ``lock``."""
        with self.lock:
            self.jobs_added_locked(count)

    def job_settled_locked(self) -> None:
        """A job left the pending or running state; call with ``lock`` held."""
        if self.joiners:
            self.settled.notify_all()

    def job_settled(self) -> None:
        """As ``job_settled_locked``, for stores that do not hold ``lock``."""
        with self.lock:
            self.job_settled_locked()


def accepts_connection(store: object) -> bool:
    """Whether ``store.add`` takes ``connection=``: the caller's database
    connection, whose current transaction the jobs are then written in
    (``JobQueue.enqueue(..., connection=conn)``; the PostgreSQL store).

    Optional for stores, so it is not part of ``Store.add``: the queue passes
    ``connection`` only when the caller gave one, and refuses it with a clear
    ``TypeError`` for a store that cannot take it.
    """
    add = getattr(store, "add", None)
    if add is None:
        return False
    try:
        parameters = inspect.signature(add).parameters
    except (TypeError, ValueError):
        return False
    return "connection" in parameters


class _Batches(Protocol):
    def claim_many(self, now: float, limit: int) -> list[Claim]: ...

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]: ...

    def fail_many(self, failures: Sequence[Failure], now: float) -> list[bool]: ...


class OneJobCalls:
    """``Store.claim``, ``Store.finish`` and ``Store.fail`` for one job, as the
    store's ``claim_many``, ``finish_many`` and ``fail_many``: the built-in
    stores take it as their base, so the one-job calls behave exactly as the
    batch calls do."""

    def claim(self: _Batches, now: float) -> Claim | None:
        claims = self.claim_many(now, 1)
        return claims[0] if claims else None

    def finish(
        self: _Batches,
        claim: Claim,
        result: str | None,
        keep_until: float | None,
        now: float,
    ) -> bool:
        return self.finish_many([Done(claim, result)], keep_until, now)[0]

    def fail(
        self: _Batches,
        claim: Claim,
        error: AttemptError,
        retry_at: float | None,
        now: float,
    ) -> bool:
        return self.fail_many([Failure(claim, error, retry_at)], now)[0]


@runtime_checkable
class Store(Protocol):
    """Where jobs live. Every method is thread-safe.

    ``now`` arguments are the queue's clock (epoch seconds); a store with a
    clock of its own (a database server) may use that instead, consistently.
    Methods that end a claim take the ``Claim`` and change nothing (returning
    ``False``) when its token is no longer current.
    """

    #: Seconds a claim lasts without renewal; ``None`` where claims live as
    #: long as this process (memory, JSON), so no renewal is needed.
    lease_seconds: float | None

    #: How many due jobs a worker may take with one ``claim_many`` while its
    #: handlers are fast (about 2 ms of work at a time). More is faster: one
    #: write for several jobs. Persistent stores default to 1, because after a
    #: crash every job a worker held runs again, and those it had not started
    #: yet count a failed attempt too.
    claim_batch: int

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        """Acquire files, locks or connections; idempotent.

        Called on first use, never at construction. Recovers the claims of a
        process that died (a failed attempt each, see ``process_died``).
        """

    def close(self) -> None:
        """Save what is unsaved and release everything ``open`` took; idempotent."""

    def add(
        self, jobs: Sequence[NewJob], now: float, *, max_pending: int | None = None
    ) -> list[Enqueued]:
        """Add jobs in one write; a key held by a pending or running job (or by
        an earlier job of the same batch) yields that job's id as a duplicate.

        With ``max_pending``, raise ``QueueFull`` and add nothing if the new
        jobs (duplicates do not count) would make more than that many
        pending (``check_room``); exact within a process, approximate across
        processes."""

    def claim(self, now: float) -> Claim | None:
        """Take the due job that runs next (highest priority, earliest due,
        lowest id) and mark it running under a new token; ``None`` if none.
        (``claim_many`` for one job.)"""

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        """``claim`` up to ``limit`` due jobs in one write, in run order.

        Workers with fast handlers take several jobs at a time, so that the
        store's cost (a lock, a transaction, a round trip) is paid once for
        many jobs; see ``jobq._workers``.
        """

    def finish(
        self, claim: Claim, result: str | None, keep_until: float | None, now: float
    ) -> bool:
        """Record success: remove the job, or keep it ``completed`` with its
        ``result`` (JSON text) until ``keep_until``. Frees the key.
        (``finish_many`` for one job.)"""

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]:
        """``finish`` each claim with its result, in one write; whether each
        was recorded (``False`` for a claim no longer current)."""

    def release(self, claims: Sequence[Claim], now: float) -> None:
        """Give back claims whose jobs did not start: pending again as they
        were, no attempt counted (workers that claimed several jobs at once,
        stopping before they ran them all)."""

    def fail(
        self, claim: Claim, error: AttemptError, retry_at: float | None, now: float
    ) -> bool:
        """Record a failed attempt: pending again at ``retry_at``, or dead when
        ``retry_at`` is ``None`` (which frees the key). (``fail_many`` for
        one job.)"""

    def fail_many(self, failures: Sequence[Failure], now: float) -> list[bool]:
        """``fail`` each claim, in one write; whether each was recorded
        (``False`` for a claim no longer current). Workers record their
        failed attempts together, as their successes: a lock taken once per
        job is what a burst of failures would otherwise queue on."""

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        """Extend the lease of running claims (no-op without leases)."""

    def recover(self, now: float) -> int:
        """Turn expired claims into failed attempts; how many were recovered."""

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        """The job in any state, or ``None`` (expired completed jobs are gone)."""

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        """Jobs in one state: dead oldest-buried first, pending in run order."""

    def revive(self, job_id: int, now: float) -> bool:
        """Make a dead job pending now with no attempts; ``False`` if it is not
        dead or its key is held by another live job."""

    def delete_dead(self, job_id: int) -> bool:
        """Remove a dead job."""

    def cancel(self, job_id: int) -> bool:
        """Remove a pending job (not a running one), freeing its key."""

    def stats(self) -> StoreStats:
        """Pending (delayed included), running and dead counts."""

    def next_due(self) -> float | None:
        """When the earliest pending job becomes due; ``None`` if none is pending."""

    def save(self) -> None:
        """Make everything durable now; raise ``StoreError`` if it cannot."""
