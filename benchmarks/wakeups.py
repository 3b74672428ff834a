"""What a SQLite enqueue pays for waking other processes: microseconds per
``queue.enqueue`` in this process while other processes hold the same file
open, either with 4 idle workers each (they are rung after every enqueue) or
enqueue-only (a queue not started: never rung).

Every job is delayed by an hour, so that no worker runs one: a ring still
goes out for each (a delayed job may be due sooner than what idle workers
wait for), and wakes one idle worker in each rung process, which reads the
next due time and sleeps again. The figure is the enqueue's cost as its
caller sees it; the woken processes' CPU is theirs (on a machine with fewer
free cores than woken processes it slows the enqueuer too).

The cross-process wake-up latency itself is in ``benchmarks.latency``
(``python -m benchmarks --only latency``: "workers in another process").

Run alone: ``python -m benchmarks.wakeups [N]``; in the suite:
``python -m benchmarks --only wakeups``. ``python -m benchmarks.wakeups
latency [N [ROUNDS]]`` prints only the cross-process rows of the latency
table: p50 and p99 of each round, SQLite and PostgreSQL.
"""

from __future__ import annotations

import functools
import signal
import sys
import tempfile
import time
from typing import Any

import jobq
from benchmarks.children import (
    Children,
    count_processes,
    protocol_channel,
    ready_then_wait,
    send_report,
)
from benchmarks.common import percentile, postgres_unavailable, steady
from benchmarks.harness import PAYLOAD, PERSISTED, Contender, Table, measure
from benchmarks.latency import cross_process_latencies

#: Other processes' queues: (processes, whether their workers run).
SETUPS = ((0, False), (1, True), (4, True), (4, False))
HOUR = 3600.0


def enqueue_micros(processes: int, workers: bool, n: int) -> float:
    """Microseconds per enqueue of n delayed jobs here, with ``processes``
    other processes on the same file (``workers``: 4 idle workers each)."""
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/jobs.db"
        with jobq.JobQueue[Any](store=url) as queue:
            queue.stats()  # the file and schema exist before the others open it
            mode = "workers" if workers else "enqueue-only"
            commands = [["benchmarks.wakeups", "peer", url, mode]] * processes
            with Children(commands) as children:
                children.go()
                time.sleep(1.1)  # past the directory's "recently changed" window
                start = time.perf_counter()
                for _ in range(n):
                    queue.enqueue(PAYLOAD, delay=HOUR)
                elapsed = time.perf_counter() - start
                children.stop()
    return elapsed / n * 1e6


def peer(url: str, mode: str) -> None:
    """A process of ``enqueue_micros``: a queue on the file, with 4 idle
    workers or none, until the parent's SIGTERM."""
    channel = protocol_channel()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, store=url)
    if mode == "workers":
        queue.start(workers=4)
    queue.stats()
    ready_then_wait(channel)
    try:
        time.sleep(3600)
    finally:
        send_report(channel, {})
        queue.close()


def label(processes: int, workers: bool) -> str:
    if not processes:
        return "jobq SQLite enqueue, no other process"
    kind = "with 4 idle workers" if workers else "enqueue-only"
    return f"jobq SQLite enqueue, {count_processes(processes)} {kind}"


def table(n: int, rounds: int) -> Table:
    contenders = [
        Contender(
            label(processes, workers),
            PERSISTED,
            functools.partial(enqueue_micros, processes, workers),
        )
        for processes, workers in SETUPS
    ]
    return Table(
        "SQLite enqueue beside other processes",
        "Microseconds per `queue.enqueue(payload, delay=3600)` in one thread while "
        "other processes have the same SQLite file open: each enqueue rings the "
        "processes whose workers run (a Unix datagram each), not the "
        "enqueue-only ones.",
        "µs",
        n,
        rounds,
        measure(contenders, n, rounds),
        reference=label(0, False),
        notes=[
            "Each ring wakes one idle worker in each process with workers; on a "
            "machine with fewer free cores than woken processes, their CPU "
            "slows the enqueuer too."
        ],
        lower_is_better=True,
        decimals=1,
    )


def cross_process_latency(n: int, rounds: int) -> None:
    """p50 and p99 (ms) of each round of the latency table's cross-process
    rows: one enqueue per millisecond here, 4 idle workers in a child."""
    for kind in ("sqlite", "postgres"):
        if kind == "postgres" and (why := postgres_unavailable()):
            print(f"{kind}: {why}")
            continue
        for _ in range(rounds):
            samples = steady(cross_process_latencies(kind, n))
            p50, p99 = percentile(samples, 50), percentile(samples, 99)
            print(f"{kind:8s} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms", flush=True)


def main(argv: list[str]) -> None:
    """A peer of ``enqueue_micros`` (``peer URL MODE``), the cross-process
    latencies (``latency [N [ROUNDS]]``), or the table (``[N]``)."""
    if argv and argv[0] == "peer":
        peer(argv[1], argv[2])
        return
    if argv and argv[0] == "latency":
        n = int(argv[1]) if len(argv) > 1 else 2_000
        cross_process_latency(n, int(argv[2]) if len(argv) > 2 else 3)
        return
    n = int(argv[0]) if argv else 5_000
    print(table(n, 3).console())


if __name__ == "__main__":
    main(sys.argv[1:])
