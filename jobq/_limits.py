"""Time limits: a handler that outlives its job's ``timeout`` is interrupted,
and one that does not stop is abandoned.

jobq runs handlers in threads of the app's own process, and a thread cannot
be killed. So at the limit the watchdog raises ``JobTimeout`` inside the
handler's thread (``PyThreadState_SetAsyncExc``: it arrives at the thread's
next Python bytecode), and only while that thread is inside the handler
call: each worker thread has one ``ThreadLimit`` whose lock the thread takes
to enter and leave the handler and the watchdog takes to raise, so the
exception never lands in jobq's own bookkeeping. A handler still inside the
call ``grace`` seconds later (it caught the exception, or it is blocked in C
code, which no exception reaches) is abandoned: the pool records its attempt
as a failed ``JobTimeout``, so the claim's token refuses whatever the thread
finishes later, stops renewing its lease, and starts a replacement thread
(see ``jobq._workers``).
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from jobq._logs import claim_extra
from jobq.errors import JobTimeout
from jobq.stores.base import Claim

if TYPE_CHECKING:
    from jobq._runner import Outcome

logger = logging.getLogger("jobq")

T = TypeVar("T")


def _raise_in(thread_id: int, exc_type: type[BaseException] | None) -> None:
    """Make ``exc_type`` pending in the thread ``thread_id``: raised at its
    next bytecode; ``None`` takes back one not raised yet."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id),
        None if exc_type is None else ctypes.py_object(exc_type),
    )


def interrupted(claim: Claim) -> str:
    """What a ``JobTimeout`` raised in the handler's thread says."""
    return f"job {claim.id} ran past its time limit of {claim.timeout:g} s"


class ThreadLimit:
    """The time limit of the attempt one worker thread runs: one per worker
    thread, armed for each attempt of a job that has a ``timeout``.

    ``ran`` holds the outcomes the thread ran and has not handed in yet: a
    thread abandoned in its next handler cannot hand them in, so the
    watchdog records them for it.
    """

    def __init__(self, limits: TimeLimits) -> None:
        self._limits = limits
        self.thread = threading.current_thread()
        self.lock = threading.Lock()
        self.claim: Claim | None = None  # set while inside a limited handler
        self.started = 0.0  # monotonic
        self.deadline = math.inf  # monotonic
        #: When the watchdog must look at this thread next (monotonic): the
        #: deadline, then the end of the grace; ``inf`` outside a handler.
        self.due = math.inf
        self.fired_at: float | None = None  # when JobTimeout was raised
        self.abandoned = False
        self.ran: list[Outcome] = []

    def call(self, claim: Claim, function: Callable[[], T]) -> T:
        """``function()``, the handler of ``claim``, under its time limit."""
        assert claim.timeout is not None  # noqa: S101 - the runner checks it
        # No lock to arm: the watchdog reads the rest only once ``claim`` is
        # set, which comes last (one store each, atomic).
        self.fired_at = None
        self.started = time.monotonic()
        self.deadline = self.due = self.started + claim.timeout
        self.claim = claim
        self._limits.armed(self.deadline)
        try:
            return function()
        finally:
            self.disarm()

    def disarm(self) -> None:
        """Leave the handler: once this returns, no ``JobTimeout`` can reach
        the thread. Idempotent; the runner calls it again after a failure,
        in case the exception arrived just before this took the lock."""
        with self.lock:
            if self.claim is None:
                return
            self.claim = None
            self.deadline = self.due = math.inf
            if self.fired_at is not None:
                _raise_in(self.thread.ident or 0, None)  # not raised yet: never

    def settle(self, claim: Claim, exc: BaseException) -> BaseException:
        """After the handler of ``claim`` raised ``exc``: leave the handler,
        and let a ``JobTimeout`` raised here say which job and limit."""
        self.disarm()
        if isinstance(exc, JobTimeout) and exc.args == (JobTimeout.DEFAULT,):
            exc.args = (interrupted(claim),)  # the handler has seen it
        return exc

    def interrupt(self, now: float) -> float:
        """Raise ``JobTimeout`` in the thread if its handler is past its
        deadline (watchdog); when to look at this thread next (monotonic)."""
        with self.lock:
            claim = self.claim
            if claim is None or self.abandoned:
                return math.inf
            if self.fired_at is not None:
                return self.fired_at + self._limits.grace
            if now < self.deadline:
                return self.deadline
            _raise_in(self.thread.ident or 0, JobTimeout)
            self.fired_at = now
            self.due = now + self._limits.grace
        logger.info(
            "job %d (attempt %d) ran past its time limit of %g s: raised "
            "JobTimeout in %s",
            claim.id, claim.attempt, claim.timeout, self.thread.name,
            extra=claim_extra(claim),
        )  # fmt: skip
        return now + self._limits.grace

    def abandon(self, now: float, record: Callable[[ThreadLimit, Claim], None]) -> bool:
        """Give up on a handler still inside its call ``grace`` seconds after
        ``JobTimeout`` (watchdog): ``record`` its attempt with the lock held,
        so that the thread, should it return now, finds it recorded. Whether
        the thread was abandoned."""
        with self.lock:
            claim = self.claim
            if (
                claim is None
                or self.abandoned
                or self.fired_at is None
                or now < self.fired_at + self._limits.grace
            ):
                return False
            self.abandoned = True
            self.due = math.inf
            record(self, claim)
        return True


