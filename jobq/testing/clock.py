"""A wall clock that tests move by hand, for queues built with ``clock=``."""

from __future__ import annotations

#: Where a ``Clock`` starts: an arbitrary wall-clock time, in epoch seconds.
T0 = 1_800_000_000.0


class Clock:
    """A wall clock that moves only when the test says so:
    ``JobQueue(handler, clock=clock)``, then ``clock.advance(seconds)``."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
