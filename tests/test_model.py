"""Model-based test: random sequences of queue operations against a reference model.

A Hypothesis state machine drives a real ``JobQueue`` on every store of
``conftest.STORES`` with random sequences of enqueue, enqueue_many, time
passing, running one job (which succeeds, fails, raises ``Fatal`` or
``Retry(after=...)``), claiming a job and ending that claim through the store
protocol, cancel, retry_dead, delete_dead, save, and, for persistent stores,
restart and crash. ``Model`` below is the contract of design.md §1-§3 written
as plainly as possible; after every step the queue must agree with it:
``stats()``, ``dead_jobs()`` in burial order, and ``get(id)`` of every job
ever added; and job ids only grow. A disagreement prints the shortest sequence
of steps that shows it (``derandomize``: CI runs the same sequences each time).

Time is a fake clock (``clock=``) that only the test moves, in whole seconds,
with ``jitter=False``: the model predicts exactly which job runs next and
when each one is due. The fake clock runs far behind the wall clock, so a
store that reads ``time.time()`` where the contract means the queue's clock
is caught.

A crash is a byte copy of the store's files taken while the queue is open (a
change is written before the call that made it returns, so the copy is what a
killed process leaves: JSON snapshot and journal, SQLite database, WAL and
shared-memory file), and a new queue on the copy. Jobs that were claimed then
are jobs whose process died: each comes back as a failed attempt (pending
again, or dead when out of attempts). The JSON store recovers them when it
loads; SQLite and PostgreSQL recover them once their lease has run out (the
copy was made by this live process, so its claims are not those of a dead
pid): the SQLite store's leases follow the host's clock, so the test makes
them run out in the file; PostgreSQL's follow the database's, so the test
waits out a lease of a few hundredths of a second.
PostgreSQL has no files to copy: there a crash is a new store object on the
same queue, which is what a host that died leaves behind.

A store that orders jobs on a clock of its own (PostgreSQL as configured by
default) runs the same machine without the steps that need the queue's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from places import POSTGRES_LEASE, SQLITE_LEASE, Place, places
from sqlite_leases import expire_sqlite_claims

import jobq
from jobq.stores import SqliteStore, Store
from jobq.stores.base import Claim
from jobq.types import AttemptError, Enqueued, JobState

PENDING, RUNNING, DEAD, COMPLETED, CANCELLED = (
    JobState.PENDING,
    JobState.RUNNING,
    JobState.DEAD,
    JobState.COMPLETED,
    JobState.CANCELLED,
)

#: How ``last_error`` begins for a job whose process died.
DIED = "jobq.errors.ProcessDied: "
#: The fake clock's start, in epoch seconds: far behind the wall clock.
T0 = 1_000_000.0
#: Backoff with whole seconds, so every due time is exact in any store.
BASE_DELAY, MAX_DELAY = 1.0, 8.0
#: How long to wait for a PostgreSQL lease to run out before failing.
LEASE_WAIT = 10.0

#: Examples per store kind; each runs up to STEPS steps. Tuned so that the
#: whole file takes well under a minute.
EXAMPLES = {"memory": 300, "json": 80, "sqlite": 80, "postgres": 25}
OWN_CLOCK_EXAMPLES = 12
STEPS = 30

KEYS = st.sampled_from([None, None, "a", "b"])  # few keys, so that they collide
PRIORITIES = st.integers(-1, 2)  # few values, so that ties are common
DELAYS = st.sampled_from([0, 0, 0, 2, 30])
OUTCOMES = st.sampled_from(["succeed", "error", "fatal", "retry"])
AFTER = st.sampled_from([0, 2, 30])
PICK = st.integers(0, 1000)  # an index into the candidates of a step (mod len)


# -- the reference model -------------------------------------------------------------


@dataclass
class ModelJob:
    id: int
    payload: int
    key: str | None
    priority: int
    run_at: float
    attempts: int = 0
    state: JobState = PENDING
    result: Any = None
    expires_at: float | None = None
    last_error: str = ""  # how the newest failed attempt's last_error begins
    #: Running and asked to stop: kept until then once it ends cancelled.
    cancelled_until: float | None = None
    cancelled_attempt: int | None = None

    @property
    def stopping(self) -> bool:
        return self.state is RUNNING and self.cancelled_until is not None


@dataclass
class Model:
    """The contract, in plain dicts and lists.

    ``jobs`` holds every job ``get`` should find (pending, running, dead,
    kept completed); ``dead`` the dead ones in burial order; ``ids`` every id
    handed out. ``completed`` and ``retried`` are the current queue object's
    counters. ``fail`` and ``died`` are what a store records; which failures
    are retried is the runner's policy, in ``QueueMachine.run_one``.
    """

    max_attempts: int
    dead_letter_limit: int
    keep_completed: float
    keep_cancelled: float = 0
    jobs: dict[int, ModelJob] = field(default_factory=dict)
    dead: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    completed: int = 0
    retried: int = 0

    def holder(self, key: str | None) -> int | None:
        """The pending or running job holding ``key`` (not a stopping one)."""
        for job in self.jobs.values():
            if (
                key is not None
                and job.key == key
                and job.state in (PENDING, RUNNING)
                and not job.stopping
            ):
                return job.id
        return None

    def add(self, job: ModelJob) -> None:
        assert job.id > max(self.ids, default=0), "job ids must only grow"
        self.jobs[job.id] = job
        self.ids.append(job.id)

    def next_due(self, now: float) -> ModelJob | None:
        """Highest priority first, then the earliest due, then the lowest id."""
        due = [j for j in self.jobs.values() if j.state is PENDING and j.run_at <= now]
        return min(due, key=lambda j: (-j.priority, j.run_at, j.id), default=None)

    def succeed(self, job: ModelJob, result: Any, keep_until: float | None) -> None:
        if keep_until is None:
            del self.jobs[job.id]
        else:
            job.state, job.result, job.expires_at = COMPLETED, result, keep_until

    def fail(self, job: ModelJob, retry_at: float | None, error: str) -> None:
        job.attempts += 1
        job.last_error = error
        if job.stopping:
            self.end_cancelled(job)
        elif retry_at is None:
            self.bury(job)
        else:
            job.state, job.run_at = PENDING, retry_at

    def died(self, jobs: list[ModelJob], now: float, shown_dead: list[int]) -> None:
        """Their process died while they ran: a failed attempt each, due again
        now, or dead when out of attempts.

        Jobs that die together have no order of their own: those buried
        together go to the end of the dead-letter list in the order the store
        shows (``shown_dead``, its list afterwards), after those of them that
        the limit dropped at once.
        """
        buried = {
            j.id for j in jobs if j.attempts + 1 >= self.max_attempts and not j.stopping
        }
        kept = [i for i in shown_dead if i in buried]
        order = sorted(buried - set(kept)) + kept
        for job in jobs:
            if job.id not in buried:
                self.fail(job, now, DIED)
        for job_id in order:
            self.fail(self.jobs[job_id], None, DIED)

    def end_cancelled(self, job: ModelJob) -> None:
        job.state, job.expires_at = CANCELLED, job.cancelled_until

    def bury(self, job: ModelJob) -> None:
        job.state = DEAD
        self.dead.append(job.id)
        while len(self.dead) > self.dead_letter_limit:
            del self.jobs[self.dead.pop(0)]

    def revive(self, job_id: int, now: float) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job.state is not DEAD or self.holder(job.key) is not None:
            return False
        self.dead.remove(job_id)
        job.state, job.attempts, job.run_at = PENDING, 0, now
        return True

    def delete_dead(self, job_id: int) -> bool:
        if job_id not in self.dead:
            return False
        self.dead.remove(job_id)
        del self.jobs[job_id]
        return True

    def cancel(self, job_id: int, now: float) -> bool:
        """A pending job ends cancelled, a running one is asked to stop."""
        job = self.jobs.get(job_id)
        if job is None or job.state not in (PENDING, RUNNING):
            return False
        if job.cancelled_until is None:
            job.cancelled_until = now + self.keep_cancelled
            if job.state is PENDING:
                self.end_cancelled(job)
            else:
                job.cancelled_attempt = job.attempts + 1
        return True

    def visible(self, job_id: int, now: float) -> ModelJob | None:
        """What ``get`` returns: kept completed jobs only until they expire."""
        job = self.jobs.get(job_id)
        if job is None or (job.expires_at is not None and job.expires_at <= now):
            return None
        return job

    def next_change(self, now: float) -> float | None:
        """When time passing changes something next: a job falls due, or a
        kept job expires; ``None`` if nothing waits for time."""
        times = [j.run_at for j in self.jobs.values() if j.state is PENDING]
        times += [j.expires_at for j in self.jobs.values() if j.expires_at]
        return min((t for t in times if t > now), default=None)

    def counts(self, now: float) -> tuple[int, int, int, int]:
        """Pending, running, dead and kept cancelled jobs."""
        states = [j.state for j in self.jobs.values()]
        cancelled = sum(
            1
            for i, j in self.jobs.items()
            if j.state is CANCELLED and self.visible(i, now)
        )
        return (states.count(PENDING), states.count(RUNNING), states.count(DEAD),
                cancelled)  # fmt: skip


# -- the state machine -----------------------------------------------------------------


class QueueMachine(RuleBasedStateMachine):
    """One example: a queue over a fresh place, and the model beside it."""

    new_place: ClassVar[Callable[[], Place]]

    def __init__(self) -> None:
        super().__init__()
        self.place = self.new_place()
        self.places = [self.place]
        # On a store's own clock the fake clock moves nothing: every delay is
        # 0, and ``now`` is only the model's step count, which orders due
        # times as the store's clock does.
        self.own_clock = self.place.own_clock
        self.base_delay = 0.0 if self.own_clock else BASE_DELAY
        self.now = T0
        self.queue: jobq.JobQueue[int] | None = None
        self.model = Model(max_attempts=1, dead_letter_limit=0, keep_completed=0)
        self.options: dict[str, Any] = {}
        self.held: list[tuple[Claim, float]] = []  # claims taken by `hold`
        self.outcome: tuple[str, float] = ("succeed", 0)
        self.ran: list[tuple[int, int, str | None, int]] = []
        self.payloads = 0
        self.shown: set[int] = set()  # ids that `get` found at the last check
        self.check_all = True  # look up every id ever given at the next check

    def teardown(self) -> None:
        try:
            if self.queue is not None:
                self.queue.close()
        finally:
            for place in self.places:
                place.remove()

    # -- helpers -----------------------------------------------------------------------

    @property
    def q(self) -> jobq.JobQueue[int]:
        assert self.queue is not None
        return self.queue

    @property
    def leases(self) -> bool:
        """Claims expire unless renewed (SQLite, PostgreSQL)."""
        return self.q.store.lease_seconds is not None

    def handle(self, job: jobq.Job[int]) -> Any:
        self.ran.append((job.id, job.attempt, job.key, job.payload))
        outcome, after = self.outcome
        if outcome == "succeed":
            return {"done": job.payload}
        if outcome == "error":
            raise ValueError(f"job {job.id} failed")
        if outcome == "fatal":
            raise jobq.Fatal("hopeless")
        raise jobq.Retry("not now", after=after)

    def open_queue(self) -> None:
        """A new queue object (a new process) on the current place."""
        self.queue = jobq.JobQueue(
            self.handle, store=self.place.store(), clock=lambda: self.now,
            jitter=False, base_delay=self.base_delay, max_delay=MAX_DELAY,
            **self.options,
        )  # fmt: skip
        self.model.completed = self.model.retried = 0
        self.q.stats()  # opens the store (recovering what a dead process ran)
        self.check_all = True

    def recover_held(self, *, at_open: bool) -> None:
        """The held claims' process died (or their leases ran out): each is a
        failed attempt, recovered at load (JSON) or once its lease expired."""
        held, self.held = self.held, []
        if not held:
            return
        store = self.q.store
        if not self.leases:
            assert at_open, "claims without leases end only with their process"
        elif isinstance(store, SqliteStore):  # on the host's clock: expired here
            self.now = max(claimed_at for _, claimed_at in held) + SQLITE_LEASE
            expire_sqlite_claims(store.path)
            assert store.recover(self.now) == len(held)
        else:  # the lease runs out on the database's clock
            deadline = time.monotonic() + LEASE_WAIT
            recovered = 0
            while recovered < len(held):
                assert time.monotonic() < deadline, "the leases never ran out"
                time.sleep(POSTGRES_LEASE / 2)
                recovered += store.recover(self.now)
            assert recovered == len(held)
        died = [self.model.jobs[claim.id] for claim, _ in held]
        self.model.died(died, self.now, [r.id for r in self.q.dead_jobs()])
        for claim, _ in held:  # a stale token changes nothing
            assert not store.finish(claim, None, None, self.now)
            failure = AttemptError("Fatal", "late", "", self.now)
            assert not store.fail(claim, failure, None, self.now)

    def seconds(self, seconds: float) -> float:
        """A delay: 0 on a store's own clock, which the test cannot move."""
        return 0.0 if self.own_clock else seconds

    @property
    def max_held(self) -> int:
        """Jobs held at once. On a store's own clock, jobs recovered together
        are due at moments the model cannot tell apart: one at a time."""
        return 1 if self.own_clock else 2

    def pick(self, pick: int, likely: list[int]) -> int:
        """An id: three times in four one of ``likely`` (if any), else any id
        ever given, or one never given."""
        if likely and pick % 4 != 3:
            return likely[pick // 4 % len(likely)]
        candidates = [*self.model.ids, max(self.model.ids, default=0) + 1000]
        return candidates[pick // 4 % len(candidates)]

    def expect_added(
        self,
        added: Enqueued,
        payload: int,
        key: str | None,
        priority: int,
        delay: float,
    ) -> None:
        holder = self.model.holder(key)
        if holder is not None:
            assert added == Enqueued(holder, True), f"{key!r} is held by {holder}"
            return
        assert not added.duplicate, added
        run_at = self.now + delay
        self.model.add(ModelJob(added.id, payload, key, priority, run_at))

    # -- rules -------------------------------------------------------------------------

    @initialize(
        max_attempts=st.integers(1, 3),
        dead_letter_limit=st.sampled_from([1000, 2, 0]),
        keep_completed=st.sampled_from([0, 0, 30]),
        keep_cancelled=st.sampled_from([0, 30]),
    )
    def start(
        self,
        max_attempts: int,
        dead_letter_limit: int,
        keep_completed: int,
        keep_cancelled: int,
    ) -> None:
        if self.own_clock:  # never expires while the test runs
            keep_completed = 3600 if keep_completed else 0
            keep_cancelled = 3600
        self.options = {
            "max_attempts": max_attempts,
            "dead_letter_limit": dead_letter_limit,
            "keep_completed": keep_completed,
            "keep_cancelled": keep_cancelled,
        }
        self.model = Model(
            max_attempts, dead_letter_limit, keep_completed, keep_cancelled
        )
        self.open_queue()

    @rule(key=KEYS, priority=PRIORITIES, delay=DELAYS)
    def enqueue(self, key: str | None, priority: int, delay: int) -> None:
        delay = self.seconds(delay)
        self.payloads += 1
        added = self.q.enqueue(self.payloads, key=key, priority=priority, delay=delay)
        self.expect_added(added, self.payloads, key, priority, delay)

    @rule(count=st.integers(0, 3), key=KEYS, priority=PRIORITIES, delay=DELAYS)
    def enqueue_many(
        self, count: int, key: str | None, priority: int, delay: int
    ) -> None:
        delay = self.seconds(delay)
        payloads = list(range(self.payloads + 1, self.payloads + 1 + count))
        self.payloads += count
        added = self.q.enqueue_many(payloads, key=key, priority=priority, delay=delay)
        assert len(added) == count
        for each, payload in zip(added, payloads, strict=True):
            self.expect_added(each, payload, key, priority, delay)

    @precondition(lambda self: not self.own_clock and self.model.next_change(self.now))
    @rule(to=st.sampled_from(["next change", "just before it", 1, 30]))
    def advance(self, to: str | int) -> None:
        """Time passes: to the moment the next job falls due or a kept job
        expires, or one second before that, or by some seconds."""
        change = self.model.next_change(self.now)
        assert change is not None
        if to == "next change":
            self.now = change
        elif to == "just before it":
            self.now = max(self.now, change - 1)
        else:
            assert isinstance(to, int)
            self.now += to

    @precondition(lambda self: self.model.next_due(self.now))
    @rule(outcomes=st.lists(st.tuples(OUTCOMES, AFTER), min_size=1, max_size=3))
    def run(self, outcomes: list[tuple[str, int]]) -> None:
        """``run_pending(limit=1)`` once per outcome: each runs the job the
        model says is next, and its handler ends as that outcome says."""
        for outcome, after in outcomes:
            self.run_one(outcome, self.seconds(after))

    def run_one(self, outcome: str, after: float) -> None:
        job = self.model.next_due(self.now)
        self.outcome, self.ran = (outcome, after), []
        ran = self.q.run_pending(limit=1)
        if job is None:
            assert (ran, self.ran) == (0, []), "nothing is due"
            return
        attempt = job.attempts + 1
        assert (ran, self.ran) == (1, [(job.id, attempt, job.key, job.payload)])
        model = self.model
        if outcome == "succeed":
            keep = model.keep_completed
            model.succeed(job, {"done": job.payload}, self.now + keep if keep else None)
            model.completed += 1
            return
        delays = {"error": min(self.base_delay * 2 ** (attempt - 1), MAX_DELAY)}
        delays["retry"] = after
        errors = {
            "error": f"ValueError: job {job.id} failed",
            "fatal": "jobq.errors.Fatal: hopeless",
            "retry": "jobq.errors.Retry: not now",
        }
        retried = outcome != "fatal" and attempt < model.max_attempts
        retry_at = self.now + delays[outcome] if retried else None
        model.fail(job, retry_at, errors[outcome])
        model.retried += retried

    @precondition(
        lambda self: len(self.held) < self.max_held and self.model.next_due(self.now)
    )
    @rule()
    def hold(self) -> None:
        """Claim the next due job through the store, as a worker does, and
        keep it running (its handler is "still running")."""
        job = self.model.next_due(self.now)
        assert job is not None
        claim = self.q.store.claim(self.now)
        assert claim is not None
        assert (claim.id, claim.attempt) == (job.id, job.attempts + 1)
        job.state = RUNNING
        self.held.append((claim, self.now))

    @precondition(lambda self: self.held)
    @rule(index=st.integers(0, 1), end=st.sampled_from(["finish", "bury", "retry"]))
    def end_held(self, index: int, end: str) -> None:
        """A held job's handler returns: the store records its outcome."""
        claim, _ = self.held.pop(index % len(self.held))
        job = self.model.jobs[claim.id]
        store = self.q.store
        if end == "finish":
            assert store.finish(claim, None, None, self.now)
            self.model.succeed(job, None, None)
            return
        retry_at = self.now + self.seconds(5) if end == "retry" else None
        failure = AttemptError("ValueError", "late", "", self.now)
        assert store.fail(claim, failure, retry_at, self.now)
        self.model.fail(job, retry_at, "ValueError: late")

    @precondition(lambda self: self.held and self.leases)
    @rule()
    def lease_expires(self) -> None:
        """Held claims' leases run out unrenewed: recovered as failed attempts,
        and their late outcomes change nothing."""
        self.recover_held(at_open=False)

    @precondition(lambda self: self.model.ids)
    @rule(pick=PICK, as_enqueued=st.booleans())
    def cancel(self, pick: int, as_enqueued: bool) -> None:
        """A pending job ends cancelled; a held one is asked to stop (no
        worker of this queue runs it: its outcome, when it comes, decides)."""
        live = [j.id for j in self.model.jobs.values() if j.state in (PENDING, RUNNING)]
        job_id = self.pick(pick, live)
        ref = Enqueued(job_id, False) if as_enqueued else job_id
        assert self.q.cancel(ref) == self.model.cancel(job_id, self.now)

    @precondition(lambda self: self.model.dead)
    @rule(pick=PICK)
    def retry_dead(self, pick: int) -> None:
        job_id = self.pick(pick, self.model.dead)
        assert self.q.retry_dead(job_id) == self.model.revive(job_id, self.now)

    @precondition(lambda self: self.model.dead)
    @rule(pick=PICK)
    def delete_dead(self, pick: int) -> None:
        job_id = self.pick(pick, self.model.dead)
        assert self.q.delete_dead(job_id) == self.model.delete_dead(job_id)

    @precondition(lambda self: self.place.persistent)
    @rule()
    def save(self) -> None:
        self.q.save()

    @precondition(lambda self: self.place.persistent)
    @rule()
    def restart(self) -> None:
        """close(), then a new queue on the same store (a new process)."""
        self.q.close()
        self.open_queue()
        self.recover_held(at_open=True)

    @precondition(lambda self: self.place.persistent)
    @rule(claim_one=st.booleans())
    def crash(self, claim_one: bool) -> None:
        """The process dies (optionally while one more job runs); a new
        process opens what it left."""
        if (
            claim_one
            and len(self.held) < self.max_held
            and self.model.next_due(self.now)
        ):
            self.hold()
        crashed = self.q
        try:
            self.place = self.place.crash_copy()
            self.places.append(self.place)
            self.open_queue()
        finally:
            crashed.close()  # its threads and handles; writes only its old place
        self.recover_held(at_open=True)

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        if self.queue is None:
            return
        model, now = self.model, self.now
        stats = self.q.stats()
        counts = (stats.pending, stats.running, stats.dead, stats.cancelled)
        assert counts == model.counts(now)
        assert (stats.completed, stats.retried) == (model.completed, model.retried)
        if not self.own_clock:  # due later on the queue's clock; retries among them
            later = [
                job for job in model.jobs.values()
                if job.state is PENDING and job.run_at > now
            ]  # fmt: skip
            assert (stats.delayed, stats.retrying) == (
                len(later),
                sum(job.attempts > 0 for job in later),
            )
        assert [r.id for r in self.q.dead_jobs()] == model.dead
        # Every id after a restart or crash; else the jobs there are and the
        # jobs there were at the last check (a job gone stays gone until then).
        visible = {i for i in model.jobs if model.visible(i, now)}
        ids = model.ids if self.check_all else sorted(visible | self.shown)
        self.shown, self.check_all = visible, False
        for job_id in ids:
            record, job = self.q.get(job_id), model.visible(job_id, now)
            if job is None:
                assert record is None, f"job {job_id} should be gone: {record}"
                continue
            assert record is not None, f"job {job_id} is missing: {job}"
            seen = (record.id, record.state, record.attempts, record.key)
            assert seen == (job.id, job.state, job.attempts, job.key), (record, job)
            assert (record.payload, record.priority) == (job.payload, job.priority)
            if job.state is PENDING and not self.own_clock:
                assert record.run_at == job.run_at, (record, job)
            if job.state is COMPLETED:
                assert record.result == job.result, (record, job)
            assert record.stopping == job.stopping, (record, job)
            if job.cancelled_until is not None and job.state is not COMPLETED:
                assert record.cancellation is not None, (record, job)
                assert record.cancellation.attempt == job.cancelled_attempt
            if job.attempts:  # after retry_dead, last_error is not specified
                assert record.last_error is not None, (record, job)
                assert record.last_error.startswith(job.last_error), (record, job)
        if self.own_clock:
            self.now += 1  # the next step happens later


# -- one test per store kind -----------------------------------------------------------


def check_against_the_model(new_place: Callable[[], Place], examples: int) -> None:
    machine = type(
        "QueueMachine", (QueueMachine,), {"new_place": staticmethod(new_place)}
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_the_queue_agrees_with_the_model(
    store_kind: str, make_store: Callable[..., Store]
) -> None:
    template = make_store(queue_clock=True)  # PostgreSQL: skips without a server
    check_against_the_model(places(store_kind, template), EXAMPLES[store_kind])


def test_a_store_on_its_own_clock_agrees_with_the_model(
    store_kind: str, make_store: Callable[..., Store]
) -> None:
    """As configured by default, PostgreSQL orders jobs on the database's
    clock, which the test cannot move: the steps that need the queue's clock
    (time passing, delays, backoff, ``Retry(after=...)``, expiry of kept jobs)
    are left out."""
    template = make_store()
    if not getattr(template, "uses_own_clock", False):
        pytest.skip("follows the queue's clock: the test above covers it")
    check_against_the_model(places(store_kind, template), OWN_CLOCK_EXAMPLES)
