"""The worker threads: long-lived threads that run a queue's due jobs.

No future per job: each thread loops take a job → run it → hand its outcome
in, and talks to the store only through the queue's ``Dispatcher``, whose
passes record the outcomes of all workers together and claim for every idle
worker at once (see ``jobq._dispatch``). Idle workers sleep until a job
arrives or the next delayed job falls due (one of them watches the clock).

Fast handlers make the store's cost per job the bottleneck, so where the
store allows it (``Store.claim_batch``: the memory store; others when asked)
a claim takes more due jobs than there are idle workers, as many as the
worker's recent handlers ran in ``BATCH_SECONDS``; any worker takes the
next of them, and a worker records the outcomes of the jobs it ran in a row
together. A stop gives the jobs not started back.

The threads are daemon threads. A ``concurrent.futures`` pool joins its threads
at interpreter exit, so one handler that never returns would hang the exit; the
queue instead stops its workers itself from an ``atexit`` hook, with a bounded
wait for running handlers (see ``jobq.queue``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from jobq._dispatch import MAX_IDLE_WAIT, Dispatcher
from jobq._runner import Outcome, Runner
from jobq.stores.base import Claim, Signal, Store

logger = logging.getLogger("jobq")

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
        self._dispatcher = Dispatcher(
            store, runner, signal, clock, lambda: self._stopping,
            durable=store.keeps_results,
        )  # fmt: skip

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
        runner, dispatcher = self._runner, self._dispatcher
        size = BatchSize(self._store.claim_batch)
        ran: list[Outcome] = []  # outcomes not recorded yet
        while True:
            if (
                self._stopping
                or len(ran) >= size.limit  # a persistent store's: after each job
                or (claim := dispatcher.ready()) is None
            ):
                claim = dispatcher.next(ran, size.next())
                ran = []
            if claim is None:  # stopping
                runner.release(dispatcher.take_ready())
                if self._leave():
                    return
                continue
            started = time.monotonic()
            ran.append(runner.run_one(claim))
            size.ran(time.monotonic() - started)

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
