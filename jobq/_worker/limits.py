"""Time limits: a handler that outlives its job's ``timeout`` is interrupted,
and one that does not stop is abandoned.

At the limit ``JobTimeout`` is requested in the handler's thread, and
raised there at the next line of the handler's own code (see
``jobq._worker.interrupt``: never inside jobq's code or the standard library's,
so an interruption cannot leave a transaction open or a lock held). A
handler still inside its call ``grace`` seconds after the limit (it caught
the exception, or it is blocked in C code or in the standard library,
where nothing lands) is abandoned: the pool records its attempt as a
failed ``JobTimeout``, so the claim's token refuses whatever the thread
finishes later, stops renewing its lease, and starts a replacement thread
(see ``jobq._worker.pool``).

A cancelled job (``queue.cancel``) is stopped the same way: ``request_stop``
asks for ``JobCancelled`` at once, with the same grace, in whatever attempt
of the job the thread runs, time-limited or not (the worker marks each
attempt as the thread's ``current`` one, no wrapper: see
``Interruptible``). A handler that asks ``cancel_requested()`` is left to
stop of its own accord: nothing is raised in it, and the grace still holds.
An isolated task's attempt runs in a child process (``isolate``, see
``jobq._worker.isolation``): its cancellation goes to the child, and the
limits thread leaves that worker thread alone (it is never abandoned).

One thread of the pool, ``jobq-limits``, watches the deadlines. It never
logs, never touches the store and takes no lock a handler's thread may hold
for long (only each thread's own small lock, and its own): a handler stuck
inside a logging handler or a store call cannot stop it. What it decides
it hands to the pool (``abandoned``), whose watchdog records and logs.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from jobq._worker.interrupt import Interruptible, learn_cleanup_lines
from jobq.errors import JobCancelled, JobTimeout
from jobq.stores.base import Claim

T = TypeVar("T")

#: While a request waits for a line it may land at, the limits thread looks
#: again this often (seconds): on Python 3.12+ it watches the functions the
#: handler entered since.
RENEW_EVERY = 0.01


def interrupted(claim: Claim) -> str:
    """What a ``JobTimeout`` raised in the handler's thread says."""
    return f"job {claim.id} ran past its time limit of {claim.timeout:g} s"


class Attempt:
    """What one thread must stop by a deadline: the claim it runs (also the
    token of its call for ``Interruptible``: a request or an abandonment
    meant for this attempt never reaches the thread's next one), the
    deadline (monotonic), the exception to raise then (``JobTimeout``,
    ``JobCancelled``) and when it was requested."""

    __slots__ = ("claim", "deadline", "exception", "requested_at")

    def __init__(
        self, claim: Claim, deadline: float, exception: type[BaseException]
    ) -> None:
        self.claim = claim
        self.deadline = deadline
        self.exception = exception
        self.requested_at: float | None = None


#: The calling worker thread's ``ThreadLimit`` (``cancel_requested``).
_this_thread = threading.local()


def cancel_requested() -> bool:
    """Whether the job whose handler calls it was asked to stop
    (``queue.cancel``): true in the thread of such an attempt, from the
    moment the request reaches this process (at once in the process that
    asked; within ``STOP_LOOK`` seconds from another). A handler that asks
    is trusted to stop of its own accord: ``JobCancelled`` is no longer
    raised in this attempt, and it is still abandoned if it runs
    ``timeout_grace`` seconds after the request. False outside a worker
    thread's handler (``run_pending`` runs no handler that can be stopped)."""
    limit: ThreadLimit | None = getattr(_this_thread, "limit", None)
    return limit is not None and limit.asked_to_stop()


class Stoppable(Protocol):
    """A child process running an isolated attempt, as a cancellation
    reaches it."""

    def cancel(self) -> None: ...


def isolating(claim: Claim) -> ThreadLimit | None:
    """The calling worker thread's limit if it runs ``claim`` now (an
    isolated attempt reports its child there, for cancellations); ``None``
    elsewhere (``run_pending``)."""
    limit: ThreadLimit | None = getattr(_this_thread, "limit", None)
    if limit is None or limit.interruptible.current is not claim:
        return None
    return limit


def current_claim() -> Claim | None:
    """The claim whose handler the calling worker thread runs, if any."""
    limit: ThreadLimit | None = getattr(_this_thread, "limit", None)
    current = None if limit is None else limit.interruptible.current
    return current if isinstance(current, Claim) else None


