"""The worker threads: long-lived threads that claim due jobs themselves.

No future per job: each thread loops claim → run → claim, and sleeps on the
queue's condition only when nothing is due, waking when a job arrives, when
the next delayed job falls due, or after ``MAX_IDLE_WAIT`` at most (so a
wall-clock jump never delays a due job by more).

Fast handlers make the store's cost per job (a lock taken by every thread, a
transaction, a round trip) the bottleneck, so where the store allows it
(``Store.claim_batch``: the memory store; others when asked) a worker claims
several due jobs at once, as many as its recent handlers ran in
``BATCH_SECONDS``, and records their outcomes (successes and failed
attempts alike) together. It runs the first and leaves the rest in the
pool's ``ready`` buffer, where any worker takes the next: no job waits
behind another one's long run while a worker is free.
Slow handlers get one job at a time; a stop gives the buffered jobs back.

The threads are daemon threads. A ``concurrent.futures`` pool joins its threads
at interpreter exit, so one handler that never returns would hang the exit; the
queue instead stops its workers itself from an ``atexit`` hook, with a bounded
wait for running handlers (see ``jobq.queue``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from jobq._runner import Outcome, Runner
from jobq.stores.base import Claim, Signal, Store

logger = logging.getLogger("jobq")

#: Longest sleep of an idle worker, in seconds.
MAX_IDLE_WAIT = 1.0

#: A batch holds about this many seconds of handler time (and at most the
#: store's ``claim_batch`` jobs).
BATCH_SECONDS = 0.002


def _remaining(deadline: float | None) -> float | None:
    """Seconds left until the monotonic ``deadline`` (``None``: no limit), for
    ``Thread.join``: at least 0, and at most ``threading.TIMEOUT_MAX`` (about
    292 years), beyond which ``join`` raises ``OverflowError``."""
    if deadline is None:
        return None
    return min(max(deadline - time.monotonic(), 0.0), threading.TIMEOUT_MAX)


class BatchSize:
    """How many jobs one worker claims at once, from how long its recent
    handlers took (a moving average of seconds per job)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seconds_per_job = BATCH_SECONDS  # one job at first

    def next(self) -> int:
        return max(1, min(self.limit, int(BATCH_SECONDS / self.seconds_per_job)))

    def ran(self, seconds: float) -> None:
        self.seconds_per_job += (max(seconds, 1e-7) - self.seconds_per_job) / 8


