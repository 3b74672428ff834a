"""The worker threads: long-lived threads that run a queue's due jobs.

No future per job: each thread loops take a job → run it → hand its outcome
in, and talks to the store only through the queue's ``Dispatcher``, whose
passes record the outcomes of all workers together and claim for every idle
worker at once (see ``jobq._worker.dispatch``). Idle workers sleep until a job
arrives or the next delayed job falls due (one of them watches the clock).

Fast handlers make the store's cost per job the bottleneck, so where the
store allows it (``Store.claim_batch``: the memory store; others when asked)
a claim takes more due jobs than there are idle workers, as many as the
worker's recent handlers ran in ``BATCH_SECONDS``; any worker takes the
next of them, and a worker records the outcomes of the jobs it ran in a row
together, unless the store takes jobs ahead (``Capabilities.prefetch``):
there each outcome is written before its worker starts another job, so a
crash re-runs at most one job per worker. A stop gives the jobs not started
back.

A job with a ``timeout`` runs under a time limit (see ``jobq._worker.limits``):
the limits thread has ``JobTimeout`` raised in a handler past its limit,
and after the grace gives up on a thread still inside it; the watchdog then
records its attempt as failed and starts another thread in its place, so
the pool keeps its size, as long as no more than ``max_abandoned`` abandoned
threads are alive: beyond that the pool shrinks instead of the process
growing, and it grows back as abandoned threads return. A job asked to
stop (``stop_job``: this process's ``queue.cancel``, or the store's
``stops_requested``, which the watchdog asks every ``STOP_LOOK`` seconds
where another process may have asked) is stopped the same way with
``JobCancelled``; one claimed but not started yet is not started.

The threads are daemon threads. A ``concurrent.futures`` pool joins its threads
at interpreter exit, so one handler that never returns would hang the exit; the
queue instead stops its workers itself from an ``atexit`` hook, with a bounded
wait for running handlers (see ``jobq.queue``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable

from jobq._logs import claim_extra
from jobq._periodic.scheduler import Scheduler
from jobq._worker.dispatch import MAX_IDLE_WAIT, Dispatcher
from jobq._worker.heartbeat import Heartbeat
from jobq._worker.limits import Attempt, ThreadLimit, TimeLimits
from jobq._worker.runner import Outcome, Runner
from jobq.activity import BEAT
from jobq.errors import JobCancelled, JobTimeout
from jobq.stores.base import STOP_LOOK, Claim, Signal, Store, capabilities_of

logger = logging.getLogger("jobq")

#: A batch holds about this many seconds of handler time (and at most the
#: store's ``claim_batch`` jobs).
BATCH_SECONDS = 0.002

#: The watchdog looks at the schedules no sooner than this after its last look.
SLOT_LOOK_MIN = 0.01


def _remaining(deadline: float | None) -> float | None:
    """Seconds left until the monotonic ``deadline`` (``None`` or infinite: no
    limit), for ``Thread.join`` and ``Condition.wait``: at least 0, and at
    most ``threading.TIMEOUT_MAX`` (about 292 years), beyond which they raise
    ``OverflowError``."""
    if deadline is None or deadline == math.inf:
        return None
    return min(max(deadline - time.monotonic(), 0.0), threading.TIMEOUT_MAX)


class BatchSize:
    """How many jobs one worker claims at once, from how long its recent
    handlers took (a moving average of seconds per job), and how many
    outcomes it holds before handing them in (``held``)."""

    def __init__(self, limit: int, held: int) -> None:
        self.limit = limit
        self.held = held
        self.seconds_per_job = BATCH_SECONDS  # one job at first

    def next(self) -> int:
        return max(1, min(self.limit, int(BATCH_SECONDS / self.seconds_per_job)))

    def ran(self, seconds: float, jobs: int) -> None:
        """``jobs`` ran in ``seconds``: the average moves as far as ``jobs``
        steps of 1/8 towards their mean would (timed per batch, not per job:
        two clock reads and a call fewer for each job)."""
        mean = max(seconds / jobs, 1e-7)
        self.seconds_per_job += (mean - self.seconds_per_job) * (1 - 0.875**jobs)


class Worker:
    """One worker thread: its time limit (``call`` wraps its handler
    calls), the outcomes it ran and has not handed in yet (a thread
    abandoned in its next handler cannot hand them in, so the watchdog
    records them for it), and ``recorded``, set once the watchdog has
    recorded the attempt it was abandoned in: should its handler return,
    it hands in its late outcome only then (the store refuses it, its claim
    being stale)."""

    __slots__ = ("call", "interruptible", "limit", "ran", "recorded", "since", "size")

    def __init__(self, limit: ThreadLimit, size: BatchSize) -> None:
        self.limit = limit
        self.call = limit.call  # bound once, not per job
        self.interruptible = limit.interruptible
        self.ran: list[Outcome] = []
        self.recorded = threading.Event()
        self.size = size
        self.since = 0.0  # when it began the jobs in ``ran`` (monotonic)


class WorkerPool:
    """Up to ``workers`` threads of one queue, each running one job at a time.

    A thread given up at a time limit (its handler did not return
    ``timeout_grace`` seconds after ``JobTimeout``) is abandoned: it leaves
    the pool, which starts another in its place while at most
    ``max_abandoned`` abandoned threads are alive (``None``: as many as
    ``workers``). So the pool's threads, working and abandoned, never
    number more than ``workers + max_abandoned``.
    """

    def __init__(
        self,
        runner: Runner,
        store: Store,
        signal: Signal,
        clock: Callable[[], float],
        warn_running_after: float | None = None,
        timeout_grace: float = 5.0,
        *,
        scheduler: Scheduler | None = None,
        max_abandoned: int | None = None,
    ) -> None:
        self._runner = runner
        self._store = store
        self._signal = signal
        self._clock = clock
        self._scheduler = scheduler
        self._warn_running_after = warn_running_after
        self._threads: set[threading.Thread] = set()
        self._stopping = True
        self._started = 0
        self.workers = 0
        self._max_abandoned = max_abandoned
        #: Threads abandoned at a time limit that are still alive (each
        #: leaves as its handler returns); under the signal's lock.
        self._lost: set[threading.Thread] = set()
        self._watchdog: threading.Thread | None = None
        #: Its own lock, not the signal's: the limits thread wakes the
        #: watchdog, and must never wait for a lock a store call holds.
        self._watchdog_wake = threading.Condition()
        #: Threads given up at a time limit, for the watchdog to record and
        #: replace (appended by the limits thread: ``deque`` is atomic).
        self._to_replace: deque[tuple[Worker, Attempt, str | None]] = deque()
        #: Jobs asked to stop whose claims this pool holds but has not
        #: started: not started (a worker reads it before each job; a stop
        #: request is final, so an id here never runs again).
        self._stops: set[int] = set()
        #: Each worker thread's state by its limit (what the limits thread
        #: names when it gives up on one); set and read in single steps.
        self._workers: dict[ThreadLimit, Worker] = {}
        self._woken = False  # the watchdog looks again before it sleeps
        #: Notified whenever a thread leaves the pool (``stop`` waits on it).
        self._left = threading.Condition(signal.lock)
        self._limits = TimeLimits(timeout_grace, self._abandoned)
        #: This process's beats, where the store keeps figures.
        self.heartbeat = Heartbeat.for_store(store, clock)
        self._beat_failed = False
        self._dispatcher = Dispatcher(
            store, runner, signal, clock, lambda: self._stopping,
            durable=store.keeps_results, scheduler=scheduler,
        )  # fmt: skip

    @property
    def running(self) -> bool:
        return not self._stopping

    @property
    def abandoned(self) -> int:
        """Threads abandoned at a time limit and still alive."""
        return len(self._lost)

    @property
    def max_abandoned(self) -> int:
        """Abandoned threads alive beyond which none is replaced."""
        limit = self._max_abandoned
        return self.workers if limit is None else limit

    @property
    def lost(self) -> int:
        """Workers the running pool lacks: abandoned and not replaced."""
        return 0 if self._stopping else max(self.workers - len(self._threads), 0)

    def runs_in_current_thread(self) -> bool:
        """Whether the calling thread is one of this pool's workers (one still
        finishing its job after a ``stop`` included)."""
        with self._signal.lock:
            return threading.current_thread() in self._threads

    def start(self, workers: int) -> None:
        """Start threads until ``workers`` run; threads still finishing a job
        from before a ``stop`` count towards that number (abandoned ones do
        not)."""
        with self._signal.lock:
            self._stopping = False
            self.workers = workers
            self._limits.open()
            self._top_up()
            if self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch, name="jobq-watchdog", daemon=True
                )
                self._watchdog.start()

    def _top_up(self) -> int:
        """Start threads until ``workers`` run, as far as ``max_abandoned``
        allows (lock held): the pool's threads, working and abandoned, stay
        within ``workers + max_abandoned``. How many it started."""
        if self._stopping:
            return 0
        room = self.workers + self.max_abandoned - len(self._lost)
        wanted = min(self.workers, room) - len(self._threads)
        for _ in range(wanted):
            self._start_worker()
        return max(wanted, 0)

    def _start_worker(self) -> None:
        """One more worker thread (lock held)."""
        self._started += 1
        thread = threading.Thread(
            target=self._work, name=f"jobq-worker-{self._started}", daemon=True
        )
        self._threads.add(thread)
        try:
            thread.start()
        except BaseException:
            self._threads.discard(thread)
            raise

    def stop(self, timeout: float | None) -> bool:
        """Take no new jobs; wait up to ``timeout`` for running ones.

        Returns whether every thread ended. A thread still inside a handler
        records its job's outcome when the handler returns, then ends; one
        abandoned at its time limit is not waited for. Never called from a
        worker thread (the queue refuses ``stop`` from a handler).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._signal.lock:
            self._stopping = True
            # Taken now: once it sees the stop it forgets itself, then still
            # hands over its last counts, which this call waits for.
            watchdog = self._watchdog
            self._signal.work.notify_all()
            self._wake_watchdog()
            threads = list(self._threads)
            while self._threads:
                wait = _remaining(deadline)
                if wait == 0:
                    break
                self._left.wait(wait)
            ended = not self._threads
            # The watchdog leaves once no handler runs: wake it to see that
            # and wait for it, so a store closed after stop() is no longer in use.
            self._wake_watchdog()
            limits = self._limits.close()
        for thread in threads:  # those that left are ending: see them end
            if thread not in self._lost:
                thread.join(_remaining(deadline))
        if ended and not self._runner.active:
            for helper in (watchdog, limits):
                if helper is not None:
                    helper.join(_remaining(deadline))
        return ended

    def _work(self) -> None:
        limit = self._limits.enter()
        batch = self._store.claim_batch
        held = 1 if capabilities_of(self._store).prefetch else batch
        worker = self._workers[limit] = Worker(limit, BatchSize(batch, held))
        try:
            self._run_jobs(worker)
        finally:
            self._limits.leave(limit)
            self._workers.pop(limit, None)
            self._leave_pool()

    def _leave_pool(self) -> None:
        """The calling worker thread ends (also if its loop failed
        unexpectedly). An abandoned one makes room: a thread the pool went
        without (``max_abandoned``) starts in its place."""
        thread = threading.current_thread()
        started = 0
        with self._signal.lock:
            self._threads.discard(thread)
            self._left.notify_all()
            if thread in self._lost:
                self._lost.discard(thread)
                try:
                    started = self._top_up()
                except RuntimeError:  # no thread can start: the next one tries
                    logger.exception("could not start a worker thread")
            workers, running = self.workers, len(self._threads)
        if started:
            logger.warning(
                "an abandoned worker thread returned, so %d thread(s) started in "
                "the place of those abandoned before: %d of %d workers run",
                started, running, workers,
            )  # fmt: skip

    def _run_jobs(self, worker: Worker) -> None:
        """Take a job, run it, hand its outcome in, until the pool stops or
        this thread was abandoned at a time limit. Nothing ends the thread
        otherwise: a failure of jobq's own (a bug) is logged and the thread
        takes the next job."""
        while True:
            try:
                if self._take_and_run(worker):
                    return
            except BaseException:  # a worker thread never dies of a failure
                with contextlib.suppress(BaseException):
                    logger.critical(
                        "a worker thread's bookkeeping failed; it carries on",
                        exc_info=True,
                    )

    def _take_and_run(self, worker: Worker) -> bool:
        """One turn of a worker: hand in what it ran, take a job and run it;
        whether the thread ends (stopping, or abandoned)."""
        runner, dispatcher, size = self._runner, self._dispatcher, worker.size
        if (
            self._stopping
            or len(worker.ran) >= size.held  # a persistent store's: after each job
            or (claim := dispatcher.ready()) is None
        ):
            if worker.ran:
                size.ran(time.monotonic() - worker.since, len(worker.ran))
            claim = dispatcher.next(worker.ran, size.next())
            worker.ran = []
            worker.since = time.monotonic()
        if claim is None:  # stopping
            runner.release(dispatcher.take_ready())
            return self._leave()
        started = time.monotonic()
        interruptible = worker.interruptible
        interruptible.current = claim  # a stop request names it (no wrapper)
        if self._stops and claim.id in self._stops:  # read after: see stop_job
            self._stops.discard(claim.id)
            interruptible.current = None
            worker.ran.append(runner.not_started(claim, JobCancelled()))
            return False
        if runner.held.lapsed(claim):  # last, just before the handler runs
            interruptible.current = None
            _give_back_lapsed(runner, claim)
            return False
        outcome = runner.run_one(claim, worker.call)
        interruptible.current = None
        if interruptible.pending:
            interruptible.leave()
        if interruptible.abandoned:
            worker.recorded.wait()  # the watchdog records its timeout first
            self._returned_late(outcome, time.monotonic() - started)
            return True
        worker.ran.append(outcome)
        return False

    def _returned_late(self, outcome: Outcome, seconds: float) -> None:
        """The handler of an abandoned thread returned after all: its attempt
        was recorded as timed out, so the store refuses this outcome (the
        claim's token is stale; logged), and the thread ends."""
        claim = outcome.claim
        logger.info(
            "job %d: the handler abandoned at its time limit returned after "
            "%.1f s; its outcome goes to the store, which refuses it, and %s ends",
            claim.id, seconds, threading.current_thread().name,
            extra=claim_extra(claim),
        )  # fmt: skip
        self._runner.record([outcome], counted=False)

    def _watch_interval(self) -> float | None:
        """How often the watchdog renews, recovers and warns; ``None`` if it
        has none of that to do (it still enforces time limits)."""
        intervals = []
        if self._store.lease_seconds is not None:
            intervals.append(self._store.lease_seconds / 3)
        if self._warn_running_after is not None:
            intervals.append(min(self._warn_running_after / 2, MAX_IDLE_WAIT * 10))
        return min(intervals, default=None)

    def _watch(self) -> None:
        """Renew the leases of running jobs, recover the expired claims of
        others, warn about handlers running longer than they should, look at
        the schedules while every worker is busy, and record and replace the
        threads given up at a time limit.

        Runs while the pool runs, and after a ``stop`` as long as a handler
        still runs here, so its job is never started a second time elsewhere.
        """
        interval = self._watch_interval()
        periodic = math.inf if interval is None else time.monotonic() + interval
        stop_look = math.inf
        if self._store.shared_between_processes:
            stop_look = time.monotonic() + STOP_LOOK
        retry = math.inf  # after a failure
        beat = math.inf if self.heartbeat is None else time.monotonic()
        warned: set[tuple[int, int]] = set()  # (job id, token) already reported
        while True:
            with self._signal.lock:
                leaving = (
                    self._stopping and not self._runner.active and not self._to_replace
                )
                if leaving:
                    self._watchdog = None
            if leaving:
                self._leave_registry()
                return
            with self._watchdog_wake:
                if not self._woken and not self._to_replace:
                    wake = min(periodic, stop_look, retry, beat, self._next_slot_look())
                    self._watchdog_wake.wait(_remaining(wake))
                self._woken = False
            try:
                retry = math.inf
                if time.monotonic() >= beat:
                    beat = time.monotonic() + BEAT
                    self._beat()
                self._replace_abandoned()
                if self._scheduler is not None:
                    self._scheduler.tick()  # a no-op until a slot falls due
                if time.monotonic() >= stop_look:
                    stop_look = time.monotonic() + STOP_LOOK
                    self._look_for_stops()
                if time.monotonic() >= periodic:
                    assert interval is not None  # noqa: S101 - inf otherwise
                    periodic = time.monotonic() + interval
                    warned = self._periodic(warned)
            except Exception:
                logger.exception("the watchdog failed; trying again shortly")
                retry = time.monotonic() + MAX_IDLE_WAIT

    def _beat(self) -> None:
        """This process's beat (``jobq.activity``); a store that fails it is
        logged once until a beat succeeds again (the counts wait for it)."""
        heartbeat = self.heartbeat
        assert heartbeat is not None  # noqa: S101 - beats only with one
        try:
            heartbeat.beat(
                self._runner.tally, self.workers - self.lost, self._runner.active
            )
        except Exception:
            if not self._beat_failed:
                logger.warning(
                    "could not write this process's figures to the store; "
                    "trying again every %g s",
                    BEAT,
                    exc_info=True,
                )
            self._beat_failed = True
        else:
            self._beat_failed = False

    def _leave_registry(self) -> None:
        """The pool stopped: hand over the last counts and leave the
        store's registry of processes."""
        if self.heartbeat is None:
            return
        try:
            self.heartbeat.hand_over(self._runner.tally)
            self.heartbeat.leave()
        except Exception:
            logger.warning(
                "could not remove this process from the store's registry; "
                "it is shown as gone once its beats stop",
                exc_info=True,
            )

    def _next_slot_look(self) -> float:
        """When the watchdog looks at the periodic jobs' schedules (monotonic;
        ``inf``: none declared). Idle workers look too, but while every
        worker runs a long job only the watchdog is awake to enqueue a slot
        on time. Never sooner than ``SLOT_LOOK_MIN`` from now, so a look that
        another thread holds is not spun on."""
        scheduler = self._scheduler
        if scheduler is None or scheduler.next_wake == math.inf:
            return math.inf
        wait = max(scheduler.next_wake - self._clock(), SLOT_LOOK_MIN)
        return time.monotonic() + min(wait, MAX_IDLE_WAIT)

    def _periodic(self, warned: set[tuple[int, int]]) -> set[tuple[int, int]]:
        """Renew the leases of held claims, recover expired ones, warn about
        slow handlers; the claims warned about, for the next time."""
        running = list(self._runner.active.copy().values())
        if self._store.lease_seconds is not None:
            now = self._clock()
            held = self._runner.held.claims()
            if held:
                sent = time.monotonic()
                self._store.renew(held, now)
                self._runner.held.renewed(held, sent)
            if not self._stopping:
                self._store.recover(now)
        if self._warn_running_after is not None:
            warned = self._warn_slow(running, warned)
        return warned

    def stop_job(self, job_id: int) -> None:
        """Stop the job ``job_id`` if this pool holds its claim: interrupt
        its handler (``JobCancelled``, see ``jobq._worker.limits``), or
        never start it. Called by ``queue.cancel`` and the watchdog."""
        if not any(claim.id == job_id for claim in self._runner.held.claims()):
            return
        if self._interrupt(job_id):
            return
        # Claimed, not started: the worker that takes it sees this. One that
        # marked it current before this was added is found by the second look.
        self._stops.add(job_id)
        if self._interrupt(job_id):
            self._stops.discard(job_id)

    def _interrupt(self, job_id: int) -> bool:
        """Have the handler running ``job_id`` stopped; whether one runs it."""
        for worker in list(self._workers.values()):
            current = worker.interruptible.current
            if (
                isinstance(current, Claim)
                and current.id == job_id
                and worker.limit.request_stop(current)
            ):
                return True
        return False

    def _look_for_stops(self) -> None:
        """Ask the store which held claims another process asked to stop
        (the watchdog, every ``STOP_LOOK`` seconds); forget the stops of
        claims no longer held."""
        held = self._runner.held.claims()
        if self._stops:
            self._stops &= {claim.id for claim in held}
        if held:
            for job_id in self._store.stops_requested(held):
                self.stop_job(job_id)

    def _abandoned(
        self, limit: ThreadLimit, attempt: Attempt, stack: str | None
    ) -> None:
        """The limits thread gave up on ``limit``'s thread in ``attempt``
        (stuck in ``stack``): the watchdog records and replaces it."""
        worker = self._workers.get(limit)
        if worker is not None:
            self._to_replace.append((worker, attempt, stack))
            self._wake_watchdog()

    def _replace_abandoned(self) -> None:
        """Record the attempts of the threads given up at a time limit, and
        start a thread in the place of each."""
        while self._to_replace:
            worker, attempt, stack = self._to_replace.popleft()
            try:
                self._record_abandoned(worker, attempt, stack)
            finally:
                try:  # counted out before it may end (it waits for recorded)
                    self._replace(worker.limit.thread, attempt)
                finally:
                    worker.recorded.set()  # its late outcome may come now

    def _record_abandoned(
        self, worker: Worker, attempt: Attempt, stack: str | None
    ) -> None:
        """Record an abandoned handler's attempt as failed (``JobTimeout``
        or ``JobCancelled``), with the outcomes its thread had not handed
        in. Recording forgets the claim, so its lease is no longer renewed."""
        claim, grace = attempt.claim, self._limits.grace
        thread = worker.limit.thread.name
        exc: JobTimeout | JobCancelled
        if attempt.exception is JobCancelled:
            exc = JobCancelled(
                f"job {claim.id} was cancelled and did not stop within the "
                f"{grace:g} s grace: its thread {thread} was abandoned"
            )
        else:
            exc = JobTimeout(
                f"job {claim.id} ran past its time limit of {claim.timeout:g} s "
                f"and did not return within the {grace:g} s grace: its thread "
                f"{thread} was abandoned"
            )
        failed = self._runner.abandoned(claim, exc, stack)
        with self._signal.lock:  # counted before anyone sees the attempt
            self._lost.add(worker.limit.thread)
        self._runner.record([*worker.ran, failed])
        worker.ran = []

    def _replace(self, thread: threading.Thread, attempt: Attempt) -> None:
        """Count ``thread`` out of the pool and start another in its place,
        unless the pool is stopping or ``max_abandoned`` threads abandoned
        before it are alive: then the pool runs one thread short (logged
        at ERROR) until one of them returns."""
        with self._signal.lock:
            self._threads.discard(thread)
            self._lost.add(thread)
            self._left.notify_all()
            if self._stopping or self._top_up():
                return
            lost, running = len(self._lost), len(self._threads)
        claim = attempt.claim
        logger.error(
            "job %d: %s was abandoned and not replaced, since %d abandoned "
            "threads are alive (max_abandoned=%d): %d of %d workers run until "
            "abandoned threads return. Give the calls that hang a timeout of "
            "their own, or run the task in a child process (isolate=True)",
            claim.id, thread.name, lost, self.max_abandoned, running, self.workers,
            extra=claim_extra(claim),
        )  # fmt: skip

    def _wake_watchdog(self) -> None:
        """Make the watchdog look now (or after the look it is in)."""
        with self._watchdog_wake:
            self._woken = True
            self._watchdog_wake.notify_all()

    def _warn_slow(
        self, running: list[tuple[Claim, float]], warned: set[tuple[int, int]]
    ) -> set[tuple[int, int]]:
        """Log a WARNING, once per claim, for each handler running too long."""
        limit = self._warn_running_after
        assert limit is not None  # noqa: S101 - only called when set
        now = time.monotonic()
        still = set()
        for claim, started in running:
            seen = (claim.id, claim.token)
            still.add(seen)
            if seen not in warned and now - started > limit:
                logger.warning(
                    "job %d (attempt %d) has been running for %.0f s; its job "
                    "stays running, and is not started again, while it runs",
                    claim.id,
                    claim.attempt,
                    now - started,
                    extra=claim_extra(claim),
                )
                warned.add(seen)
        return warned & still

    def _leave(self) -> bool:
        """End this thread if the pool is still stopping (it may have restarted)."""
        with self._signal.lock:
            if not self._stopping:
                return False
            self._threads.discard(threading.current_thread())
            self._left.notify_all()
            return True


def _give_back_lapsed(runner: Runner, claim: Claim) -> None:
    """``claim``'s lease may have run out before a worker started its job:
    this process was stopped or starved past it (``jobq._worker.leases``).
    Given back rather than run: another process may have recovered and run
    it already (then the store skips the release)."""
    logger.warning(
        "job %d: its lease may have run out before a worker started it (this "
        "process was stopped or starved past it?): given back, not run here",
        claim.id,
        extra=claim_extra(claim),
    )
    runner.release([claim])
