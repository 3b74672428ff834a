"""One place per queue that talks to the store for its workers.

Claims: the ``Dispatcher`` takes due jobs for every worker that is idle right
now in one store call (``claim_many``), never more than there are idle
workers unless the store asks for more (``claim_batch``, the memory store's
prefetch), and hands them out. Whichever idle worker finds nobody claiming
makes the call; the others wait for what it brings. So N idle workers cost
one transaction, not N fighting over a write lock, and a crash re-runs at
most one job per worker.

Outcomes: ``GroupCommit`` records the outcomes of all workers together, for
a store that keeps jobs beyond the process. A worker that has outcomes to
record writes them, and everything other workers added meanwhile, in one
store write; whoever arrives while a write is under way waits for the next
one, which one of them makes. Each returns only once its outcome is written,
so a worker never runs a second job with the first one's outcome unrecorded.
(The memory store's workers record their own: it keeps nothing to wait for.)
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator

from jobq._runner import Outcome, Runner
from jobq.stores.base import Claim, Signal, Store

logger = logging.getLogger("jobq")

#: Longest sleep of the idle worker that watches the clock, in seconds: a
#: clock jump or a wake-up a store could not send never delays a due job by
#: more.
MAX_IDLE_WAIT = 1.0

#: Longest sleep of the other idle workers, in seconds: a store's wake-up, a
#: hand-off or a stop wakes them; this only bounds a wake-up gone missing.
FOLLOWER_WAIT = 30.0


class Dispatcher:
    """Hands due jobs to a queue's idle workers, claiming for all of them at once.

    Shares the queue's ``Signal``: its lock guards the hand-off, and idle
    workers sleep on ``signal.work``, which stores notify when jobs become
    claimable (``signal.idle_workers`` counts the sleepers).
    """

    def __init__(
        self,
        store: Store,
        runner: Runner,
        signal: Signal,
        clock: Callable[[], float],
        stopping: Callable[[], bool],
    ) -> None:
        self._store = store
        self._runner = runner
        self._signal = signal
        self._clock = clock
        self._stopping = stopping
        #: Claimed jobs not started yet, in run order: any idle worker takes
        #: the next (``deque`` appends and pops are atomic).
        self._ready: deque[Claim] = deque()
        self._claiming = False  # a worker is in the store for the idle ones
        self._napping = False  # an idle worker watches the clock
        self._idle = 0  # workers in ``next``, asleep or not

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
        return taken

    def next(self, prefetch: int = 1) -> Claim | None:
        """The next job for this worker: one already claimed, else one from a
        claim made for every idle worker (by this worker, unless another is
        making it), waiting while nothing is due. ``None`` once the pool is
        stopping. ``prefetch``: claim at least this many (the store's
        ``claim_batch`` for fast handlers, 1 otherwise)."""
        signal = self._signal
        with signal.lock:
            self._idle += 1
            try:
                while not self._stopping():
                    claim = self.ready()
                    if claim is not None:
                        return claim
                    if self._claiming:  # another worker is in the store for us
                        self._sleep(FOLLOWER_WAIT)
                        continue
                    generation = signal.generation
                    claim = self._claim(max(self._idle, prefetch))
                    if claim is not None:
                        return claim
                    if signal.generation == generation and not self._ready:
                        self._nap()
                return None
            finally:
                self._idle -= 1  # with the lock held: a claimer counts right

    def _claim(self, wanted: int) -> Claim | None:
        """Claim up to ``wanted`` due jobs in one store call; keep the first,
        hand the rest to idle workers (lock held, released for the call)."""
        signal = self._signal
        self._claiming = True
        claims: list[Claim] = []
        with self._unlocked():
            try:
                claims = self._store.claim_many(self._clock(), wanted)
            except Exception:
                logger.exception("claiming jobs failed; trying again shortly")
        self._claiming = False
        if not claims:
            return None
        self._runner.hold(claims)
        if self._stopping():  # stopped meanwhile: the stop gives them back
            self._ready.extend(claims)
            return None
        self._ready.extend(claims[1:])
        others = len(claims) - 1
        if len(claims) == wanted and self._idle > len(claims):
            others += 1  # perhaps more are due: one of them claims again
        if others and signal.idle_workers:
            signal.work.notify(others)
        return claims[0]

    def _nap(self) -> None:
        """Nothing was due (lock held). One idle worker sleeps until the next
        delayed job is due (at most ``MAX_IDLE_WAIT``) and then looks again;
        the others sleep until a store or that worker wakes them, so idle
        workers cost nothing."""
        if self._napping:
            self._sleep(FOLLOWER_WAIT)
            return
        self._napping = True
        try:
            with self._unlocked():
                try:
                    due = self._store.next_due()
                except Exception:
                    logger.exception("reading the next due time failed")
                    due = None
                wait = MAX_IDLE_WAIT if due is None else due - self._clock()
            if not self._ready:
                self._sleep(min(max(wait, 0.0), MAX_IDLE_WAIT))
        finally:
            self._napping = False

    @contextlib.contextmanager
    def _unlocked(self) -> Iterator[None]:
        """Release the signal's lock (held once) for a store call: a store
        call must not hold up the workers' hand-off, nor stores' wake-ups."""
        lock = self._signal.lock
        lock.release()
        try:
            yield
        finally:
            lock.acquire()

    def _sleep(self, timeout: float) -> None:
        """Sleep on ``signal.work`` (lock held) until notified or ``timeout``."""
        signal = self._signal
        if timeout <= 0 or self._stopping():
            return
        signal.idle_workers += 1
        try:
            signal.work.wait(timeout)
        finally:
            signal.idle_workers -= 1


class GroupCommit:
    """Records the outcomes of a queue's workers together (see the module).

    A worker returns once its outcomes are written. For stores that keep
    jobs beyond the process; the memory store's workers record their own.
    """

    def __init__(self, runner: Runner) -> None:
        self._runner = runner
        self._done = threading.Condition(threading.Lock())
        self._pending: list[Outcome] = []
        self._writing = False
        self._next = 1  # the number of the next batch to be written
        self._written = 0  # the number of the last batch written

    @property
    def waiting(self) -> int:
        """Outcomes waiting for the next write."""
        return len(self._pending)

    def record(self, outcomes: list[Outcome]) -> None:
        """Record ``outcomes``, in one write with those of the workers that
        arrived meanwhile; return once they are written."""
        if not outcomes:
            return
        done = self._done
        with done:
            self._pending += outcomes
            mine = self._next  # the batch they go in
            while self._written < mine:
                if self._writing:
                    done.wait()  # whoever writes wakes us; we may write next
                    continue
                batch, self._pending = self._pending, []
                number = self._next
                self._next += 1
                self._writing = True
                done.release()
                try:
                    self._runner.record(batch)  # never raises: see Runner.record
                finally:
                    done.acquire()
                    self._writing = False
                    self._written = number
                    done.notify_all()