class ThreadLimit:
    """The time limit of the attempt one worker thread runs: one per worker
    thread, created in that thread. ``call`` wraps the handler call, and
    knows nothing of what runs inside it."""

    def __init__(self, limits: TimeLimits) -> None:
        self._limits = limits
        self.interruptible = Interruptible()
        self.thread = self.interruptible.thread
        _this_thread.limit = self
        self.attempt: Attempt | None = None  # set while inside a limited handler
        #: A cancellation to enforce (set by any thread, ``request_stop``;
        #: cleared by the limits thread once its attempt is over).
        self.stop: Attempt | None = None
        #: The claim whose handler asked ``cancel_requested()``: stops itself.
        self.cooperative: object = None
        #: The attempt whose grace ran out, for the limits thread to abandon.
        self.expired: Attempt | None = None
        #: The child process of the isolated attempt the thread runs now
        #: (``isolate``): cancellations stop it, not the thread.
        self.isolated: Stoppable | None = None
        #: When the limits thread must look at this thread next (monotonic):
        #: the deadline, then the renewals and the end of the grace; ``inf``
        #: outside a limited handler.
        self.due = math.inf

    @property
    def abandoned(self) -> bool:
        return self.interruptible.abandoned

    def call(self, claim: Claim, function: Callable[[], T]) -> T:
        """``function()``, the handler of ``claim``, under its time limit."""
        assert claim.timeout is not None  # noqa: S101 - the runner checks it
        deadline = time.monotonic() + claim.timeout
        self.attempt = Attempt(claim, deadline, JobTimeout)
        self.due = deadline  # before reading the limits thread's next look
        self._limits.armed(deadline)
        try:
            return self.interruptible.call(function, claim)
        except JobTimeout as exc:
            if exc.args == (JobTimeout.DEFAULT,):  # the handler saw the plain one
                exc.args = (interrupted(claim),)
            raise
        finally:
            self.attempt = None
            self.due = math.inf

    def request_stop(self, claim: Claim) -> bool:
        """From any thread: have ``claim``'s attempt stopped now, if this
        thread runs it (the limits thread requests ``JobCancelled`` and
        keeps the grace; an isolated attempt's child is told instead);
        whether it does."""
        with self.interruptible.lock:  # against isolate: one of the two sees it
            if self.interruptible.current is not claim:
                return False
            if self.isolated is not None:
                self.isolated.cancel()
                return True
            stop = self.stop
            wake = stop is None or stop.claim is not claim
            if wake:
                self.stop = Attempt(claim, -math.inf, JobCancelled)
        if wake:
            self._limits.wake()
        return True

    def isolate(self, child: Stoppable | None) -> None:
        """In the thread: the attempt it runs now runs in ``child``, a child
        process that a cancellation stops instead of this thread (a stop
        asked already goes to it); ``None``: that attempt is over."""
        with self.interruptible.lock:
            self.isolated = child
            stop = self.stop
            current = self.interruptible.current
            if child is not None and stop is not None and stop.claim is current:
                self.stop = None  # the child's to enforce, not the limits thread's
                child.cancel()

    def asked_to_stop(self) -> bool:
        """``cancel_requested()``, in this thread: the attempt it runs now
        stops itself from here on."""
        current = self.cooperative = self.interruptible.current
        stop = self.stop
        return current is not None and stop is not None and stop.claim is current

    def look(self, now: float, grace: float) -> float:
        """For the limits thread: request ``JobTimeout`` once the deadline
        has passed, ``JobCancelled`` once asked; when to look at this thread
        next (monotonic; ``-inf``: a grace is over, abandon it for
        ``expired``)."""
        if self.abandoned or self.isolated is not None:
            return math.inf  # an isolated attempt's child is stopped instead
        soonest = math.inf
        attempt = self.attempt
        if attempt is not None:
            soonest = self._look(attempt, now, grace)
            if attempt.requested_at is not None and soonest != -math.inf:
                self.due = soonest  # a look armed during this one sees it
        stop = self.stop
        if stop is not None and soonest != -math.inf:
            at = self._look(stop, now, grace)
            if at == math.inf:
                self.stop = None  # its attempt is over
            soonest = min(soonest, at)
        return soonest

    def _look(self, attempt: Attempt, now: float, grace: float) -> float:
        """``look`` at one of the attempt's deadlines (its time limit, or
        its cancellation)."""
        interruptible = self.interruptible
        if attempt.requested_at is None:
            if now < attempt.deadline:
                return attempt.deadline
            if interruptible.current is not attempt.claim:
                return math.inf  # it left the handler meanwhile
            if self.cooperative is not attempt.claim:
                # Refused while its call runs: another request is in (the
                # time limit's); the grace runs from now all the same.
                interruptible.request(attempt.exception, attempt.claim)
                learn_cleanup_lines(interruptible.files_to_learn())
            attempt.requested_at = now
        elif interruptible.pending and not interruptible.delivered:
            interruptible.renew()
            learn_cleanup_lines(interruptible.files_to_learn())
        end = attempt.requested_at + grace
        if now >= end:
            self.expired = attempt
            return -math.inf
        if interruptible.delivered or not interruptible.pending:
            return end
        return min(end, now + RENEW_EVERY)


