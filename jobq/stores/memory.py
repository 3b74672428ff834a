"""The memory store: the whole queue in this process, gone when it exits.

Every operation is O(log n) or better: due jobs are kept in run order
(priority, due time, id; see ``_due``), delayed jobs in a heap ordered by due
time, and a claim moves the jobs that became due from one to the other.
Cancelled jobs are left where they are and skipped when they surface, so
nothing scans the queue.

Stored jobs (see ``_entry``) are never changed in place: each change stores a new one,
and which jobs run is kept beside them in ``_claims`` (id -> token and the
attempt's start). That lets the JSON store take a consistent snapshot by
copying references under the lock and serialize it after releasing the lock,
and it keeps a claim cheap: taking a job touches no entry at all. A running
job's entry still holds its previous attempt's times; what shows it (``get``,
``list_jobs``, ``view``) puts the claim's start in, and the outcome's new
entry records it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from jobq._fork import reset_after_fork
from jobq.stores._activity import ActivityInMemory
from jobq.stores._due import DueJobs
from jobq.stores._entry import (
    AFTER_FAILURE,
    ATTEMPTS,
    CANCELLATION,
    CANCELLED,
    COMPLETED,
    DEAD,
    EXPIRES_AT,
    FINISHED_AT,
    ID,
    KEY,
    LAST_ERROR,
    LIMITS,
    MAX_ATTEMPTS,
    META,
    PARENTS,
    PAYLOAD,
    PENDING,
    PRIORITY,
    RESULT,
    RUN_AT,
    RUNNING,
    STARTED_AT,
    STATE,
    TASK,
    TIMEOUT,
    WAITING,
    Entry,
    evolve,
    failed,
    new_entry,
    record,
    started,
)
from jobq.stores._family import Standing, first_outcomes, waits, with_outcome
from jobq.stores._limiter import Limiter
from jobq.stores.base import (
    CancelOutcome,
    Capabilities,
    Claim,
    Done,
    Failure,
    NewJob,
    ParentEnd,
    Signal,
    SlotState,
    StoreStats,
    check_room,
    child_fate,
    ended_by_crash,
    log_dropped_dead,
    overlapping_job,
    parent_ended,
    paused,
    process_died,
    resumed,
    run_by_hand,
    slot_taken,
    unknown_parent,
)
from jobq.stores.helpers import (
    OneJobCalls,
)
from jobq.stores.pages import JobPage, JobQuery, pending_view, sort_key, take_page
from jobq.types import AttemptError, Enqueued, JobRecord, JobState, Limit, LimitUsage


class _JobTable:
    """Jobs by id, kept in blocks of consecutive ids.

    A plain dict would do for lookups; blocks let the JSON store copy the
    queue for a snapshot a block at a time, each copy small and taken under
    the lock for a moment, instead of one copy of every reference at once
    (which the garbage collector then walks, pausing every thread).
    """

    __slots__ = ("_blocks",)

    def __init__(self) -> None:
        self._blocks: dict[int, dict[int, Entry]] = {}

    def get(self, job_id: int) -> Entry | None:
        block = self._blocks.get(job_id >> _BLOCK_BITS)
        return None if block is None else block.get(job_id)

    def __getitem__(self, job_id: int) -> Entry:
        return self._blocks[job_id >> _BLOCK_BITS][job_id]

    def __setitem__(self, job_id: int, entry: Entry) -> None:
        block = self._blocks.get(job_id >> _BLOCK_BITS)
        if block is None:
            block = self._blocks[job_id >> _BLOCK_BITS] = {}
        block[job_id] = entry

    def __delitem__(self, job_id: int) -> None:
        number = job_id >> _BLOCK_BITS
        block = self._blocks[number]
        del block[job_id]
        if not block:
            del self._blocks[number]

    def pop(self, job_id: int) -> Entry:
        entry = self[job_id]
        del self[job_id]
        return entry

    def values(self) -> Iterator[Entry]:
        for block in self._blocks.values():
            yield from block.values()

    def block_numbers(self) -> list[int]:
        return list(self._blocks)

    def copy_block(self, number: int) -> tuple[Entry, ...]:
        """The entries of one block as they are now (empty if it is gone)."""
        block = self._blocks.get(number)
        return () if block is None else tuple(block.values())


#: Ids per block of a ``_JobTable``: 2**12.
_BLOCK_BITS = 12


class ChangeRecorder(Protocol):
    """Told of every change a ``MemoryStore`` makes, with its lock held: a
    store that keeps the memory store's jobs elsewhere (the JSON file's
    journal) records them. Each call must be quick and must not fail."""

    def stored(self, entry: Entry) -> None:
        """This entry is now how the job stands (pending, dead, completed)."""

    def removed(self, job_id: int) -> None:
        """This job is gone."""

    def claimed(self, job_id: int, started_at: float) -> None:
        """This pending job now runs, since ``started_at``."""

    def stopping(self, entry: Entry, started_at: float | None) -> None:
        """This running job (since ``started_at``) was asked to stop: its
        entry now holds the request."""

    def scheduled(self, state: SlotState) -> None:
        """A schedule's state was stored (``enqueue_slot``)."""

    def declared(self, limit: Limit) -> None:
        """A limit's declaration was stored (``declare_limit``)."""

    def settled(self) -> None:
        """A job left pending or running: the recorder wakes ``join``
        callers (``Signal.job_settled_locked``) once it has recorded that."""

    def begin(self) -> None:
        """The changes told until ``end`` are one write (a parent's end and
        its children's): recorded together or not at all."""

    def end(self) -> None:
        """The end of what ``begin`` began."""


