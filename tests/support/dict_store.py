"""A store written by a third party, against the documented contract alone
(``jobq.stores.base``): a dict of jobs guarded by the queue's lock.

Every call scans the jobs (O(n)): it is meant to be obviously right, not fast.
The jobs live on a ``Shelf`` that outlives the store object, as a database
outlives a process: a second store over the same shelf is a restart, and
jobs still running on it were running in a process that died. It leaves out
what the suite cannot check in one process: fork (``reset_after_fork``, see
``Store`` in ``jobq.stores.base``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from jobq import (
    AttemptError,
    Cancellation,
    Enqueued,
    FinishedMinute,
    JobRecord,
    JobState,
)
from jobq.stores.base import (
    CancelOutcome,
    Claim,
    Done,
    Failure,
    NewJob,
    Signal,
    SlotState,
    StoreStats,
    add_error,
    check_room,
    describe_error,
    ended_by_crash,
    log_dropped_dead,
    log_recovered,
    overlapping_job,
    paused,
    process_died,
    resumed,
    run_by_hand,
    slot_taken,
)


@dataclass
class Row:
    """One job as the shelf keeps it; payload and result as JSON text."""

    id: int
    created_at: float
    payload: str  # from here on, the fields of NewJob in its order
    run_at: float
    key: str | None
    priority: int
    max_attempts: int
    task: str | None
    timeout: float | None
    meta: str | None  # JSON object text
    limits: tuple[str, ...] = ()  # kept, never enforced: no Capabilities.limits
    after: tuple[int, ...] = ()  # never given: no Capabilities.workflows
    after_failure: str = "wait"
    state: JobState = JobState.PENDING
    attempts: int = 0
    last_error: str | None = None
    errors: tuple[AttemptError, ...] = ()
    result: str | None = None
    keep_until: float | None = None  # completed, cancelled: gone from then on
    cancellation: Cancellation | None = None  # cancelled, or running and stopping
    started_at: float | None = None  # the last attempt's
    finished_at: float | None = None
    token: int = 0  # running: the current claim's
    buried: int = 0  # dead: burial order


@dataclass
class Shelf:
    """Where the jobs live, beyond any one store object."""

    rows: dict[int, Row] = field(default_factory=dict)
    last_id: int = 0
    tokens: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    burials: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    schedules: dict[str, SlotState] = field(default_factory=dict)


class DictStore:
    """Jobs in a dict on a ``Shelf``, guarded by the queue's lock."""

    lease_seconds: float | None = None  # claims live as long as this process
    claim_batch = 4
    shared_between_processes = False
    keeps_results = False
    transactional_add = False

    def __init__(self, shelf: Shelf) -> None:
        self.shelf = shelf
        self.signal = Signal()
        self.dead_letter_limit = 1000
        self.opened = False

    # -- lifecycle --

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        with signal.lock:
            self.signal, self.dead_letter_limit = signal, dead_letter_limit
            if self.opened:
                return
            self.opened = True
            now = signal.clock()
            died = [r for r in self.shelf.rows.values() if r.state is JobState.RUNNING]
            for row in died:  # claimed by a process that is gone
                stopping = row.cancellation is not None
                end = ended_by_crash(row.attempts, row.max_attempts, stopping)
                self._failed(row, process_died(now), end, now, now)
            log_recovered(row.id for row in died)
            retried = sum(row.state is JobState.PENDING for row in died)
            if retried:
                self.signal.jobs_added_locked(retried)

    def close(self) -> None:
        """The shelf keeps everything."""

    def save(self) -> None:
        """The shelf keeps everything."""

    # -- the job's path --

    def add(
        self, jobs: Sequence[NewJob], now: float, *, max_pending: int | None = None
    ) -> list[Enqueued]:
        with self.signal.lock:
            held = self._held_keys()
            keys = {job.key for job in jobs if job.key is not None}
            adding = sum(job.key is None for job in jobs) + len(keys - held.keys())
            if max_pending is not None:
                check_room(self.stats().pending, adding, max_pending)
            added: list[Enqueued] = []
            due = 0
            for job in jobs:
                if job.key is not None and job.key in held:
                    added.append(Enqueued(held[job.key], True))
                    continue
                self.shelf.last_id += 1
                row = Row(self.shelf.last_id, now, *job)
                self.shelf.rows[row.id] = row
                if row.key is not None:
                    held[row.key] = row.id
                added.append(Enqueued(row.id, False))
                due += row.run_at <= now
            if adding:  # a delayed one may be the earliest now: wake a worker too
                self.signal.jobs_added_locked(max(due, 1))
            return added

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        with self.signal.lock:
            due = [r for r in self.shelf.rows.values() if self._pending_due(r, now)]
            due.sort(key=lambda r: (-r.priority, r.run_at, r.id))
            claims = []
            for row in due[:limit]:
                row.state, row.token = JobState.RUNNING, next(self.shelf.tokens)
                row.started_at, row.finished_at = now, None
                attempt = row.attempts + 1
                claims.append(
                    Claim(
                        row.id,
                        row.token,
                        row.payload,
                        attempt,
                        row.max_attempts,
                        row.key,
                        row.task,
                        row.run_at,
                        row.timeout,
                        row.meta,
                    )
                )
            return claims

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]:
        with self.signal.lock:
            self._purge(now)
            recorded = []
            for claim, result in done:
                row = self._claimed(claim)
                recorded.append(row is not None)
                if row is None:
                    continue
                if keep_until is None:
                    del self.shelf.rows[row.id]
                else:  # a stopping job whose handler returned completes too
                    row.state, row.result = JobState.COMPLETED, result
                    row.keep_until, row.token = keep_until, 0
                    row.finished_at, row.cancellation = now, None
            if any(recorded):
                self.signal.job_settled_locked()
            return recorded

    def fail_many(
        self, failures: Sequence[Failure], now: float
    ) -> list[JobState | None]:
        with self.signal.lock:
            states: list[JobState | None] = []
            for claim, error, retry_at in failures:
                row = self._claimed(claim)
                if row is None:
                    states.append(None)
                    continue
                if row.cancellation is not None:  # asked to stop: never retried
                    end = JobState.CANCELLED
                else:
                    end = JobState.DEAD if retry_at is None else JobState.PENDING
                self._failed(row, error, end, retry_at, now)
                states.append(end)
                if end is JobState.PENDING and row.run_at <= now:
                    self.signal.jobs_added_locked()
            return states

    def release(self, claims: Sequence[Claim], now: float) -> None:
        with self.signal.lock:
            for claim in claims:
                row = self._claimed(claim)
                if row is None:
                    continue
                row.token, row.started_at = 0, None  # it never started
                if row.cancellation is not None:  # asked to stop: it never will
                    row.state = JobState.CANCELLED  # kept until keep_until
                    self.signal.job_settled_locked()
                else:
                    row.state = JobState.PENDING
                    self.signal.jobs_added_locked()

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        """No leases: nothing to renew."""

    def recover(self, now: float) -> int:
        """No leases: claims of a dead process are recovered at ``open``."""
        return 0

    # -- looking and managing --

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        with self.signal.lock:
            row = self.shelf.rows.get(job_id)
            if row is None or self._expired(row, now):
                return None
            return self._record(row)

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        with self.signal.lock:
            rows = [r for r in self.shelf.rows.values() if r.state is state]
            if state is JobState.DEAD:
                rows.sort(key=lambda r: r.buried)
            else:
                rows.sort(key=lambda r: (r.run_at, -r.priority, r.id))
            return [self._record(row) for row in rows[:limit]]

    def revive(self, job_id: int, now: float) -> bool:
        with self.signal.lock:
            row = self.shelf.rows.get(job_id)
            if row is None or row.state is not JobState.DEAD:
                return False
            if row.key is not None and row.key in self._held_keys():
                return False
            row.state, row.attempts, row.run_at = JobState.PENDING, 0, now
            self.signal.jobs_added_locked()
            return True

    def delete_dead(self, job_id: int) -> bool:
        with self.signal.lock:
            row = self.shelf.rows.get(job_id)
            if row is None or row.state is not JobState.DEAD:
                return False
            del self.shelf.rows[job_id]
            return True

    def cancel(
        self, job_id: int, now: float, *, by: str, keep_until: float
    ) -> CancelOutcome | None:
        with self.signal.lock:
            self._purge(now)
            row = self.shelf.rows.get(job_id)
            if row is None:
                return None
            if row.state is JobState.PENDING:
                row.state, row.keep_until = JobState.CANCELLED, keep_until
                row.cancellation = Cancellation(now, by, None)
                self.signal.job_settled_locked()
                return "cancelled"
            if row.state is JobState.RUNNING:
                if row.cancellation is None:  # a second request changes nothing
                    row.cancellation = Cancellation(now, by, row.attempts + 1)
                    row.keep_until = keep_until  # for when it ends cancelled
                return "stopping"
            return None

    def stops_requested(self, claims: Sequence[Claim]) -> list[int]:
        with self.signal.lock:
            return [
                claim.id
                for claim in claims
                if (row := self._claimed(claim)) is not None
                and row.cancellation is not None
            ]

    def stats(self) -> StoreStats:
        with self.signal.lock:
            states = [row.state for row in self.shelf.rows.values()]
            now = self.signal.clock()
            return StoreStats(
                pending=states.count(JobState.PENDING),
                running=states.count(JobState.RUNNING),
                dead=states.count(JobState.DEAD),
                delayed=sum(
                    row.state is JobState.PENDING and row.run_at > now
                    for row in self.shelf.rows.values()
                ),
                kept=sum(
                    row.state is JobState.COMPLETED and not self._expired(row, now)
                    for row in self.shelf.rows.values()
                ),
                cancelled=sum(
                    row.state is JobState.CANCELLED and not self._expired(row, now)
                    for row in self.shelf.rows.values()
                ),
                retrying=sum(
                    row.state is JobState.PENDING
                    and row.run_at > now
                    and row.attempts > 0
                    for row in self.shelf.rows.values()
                ),
            )

    def finished_per_minute(self, since: float, now: float) -> list[FinishedMinute]:
        """The optional read (see ``jobq.stores.base``), by a scan."""
        with self.signal.lock:
            counts: dict[float, list[int]] = {}
            for row in self.shelf.rows.values():
                kept = row.state is JobState.COMPLETED and not self._expired(row, now)
                if row.finished_at is None or row.finished_at < since:
                    continue
                if kept or row.state is JobState.DEAD:
                    minute = counts.setdefault(row.finished_at // 60 * 60, [0, 0])
                    minute[0 if kept else 1] += 1
            return [FinishedMinute(m, *counts[m]) for m in sorted(counts)]

    def next_due(self) -> float | None:
        with self.signal.lock:
            pending = [
                r.run_at
                for r in self.shelf.rows.values()
                if r.state is JobState.PENDING
            ]
            return min(pending, default=None)

    # -- periodic jobs (ScheduleStore) --

    def enqueue_slot(
        self,
        name: str,
        expression: str,
        slot: float,
        job: NewJob,
        now: float,
        *,
        skip_running: bool,
    ) -> Enqueued | None:
        with self.signal.lock:
            state = self.shelf.schedules.get(name)
            if slot_taken(state, slot):
                return None
            skipped = overlapping_job(state, skip_running, self._live)
            result = (
                self.add([job], now)[0] if skipped is None else Enqueued(skipped, True)
            )
            self.shelf.schedules[name] = SlotState(name, expression, slot, result.id)
            return result

    def schedule_states(self) -> list[SlotState]:
        with self.signal.lock:
            return sorted(self.shelf.schedules.values())

    def pause_schedule(self, name: str, now: float, *, by: str) -> bool:
        with self.signal.lock:
            state = paused(self.shelf.schedules.get(name), name, now, by)
            if state is not None:
                self.shelf.schedules[name] = state
            return state is not None

    def resume_schedule(self, name: str, now: float) -> bool:
        with self.signal.lock:
            state = resumed(self.shelf.schedules.get(name), now)
            if state is not None:
                self.shelf.schedules[name] = state
            return state is not None

    def enqueue_now(
        self, name: str, job: NewJob, now: float, *, skip_running: bool
    ) -> Enqueued:
        with self.signal.lock:
            state = self.shelf.schedules.get(name)
            skipped = overlapping_job(state, skip_running, self._live)
            if skipped is not None:
                return Enqueued(skipped, True)
            result = self.add([job], now)[0]
            if not result.duplicate:
                self.shelf.schedules[name] = run_by_hand(state, name, result.id)
            return result

    # -- helpers (with the lock held) --

    def _live(self, job_id: int) -> bool:
        row = self.shelf.rows.get(job_id)
        return row is not None and row.state in (JobState.PENDING, JobState.RUNNING)

    def _held_keys(self) -> dict[str, int]:
        """Keys of pending and running jobs (not stopping ones: a cancel
        frees the key at once), and the job holding each."""
        return {
            row.key: row.id
            for row in self.shelf.rows.values()
            if row.key is not None
            and row.state in (JobState.PENDING, JobState.RUNNING)
            and row.cancellation is None
        }

    @staticmethod
    def _pending_due(row: Row, now: float) -> bool:
        return row.state is JobState.PENDING and row.run_at <= now

    @staticmethod
    def _expired(row: Row, now: float) -> bool:
        """A kept completed or cancelled job whose time is over (a stopping
        job holds the ``keep_until`` of its end, not yet its own)."""
        return (
            row.state in (JobState.COMPLETED, JobState.CANCELLED)
            and row.keep_until is not None
            and row.keep_until <= now
        )

    def _purge(self, now: float) -> None:
        """Remove the kept completed and cancelled jobs whose time is over."""
        for gone in [r for r in self.shelf.rows.values() if self._expired(r, now)]:
            del self.shelf.rows[gone.id]

    def _claimed(self, claim: Claim) -> Row | None:
        """The job ``claim`` is the current claim of, else ``None``."""
        row = self.shelf.rows.get(claim.id)
        if row is None or row.state is not JobState.RUNNING or row.token != claim.token:
            return None
        return row

    def _failed(
        self,
        row: Row,
        error: AttemptError,
        end: JobState,
        retry_at: float | None,
        now: float,
    ) -> None:
        """A failed attempt, recorded ``now``, that ends the job in ``end``:
        pending again at ``retry_at``, cancelled (it was stopping: kept until
        the ``keep_until`` its cancel gave), or dead (keeping the newest
        ``dead_letter_limit`` dead jobs)."""
        row.attempts += 1
        row.finished_at = now
        row.last_error = describe_error(error)
        row.errors = add_error(row.errors, error)
        row.token = 0
        if end is JobState.PENDING:
            assert retry_at is not None
            row.state, row.run_at = JobState.PENDING, retry_at
            return
        if end is JobState.CANCELLED:
            row.state = JobState.CANCELLED
            self.signal.job_settled_locked()
            return
        row.state, row.buried = JobState.DEAD, next(self.shelf.burials)
        dead = sorted(
            (r for r in self.shelf.rows.values() if r.state is JobState.DEAD),
            key=lambda r: r.buried,
        )
        for gone in dead[: max(len(dead) - self.dead_letter_limit, 0)]:
            del self.shelf.rows[gone.id]
            log_dropped_dead(self.dead_letter_limit, gone.id, gone.last_error)
        self.signal.job_settled_locked()

    @staticmethod
    def _record(row: Row) -> JobRecord[Any]:
        return JobRecord(
            id=row.id,
            payload=json.loads(row.payload),
            attempts=row.attempts,
            state=row.state,
            run_at=row.run_at,
            created_at=row.created_at,
            last_error=row.last_error,
            key=row.key,
            priority=row.priority,
            result=None if row.result is None else json.loads(row.result),
            task=row.task,
            errors=row.errors,
            max_attempts=row.max_attempts,
            started_at=row.started_at,
            finished_at=row.finished_at,
            timeout=row.timeout,
            meta=MappingProxyType(json.loads(row.meta or "{}")),
            cancellation=row.cancellation,
            limits=row.limits,
        )
