"""Running one claimed job: the attempt, then its outcome recorded and told.

A job's path through here reads straight down: ``run_one`` builds the
``Job``, publishes ``started``, calls the middleware around the handler or
task (``_invoke``) and returns the outcome; ``record`` writes outcomes to the
store (successes in one write, failed attempts in another), logs the failed
ones and publishes ``succeeded``, ``retrying`` or ``dead`` for each outcome
the store took (``cancelled`` for a job that was asked to stop and did).

A job with a ``task`` name goes to the function ``@queue.task`` registered
under that name, with the arguments stored in its payload (a name nothing
registered goes to the queue's ``resolve_task``, if any); any other job goes
to the queue's handler, as a ``Job``. An isolated task's attempt runs in a
child process (``jobq._worker.isolation``), which enforces its time limit
itself: the worker thread's limit does not wrap it.

Worker threads and ``run_pending`` both come here, so a job behaves the same
whichever thread runs it. Anything the handler or a middleware raises,
``BaseException`` subclasses included, is a failed attempt; nothing they do
can kill the caller.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar, cast

from jobq._failures import describe_failure, with_stack
from jobq._json import decode, decode_meta, encode
from jobq._logs import claim_extra
from jobq._time import to_seconds
from jobq._worker import tally
from jobq._worker.interrupt import hands_over, trim_callbacks
from jobq._worker.isolation import Isolation
from jobq._worker.leases import HeldClaims
from jobq._worker.tally import Tally, bucket
from jobq.activity import TaskError
from jobq.errors import Fatal, JobCancelled, JobTimeout, Retry
from jobq.events import EventKind, Subscriber, Subscribers, new_event, publish
from jobq.middleware import Middleware, wrap
from jobq.retry import RetryPolicy
from jobq.stores.base import (
    Claim,
    Done,
    Failure,
    PrefetchStore,
    Store,
    describe_error,
    new_done,
)
from jobq.tasks import Task, task_arguments, unknown_task
from jobq.types import NO_META, Job, JobState, StepJob

logger = logging.getLogger("jobq")

# The kinds the runner publishes, read once (an enum member's lookup on its
# class costs a call, and these are read for every job).
STARTED, SUCCEEDED = EventKind.STARTED, EventKind.SUCCEEDED
RETRYING, DEAD = EventKind.RETRYING, EventKind.DEAD

#: What a failed attempt that ended its job counts for, in the tally.
ENDED = {JobState.DEAD: tally.DEAD, JobState.CANCELLED: tally.CANCELLED}

#: The event of a failed attempt, by the state the store says its job is in.
FAILED_KINDS = {
    JobState.PENDING: RETRYING,
    JobState.DEAD: DEAD,
    JobState.CANCELLED: EventKind.CANCELLED,
}

Handler = Callable[[Job[Any]], Any]

R = TypeVar("R")

#: ``resolve_task``: a handler for the jobs of a task name that no
#: ``@queue.task`` registered, or ``None`` (the job is then dead at once).
TaskResolver = Callable[[str], Handler | None]

#: What a worker thread runs a limited attempt under: ``limit(claim, call)``
#: returns ``call()`` (the time limit of ``jobq._worker.limits``, whose
#: ``JobTimeout`` says the job and its limit).
Limit = Callable[[Claim, Callable[[], Any]], Any]


class NoHandler(Fatal):
    """Recorded for a plain job (no task) on a queue without a handler: the
    job is dead at once."""


class Succeeded:
    """An attempt that returned: what the store records, what it returned,
    and for its events the ``Job`` it ran and when it started and ended
    (the queue's clock). A slotted class, not a ``NamedTuple``, whose
    construction (through a Python ``__new__``) costs twice as much, and
    one is built for every observed job."""

    __slots__ = ("done", "ended_at", "job", "started_at", "value")

    def __init__(self, done: Done, value: Any, job: Job[Any] | None,
                 started_at: float, ended_at: float) -> None:  # fmt: skip
        self.done = done
        self.value = value
        self.job = job
        self.started_at = started_at
        self.ended_at = ended_at

    @property
    def claim(self) -> Claim:
        return self.done.claim


class Failed(NamedTuple):
    """A failed attempt: what the store records, the exception (for the
    log, and for ``run_pending`` to re-raise an interrupt), and for its
    events the ``Job`` and when it started (it ended at ``failure.error.at``;
    ``None``: nobody subscribed to attempt events when it started, so its
    start was not read)."""

    failure: Failure
    exc: BaseException
    job: Job[Any] | None
    started_at: float | None
    #: ``False``: its handler never started (``not_started``), so it is no
    #: attempt in the tally.
    attempted: bool = True

    @property
    def claim(self) -> Claim:
        return self.failure.claim


#: What ``run_one`` returns: a bare ``Done`` when nothing observes the
#: attempt, a ``Succeeded`` (with what events need) when something does.
Outcome = Done | Succeeded | Failed

CounterName = Literal["completed", "retried"]


class Counters:
    """``completed`` and ``retried`` as counted by one queue object, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.completed = 0
        self.retried = 0

    def count(self, counter: CounterName, n: int) -> None:
        """Add ``n`` to ``completed`` or ``retried``."""
        with self._lock:
            setattr(self, counter, getattr(self, counter) + n)


class Runner:
    """Runs claimed jobs for one queue and reports their outcome to its store."""

    def __init__(
        self,
        store: Store,
        handler: Handler | None,
        policy: RetryPolicy,
        clock: Callable[[], float],
        keep_completed: float,
        tasks: Mapping[str, Task[..., Any]] | None = None,
        *,
        middleware: Sequence[Middleware] = (),
        subscribers: Subscribers | None = None,
        resolve_task: TaskResolver | None = None,
        isolation: Isolation | None = None,
    ) -> None:
        self.store = store
        self.handler = handler
        #: Named tasks by name: the queue's registry itself, so tasks
        #: registered later are found too.
        self.tasks: Mapping[str, Task[..., Any]] = {} if tasks is None else tasks
        self.policy = policy
        self.clock = clock
        self.keep_completed = keep_completed
        self.middleware = tuple(middleware)
        self.subscribers = Subscribers() if subscribers is None else subscribers
        self.resolve_task = resolve_task
        #: The child processes of isolated tasks.
        self.isolation = Isolation(5.0) if isolation is None else isolation
        self.counters = Counters()
        #: Outcomes and durations since the last beat, for the store's
        #: figures (``jobq.activity``).
        self.tally = Tally()
        self._attempted = self.tally.attempts.append  # per attempt: looked up once
        #: The claims whose handlers run now, by the claim's identity (one
        #: job may run twice at once here, if its lease was lost and it was
        #: claimed again), with the monotonic time each started: for warnings
        #: about slow handlers. Changed and copied only by single dict
        #: operations, which are atomic.
        self.active: dict[int, tuple[Claim, float]] = {}
        #: Every claim this queue's workers hold, started or not: the
        #: leases the watchdog renews, and how long each is known to hold.
        self.held = HeldClaims(store.lease_seconds)

    def run(self, claim: Claim) -> BaseException | None:
        """Run the handler for ``claim`` and record what happened.

        Returns the ``KeyboardInterrupt`` or ``SystemExit`` the handler raised,
        if any: recorded as a failed attempt like anything else, it is also
        meant for the calling thread (``run_pending`` re-raises it, so Ctrl-C
        stops a cron script; worker threads carry on).
        """
        self.held.hold([claim])
        outcome = self.run_one(claim)
        self.record([outcome])
        if isinstance(outcome, Failed) and isinstance(
            outcome.exc, KeyboardInterrupt | SystemExit
        ):
            return outcome.exc
        return None

    # -- the attempt -------------------------------------------------------------

    def run_one(self, claim: Claim, limit: Limit | None = None) -> Outcome:
        """One attempt of ``claim``'s job; the outcome is recorded with
        ``record`` (alone or with others). ``limit``: the worker thread's,
        which enforces the job's ``timeout`` (``None``: no limit, as in
        ``run_pending``).

        Without middleware and subscribers it is the bare call (the hot path
        of every job: no ``Job`` for a task, no clock); else ``_observed``.
        """
        if self.middleware or self.subscribers.attempts:
            return self._observed(claim, limit)
        running = id(claim)  # the claim is alive until it is deleted below
        began = time.monotonic()
        self.active[running] = (claim, began)
        try:
            if limit is None or claim.timeout is None or self._isolated(claim):
                value = self._invoke(claim, None)
            else:
                value = limit(claim, lambda: self._invoke(claim, None))
        except BaseException as exc:  # noqa: BLE001 - every failure is an attempt
            self._attempt_over(running, claim, began, False)
            return self._failed(claim, exc, None, None)
        # _attempt_over, inline: this is every job's path.
        if self.active.pop(running, None) is not None:
            self._attempted((claim.task, bucket(time.monotonic() - began), True))
        if value is None:  # the usual no-op's: nothing to encode, no call
            return new_done((claim, None))
        return new_done((claim, self._stored_result(claim, value)))

    def _observed(self, claim: Claim, limit: Limit | None) -> Outcome:
        """``run_one`` with the ``Job`` built for the middleware and events,
        ``started`` published, and the attempt's times kept for the events
        that ``record`` publishes: read only if someone subscribed to an
        attempt's events (middleware alone needs neither them nor a clock)."""
        running = id(claim)
        began = time.monotonic()
        self.active[running] = (claim, began)
        observed = self.subscribers.attempts
        started_at = self.clock() if observed else 0.0
        job = None
        try:
            job = job_of(claim)
            if self.subscribers.started:
                self._started(claim, job, started_at)
            if (
                limit is not None
                and claim.timeout is not None
                and not self._isolated(claim)
            ):
                value = limit(claim, self._attempt(claim, job))
            elif self.middleware:
                value = self._attempt(claim, job)()
            else:  # the common case, called here: no closure to build
                value = self._invoke(claim, job)
        except BaseException as exc:  # noqa: BLE001 - every failure is an attempt
            self._attempt_over(running, claim, began, False)
            return self._failed(claim, exc, job, started_at if observed else None)
        else:
            self._attempt_over(running, claim, began, True)
        finally:
            self.active.pop(running, None)  # if jobq's own code failed above
        done = Done(claim, self._stored_result(claim, value))
        if not observed:
            return done
        return Succeeded(done, value, job, started_at, self.clock())

    def _isolated(self, claim: Claim) -> bool:
        """Whether ``claim``'s job is of an isolated task (its child process
        enforces the time limit)."""
        task = None if claim.task is None else self.tasks.get(claim.task)
        return task is not None and task.isolate

    def _attempt_over(
        self, running: int, claim: Claim, began: float, returned: bool
    ) -> None:
        """The attempt's handler returned or raised: out of ``active``, and
        counted in the tally, unless its thread was abandoned meanwhile
        (``abandoned`` took it out and counted it; the store refuses what
        it returns now)."""
        if self.active.pop(running, None) is not None:
            self._attempted((claim.task, bucket(time.monotonic() - began), returned))

    def _attempt(self, claim: Claim, job: Job[Any]) -> Callable[[], Any]:
        """The attempt as a call: through the middleware, if any."""
        if self.middleware:
            return wrap(self.middleware, job, lambda: self._invoke(claim, job))
        return functools.partial(self._invoke, claim, job)

    def abandoned(
        self, claim: Claim, exc: JobTimeout | JobCancelled, stack: str | None
    ) -> Failed:
        """The failed attempt recorded for a handler abandoned at its time
        limit or after a cancellation (by the watchdog, while the handler
        still runs): its error shows where the thread was stuck (``stack``,
        formatted)."""
        running = self.active.pop(id(claim), None)
        ran_for = 0.0 if running is None else time.monotonic() - running[1]
        # Counted here: should the handler return, the store refuses that.
        self._attempted((claim.task, bucket(ran_for), False))
        job = job_of(claim) if self.subscribers.attempts else None
        failed = self._failed(claim, exc, job, self.clock() - ran_for)
        if stack is None:
            return failed
        error = with_stack(failed.failure.error, stack)
        return failed._replace(failure=failed.failure._replace(error=error))

    def not_started(self, claim: Claim, exc: JobCancelled) -> Failed:
        """The failed attempt recorded for a claim whose job was asked to
        stop before its handler started (it never starts)."""
        return self._failed(claim, exc, None, None)._replace(attempted=False)

    @hands_over
    def _invoke(self, claim: Claim, job: Job[Any] | None) -> Any:
        """Call the job's task with its arguments, or the handler with the job.

        An unknown task, a task job's malformed payload, or a plain job on a
        queue without a handler raise a ``Fatal``: the job is dead at once.
        """
        name = claim.task
        if name is None:
            if self.handler is None:
                raise NoHandler(
                    "this queue has no handler for plain jobs (those added with "
                    "enqueue); pass one to JobQueue(handler)"
                )
            return self.handler(job_of(claim) if job is None else job)
        function = self.tasks.get(name)
        if function is not None and function.isolate:
            return self.isolation.run(claim, function)
        if function is not None:
            payload = decode(claim.payload) if job is None else job.payload
            args, kwargs = task_arguments(payload)
            if function.takes_parent_results:
                kwargs["parent_results"] = parent_results(claim)
            return function(*args, **kwargs)
        handler = None if self.resolve_task is None else self.resolve_task(name)
        if handler is None:
            raise unknown_task(name)
        return handler(job_of(claim) if job is None else job)

    def _stored_result(self, claim: Claim, result: Any) -> str | None:
        """The result as JSON text, for a completed job kept or a workflow's
        children (``None`` is ``None`` to both: no encoding)."""
        if result is None:
            return None
        try:
            return encode(result, "result")
        except Exception:  # noqa: BLE001 - whatever the value does, the job succeeded
            logger.warning(
                "job %d succeeded but its result is not JSON; keeping None",
                claim.id,
                extra=claim_extra(claim),
            )
            return None

    def _failed(
        self,
        claim: Claim,
        exc: BaseException,
        job: Job[Any] | None,
        started_at: float | None,
    ) -> Failed:
        """The failed attempt ``exc`` ended: its error, and when the job runs
        again (never after a ``Fatal`` or its last attempt)."""
        now = self.clock()
        if isinstance(exc, JobTimeout | JobCancelled):
            trim_callbacks(exc)  # raised by a callback at the handler's line
        retry_at = None
        if not isinstance(exc, Fatal) and claim.attempt < claim.max_attempts:
            retry_at = now + self._retry_delay(claim, exc)
        failure = Failure(claim, describe_failure(exc, now), retry_at)
        return Failed(failure, exc, job, started_at)

    def _retry_delay(self, claim: Claim, exc: BaseException) -> float:
        if isinstance(exc, Retry) and exc.after is not None:
            try:
                return to_seconds(exc.after, "Retry(after=...)")
            except (TypeError, ValueError):
                logger.warning(
                    "job %d raised Retry with a bad after=%r; using the backoff",
                    claim.id,
                    exc.after,
                    extra=claim_extra(claim),
                )
        return self.policy.delay(claim.attempt)

    # -- recording outcomes --------------------------------------------------------

    def record(
        self,
        outcomes: Sequence[Outcome],
        *,
        counted: bool = True,
        starting: Sequence[Claim] = (),
    ) -> list[Claim] | None:
        """Record outcomes: the successes in one store write, the failed
        attempts in another; then log each failure and publish an event for
        each outcome the store took (``cancelled`` for a failed attempt of a
        job that was asked to stop). ``counted=False``: the outcomes of a
        thread abandoned earlier, whose attempt the tally has already (as
        failed): none is taken back when the store refuses it.

        ``starting``: claims a ``PrefetchStore`` took ahead, marked started
        by the first of those writes (or one of their own). Returns those
        marked (the others are no longer this process's: forgotten), or
        ``None`` if the write failed (never raises: the failure is logged)."""
        marks = _Marks(starting)
        if not outcomes:
            marks.alone(self.store, self.clock())
            return marks.result(self)
        succeeded: list[Done | Succeeded] = []
        done: list[Done] = []
        failed: list[Failed] = []
        for outcome in outcomes:
            if isinstance(outcome, Done):
                succeeded.append(outcome)
                done.append(outcome)
            elif isinstance(outcome, Succeeded):
                succeeded.append(outcome)
                done.append(outcome.done)
            else:
                failed.append(outcome)
        now = self.clock()
        if done:
            keep_until = now + self.keep_completed if self.keep_completed > 0 else None
            recorded = self._record(
                [d.claim for d in done],
                "success",
                lambda: marks.sent(self.store.finish_many)(done, keep_until, now),
                "completed",
                [1] * len(done),
            )
            if counted and not all(recorded):  # taken back from the tally
                for d, ok in zip(done, recorded, strict=True):
                    if not ok:
                        self.tally.count(d.claim.task, tally.UNRECORDED_SUCCESS)
            callbacks = self.subscribers.succeeded
            if callbacks:
                for success, ok in zip(succeeded, recorded, strict=True):
                    if ok and isinstance(success, Succeeded):
                        self._ended(success, SUCCEEDED, callbacks)
        if failed:
            failures = [f.failure for f in failed]
            states = self._record(
                [f.claim for f in failures],
                "failure",
                lambda: marks.sent(self.store.fail_many)(failures, now),
                "retried",
                [int(f.retry_at is not None) for f in failures],
            )
            for outcome, state in zip(failed, states, strict=True):
                if counted:
                    self._tally_failure(outcome, state)
                if state is None:
                    continue
                if state is JobState.CANCELLED and outcome.failure.retry_at:
                    self.counters.count("retried", -1)  # it stopped instead
                _safely(_log_failure, outcome, state)
                kind = FAILED_KINDS[state]
                callbacks = self.subscribers.of(kind)
                if callbacks:
                    self._ended(outcome, kind, callbacks)
        return marks.result(self) if starting else []  # no call: every job's path

    def _tally_failure(self, outcome: Failed, state: JobState | None) -> None:
        """What a failed attempt's record adds to the tally beyond the
        attempt (counted as it ended): its error (the task's newest, for the
        figures) and the job's end, or the attempt taken back where the
        store did not record it."""
        task = outcome.claim.task
        if state is None:
            if outcome.attempted:
                self.tally.count(task, tally.UNRECORDED_FAILURE)
            return
        if state is not JobState.CANCELLED and outcome.attempted:
            error = outcome.failure.error
            self.tally.errors.append(
                (task, TaskError(error.at, outcome.claim.id, describe_error(error)))
            )
        if state is not JobState.PENDING:
            self.tally.count(task, ENDED[state])

    def release(self, claims: Sequence[Claim]) -> None:
        """Give claims whose jobs did not start back to the store."""
        if not claims:
            return
        try:
            self.store.release(claims, self.clock())
        except Exception:
            logger.exception(
                "%d claimed job(s) could not be given back; they run once their "
                "claims are recovered",
                len(claims),
            )
        self.held.forget(claims)

    def _record(
        self,
        claims: Sequence[Claim],
        outcome: str,
        write: Callable[[], list[R]],
        counter: CounterName,
        counts: Sequence[int],
    ) -> Sequence[R | None]:
        """Record one outcome for each of ``claims`` with ``write`` (the store
        call); what the store said of each (falsy: not recorded), ``None``
        for each where the store failed. ``counts`` are what each claim adds
        to the counter named ``counter``.

        The counters move first, so that whoever the store's settling wakes
        (``join``) already sees them, and move back for the outcomes the store
        did not record (stale claims, or a store error: the worker goes on
        either way).
        """
        self.counters.count(counter, sum(counts))
        recorded: Sequence[R | None]
        try:
            recorded = write()
        except Exception as store_error:  # noqa: BLE001 - workers outlive store errors
            recorded = [None] * len(claims)
            for claim in claims:
                _safely(_log_unrecorded, claim, outcome, store_error)
        else:
            for claim, ok in zip(claims, recorded, strict=True):
                if not ok:
                    _safely(_log_stale, claim, outcome)
        finally:
            self.held.forget(claims)
        if not all(recorded):
            missed = zip(counts, recorded, strict=True)
            self.counters.count(counter, -sum(n for n, ok in missed if not ok))
        return recorded

    # -- events ------------------------------------------------------------------

    def _started(self, claim: Claim, job: Job[Any] | None, at: float) -> None:
        wait = at - claim.run_at
        publish(
            self.subscribers.started,
            new_event(
                STARTED, claim.id, claim.task, claim.attempt, at,
                None, wait if wait > 0.0 else 0.0, None, None, job,
            ),
        )  # fmt: skip

    def _ended(
        self,
        outcome: Succeeded | Failed,
        kind: EventKind,
        callbacks: tuple[Subscriber, ...],
    ) -> None:
        """Publish the event of an attempt's end (it raises nothing)."""
        if isinstance(outcome, Succeeded):
            claim, error, result = outcome.done.claim, None, outcome.value
            ended_at = outcome.ended_at
        else:
            claim, error, _ = outcome.failure
            result, ended_at = None, error.at
        started_at = outcome.started_at
        ran: float | None = None
        wait: float | None = None
        if started_at is not None:  # else: subscribed during the attempt
            ran, wait = ended_at - started_at, started_at - claim.run_at
            ran, wait = (ran if ran > 0.0 else 0.0), (wait if wait > 0.0 else 0.0)
        publish(
            callbacks,
            new_event(
                kind, claim.id, claim.task, claim.attempt, ended_at,
                ran, wait, error, result, outcome.job,
            ),
        )  # fmt: skip


class _Marks:
    """Claims taken ahead to mark started with the first write that goes
    to the store (``PrefetchStore``), and which of them it marked."""

    def __init__(self, starting: Sequence[Claim]) -> None:
        self.starting = starting
        #: The flags of the write that carried the marks; ``None`` until
        #: one returned (none to wait for with nothing to mark).
        self.marked: Sequence[object] | None = [] if not starting else None

    def sent(self, write: Callable[..., list[R]]) -> Callable[..., list[R]]:
        """``write`` (a store method), given the marks if not sent yet; the
        flags of the marks are kept, the outcomes' returned."""
        if self.marked is not None:
            return write
        starting = self.starting

        def marked(*args: Any) -> list[R]:
            result = write(*args, starting=starting)
            split = len(result) - len(starting)
            self.marked = result[split:]
            return result[:split]

        return marked

    def alone(self, store: Store, now: float) -> None:
        """The marks in a write of their own (no outcome to send them with)."""
        if self.marked is None:
            try:
                self.marked = cast(PrefetchStore, store).start(self.starting, now)
            except Exception:
                logger.exception("marking jobs taken ahead started failed")

    def result(self, runner: Runner) -> list[Claim] | None:
        """The claims marked (the others forgotten: another process's now,
        or soon), or ``None`` if no write carried the marks."""
        if self.marked is None:
            return None
        kept: list[Claim] = []
        lost: list[Claim] = []
        for claim, ok in zip(self.starting, self.marked, strict=True):
            (kept if ok else lost).append(claim)
        if lost:
            logger.warning(
                "%d job(s) taken ahead were no longer this process's when a "
                "worker was to start them (stopped past their lease?): not run here",
                len(lost),
            )
            runner.held.forget(lost)
        return kept


def job_of(claim: Claim) -> Job[Any]:
    """The ``Job`` a handler (and middleware) receives for ``claim``: a fresh
    copy of the payload for each attempt. Most jobs have no ``meta``: theirs
    is the shared empty one, with no call (this runs for every job)."""
    # Unpacked at once: reading a named tuple's fields one by one costs more.
    (job_id, _, payload, attempt, _, key, task, _, timeout, meta_text, _,
     parents) = claim  # fmt: skip
    meta = NO_META if meta_text is None else decode_meta(meta_text)
    if not parents:
        return Job(job_id, decode(payload), attempt, key, task, meta, timeout)
    return StepJob(job_id, decode(payload), attempt, key, task, meta, timeout,
                   tuple(parent[0] for parent in parents),
                   tuple(parent_results(claim)),
                   tuple(p[0] for p in parents if p[1] != "completed"))  # fmt: skip


def parent_results(claim: Claim) -> list[Any]:
    """What each parent of ``claim``'s job returned, in ``after`` order
    (``None`` for one that failed): fresh objects for each attempt."""
    return [
        None if result is None or end != "completed" else decode(result)
        for _, end, result in claim.parents
    ]


def _safely(action: Callable[..., None], *args: Any) -> None:
    """``action(*args)``, a log line or an event about an outcome already
    recorded: whatever it raises (a logging filter's bug, a subscriber's
    ``SystemExit``) is logged if it can be, and the worker goes on."""
    try:
        action(*args)
    except BaseException:  # nothing here may stop a worker
        with contextlib.suppress(BaseException):
            logger.exception("telling of a job's outcome failed; ignored")


def _log_failure(failed: Failed, state: JobState) -> None:
    claim, error, retry_at = failed.failure
    if state is JobState.CANCELLED:
        logger.info(
            "job %d was cancelled: attempt %d stopped (%s: %s)",
            claim.id,
            claim.attempt,
            error.type,
            error.message,
            extra=claim_extra(claim),
        )
    elif retry_at is None:
        logger.error(
            "job %d is dead after %d attempt(s): %s: %s",
            claim.id,
            claim.attempt,
            error.type,
            error.message,
            exc_info=failed.exc,
            extra=claim_extra(claim),
        )
    else:
        logger.warning(
            "job %d attempt %d failed (%s: %s); retry in %.3g s",
            claim.id,
            claim.attempt,
            error.type,
            error.message,
            retry_at - error.at,
            extra=claim_extra(claim),
        )


def _log_unrecorded(claim: Claim, outcome: str, exc: Exception) -> None:
    """The store failed to record an outcome (closed, unreachable): the worker
    goes on, and the job runs again once the store recovers its claim."""
    logger.error(
        "job %d: its %s could not be recorded; it runs again once its claim is "
        "recovered",
        claim.id,
        outcome,
        exc_info=exc,
        extra=claim_extra(claim),
    )


def _log_stale(claim: Claim, outcome: str) -> None:
    logger.warning(
        "job %d: its %s was not recorded because the claim is no longer current "
        "(the job was recovered or claimed again)",
        claim.id,
        outcome,
        extra=claim_extra(claim),
    )
