"""The retry policy: how many attempts a job gets and how long it waits between them.

A small pure object, like urllib3's ``Retry``: ``delay`` takes the retry number
and a random draw, reads no clock, and can be tested without threads or time.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from jobq._rules import check_max_attempts
from jobq._time import to_seconds

#: Jitter spreads a delay uniformly within this fraction either way.
JITTER = 0.2

# 2.0 ** 1024 overflows; any exponent this large is far past every cap anyway.
_MAX_EXPONENT = 1000


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_attempts`` failed attempts bury a job; retry ``n`` (1 = first retry)
    waits ``min(base_delay * 2**(n-1), max_delay)``, spread by ±20 % if ``jitter``.
    """

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 3600.0
    jitter: bool = True

    def __post_init__(self) -> None:
        check_max_attempts(self.max_attempts)
        to_seconds(self.base_delay, "base_delay")  # ValueError if < 0 or not finite
        to_seconds(self.max_delay, "max_delay")

    def delay(self, retry: int, draw: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number ``retry`` (``draw`` gives [0, 1))."""
        exponent = min(max(retry - 1, 0), _MAX_EXPONENT)
        delay = min(self.base_delay * 2.0**exponent, self.max_delay)
        if self.jitter:
            delay *= 1.0 - JITTER + 2 * JITTER * draw()
        return delay
