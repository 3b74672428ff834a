"""One place per queue that talks to the store for its workers.

A worker that finishes its jobs hands their outcomes to the queue's
``Dispatcher`` and asks it for the next job. Whichever waiting worker finds
nobody in the store becomes the leader for one pass: it records the outcomes
every worker handed in meanwhile (successes in one write, failed attempts in
another: group commit) and then claims due jobs for every worker that is
idle now and has no claimed job waiting, in one store call, never more than
there are idle workers unless the store prefetches (``claim_batch``); it
keeps one and hands the others out. The other workers wait for what that
pass brings.

A store that takes jobs ahead (``Capabilities.prefetch``: PostgreSQL) marks
the jobs of a claim beyond the idle workers not started; a pass marks as
many of them started as workers want, in the write of their outcomes (no
round trip more), before handing them out. So after a crash recovery gives
back those never started with no attempt counted, and a process stopped
past its leases hands out none of those the mark finds lost.

So N workers cost one pass of store calls, not N claims and N finishes
fighting over a write lock and its round trips. A store that keeps jobs
beyond the process gives a worker a new job only after its outcomes are
written, so a crash re-runs at most one job per worker; the memory store,
which keeps nothing, has each worker record its own outcomes at once.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import cast

from jobq._periodic.scheduler import Scheduler
from jobq._worker.runner import Outcome, Runner
from jobq.stores.base import Claim, PrefetchStore, Signal, Store, capabilities_of

logger = logging.getLogger("jobq")

#: Longest sleep of the idle worker that watches the clock, in seconds: a
#: clock jump or a wake-up a store could not send never delays a due job by
#: more.
MAX_IDLE_WAIT = 1.0

#: Longest sleep of the other idle workers, in seconds: a store's wake-up, a
#: pass that brings them work or a stop wakes them; this only bounds a
#: wake-up gone missing.
FOLLOWER_WAIT = 30.0


class Dispatcher:
    """Records the outcomes of a queue's workers and hands them due jobs.

    Shares the queue's ``Signal``: its lock guards the hand-off, and idle
    workers sleep on ``signal.work``, which stores notify when jobs become
    claimable (``signal.idle_workers`` counts the sleepers). ``durable``:
    outcomes are written before their worker gets another job (a store that
    keeps jobs beyond the process); else each worker records its own.
    """

    def __init__(
        self,
        store: Store,
        runner: Runner,
        signal: Signal,
        clock: Callable[[], float],
        stopping: Callable[[], bool],
        *,
        durable: bool,
        scheduler: Scheduler | None = None,
    ) -> None:
        self._store = store
        self._runner = runner
        self._signal = signal
        self._clock = clock
        self._stopping = stopping
        self._durable = durable
        self._scheduler = scheduler
        #: Claimed jobs not started yet, in run order: any idle worker takes
        #: the next (``deque`` appends and pops are atomic).
        self._ready: deque[Claim] = deque()
        #: Jobs a ``PrefetchStore`` took ahead, not marked started: a pass
        #: marks them before they go to ``_ready`` (under the lock).
        self._ahead: deque[Claim] = deque()
        self._marks_starts = capabilities_of(store).prefetch
        self._pending: list[Outcome] = []  # handed in, not written yet
        self._passes = 0  # passes begun; outcomes handed in go in the next
        self._written = 0  # the last pass whose outcomes are written
        self._leading = False  # a worker is in the store for the others
        #: Where workers whose outcomes wait for a pass sleep: every pass
        #: wakes them all (the idle ones sleep on ``signal.work``).
        self._passed = threading.Condition(signal.lock)
        self._awaiting = 0  # workers asleep on ``_passed``
        self._napping = False  # an idle worker watches the clock
        self._idle = 0  # workers in ``next``, asleep or not

    @property
    def waiting(self) -> int:
        """Outcomes handed in and waiting for the next pass."""
        return len(self._pending)

    def ready(self) -> Claim | None:
        """A claim already taken for this queue, if any (no lock, no store)."""
        try:
            return self._ready.popleft()
        except IndexError:
            return None

    def take_ready(self) -> list[Claim]:
        """Every claim taken but not started (to give back at a stop)."""
        taken = []
        while (claim := self.ready()) is not None:
            taken.append(claim)
        with self._signal.lock:
            taken += self._ahead
            self._ahead.clear()
        return taken

    def next(self, outcomes: list[Outcome], prefetch: int = 1) -> Claim | None:
        """Record ``outcomes`` and return this worker's next job: one already
        claimed, else one from a pass made for every idle worker (by this
        worker, unless another is making it), waiting while nothing is due.
        ``None`` once the pool is stopping (the outcomes are written then
        too). ``prefetch``: claim at least this many (the store's
        ``claim_batch`` for fast handlers, 1 otherwise)."""
        if outcomes and not self._durable:
            self._runner.record(outcomes)  # nothing to wait for: memory
            outcomes = []
        signal = self._signal
        with signal.lock:
            self._pending += outcomes
            mine = self._passes + 1 if outcomes else 0  # the pass that writes them
            self._idle += 1
            try:
                while True:
                    written = self._written >= mine
                    if written:
                        if self._stopping():
                            return None
                        claim = self.ready()
                        if claim is not None:
                            return claim
                    if self._leading:  # another worker is in the store for us
                        if written:
                            self._sleep(FOLLOWER_WAIT)
                        else:  # the pass (this or the next) writes ours
                            self._awaiting += 1
                            try:
                                self._passed.wait(FOLLOWER_WAIT)
                            finally:
                                self._awaiting -= 1
                        continue
                    generation = signal.generation
                    claim = self._lead(prefetch)  # writes ours too
                    if claim is not None:
                        return claim
                    if signal.generation == generation and not (
                        self._ready or self._pending or self._stopping()
                    ):
                        self._nap()
            finally:
                self._idle -= 1  # with the lock held: a leader counts right

    def _lead(self, prefetch: int) -> Claim | None:
        """One pass (lock held, released for the store calls): write every
        outcome handed in, with the marks of the jobs taken ahead that idle
        workers take now; claim for the idle workers still without a job
        (at least ``prefetch``); keep the first job, hand the others out,
        wake whoever the pass concerns."""
        signal = self._signal
        batch, self._pending = self._pending, []
        self._passes += 1
        number = self._passes
        short = 0 if self._stopping() else self._idle - len(self._ready)
        starting = [self._ahead.popleft() for _ in range(min(short, len(self._ahead)))]
        short -= len(starting)
        limit = max(short, prefetch) if short > 0 else 0
        self._leading = True
        claims: list[Claim] = []
        sent = 0.0
        marked: list[Claim] | None = starting
        try:
            signal.lock.release()  # for the store calls: see _nap
            try:
                if batch or starting:  # never raises: see Runner.record
                    marked = self._runner.record(batch, starting=starting)
                if limit:
                    self._look_at_schedules()
                    sent = time.monotonic()  # their leases begin no earlier
                    claims = self._claim(limit, short)
            finally:
                signal.lock.acquire()
        finally:
            self._leading = False
            self._written = number
        if marked is None:  # the write failed: they wait for the next pass
            self._ahead.extendleft(reversed(starting))
            marked = []
        handed = marked
        if claims:
            self._runner.held.hold(claims, sent)
            handed = marked + claims
            if self._marks_starts:
                handed = marked + claims[:short]
                self._ahead.extend(claims[short:])
        if self._stopping():  # stopped meanwhile: the stop gives them back
            self._ready.extend(handed)
            handed = []
        # Whoever handed outcomes in: theirs are written now (they take the
        # jobs claimed for them), or one of them leads the next pass.
        if self._awaiting:
            self._passed.notify_all()
        if self._stopping():
            signal.work.notify_all()
        elif signal.idle_workers:
            woken = max(len(handed) - 1, 0)  # the jobs for the others
            more = self._ahead or (limit and len(claims) == limit)
            if more and self._idle > len(handed) + len(self._ready):
                woken += 1  # perhaps more are due: one of them claims again
            if woken:
                signal.work.notify(woken)
        if not handed:
            return None
        self._ready.extend(handed[1:])
        return handed[0]

    def _claim(self, limit: int, start: int) -> list[Claim]:
        """Up to ``limit`` due jobs, those beyond ``start`` taken ahead where
        the store can (lock released); none if the store failed (logged)."""
        try:
            if self._marks_starts:
                store = cast(PrefetchStore, self._store)
                return store.claim_many(self._clock(), limit, start=start)
            return self._store.claim_many(self._clock(), limit)
        except Exception:
            logger.exception("claiming jobs failed; trying again shortly")
            return []

    def _look_at_schedules(self) -> None:
        """Enqueue the periodic jobs' slots that fell due (a comparison of
        times while none did), so this pass claims them."""
        scheduler = self._scheduler
        if scheduler is None:
            return
        wake = scheduler.next_wake
        if wake != math.inf and self._clock() >= wake:  # no schedule: no clock read
            scheduler.tick()  # logs a store's failure itself

    def _nap(self) -> None:
        """Nothing was due (lock held). One idle worker sleeps until the next
        delayed job is due (at most ``MAX_IDLE_WAIT``) and then looks again;
        the others sleep until a store or a pass wakes them, so idle workers
        cost nothing."""
        if self._napping:
            self._sleep(FOLLOWER_WAIT)
            return
        self._napping = True
        signal = self._signal
        generation = signal.generation
        try:
            # Store calls never hold the lock: they must not hold up the
            # workers' hand-off, nor stores' wake-ups.
            signal.lock.release()
            try:
                try:
                    due = self._store.next_due()
                except Exception:
                    logger.exception("reading the next due time failed")
                    due = None
                wait = MAX_IDLE_WAIT if due is None else due - self._clock()
                if self._scheduler is not None:  # the next slot, if sooner
                    wait = min(wait, self._scheduler.next_wake - self._clock())
            finally:
                signal.lock.acquire()
            # A job added meanwhile woke nobody if every other worker was
            # busy: look again instead of sleeping.
            if not self._ready and signal.generation == generation:
                self._sleep(min(max(wait, 0.0), MAX_IDLE_WAIT))
        finally:
            self._napping = False

    def _sleep(self, timeout: float) -> None:
        """Sleep on ``signal.work`` (lock held) until notified or ``timeout``;
        not at all once stopping."""
        signal = self._signal
        if timeout <= 0 or self._stopping():
            return
        signal.idle_workers += 1
        try:
            signal.work.wait(timeout)
        finally:
            signal.idle_workers -= 1