#: What the pool does with a thread abandoned in an attempt: record it as a
#: failed attempt (the ``Attempt`` says why, ``JobTimeout`` or
#: ``JobCancelled``, with the stack the thread was in), replace it.
Abandoned = Callable[[ThreadLimit, Attempt, str | None], None]


class TimeLimits:
    """The ``ThreadLimit`` of every worker thread of one pool, and the
    thread that enforces them (started with the first limited attempt).

    No lock per job: a worker sets its limit's ``due``, then reads
    ``next_look`` and wakes the limits thread only if its deadline comes
    sooner. While the limits thread looks, ``next_look`` is ``-inf``
    (nobody wakes it); once it has published the next one it reads every
    thread's ``due`` again (``_earliest``), which sees any limit armed
    meanwhile: that worker read ``-inf`` after setting its ``due``."""

    def __init__(self, grace: float, abandoned: Abandoned) -> None:
        self.grace = grace
        self._abandoned = abandoned
        self._lock = threading.Lock()
        self._woken = threading.Condition(self._lock)
        self._rewatch = False
        self._threads: set[ThreadLimit] = set()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: When the limits thread looks next (monotonic), read without a
        #: lock by workers arming a limit; ``-inf`` while it looks.
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

    def armed(self, deadline: float) -> None:
        """A worker armed a limit: wake the limits thread if it would look
        later than ``deadline`` (starting it the first time)."""
        if deadline < self.next_look:
            self.wake()

    def wake(self) -> None:
        """Have the limits thread look now (starting it the first time):
        also while it looks, unlike ``armed``."""
        with self._woken:
            self._rewatch = True
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._watch, name="jobq-limits", daemon=True
                )
                self._thread.start()
            self._woken.notify()

    def open(self) -> None:
        """Watch again after a ``close`` (the pool restarts)."""
        with self._lock:
            self._closed = False

    def close(self) -> threading.Thread | None:
        """The limits thread ends once no limited handler runs (it still
        watches those); the thread, to join, if it runs."""
        with self._woken:
            self._closed = True
            self._rewatch = True  # a look sees whether a limited handler runs
            self._woken.notify()
            return self._thread

    def _watch(self) -> None:
        """Look at every thread when one falls due: the limits thread."""
        look = math.inf
        while True:
            with self._woken:
                self.next_look = look
                look = min(look, self._earliest())  # armed during the look
                while not self._rewatch:
                    wait = look - time.monotonic()
                    if wait <= 0:
                        break
                    self._woken.wait(min(wait, threading.TIMEOUT_MAX))
                self._rewatch = False
                self.next_look = -math.inf  # looking (see the class)
            look = self.look(time.monotonic())
            if look == math.inf:
                with self._woken:
                    if self._closed and not self._rewatch:
                        self._thread = None
                        self.next_look = math.inf  # the next arming starts one
                        return

    def _earliest(self) -> float:
        """The earliest ``due`` of any thread (monotonic; ``inf``: none);
        with ``_lock`` held."""
        return min((limit.due for limit in self._threads), default=math.inf)

    def look(self, now: float) -> float:
        """Request ``JobTimeout`` in the handlers past their deadline and
        abandon those past their grace too; when to look next (monotonic,
        ``inf``: no limited handler runs)."""
        with self._lock:
            threads = list(self._threads)
        soonest = math.inf
        for limit in threads:
            at = limit.look(now, self.grace)
            if at == -math.inf:
                self._abandon(limit)
            else:
                soonest = min(soonest, at)
        return soonest

    def _abandon(self, limit: ThreadLimit) -> None:
        attempt = limit.expired
        if attempt is None or not limit.interruptible.abandon(attempt.claim):
            return  # it returned meanwhile
        limit.due = math.inf
        self.leave(limit)
        self._abandoned(limit, attempt, limit.interruptible.stuck_at)
