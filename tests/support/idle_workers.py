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

    def __init__(self, sig: Signal, count: int, timeout: float) -> None:
        self.sig = sig
        self.woken: list[bool] = []
        self.threads = [
            threading.Thread(target=self._wait, args=(timeout,), daemon=True)
            for _ in range(count)
        ]
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + WAIT
        while True:  # a thread counts itself and waits under the lock at once
            with sig.lock:
                if sig.idle_workers == count:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("the idle workers did not start waiting")
            time.sleep(0.001)

    def _wait(self, timeout: float) -> None:
        with self.sig.lock:
            self.sig.idle_workers += 1
            try:
                woken = self.sig.work.wait(timeout)
            finally:
                self.sig.idle_workers -= 1
            self.woken.append(woken)

    def join(self) -> list[bool]:
        """Whether each was woken, woken ones first."""
        for thread in self.threads:
            thread.join(WAIT)
        return sorted(self.woken, reverse=True)