class TimeLimits:
    """The ``ThreadLimit`` of every worker thread of one pool, for its
    watchdog. ``wake`` wakes the watchdog when an attempt's deadline comes
    before the time it means to look again (``next_look``).

    No lock per job: a worker arms its own limit, then reads ``next_look``.
    While the watchdog looks, ``next_look`` is ``-inf`` (nobody wakes it);
    once it has published the next one it reads every thread's ``due``
    again (``earliest``), which sees any limit armed meanwhile: that worker
    read ``-inf`` after arming, so before the publication."""

    def __init__(self, grace: float, wake: Callable[[], None]) -> None:
        self.grace = grace
        self._wake = wake
        self._lock = threading.Lock()
        self._threads: set[ThreadLimit] = set()
        #: When the watchdog looks next (monotonic), read without a lock by
        #: workers arming a limit; ``-inf`` while it looks.
        self.next_look = math.inf

    def enter(self) -> ThreadLimit:
        """The calling worker thread's limit, watched until ``leave``."""
        limit = ThreadLimit(self)
        with self._lock:
            self._threads.add(limit)
        return limit

    def leave(self, limit: ThreadLimit) -> None:
        with self._lock:
            self._threads.discard(limit)

    def earliest(self) -> float:
        """The earliest ``due`` of any thread (monotonic; ``inf``: none)."""
        with self._lock:
            threads = list(self._threads)
        return min((limit.due for limit in threads), default=math.inf)

    def armed(self, deadline: float) -> None:
        if deadline < self.next_look:
            self._wake()

    def look(self, now: float) -> tuple[list[ThreadLimit], float]:
        """Interrupt the handlers past their deadline; the threads whose
        grace is over too, and when to look next (monotonic, ``inf``: no
        limited handler runs)."""
        with self._lock:
            threads = list(self._threads)
        overdue: list[ThreadLimit] = []
        soonest = math.inf
        for limit in threads:
            at = limit.interrupt(now)
            if at <= now:
                overdue.append(limit)
            else:
                soonest = min(soonest, at)
        return overdue, soonest

    def abandon(
        self,
        limit: ThreadLimit,
        now: float,
        record: Callable[[ThreadLimit, Claim], None],
    ) -> bool:
        """Abandon ``limit``'s thread (see ``ThreadLimit.abandon``) and stop
        watching it."""
        if not limit.abandon(now, record):
            return False
        self.leave(limit)
        return True
