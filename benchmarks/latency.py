"""Enqueue->start latency on an idle pool: one enqueue per millisecond to 4
idle workers; the p99 in ms is the table's figure, the p50 of the same rounds
a second table in its notes.

Each payload carries ``time.monotonic()`` taken just before its enqueue (one
clock for every process on Linux); the handler records how long ago that was
when it starts. The contenders are those of the throughput tables
(``benchmarks.throughput``), plus jobq's SQLite and PostgreSQL stores with
the workers in another process than the producer.

Run alone: ``python -m benchmarks.latency [N]``; in the suite:
``python -m benchmarks``.
"""

from __future__ import annotations

import functools
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import jobq
from benchmarks import processes
from benchmarks.children import (
    Children,
    protocol_channel,
    ready_then_wait,
    send_report,
)
from benchmarks.common import (
    DEADLINE,
    Percentiles,
    paced,
    postgres_unavailable,
    since,
)
from benchmarks.harness import PERSISTED, Contender, Result, Table, Tally
from benchmarks.throughput import EngineFactory, Setup, Workload, per_speed


def latencies(engine: EngineFactory, n: int) -> list[float]:
    """Milliseconds from enqueue to handler start of n jobs, enqueued one per
    ``INTERVAL`` to idle workers."""
    samples: list[float] = []
    tally = Tally(n)

    def started(payload: Any) -> None:
        samples.append(since(payload))
        tally()

    with engine(Setup(started)) as queue:
        queue.start()
        paced(queue.enqueue, n)
        tally.wait(DEADLINE)
    return samples


def cross_process_latencies(kind: str, n: int) -> list[float]:
    """As ``latencies``, with the 4 idle workers in a child process (one
    JobQueue) and the producer here, on one SQLite file or PostgreSQL schema:
    how soon a worker sees another process's job."""
    with processes.fresh_store(kind) as location:
        store = processes.open_store(kind, location)
        with jobq.JobQueue[Any](store=store) as queue:
            queue.stats()  # the schema exists before the child opens it
            command = ["benchmarks.latency", "child", kind, location, str(n)]
            with Children([command]) as children:
                children.go()
                paced(queue.enqueue, n)
                (report,) = children.reports()
    samples: list[float] = report["samples"]
    return samples


def latency_child(kind: str, location: str, n: int) -> None:
    """The child of ``cross_process_latencies``: 4 idle workers, then the
    latencies of the first n jobs."""
    channel = protocol_channel()
    samples: list[float] = []
    tally = Tally(n)

    def started(job: jobq.Job[Any]) -> None:
        samples.append(since(job.payload))
        tally()

    with jobq.JobQueue(started, store=processes.open_store(kind, location)) as queue:
        queue.start(workers=4)
        queue.stats()
        ready_then_wait(channel)
        tally.wait(DEADLINE)
    send_report(channel, {"samples": samples})


def cross_process_contenders() -> tuple[list[Contender], list[str]]:
    """jobq SQLite and PostgreSQL, workers in another process."""
    found, notes = [], []
    for kind, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        label = f"jobq {name}, workers in another process"
        if kind == "postgres" and (why := postgres_unavailable()):
            notes.append(f"{label}: {why}: skipped.")
            continue
        run = Percentiles(functools.partial(cross_process_latencies, kind))
        found.append(Contender(label, PERSISTED, run))
    return found, notes


def percentiles(engine: EngineFactory) -> Percentiles:
    return Percentiles(functools.partial(latencies, engine))


LATENCY = Workload(
    "latency",
    "Enqueue->start latency p99, 4 idle workers",
    "One producer enqueues a job every millisecond to 4 idle workers; the "
    "figure is the 99th percentile of the time from just before `enqueue` to "
    "the handler's start, in ms, over the jobs after the first tenth (the "
    "first job wakes a pool that was idle; see the notes). Workers are started "
    "and stores opened before the first job.",
    percentiles,
    more=cross_process_contenders,
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


#: What the first tenth of the jobs (left out of the figures) pays.
WAKE_NOTE = (
    "The first job after an idle spell: jobq's workers in this process wake "
    "at once; jobq SQLite workers in another process are woken by a Unix "
    "datagram from the enqueuing process (a socket per open store beside the "
    "database file), jobq PostgreSQL workers elsewhere by LISTEN/NOTIFY, as "
    "many idle workers as there are new jobs; Huey's consumer polls every "
    "0.1 s."
)


def table(n: int, rounds: int) -> Table:
    found = LATENCY.table(n, rounds)
    found.notes[:0] = [p50_table(found.results), WAKE_NOTE]
    return found


def main(argv: list[str]) -> None:
    """A child of ``cross_process_latencies`` (``child KIND LOCATION N``), or
    the table (``[N]``)."""
    if argv and argv[0] == "child":
        latency_child(argv[1], argv[2], int(argv[3]))
        return
    n = int(argv[0]) if argv else 2_000
    print(table(n, 5).console())


if __name__ == "__main__":
    main(sys.argv[1:])
