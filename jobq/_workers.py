"""The worker threads: long-lived threads that claim due jobs themselves.

No future per job: each thread loops claim → run → claim, and sleeps on the
queue's condition only when nothing is due, waking when a job arrives, when
the next delayed job falls due, or after ``MAX_IDLE_WAIT`` at most (so a
wall-clock jump never delays a due job by more).

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

from jobq._runner import Runner
from jobq.stores.base import Signal, Store

logger = logging.getLogger("jobq")

#: Longest sleep of an idle worker, in seconds.
MAX_IDLE_WAIT = 1.0


class WorkerPool:
    """Up to ``workers`` threads of one queue, each running one job at a time."""

    def __init__(
        self, runner: Runner, store: Store, signal: Signal, clock: Callable[[], float]
    ) -> None:
        self._runner = runner
        self._store = store
        self._signal = signal
        self._clock = clock
        self._threads: set[threading.Thread] = set()
        self._stopping = True
        self._started = 0
        self.workers = 0
        self._lease_keeper: threading.Thread | None = None
        self._lease_wake = threading.Condition(signal.lock)

    @property
    def running(self) -> bool:
        return not self._stopping

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
            if self._store.lease_seconds is not None and self._lease_keeper is None:
                self._lease_keeper = threading.Thread(
                    target=self._keep_leases, name="jobq-leases", daemon=True
                )
                self._lease_keeper.start()

    def stop(self, timeout: float | None) -> bool:
        """Take no new jobs; wait up to ``timeout`` for running ones.

        Returns whether every thread ended. A thread still inside a handler
        records its job's outcome when the handler returns, then ends.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._signal.lock:
            self._stopping = True
            self._signal.work.notify_all()
            self._lease_wake.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is threading.current_thread():
                continue  # stop() called from a handler: this thread ends after it
            remaining = (
                None if deadline is None else max(deadline - time.monotonic(), 0)
            )
            thread.join(remaining)
        with self._signal.lock:
            ended = not (self._threads - {threading.current_thread()})
            # The lease keeper leaves once no handler runs: wake it to see that
            # and wait for it, so a store closed after stop() is no longer in use.
            self._lease_wake.notify_all()
            keeper = self._lease_keeper
        if ended and keeper is not None and not self._runner.active:
            keeper.join(
                None if deadline is None else max(deadline - time.monotonic(), 0)
            )
        return ended

    def _work(self) -> None:
        signal, store, clock = self._signal, self._store, self._clock
        while True:
            generation = signal.generation
            if self._stopping and self._leave():
                return
            try:
                claim = store.claim(clock())
            except Exception:
                logger.exception("claiming a job failed; trying again shortly")
                claim = None
                self._sleep(generation, MAX_IDLE_WAIT)
                continue
            if claim is not None:
                self._runner.run(claim)
                continue
            try:
                due = store.next_due()
            except Exception:
                logger.exception("reading the next due time failed")
                due = None
            wait = MAX_IDLE_WAIT if due is None else due - clock()
            self._sleep(generation, min(max(wait, 0.0), MAX_IDLE_WAIT))

    def _sleep(self, generation: int, timeout: float) -> None:
        """Wait for new work unless some arrived since ``generation`` was read."""
        signal = self._signal
        with signal.lock:
            if self._stopping or signal.generation != generation or timeout <= 0:
                return
            signal.idle_workers += 1
            try:
                signal.work.wait(timeout)
            finally:
                signal.idle_workers -= 1

    def _keep_leases(self) -> None:
        """Renew the leases of running jobs; recover the expired claims of others.

        Runs while the pool runs, and after a ``stop`` as long as a handler
        still runs here, so its job is never started a second time elsewhere.
        """
        lease = self._store.lease_seconds
        assert lease is not None  # noqa: S101 - only started for leasing stores
        interval = lease / 3
        while True:
            with self._signal.lock:
                if self._stopping and not self._runner.active:
                    self._lease_keeper = None
                    return
                self._lease_wake.wait(interval)
            try:
                now = self._clock()
                running = list(self._runner.active.copy().values())
                if running:
                    self._store.renew(running, now)
                if not self._stopping:
                    self._store.recover(now)
            except Exception:
                logger.exception("renewing leases failed; trying again shortly")

    def _leave(self) -> bool:
        """End this thread if the pool is still stopping (it may have restarted)."""
        with self._signal.lock:
            if not self._stopping:
                return False
            self._threads.discard(threading.current_thread())
            return True
