"""Threads that wait on a store's ``Signal`` as idle workers do, to tell
whether a wake-up came: each records whether a notification (rather than its
timeout) ended its wait."""

from __future__ import annotations

import threading
import time

from jobq.stores.base import Signal

#: A cap on every wait here, so that a broken test fails instead of hanging.
WAIT = 30.0


class IdleWorkers:
    """``count`` threads waiting on ``sig.work`` for up to ``timeout``
    seconds each; once built, every one of them waits."""

    def __init__(self, sig: Signal, count: int, timeout: float = WAIT) -> None:
        self.sig = sig
        self.woken: list[bool] = []
        self._released = False  # ``settle`` ended the waits still going
        self._started = 0  # threads that began waiting (never counted down)
        self._ended = threading.Condition(sig.lock)  # a wait began or ended
        self.threads = [
            threading.Thread(target=self._wait, args=(timeout,), daemon=True)
            for _ in range(count)
        ]
        for thread in self.threads:
            thread.start()
        # Not ``sig.idle_workers == count``: a thread woken at once (by a
        # wake-up of earlier writes) leaves before a poll of it would see it.
        with sig.lock:
            if not self._ended.wait_for(lambda: self._started == count, WAIT):
                raise TimeoutError("the idle workers did not start waiting")

    def _wait(self, timeout: float) -> None:
        with self.sig.lock:
            self.sig.idle_workers += 1
            self._started += 1
            self._ended.notify_all()
            try:
                woken = self.sig.work.wait(timeout) and not self._released
            finally:
                self.sig.idle_workers -= 1
            self.woken.append(woken)
            self._ended.notify_all()

    def join(self) -> list[bool]:
        """Whether each was woken, woken ones first."""
        for thread in self.threads:
            thread.join(WAIT)
        return sorted(self.woken, reverse=True)

    def settle(self, expected: int, quiet: float) -> list[bool]:
        """As ``join``, for threads built with a long ``timeout``: wait until
        ``expected`` of them are woken, then ``quiet`` seconds more for any
        wrongly woken, then end the others' waits (not counted as woken).
        So a slow wake-up (a child process starting on a busy machine) is
        waited for, and a wrong one is still seen."""
        with self.sig.lock:
            self._ended.wait_for(lambda: sum(self.woken) >= expected, WAIT)
        time.sleep(quiet)
        with self.sig.lock:
            self._released = True
            self.sig.work.notify_all()
        return self.join()