class MemoryStore(ActivityInMemory, OneJobCalls):
    """Jobs in this process's memory, guarded by the queue's lock.

    ``recorder``: told of every change (see ``ChangeRecorder``); the JSON
    store holds a memory store and records its changes in a journal.
    """

    lease_seconds: float | None = None
    shared_between_processes = False
    keeps_results = False
    transactional_add = False
    capabilities = Capabilities(
        pages=True, schedules=True, limits=True, workflows=True, activity=True
    )
    location = "memory"
    #: Nothing survives a crash here, so workers may always take several jobs.
    claim_batch: int = 32

    def __init__(self, *, recorder: ChangeRecorder | None = None) -> None:
        self._recorder = recorder
        self._signal = Signal()
        self._lock = self._signal.lock
        self._dead_letter_limit = 1000
        self._tokens = itertools.count(1)
        self._clear()
        self._clear_activity()
        reset_after_fork(self)

    def _after_fork_in_child(self) -> None:
        """This child holds a copy of the queue, not the parent's threads: the
        jobs the parent was running are pending again here (at least once)."""
        self._signal = Signal()  # the parent's lock may be held by a thread now gone
        self._lock = self._signal.lock
        self._clear_activity()  # the parent's figures, and its lock
        for job_id in self._claims:
            entry = self._jobs[job_id] = started(self._jobs[job_id], None)
            self._pending += 1
            self._due_of(entry).push((-entry[PRIORITY], entry[RUN_AT], job_id))
        self._claims.clear()
        self._push_due(self._limiter.restart(self._limiter.declarations()))

    def _clear(self) -> None:
        self._jobs = _JobTable()
        # running job id -> its claim's token and its attempt's started_at
        self._claims: dict[int, tuple[int, float | None]] = {}
        self._due = DueJobs()
        # Due jobs under limits, apart: a claim looks at them only when there
        # are any, so jobs under none cost a claim nothing more.
        self._limited = DueJobs()
        self._any_limited = False  # _limited may hold something
        self._delayed: list[tuple[float, int]] = []  # (run_at, id)
        # The pending jobs whose item in ``_delayed`` is live (not yet moved
        # to a lane, nor gone stale), and how many of them are retries: so
        # ``stats`` counts delayed and retrying jobs without walking them.
        self._heaped: dict[int, bool] = {}  # id -> a retry (attempts > 0)
        self._heaped_retries = 0
        self._keys: dict[str, int] = {}
        self._dead: OrderedDict[int, None] = OrderedDict()  # burial order
        self._completed: deque[tuple[float, int]] = deque()  # (expires_at, id)
        self._cancelled: deque[tuple[float, int]] = deque()  # likewise
        self._pending = 0  # waiting, not running
        self._waiting = 0  # waiting for a parent (after=)
        # parent id -> its children's ids, in the order they were added
        self._children: dict[int, list[int]] = {}
        self._next_id = 1
        self._schedules: dict[str, SlotState] = {}
        self._limiter = Limiter()
        self._rate_waits = self._limiter.waits  # the same list: read per claim

    # -- lifecycle -----------------------------------------------------------

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        self._signal = signal
        self._lock = signal.lock
        self._dead_letter_limit = dead_letter_limit

    def close(self) -> None:
        """Nothing to release: the jobs live as long as this object."""

    def save(self) -> None:
        """Nothing to save: memory keeps nothing beyond the process."""

    # -- the job's path: add, claim, finish or fail ---------------------------

    def add(
        self, jobs: Sequence[NewJob], now: float, *, max_pending: int | None = None
    ) -> list[Enqueued]:
        results: list[Enqueued] = []
        recorder = self._recorder
        with self._lock:
            if max_pending is not None:
                check_room(self._pending, self._new_jobs(jobs), max_pending)
            due = 0
            keys = self._keys
            for new in jobs:
                # Unpacked: reading a named tuple's fields costs more.
                (payload, run_at, key, priority, max_attempts, task, timeout, meta,
                 limits, after, _) = new  # fmt: skip
                if key is not None and key in keys:
                    results.append(Enqueued(keys[key], True))
                    continue
                job_id = self._next_id
                self._next_id = job_id + 1
                if after:
                    self._check_parents(jobs, job_id, results)
                    due += self._add_child(job_id, new, now)
                    results.append(Enqueued(job_id, False))
                    continue
                entry = new_entry(job_id, payload, key, priority, run_at, now,
                                  max_attempts, task, timeout, meta,
                                  limits)  # fmt: skip
                self._jobs[job_id] = entry
                if key is not None:
                    keys[key] = job_id
                self._pending += 1
                due += self._schedule(entry, now)
                if recorder is not None:  # _changed, without its call
                    recorder.stored(entry)
                results.append(Enqueued(job_id, False))
            if due:
                self._signal.jobs_added_locked(due)
        return results

    def _add_child(self, job_id: int, new: NewJob, now: float) -> int:
        """Add a job with parents: waiting, pending, or cancelled at once
        (a parent failed already); 1 if it is due now (see ``_schedule``)."""
        parents, cancelled_by = first_outcomes(
            new.after, new.after_failure, self._standing
        )
        for parent_id in new.after:
            self._children.setdefault(parent_id, []).append(job_id)
        entry = new_entry(job_id, new.payload, new.key, new.priority, new.run_at, now,
                          new.max_attempts, new.task, new.timeout, new.meta,
                          new.limits, WAITING if waits(parents) else PENDING,
                          parents or tuple((p, None, None) for p in new.after),
                          new.after_failure)  # fmt: skip
        if cancelled_by is not None:
            keep_until = now + self._signal.keep_cancelled
            self._end_cancelled(
                evolve(entry, cancellation=(now, cancelled_by, None, keep_until))
            )
            self._settled()
            return 0
        self._jobs[job_id] = entry
        if new.key is not None:
            self._keys[new.key] = job_id
        self._changed(entry)
        if entry[STATE] == WAITING:
            self._waiting += 1
            return 0
        self._pending += 1
        return self._schedule(entry, now)

    def _check_parents(
        self, jobs: Sequence[NewJob], job_id: int, added: list[Enqueued]
    ) -> None:
        """At the batch's first job with parents (``job_id``, after the
        jobs ``added``): ``ValueError`` for a parent id never given (see
        ``add``), those jobs taken back: all or none. Not before: the usual
        batch has no parents, and pays nothing for them."""
        if any(new.after for new in itertools.islice(jobs, len(added))):
            return  # an earlier job of the batch had parents: checked then
        first_id = job_id - sum(not job.duplicate for job in added)
        for new in jobs:
            if new.after and max(new.after) >= first_id:
                for job in added:
                    if not job.duplicate:
                        self._take_back(self._jobs.pop(job.id))
                raise unknown_parent(max(new.after))

    def _take_back(self, entry: Entry) -> None:
        """Forget a plain job just added: ``add`` failed after it."""
        self._release_key(entry)
        self._pending -= 1  # its heap item is skipped when it surfaces
        self._unheap(entry[ID])
        self._changed(entry[ID])

    def _standing(self, job_id: int) -> Standing:
        """How a parent stands for a child added now (see ``Standing``)."""
        entry = self._jobs.get(job_id)
        if entry is None:
            return None
        state = entry[STATE]
        if state == COMPLETED:
            return "completed", entry[RESULT]
        if job_id not in self._claims and state in (DEAD, CANCELLED):
            return state, None  # type: ignore[return-value]  # DEAD, CANCELLED
        return None, None

    def _new_jobs(self, jobs: Sequence[NewJob]) -> int:
        """How many of ``jobs`` ``add`` would add: those whose key no live job
        (nor an earlier job of the batch) holds."""
        keys = {job.key for job in jobs if job.key is not None}
        held = sum(key in self._keys for key in keys)
        return sum(job.key is None for job in jobs) + len(keys) - held

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        claims: list[Claim] = []
        recorder = self._recorder
        with self._lock:
            due = self._due
            if self._rate_waits:  # held jobs a rate lets go by now
                self._push_due(self._limiter.ready(now))
            if self._delayed and self._delayed[0][0] <= now:
                self._promote(now)
            if self._any_limited:
                self._claim_mixed(claims, now, limit)
                return claims
            # Jobs under no limit: ``_claimed`` and ``_pending_entry``
            # inlined, so that such a claim costs no call more than it did
            # before limits existed.
            jobs = self._jobs
            while len(claims) < limit:
                try:
                    _, run_at, job_id = due.pop()
                except IndexError:  # nothing more is due
                    break
                entry = jobs.get(job_id)
                if entry is None or entry[STATE] != PENDING or entry[RUN_AT] != run_at:
                    continue  # cancelled or rescheduled since it was pushed
                token = next(self._tokens)
                self._claims[job_id] = (token, now)
                self._pending -= 1
                if recorder is not None:
                    recorder.claimed(job_id, now)
                claims.append(Claim(job_id, token, entry[PAYLOAD], entry[ATTEMPTS] + 1,
                                    entry[MAX_ATTEMPTS], entry[KEY], entry[TASK],
                                    run_at, entry[TIMEOUT], entry[META], (),
                                    entry[PARENTS]))  # fmt: skip
        return claims

    def _claim_mixed(self, claims: list[Claim], now: float, limit: int) -> None:
        """``claim_many``'s loop while jobs under limits are due: the two
        lanes merged in run order, each limited job admitted or held."""
        due, limited = self._due, self._limited
        while len(claims) < limit:
            top, first = limited.peek(), due.peek()
            if top is None:
                self._any_limited = False  # the next claim takes the usual loop
            if top is not None and (first is None or top < first):
                entry = self._admitted(limited.pop(), now)
                if entry is None:
                    continue  # held by a limit (or gone)
            elif first is not None:
                _, run_at, job_id = due.pop()
                entry = self._pending_entry(run_at, job_id)
                if entry is None:
                    continue  # cancelled or rescheduled since it was pushed
            else:
                return
            claims.append(self._claimed(entry, now))

    def _claimed(self, entry: Entry, now: float) -> Claim:
        """The due ``entry`` claimed: running under a new token."""
        job_id = entry[ID]
        token = next(self._tokens)
        self._claims[job_id] = (token, now)
        self._pending -= 1
        if self._recorder is not None:
            self._recorder.claimed(job_id, now)
        return Claim(job_id, token, entry[PAYLOAD], entry[ATTEMPTS] + 1,
                     entry[MAX_ATTEMPTS], entry[KEY], entry[TASK], entry[RUN_AT],
                     entry[TIMEOUT], entry[META], entry[LIMITS],
                     entry[PARENTS])  # fmt: skip

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]:
        with self._lock:
            if self._completed:
                self._expire(self._completed, COMPLETED, now)
            # A loop: on Python 3.11 a comprehension is a call of a closure,
            # a cost a single job's finish would pay.
            ended: list[bool] = []
            for claim, result in done:
                ok = self._finish_locked(claim, result, keep_until, now)
                ended.append(ok)
            if self._signal.joiners and any(ended):
                self._settled()
        return ended

    def _finish_locked(
        self, claim: Claim, result: str | None, keep_until: float | None, now: float
    ) -> bool:
        ended = self._end_claim(claim, now)
        if ended is None:
            return False
        entry, start = ended
        if self._children:  # a workflow's step may be a parent: see there
            return self._finish_step(entry, start, result, keep_until, now)
        if entry[KEY] is not None:  # the usual job has none: no call
            self._release_key(entry)
        if keep_until is None:
            del self._jobs[entry[ID]]
            if self._recorder is not None:  # _changed, without its call
                self._recorder.removed(entry[ID])
        else:
            entry = evolve(entry, state=COMPLETED, result=result, expires_at=keep_until,
                           started_at=start, finished_at=now,
                           cancellation=None)  # its work is done  # fmt: skip
            self._jobs[entry[ID]] = entry
            self._completed.append((keep_until, entry[ID]))
            self._changed(entry)
        return True

    def _finish_step(
        self,
        entry: Entry,
        start: float | None,
        result: str | None,
        keep_until: float | None,
        now: float,
    ) -> bool:
        """``_finish_locked`` while workflows exist: a parent's success
        and its children's changes, one write."""
        job_id = entry[ID]
        with self._family_write(job_id):
            self._release_key(entry)
            if keep_until is None:
                del self._jobs[job_id]
                self._changed(job_id)
            else:
                entry = evolve(entry, state=COMPLETED, result=result,
                               expires_at=keep_until, started_at=start,
                               finished_at=now, cancellation=None)  # fmt: skip
                self._jobs[job_id] = entry
                self._completed.append((keep_until, job_id))
                self._changed(entry)
            self._parent_ended(job_id, "completed", result, "completed", now)
            if keep_until is None:
                self._children.pop(job_id, None)
        return True

    def release(self, claims: Sequence[Claim], now: float) -> None:
        with self._lock:
            released = stopped = 0
            for claim in claims:
                ended = self._end_claim(claim, now)
                if ended is None:
                    continue
                entry = started(ended[0], None)
                if entry[CANCELLATION] is not None:  # asked to stop: it never starts
                    with self._family_write(entry[ID]):
                        self._end_cancelled(entry)
                        self._parent_ended(entry[ID], "cancelled", None,
                                           "was cancelled", now)  # fmt: skip
                    stopped += 1
                    continue
                self._jobs[claim.id] = entry
                self._pending += 1
                self._schedule(entry, now)
                self._changed(entry)  # the JSON store: no longer running
                released += 1
            if released:
                self._signal.jobs_added_locked(released)
            if stopped:
                self._settled()

    def fail_many(
        self, failures: Sequence[Failure], now: float
    ) -> list[JobState | None]:
        states: list[JobState | None] = []
        with self._lock:
            due = settled = 0
            for claim, error, retry_at in failures:
                ended = self._end_claim(claim, now)
                if ended is None:
                    states.append(None)
                    continue
                entry, start = ended
                if entry[CANCELLATION] is not None:
                    with self._family_write(entry[ID]):
                        self._end_cancelled(failed(entry, error, started_at=start,
                                                   finished_at=now))  # fmt: skip
                        self._parent_ended(entry[ID], "cancelled", None,
                                           "was cancelled", now)  # fmt: skip
                    states.append(JobState.CANCELLED)
                    settled += 1
                elif retry_at is None:
                    with self._family_write(entry[ID]):
                        self._bury(failed(entry, error, state=DEAD, started_at=start,
                                          finished_at=now))  # fmt: skip
                        self._parent_ended(entry[ID], "dead", None, "died", now)
                    states.append(JobState.DEAD)
                    settled += 1
                else:
                    entry = failed(entry, error, run_at=retry_at, started_at=start,
                                   finished_at=now)  # fmt: skip
                    self._jobs[entry[ID]] = entry
                    self._pending += 1
                    due += self._schedule(entry, now)
                    self._changed(entry)
                    states.append(JobState.PENDING)
            if due:
                self._signal.jobs_added_locked(due)
            if settled:
                self._settled()
        return states

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        """Claims live as long as this process: nothing to renew."""

    def recover(self, now: float) -> int:
        """Claims live as long as this process: none can expire."""
        return 0

    # -- looking and managing --------------------------------------------------

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        with self._lock:
            entry = self._jobs.get(job_id)
            if entry is None or (
                entry[EXPIRES_AT] is not None and entry[EXPIRES_AT] <= now
            ):
                return None
            held = self._claims.get(job_id)
            children = tuple(self._children.get(job_id, ()))
            if held is None:
                return record(entry, False, self._limiter.held_by(job_id), children)
            return record(started(entry, held[1]), True, None, children)

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        with self._lock:
            if state == DEAD:
                ids = list(itertools.islice(self._dead, limit))
                return [record(self._jobs[i], False) for i in ids]
            running = state == RUNNING
            claims = self._claims
            entries = [
                e
                for e in self._jobs.values()
                if (e[ID] in claims) == running
                and e[STATE] == (PENDING if running else state)
            ]
            if running:
                entries = [started(e, claims[e[ID]][1]) for e in entries]
        entries.sort(key=lambda e: (e[RUN_AT], -e[PRIORITY], e[ID]))
        held_by = self._limiter.held_by
        return [record(entry, running, held_by(entry[ID])) for entry in entries[:limit]]

    def revive(self, job_id: int, now: float) -> bool:
        with self._lock:
            entry = self._jobs.get(job_id)
            if entry is None or entry[STATE] != DEAD:
                return False
            if entry[KEY] is not None:
                if entry[KEY] in self._keys:
                    return False
                self._keys[entry[KEY]] = job_id
            del self._dead[job_id]
            entry = evolve(entry, state=PENDING, attempts=0, run_at=now)
            self._jobs[job_id] = entry
            self._pending += 1
            self._schedule(entry, now)
            self._signal.jobs_added_locked()
            self._changed(entry)
            return True

    def delete_dead(self, job_id: int) -> bool:
        with self._lock:
            if job_id not in self._dead:
                return False
            with self._family_write(job_id):
                del self._dead[job_id]
                del self._jobs[job_id]
                self._changed(job_id)
                self._gone(job_id, "was deleted", self._signal.clock())
            return True

    # -- limits (LimitStore) -----------------------------------------------------

    def declare_limit(self, limit: Limit) -> Limit | None:
        with self._lock:
            replaced, released = self._limiter.declare(limit, self._signal.clock())
            self._push_due(released)
            if self._recorder is not None:
                self._recorder.declared(limit)
            return replaced

    def limit_usage(self, now: float) -> list[LimitUsage]:
        with self._lock:
            return self._limiter.usage()

    def limit_declarations(self) -> list[Limit]:
        """The declarations, by name (``lock`` held: the JSON store's snapshot)."""
        return self._limiter.declarations()

    def restore_limits(self, limits: Sequence[Limit]) -> None:
        """Replace the declarations with loaded ones (``lock`` held)."""
        self._limiter.restart(limits)

    def cancel(
        self, job_id: int, now: float, *, by: str, keep_until: float
    ) -> CancelOutcome | None:
        with self._lock:
            entry = self._jobs.get(job_id)
            if entry is None or entry[STATE] not in (PENDING, WAITING):
                return None
            self._release_key(entry)
            if job_id in self._claims:  # running: it stops, then ends cancelled
                if entry[CANCELLATION] is None:
                    request = (now, by, entry[ATTEMPTS] + 1, keep_until)
                    entry = self._jobs[job_id] = evolve(entry, cancellation=request)
                    if self._recorder is not None:
                        self._recorder.stopping(entry, self._claims[job_id][1])
                return "stopping"
            if self._cancelled:
                self._expire(self._cancelled, CANCELLED, now)
            if entry[STATE] == WAITING:
                self._waiting -= 1
            else:
                self._pending -= 1  # its heap item is skipped when it surfaces
                self._unheap(job_id)
            if entry[LIMITS]:
                self._push_due(self._limiter.cancelled(job_id, entry[LIMITS], now))
            with self._family_write(job_id):
                self._end_cancelled(
                    evolve(entry, cancellation=(now, by, None, keep_until))
                )
                self._parent_ended(job_id, "cancelled", None, "was cancelled", now)
            self._settled()
            return "cancelled"

    def stops_requested(self, claims: Sequence[Claim]) -> list[int]:
        with self._lock:
            return [
                claim.id
                for claim in claims
                if self._current(claim)
                and self._jobs[claim.id][CANCELLATION] is not None
            ]

    def stats(self) -> StoreStats:
        with self._lock:
            now = self._signal.clock()
            self._promote(now)  # what is left in the heap is delayed
            return StoreStats(
                self._pending, len(self._claims), len(self._dead), len(self._heaped),
                _live_count(self._completed, now), _live_count(self._cancelled, now),
                self._waiting, self._heaped_retries,
            )  # fmt: skip

    def page_jobs(self, query: JobQuery, now: float) -> JobPage:
        """A page of a list (see ``jobq.stores.pages``): a walk of the jobs
        in memory that builds records for the page's jobs only."""
        view = query.view
        with self._lock:
            claims = self._claims
            if view == "running":
                entries: Iterable[Entry] = (
                    started(self._jobs[i], held[1]) for i, held in claims.items()
                )
            elif view == "dead":
                entries = (self._jobs[i] for i in self._dead)
            else:
                state = {
                    "completed": COMPLETED, "cancelled": CANCELLED, "waiting": WAITING
                }.get(view, PENDING)  # fmt: skip
                pending = state == PENDING
                entries = (
                    e
                    for e in self._jobs.values()
                    if e[STATE] == state
                    and e[ID] not in claims
                    and (e[EXPIRES_AT] is None or e[EXPIRES_AT] > now)
                    and (
                        not pending or pending_view(e[RUN_AT], e[ATTEMPTS], now) == view
                    )
                )
            running = view == "running"
            return take_page(
                (
                    (sort_key(view, e[PRIORITY], e[RUN_AT], e[ID], _ended_at(e)), e)
                    for e in entries
                    if query.admits(e[TASK], e[KEY], e[LAST_ERROR])
                ),
                query,
                lambda entry: record(entry, running, self._limiter.held_by(entry[ID])),
            )

    def next_due(self) -> float | None:
        with self._lock:
            for due in (self._due, self._limited):
                while (top := due.peek()) is not None and not self._pending_entry(
                    *top[1:]
                ):
                    due.pop()
                if top is not None:
                    return top[1]
            delayed = self._delayed
            while delayed and not self._pending_entry(*delayed[0]):
                heapq.heappop(delayed)
            times = [delayed[0][0]] if delayed else []
            rate = self._limiter.next_ready()  # a held job a rate lets go then
            if rate is not None:
                times.append(rate)
            return min(times, default=None)

    # -- periodic jobs (ScheduleStore) ----------------------------------------

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
        with self._lock:
            state = self._schedules.get(name)
            if slot_taken(state, slot):
                return None
            skipped = overlapping_job(state, skip_running, self._live)
            result = (
                self.add([job], now)[0] if skipped is None else Enqueued(skipped, True)
            )
            self._put_schedule(SlotState(name, expression, slot, result.id))
            return result

    def schedule_states(self) -> list[SlotState]:
        with self._lock:
            return sorted(self._schedules.values())

    def pause_schedule(self, name: str, now: float, *, by: str) -> bool:
        with self._lock:
            state = paused(self._schedules.get(name), name, now, by)
            if state is not None:
                self._put_schedule(state)
            return state is not None

    def resume_schedule(self, name: str, now: float) -> bool:
        with self._lock:
            state = resumed(self._schedules.get(name), now)
            if state is not None:
                self._put_schedule(state)
            return state is not None

    def enqueue_now(
        self, name: str, job: NewJob, now: float, *, skip_running: bool
    ) -> Enqueued:
        with self._lock:
            state = self._schedules.get(name)
            skipped = overlapping_job(state, skip_running, self._live)
            if skipped is not None:
                return Enqueued(skipped, True)
            result = self.add([job], now)[0]
            if not result.duplicate:
                self._put_schedule(run_by_hand(state, name, result.id))
            return result

    def _put_schedule(self, state: SlotState) -> None:
        """Store a schedule's state, and record it (``lock`` held)."""
        self._schedules[state.name] = state
        if self._recorder is not None:
            self._recorder.scheduled(state)

    def restore_schedules(self, states: Sequence[SlotState]) -> None:
        """Replace the schedules' states with loaded ones (``lock`` held)."""
        self._schedules = {state.name: state for state in states}

    def _live(self, job_id: int) -> bool:
        """Whether the job is pending or running."""
        entry = self._jobs.get(job_id)
        return job_id in self._claims or (entry is not None and entry[STATE] == PENDING)

    # -- for a store that keeps these jobs elsewhere (the JSON file) ---------

    @property
    def lock(self) -> threading.RLock:
        """The lock that guards the jobs (the queue's, once opened)."""
        return self._lock

    @property
    def clock(self) -> Callable[[], float]:
        """The queue's clock (see ``Signal.clock``)."""
        return self._signal.clock

    def view(self) -> tuple[list[int], list[Entry], dict[int, float | None], int]:
        """With ``lock`` held: the numbers of the blocks of jobs (to copy one
        at a time with ``copy_block``), the dead entries in burial order, the
        running jobs' ids with their attempts' ``started_at`` (their entries
        hold the previous attempt's), and the next id to give."""
        dead = [self._jobs[job_id] for job_id in self._dead]
        running = {job_id: held[1] for job_id, held in self._claims.items()}
        return self._jobs.block_numbers(), dead, running, self._next_id

    def copy_block(self, number: int) -> tuple[Entry, ...]:
        """The entries of one block of ``view``, as they are now (take
        ``lock`` for the copy: it is quick)."""
        return self._jobs.copy_block(number)

    # -- telling the recorder (called with the lock held) ---------------------

    def _settled(self) -> None:
        """A job left pending or running: wake ``join`` callers, or have the
        recorder wake them once the change is recorded (the JSON store's
        journal: ``join`` returns once another process can read it)."""
        if self._recorder is None:
            self._signal.job_settled_locked()
        else:
            self._recorder.settled()

    def _changed(self, change: Entry | int) -> None:
        """An entry was stored, or the job with this id removed."""
        recorder = self._recorder
        if recorder is not None:
            if isinstance(change, int):
                recorder.removed(change)
            else:
                recorder.stored(change)

    # -- workflows (call with the lock held) -----------------------------------

    def _parent_ended(
        self, parent_id: int, end: ParentEnd, result: str | None, how: str, now: float
    ) -> None:
        """Carry a parent's end to its waiting children (see "Workflows" in
        ``jobq.stores.base``): each counts it, is released, or is cancelled
        (and its own children after it)."""
        if parent_id not in self._children:
            return
        ends = [(parent_id, end, result, how)]
        released: list[tuple[int, str | None]] = []
        due = cancelled = 0
        while ends:
            parent_id, end, result, how = ends.pop()
            for child_id in self._children.get(parent_id, ()):
                child = self._jobs.get(child_id)
                if child is None or child[STATE] != WAITING:
                    continue
                fate = child_fate(child[AFTER_FAILURE] or "wait", end)
                if fate == "waiting":
                    continue
                if fate == "cancel":
                    self._waiting -= 1
                    self._release_key(child)
                    by = parent_ended(parent_id, how)
                    keep_until = now + self._signal.keep_cancelled
                    self._end_cancelled(
                        evolve(child, cancellation=(now, by, None, keep_until))
                    )
                    cancelled += 1
                    ends.append((child_id, "cancelled", None, "was cancelled"))
                    continue
                parents = with_outcome(child[PARENTS], parent_id, end, result)
                if waits(parents):
                    child = evolve(child, parents=parents)
                else:
                    run_at = max(child[RUN_AT], now)
                    child = evolve(child, parents=parents, state=PENDING, run_at=run_at)
                    self._waiting -= 1
                    self._pending += 1
                    due += self._schedule(child, now)
                    released.append((child_id, child[TASK]))
                self._jobs[child_id] = child
                self._changed(child)
        if due:
            self._signal.jobs_added_locked(due)
        if cancelled:
            self._settled()
        self._signal.jobs_released(released)

    def _gone(self, job_id: int, how: str, now: float) -> None:
        """A dead job is gone (deleted, or dropped beyond the cap): its
        waiting children end as a cancelled parent's do."""
        if job_id in self._children:
            self._parent_ended(job_id, "cancelled", None, how, now)
            del self._children[job_id]

    @contextmanager
    def _family_write(self, job_id: int) -> Iterator[None]:
        """A parent's end and its children's changes as one write for the
        recorder (the JSON store's journal: one record)."""
        grouped = self._recorder is not None and job_id in self._children
        if grouped:
            self._recorder.begin()  # type: ignore[union-attr]  # grouped says
        try:
            yield
        finally:
            if grouped:
                self._recorder.end()  # type: ignore[union-attr]

    # -- helpers (call with the lock held) -------------------------------------

    def _schedule(self, entry: Entry, now: float) -> int:
        """Put a pending entry in the right heap; 1 if it is due now, else 0.

        A delayed job that becomes the earliest one also wakes an idle worker,
        so that worker shortens its wait to the new due time.
        """
        if entry[RUN_AT] <= now:
            due = self._due_of(entry) if entry[LIMITS] else self._due  # no call: usual
            due.push((-entry[PRIORITY], entry[RUN_AT], entry[ID]))
            return 1
        if not self._delayed or entry[RUN_AT] < self._delayed[0][0]:
            self._signal.jobs_added_locked()
        heapq.heappush(self._delayed, (entry[RUN_AT], entry[ID]))
        self._unheap(entry[ID])  # an older item of the job's, gone stale
        retry = self._heaped[entry[ID]] = entry[ATTEMPTS] > 0
        self._heaped_retries += retry
        return 0

    def _promote(self, now: float) -> None:
        """Move the delayed jobs due by ``now`` to their lanes (claims take
        them from there), dropping the stale items met on the way."""
        delayed, due = self._delayed, self._due
        while delayed and delayed[0][0] <= now:
            run_at, job_id = heapq.heappop(delayed)
            entry = self._pending_entry(run_at, job_id)
            if entry is not None:
                self._unheap(job_id)
                lane = self._due_of(entry) if entry[LIMITS] else due
                lane.push((-entry[PRIORITY], run_at, job_id))

    def _unheap(self, job_id: int) -> None:
        """The job no longer has a live item in ``_delayed``."""
        retry = self._heaped.pop(job_id, None)
        if retry is not None:
            self._heaped_retries -= retry

    def _pending_entry(self, run_at: float, job_id: int) -> Entry | None:
        """The pending job a queued (run_at, id) stands for; ``None`` if it was
        cancelled or rescheduled since (heap and lane items are skipped when
        they surface, never searched for)."""
        entry = self._jobs.get(job_id)
        if entry is None or entry[STATE] != PENDING or entry[RUN_AT] != run_at:
            return None
        return entry

    def _current(self, claim: Claim) -> bool:
        """Whether ``claim`` is the job's current claim."""
        held = self._claims.get(claim.id)
        return held is not None and held[0] == claim.token

    def _end_claim(self, claim: Claim, now: float) -> tuple[Entry, float | None] | None:
        """The claimed entry and its attempt's ``started_at``, the claim
        ended and its limits' slots freed; ``None`` if the token is stale
        (``_current``, inlined: this runs for every job)."""
        held = self._claims.get(claim.id)
        if held is None or held[0] != claim.token:
            return None
        del self._claims[claim.id]
        entry = self._jobs[claim.id]
        if entry[LIMITS]:
            self._push_due(self._limiter.free(entry[LIMITS], now))
        return entry, held[1]

    def _due_of(self, entry: Entry) -> DueJobs:
        """Where a due job waits for a claim: apart if it has limits."""
        if entry[LIMITS]:
            self._any_limited = True
            return self._limited
        return self._due

    def _admitted(self, item: tuple[int, float, int], now: float) -> Entry | None:
        """The pending job of a due ``item`` under limits, its slots and
        starts taken; ``None`` if its limits hold it back (or it is gone)."""
        entry = self._pending_entry(item[1], item[2])
        if entry is None:
            return None
        admitted, released = self._limiter.admit(item, entry[LIMITS], now)
        self._push_due(released)
        return entry if admitted else None

    def _push_due(self, items: list[tuple[int, float, int]]) -> None:
        """Held jobs a limit let go: due again, in their order, waking workers."""
        if items:
            self._any_limited = True
            for item in items:
                self._limited.push(item)
            self._signal.jobs_added_locked(len(items))

    def _release_key(self, entry: Entry) -> None:
        if entry[KEY] is not None and self._keys.get(entry[KEY]) == entry[ID]:
            del self._keys[entry[KEY]]

    def _end_cancelled(self, entry: Entry) -> None:
        """Store ``entry`` cancelled, kept until its cancellation says."""
        keep_until = entry[CANCELLATION][3]  # type: ignore[index]  # set by cancel
        entry = evolve(entry, state=CANCELLED, expires_at=keep_until)
        self._jobs[entry[ID]] = entry
        kept = self._cancelled
        if kept and keep_until < kept[-1][0]:  # a stopped job, asked long ago: rare
            bisect.insort(kept, (keep_until, entry[ID]))
        else:
            kept.append((keep_until, entry[ID]))
        self._changed(entry)

    def _bury(self, entry: Entry) -> None:
        """Store a dead entry and drop the oldest dead beyond the limit."""
        self._release_key(entry)
        self._jobs[entry[ID]] = entry
        self._dead[entry[ID]] = None
        self._changed(entry)
        self._trim_dead()

    def _trim_dead(self) -> None:
        while len(self._dead) > self._dead_letter_limit:
            dropped, _ = self._dead.popitem(last=False)
            gone = self._jobs.pop(dropped)
            self._changed(dropped)
            log_dropped_dead(self._dead_letter_limit, dropped, gone[LAST_ERROR])
            self._gone(dropped, "was dropped from the dead-letter list",
                       self._signal.clock())  # fmt: skip

    def _expire(self, kept: deque[tuple[float, int]], state: str, now: float) -> None:
        """Purge the kept jobs of ``state`` (completed, cancelled) whose time
        is over: the head of ``kept``, which is in expiry order."""
        while kept and kept[0][0] <= now:
            _, job_id = kept.popleft()
            entry = self._jobs.get(job_id)
            if entry is not None and entry[STATE] == state:
                del self._jobs[job_id]
                self._changed(job_id)
                self._children.pop(job_id, None)

    def restore(
        self,
        entries: Sequence[Entry],
        running: Sequence[int],
        next_id: int,
        now: float,
        *,
        recover: bool,
    ) -> None:
        """Replace every job with loaded entries (dead ones in burial order),
        rebuilding the indexes; with ``lock`` held.

        For stores loaded from disk. With ``recover``, the jobs in ``running``
        were running when their process died: each becomes a failed attempt
        (told to the recorder), so a job that kills its process ends
        in the dead letters instead of killing every restart. Without it (a
        reader beside a live owner) they are shown as running, and no claim
        of this process can end them.
        """
        self._clear()
        error = process_died(now)
        self._next_id = max(next_id, *(e[ID] + 1 for e in entries), 1)
        died = set(running) if recover else set()
        # A reader's claims: tokens start at 1, so none of this process ends them.
        self._claims = dict.fromkeys(set(running) - died, (0, None))
        buried: list[int] = []
        ended: list[Entry] = []  # died as parents may have: their children follow
        for entry in entries:
            if entry[ID] in self._claims:  # its entry holds the start
                self._claims[entry[ID]] = (0, entry[STARTED_AT])
            if entry[ID] in died:
                entry = self._died(entry, error, now)
                if entry[STATE] == DEAD:
                    buried.append(entry[ID])
                if entry[STATE] != PENDING:
                    ended.append(entry)
                self._changed(entry)
            elif entry[STATE] == DEAD:
                self._dead[entry[ID]] = None
            self._jobs[entry[ID]] = entry
            for parent in entry[PARENTS]:
                self._children.setdefault(parent[0], []).append(entry[ID])
            if entry[STATE] == WAITING:
                self._waiting += 1
            if entry[STATE] == PENDING and entry[ID] not in self._claims:
                self._pending += 1
                self._schedule(entry, now)
            live = entry[STATE] in (PENDING, WAITING) and entry[CANCELLATION] is None
            if live and entry[KEY] is not None:
                self._keys[entry[KEY]] = entry[ID]
        for children in self._children.values():
            children.sort()
        self._dead.update(dict.fromkeys(buried))
        for entry in ended:
            how = "died" if entry[STATE] == DEAD else "was cancelled"
            self._parent_ended(entry[ID], entry[STATE], None, how, now)  # type: ignore[arg-type]
        for kept, state in ((self._completed, COMPLETED), (self._cancelled, CANCELLED)):
            kept.extend(
                sorted(
                    (e[EXPIRES_AT], e[ID])
                    for e in self._jobs.values()
                    if e[STATE] == state and e[EXPIRES_AT] is not None
                )
            )
        self._trim_dead()

    @staticmethod
    def _died(entry: Entry, error: AttemptError, now: float) -> Entry:
        """The entry of a job whose process died while it ran (``error``):
        its attempt failed, and it ends as ``ended_by_crash`` says."""
        cancel = entry[CANCELLATION]
        state = ended_by_crash(entry[ATTEMPTS], entry[MAX_ATTEMPTS], cancel is not None)
        if cancel is not None:  # state is CANCELLED
            return failed(entry, error, state=CANCELLED, expires_at=cancel[3],
                          finished_at=now)  # fmt: skip
        if state is JobState.PENDING:
            return failed(entry, error, state=PENDING, run_at=now, finished_at=now)
        return failed(entry, error, state=DEAD, finished_at=now)


def _live_count(kept: deque[tuple[float, int]], now: float) -> int:
    """How many of ``kept`` (in expiry order, holding every kept job of its
    state) have not expired at ``now``: the expired ones not purged yet are
    at its head, a walk of those few."""
    expired = 0
    for expires_at, _ in kept:
        if expires_at > now:
            break
        expired += 1
    return len(kept) - expired


def _ended_at(entry: Entry) -> float | None:
    """When a job's list places it, newest first: a cancelled job by when it
    was cancelled, any other by its last attempt's end."""
    cancel = entry[CANCELLATION]
    return entry[FINISHED_AT] if cancel is None else cancel[0]
