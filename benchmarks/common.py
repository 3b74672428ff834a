"""What several benchmark modules share, so that none imports another for it:
the limits and settings of a round, where PostgreSQL is, how latency is
sampled (a paced producer, percentiles of the steady part), and how
callgrind counts a command's instructions.

Imports only ``benchmarks.harness`` (and psycopg when asked whether the
server is up).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.harness import PAYLOAD

#: Longest wait for the last job of a round: a round that does not finish
#: raises rather than reporting a number.
DEADLINE = 120.0

PRODUCERS = 8  # producer threads of "enqueue8"
SLEEP = 0.005  # the I/O-bound handler's wait
POSTGRES_URL = os.environ.get(
    "JOBQ_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)


def callgrind(command: Sequence[str], env: dict[str, str]) -> int:
    """Instructions callgrind counts for ``command`` run with ``env`` (its
    whole run, start included): counts compare within one run, not wall
    time, so a busy machine does not blur them."""
    ran = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         *command],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    found = re.search(r"Collected : (\d+)", ran.stderr)
    if found is None:
        raise RuntimeError(f"no callgrind summary in: {ran.stderr[-500:]}")
    return int(found.group(1))


def postgres_unavailable() -> str | None:
    """Why jobq's PostgreSQL store cannot run here, or None."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (`pip install -e '.[postgres]'`)"
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        return f"no PostgreSQL server at {POSTGRES_URL} ({exc})"
    return None


# -- latency: how it is sampled ----------------------------------------------------

INTERVAL = 0.001  # one enqueue per millisecond


def since(payload: Any) -> float:
    """Milliseconds since the payload was sent."""
    return (time.monotonic() - payload["sent"]) * 1000


def paced(enqueue: Callable[[Any], object], n: int) -> None:
    """n jobs, one per ``INTERVAL``, each stamped just before its enqueue."""
    start = time.monotonic()
    for i in range(n):
        pause = start + i * INTERVAL - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        enqueue({**PAYLOAD, "sent": time.monotonic()})


def steady(samples: Sequence[float]) -> Sequence[float]:
    """The samples after the first tenth: the first jobs wake a pool that was
    idle, which a pool that polls notices only at its next look (Huey's
    consumer: within 0.1 s), and the jobs queued meanwhile wait for them; a
    pool that was idle also pays for connections opened on first use. The
    table notes that wait."""
    return samples[len(samples) // 10 :]


def percentile(samples: Sequence[float], q: int) -> float:
    """The q-th percentile (1-99) of at least two samples, interpolated."""
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


class Percentiles:
    """One contender's latency round: returns the p99 (the table's figure)
    and keeps the p50 of each round for the second table. ``samples(n)``
    runs a round: n latencies in ms (any contender's, not only engines')."""

    def __init__(self, samples: Callable[[int], list[float]]) -> None:
        self.samples = samples
        self.p50s: list[float] = []

    def __call__(self, n: int) -> float:
        samples = steady(self.samples(n))
        self.p50s.append(percentile(samples, 50))
        return percentile(samples, 99)