class WorkerPool:
    """Up to ``workers`` threads of one queue, each running one job at a time."""

    def __init__(
        self,
        runner: Runner,
        store: Store,
        signal: Signal,
        clock: Callable[[], float],
        warn_running_after: float | None = None,
    ) -> None:
        self._runner = runner
        self._store = store
        self._signal = signal
        self._clock = clock
        self._warn_running_after = warn_running_after
        self._threads: set[threading.Thread] = set()
        self._stopping = True
        self._started = 0
        self.workers = 0
        self._watchdog: threading.Thread | None = None
        self._watchdog_wake = threading.Condition(signal.lock)
        #: Claimed jobs not started yet, in run order: any worker takes the
        #: next (``deque`` appends and pops are atomic).
        self._ready: deque[Claim] = deque()

    @property
    def running(self) -> bool:
        return not self._stopping

    def runs_in_current_thread(self) -> bool:
        """Whether the calling thread is one of this pool's workers (one still
        finishing its job after a ``stop`` included)."""
        with self._signal.lock:
            return threading.current_thread() in self._threads

    def start(self, workers: int) -> None:
        """Start threads until ``workers`` run; threads still finishing a job
        from before a ``stop`` count towards that number."""
        with self._signal.lock:
            self._stopping = False
            self.workers = workers
            for _ in range(workers - len(self._threads)):
                self._started += 1
                thread = threading.Thread(
                    target=self._work, name=f"jobq-worker-{self._started}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            interval = self._watch_interval()
            if interval is not None and self._watchdog is None:
                self._watchdog = threading.Thread(
                    target=self._watch, args=(interval,), name="jobq-watchdog",
                    daemon=True,
                )  # fmt: skip
                self._watchdog.start()

    def stop(self, timeout: float | None) -> bool:
        """Take no new jobs; wait up to ``timeout`` for running ones.

        Returns whether every thread ended. A thread still inside a handler
        records its job's outcome when the handler returns, then ends. Never
        called from a worker thread (the queue refuses ``stop`` from a handler).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._signal.lock:
            self._stopping = True
            self._signal.work.notify_all()
            self._watchdog_wake.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join(_remaining(deadline))
        with self._signal.lock:
            ended = not self._threads
            # The watchdog leaves once no handler runs: wake it to see that
            # and wait for it, so a store closed after stop() is no longer in use.
            self._watchdog_wake.notify_all()
            watchdog = self._watchdog
        if ended and watchdog is not None and not self._runner.active:
            watchdog.join(_remaining(deadline))
        return ended

    def _work(self) -> None:
        signal, runner = self._signal, self._runner
        size = BatchSize(self._store.claim_batch)
        ran: list[Outcome] = []  # outcomes not recorded yet
        while True:
            generation = signal.generation
            if self._stopping:
                runner.record(ran)
                ran = []
                runner.release(self._take_ready())
                if self._leave():
                    return
            try:
                claim = self._next_claim(size)
            except Exception:
                logger.exception("claiming a job failed; trying again shortly")
                self._sleep(generation, MAX_IDLE_WAIT)
                continue
            if claim is None:
                runner.record(ran)
                ran = []
                self._idle(generation)
                continue
            started = time.monotonic()
            ran.append(runner.run_one(claim))
            size.ran(time.monotonic() - started)
            if not self._ready or len(ran) >= size.limit:
                runner.record(ran)
                ran = []

    def _next_claim(self, size: BatchSize) -> Claim | None:
        """The next buffered claim, else the next due jobs from the store."""
        try:
            return self._ready.popleft()
        except IndexError:
            pass
        claims = self._store.claim_many(self._clock(), size.next())
        if not claims:
            return None
        self._runner.hold(claims)
        if len(claims) > 1:
            self._ready.extend(claims[1:])
            if self._signal.idle_workers:  # a hint: this worker runs them anyway
                self._signal.jobs_added(len(claims) - 1)
        return claims[0]

    def _take_ready(self) -> list[Claim]:
        taken = []
        while True:
            try:
                taken.append(self._ready.popleft())
            except IndexError:
                return taken

    def _idle(self, generation: int) -> None:
        """Sleep until the next delayed job is due, or new work arrives."""
        try:
            due = self._store.next_due()
        except Exception:
            logger.exception("reading the next due time failed")
            due = None
        wait = MAX_IDLE_WAIT if due is None else due - self._clock()
        self._sleep(generation, min(max(wait, 0.0), MAX_IDLE_WAIT))

    def _sleep(self, generation: int, timeout: float) -> None:
        """Wait for new work unless some arrived since ``generation`` was read."""
        signal = self._signal
        with signal.lock:
            if (
                self._stopping
                or signal.generation != generation
                or timeout <= 0
                or self._ready
            ):
                return
            signal.idle_workers += 1
            try:
                signal.work.wait(timeout)
            finally:
                signal.idle_workers -= 1

    def _watch_interval(self) -> float | None:
        """How often the watchdog looks; ``None`` if it has nothing to do."""
        intervals = []
        if self._store.lease_seconds is not None:
            intervals.append(self._store.lease_seconds / 3)
        if self._warn_running_after is not None:
            intervals.append(min(self._warn_running_after / 2, MAX_IDLE_WAIT * 10))
        return min(intervals, default=None)

    def _watch(self, interval: float) -> None:
        """Renew the leases of running jobs, recover the expired claims of
        others, and warn about handlers running longer than they should.

        Runs while the pool runs, and after a ``stop`` as long as a handler
        still runs here, so its job is never started a second time elsewhere.
        """
        warned: set[tuple[int, int]] = set()  # (job id, token) already reported
        while True:
            with self._signal.lock:
                if self._stopping and not self._runner.active:
                    self._watchdog = None
                    return
                self._watchdog_wake.wait(interval)
            try:
                running = list(self._runner.active.copy().values())
                if self._store.lease_seconds is not None:
                    now = self._clock()
                    held = self._runner.held_claims()
                    if held:
                        self._store.renew(held, now)
                    if not self._stopping:
                        self._store.recover(now)
                if self._warn_running_after is not None:
                    warned = self._warn_slow(running, warned)
            except Exception:
                logger.exception("the watchdog failed; trying again shortly")

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
                )
                warned.add(seen)
        return warned & still

    def _leave(self) -> bool:
        """End this thread if the pool is still stopping (it may have restarted)."""
        with self._signal.lock:
            if not self._stopping:
                return False
            self._threads.discard(threading.current_thread())
            return True
