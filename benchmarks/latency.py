"""Enqueue->start latency on an idle pool: one enqueue per millisecond to 4
idle workers; the p99 in ms is the table's figure, the p50 of the same rounds
a second table in its notes.

Each payload carries ``perf_counter()`` taken just before its enqueue; the
handler records how long ago that was when it starts. The contenders are
those of the throughput tables (``benchmarks.throughput``).

Run alone: ``python -m benchmarks.latency [N]``; in the suite:
``python -m benchmarks``.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.harness import PAYLOAD, Result, Table, Tally
from benchmarks.throughput import DEADLINE, EngineFactory, Setup, Workload, per_speed

INTERVAL = 0.001  # one enqueue per millisecond


def latencies(engine: EngineFactory, n: int) -> list[float]:
    """Milliseconds from enqueue to handler start of n jobs, enqueued one per
    ``INTERVAL`` to idle workers."""
    samples: list[float] = []
    tally = Tally(n)

    def started(payload: Any) -> None:
        samples.append((time.perf_counter() - payload["sent"]) * 1000)
        tally()

    with engine(Setup(started)) as queue:
        queue.start()
        start = time.perf_counter()
        for i in range(n):
            pause = start + i * INTERVAL - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            queue.enqueue({**PAYLOAD, "sent": time.perf_counter()})
        tally.wait(DEADLINE)
    return samples


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
        samples = self.samples(n)
        self.p50s.append(percentile(samples, 50))
        return percentile(samples, 99)


def percentiles(engine: EngineFactory) -> Percentiles:
    return Percentiles(functools.partial(latencies, engine))


LATENCY = Workload(
    "latency",
    "Enqueue->start latency p99, 4 idle workers",
    "One producer enqueues a job every millisecond to 4 idle workers; the "
    "figure is the 99th percentile of the time from just before `enqueue` to "
    "the handler's start, in ms. Workers are started and stores opened before "
    "the first job.",
    percentiles,
    shares=per_speed(1.0, 1.0, 1.0),  # the pace, not the speed, sets a round
    unit="ms",
    lower_is_better=True,
    decimals=2,
)


def p50_table(results: Sequence[Result]) -> str:
    """The p50s of the same rounds, as a Markdown table ("-" for a contender
    whose round does not keep them)."""
    lines = [
        "p50 (median latency) of the same rounds, in ms:",
        "",
        "| contender | median | min-max |",
        "|---|--:|--:|",
    ]
    for result in results:
        p50s: list[float] = getattr(result.contender.run, "p50s", [])
        figures = (
            f"{statistics.median(p50s):.2f} | {min(p50s):.2f}-{max(p50s):.2f}"
            if p50s
            else "- | -"
        )
        lines.append(f"| {result.contender.name} | {figures} |")
    return "\n".join(lines)


def table(n: int, rounds: int) -> Table:
    found = LATENCY.table(n, rounds)
    found.notes.insert(0, p50_table(found.results))
    return found


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000
    print(table(n, 5).console())


if __name__ == "__main__":
    main()
