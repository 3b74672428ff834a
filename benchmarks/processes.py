"""Several processes on one store: jobq on one SQLite file and on PostgreSQL
with 1, 2 and 4 processes (one JobQueue with 4 workers each), beside RQ and
Procrastinate with 1, 2 and 4 worker processes, in the same run.

- drain: N no-op jobs are queued first, then the processes run them;
- enqueue: p producer processes call ``enqueue`` N/p times each, at once.

The process plumbing (``Children``: spawn, "ready", "go", one JSON report
line, kill in ``finally``) is ``benchmarks.children``'s, shared with
``benchmarks.latency`` and ``benchmarks.brokers``.

Run alone: ``python -m benchmarks.processes [N [ROUNDS]]`` (2,000 jobs, 3
rounds); in the suite: ``python -m benchmarks --only processes --only
processes-enqueue`` (N = 2,000, 5 rounds: about 3.5 minutes for both tables on
2 busy cores, most of it starting processes; ``--quick``: N = 400).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jobq
from benchmarks import brokers, throughput
from benchmarks.brokers import Peer, Workers
from benchmarks.children import (
    TIMEOUT,
    Children,
    count_processes,
    protocol_channel,
    ready_then_wait,
    send_report,
)
from benchmarks.common import POSTGRES_URL, postgres_unavailable
from benchmarks.harness import (
    PAYLOAD,
    PERSISTED,
    REFERENCE,
    STDLIB,
    WORKERS,
    Contender,
    Result,
    Table,
    measure,
)

PROCESS_COUNTS = (1, 2, 4)


# -- jobq's children ----------------------------------------------------------


def open_store(kind: str, location: str) -> Any:
    """The same store in the parent and in every child: a SQLite file (by
    URL, as users name it), or a PostgreSQL schema on POSTGRES_URL."""
    if kind == "sqlite":
        return f"sqlite:///{location}"
    from jobq.stores import PostgresStore

    # Its defaults, or the older trade: outcomes of a batch written together.
    batch = {"claim_batch": BATCH, "take_ahead": False}
    options = batch if kind == "postgres-batch" else {}
    return PostgresStore(POSTGRES_URL, schema=location, queue="bench", **options)


def jobq_child(mode: str, kind: str, location: str, n: int) -> None:
    """One process of a figure: "enqueue" calls enqueue n times; "drain" runs
    4 workers until the store has nothing pending or running."""
    channel = protocol_channel()
    ran: list[int] = []
    queue = jobq.JobQueue(
        lambda job: ran.append(job.id), store=open_store(kind, location)
    )
    queue.stats()  # the store is open before the clock starts
    ready_then_wait(channel)
    if mode == "enqueue":
        for _ in range(n):
            queue.enqueue(PAYLOAD)
    else:
        drain_until_empty_or_told(queue)
    send_report(channel, {"ran": len(ran)})
    queue.close()


class Stopped(Exception):
    """SIGTERM from the parent: another process saw the store empty first."""


def drain_until_empty_or_told(queue: jobq.JobQueue[Any]) -> None:
    """Run 4 workers until ``join`` sees the store empty, or until the
    parent, told so by another process, says stop (SIGTERM): ``join`` here
    may look only once a second."""
    waiting = True

    def stop(signum: int, frame: object) -> None:
        if waiting:  # once join returned, a late SIGTERM changes nothing
            raise Stopped

    signal.signal(signal.SIGTERM, stop)
    try:
        queue.start(workers=WORKERS)
        drained = queue.join(timeout=TIMEOUT)
        waiting = False
    except Stopped:
        return
    if not drained:
        raise SystemExit("the queue did not drain")


# -- jobq's figures -----------------------------------------------------------


@contextlib.contextmanager
def fresh_store(kind: str) -> Iterator[str]:
    """A new SQLite file (in a temporary directory) or PostgreSQL schema
    (dropped afterwards) for one round; yields its location."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield os.path.join(directory, "jobs.db")
    else:
        from benchmarks.schemas import Schema  # needs psycopg

        with Schema(POSTGRES_URL) as schema:
            yield schema.name


def jobq_commands(
    mode: str, kind: str, location: str, shares: Sequence[int]
) -> list[list[str]]:
    return [
        ["benchmarks.processes", "jobq", mode, kind, location, str(share)]
        for share in shares
    ]


def jobq_drain(kind: str, processes: int, n: int) -> float:
    """Jobs/s of ``processes`` processes (4 workers each) draining n jobs.

    The drain ends when the first process sees the store empty (the one that
    finished the last job is told at once), and every job must have run
    exactly once."""
    with fresh_store(kind) as location:
        with jobq.JobQueue[Any](store=open_store(kind, location)) as queue:
            queue.enqueue_many([PAYLOAD] * n)
        commands = jobq_commands("drain", kind, location, [0] * processes)
        with Children(commands) as children:
            start = children.go()
            children.first_report()
            elapsed = time.perf_counter() - start
            ran = sum(report["ran"] for report in children.stop())
    if ran != n:
        raise RuntimeError(f"{ran} jobs ran, {n} were queued")
    return n / elapsed


def jobq_enqueue(kind: str, processes: int, n: int) -> float:
    """Jobs/s of ``processes`` processes enqueueing n jobs in all, one call
    per job; ends when the last process is done."""
    share = n // processes
    with fresh_store(kind) as location:
        with jobq.JobQueue[Any](store=open_store(kind, location)) as queue:
            queue.stats()  # the schema exists before the children start
        with Children(
            jobq_commands("enqueue", kind, location, [share] * processes)
        ) as children:
            start = children.go()
            children.reports()
            elapsed = time.perf_counter() - start
        with jobq.JobQueue[Any](store=open_store(kind, location)) as queue:
            if queue.stats().pending != share * processes:
                raise RuntimeError("jobs went missing")
    return share * processes / elapsed


# -- the tables ---------------------------------------------------------------

STORES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
#: Draining also runs PostgreSQL with workers that claim up to BATCH jobs at
#: once and write their outcomes together (``claim_batch``, ``take_ahead=False``):
#: faster, at the price of more re-runs after a crash.
BATCH = 32
DRAIN_STORES = {**STORES, "postgres-batch": f"PostgreSQL claim_batch={BATCH}"}
#: The share of N each contender runs a round: RQ runs 150-550 jobs/s,
#: Procrastinate about as many; jobq's figures all run N.
PEER_SCALE = {1: 0.1, 2: 0.15, 4: 0.25}


DRAINING = f" x {WORKERS} workers"  # what a drain process runs
ENQUEUEING = " enqueueing"


def jobq_name(kind: str, processes: int, doing: str) -> str:
    return f"jobq {DRAIN_STORES[kind]}, {count_processes(processes)}{doing}"


def peer_name(peer: Peer, workers: Workers) -> str:
    return f"{peer.label}, {workers.label(peer.key)}"


def jobq_contenders(
    run: Callable[[str, int, int], float], doing: str, kinds: Iterable[str]
) -> tuple[list[Contender], list[str]]:
    """jobq on each store with 1, 2 and 4 processes (PostgreSQL skipped, with
    a note, when the server is down)."""
    found: list[Contender] = []
    notes: list[str] = []
    for kind in kinds:
        if kind.startswith("postgres") and (why := postgres_unavailable()):
            notes.append(f"jobq PostgreSQL: {why}: skipped.")
            continue
        found.extend(
            Contender(
                jobq_name(kind, count, doing),
                PERSISTED,
                functools.partial(run, kind, count),
            )
            for count in PROCESS_COUNTS
        )
    return found, notes


def peer_drain_contenders() -> tuple[list[Contender], list[str]]:
    """RQ with 1, 2 and 4 SimpleWorker processes; Procrastinate with 1, 2 and
    4 worker processes of concurrency 4 (as many as jobq's processes)."""
    found: list[Contender] = []
    notes: list[str] = []
    for peer in (brokers.RQ, brokers.PROCRASTINATE):
        if (why := brokers.available(peer)) is not None:
            notes.append(why)
            continue
        for count in PROCESS_COUNTS:
            workers = peer_workers(peer.key, count)
            found.append(
                Contender(
                    peer_name(peer, workers),
                    PERSISTED,
                    functools.partial(brokers.drain_rate, peer.key, workers=workers),
                    peer.package,
                    scale=PEER_SCALE[count],
                )
            )
    return found, notes


def peer_workers(peer: str, processes: int) -> Workers:
    """RQ: that many SimpleWorkers; Procrastinate: that many processes of
    concurrency 4, as jobq's processes have 4 workers each."""
    return Workers(processes, 1 if peer == "rq" else WORKERS)


def reference() -> Contender:
    """The suite's reference, so that ratios compare across tables."""
    return Contender(
        throughput.REFERENCE_NAME, REFERENCE, throughput.thread_pool, STDLIB
    )


def ratio_notes(results: Sequence[Result]) -> list[str]:
    """jobq on PostgreSQL with 4 processes over each peer with 4 worker
    processes (the issue's target: >= 5x RQ), when both ran."""
    medians = {r.contender.name: r.median for r in results}
    notes = []
    for kind in ("postgres", "postgres-batch"):
        mine = jobq_name(kind, 4, DRAINING)
        for peer in (brokers.RQ, brokers.PROCRASTINATE):
            theirs = peer_name(peer, peer_workers(peer.key, 4))
            if mine in medians and theirs in medians:
                notes.append(
                    f"{mine} / {theirs}: {medians[mine] / medians[theirs]:.2f}x"
                    + (" (target: >= 5x)." if peer is brokers.RQ else ".")
                )
    return notes


def table(n: int, rounds: int) -> Table:
    """Drain throughput with 1, 2 and 4 processes."""
    mine, notes = jobq_contenders(jobq_drain, DRAINING, DRAIN_STORES)
    peers, peer_notes = peer_drain_contenders()
    results = measure([reference(), *mine, *peers], n, rounds)
    return Table(
        title="Drain throughput, several processes",
        description=(
            "N no-op jobs are queued first; then the processes, started and "
            "connected before the clock, run them until the store is empty. "
            "jobq: each process one JobQueue with 4 workers, on one SQLite file "
            "or one PostgreSQL schema. RQ: SimpleWorker processes in burst mode "
            "(one job at a time each) on the local Redis. Procrastinate: worker "
            "processes with concurrency 4 on the local PostgreSQL. Reference: "
            "a ThreadPoolExecutor(4) in one process running N jobs."
        ),
        unit="jobs/s",
        n=n,
        rounds=rounds,
        results=results,
        reference=throughput.REFERENCE_NAME,
        notes=ratio_notes(results) + notes + peer_notes,
    )


def enqueue_table(n: int, rounds: int) -> Table:
    """Enqueue throughput with 1, 2 and 4 producer processes."""
    mine, notes = jobq_contenders(jobq_enqueue, ENQUEUEING, STORES)
    peers, peer_notes = brokers.contenders("enqueue")
    # their share is set for the suite's N of 50,000; N is smaller here
    peers = [dataclasses.replace(c, scale=PEER_SCALE[4]) for c in peers]
    return Table(
        title="Enqueue throughput, several producer processes",
        description=(
            "p processes, started and connected before the clock, each call "
            "enqueue N/p times (one transaction a job) at once, with no "
            "workers; the clock stops when the last is done. RQ and "
            "Procrastinate: one producer (a thread of this process), for "
            "scale. Reference: a ThreadPoolExecutor(4) running N jobs."
        ),
        unit="jobs/s",
        n=n,
        rounds=rounds,
        results=measure([reference(), *mine, *peers], n, rounds),
        reference=throughput.REFERENCE_NAME,
        notes=notes + peer_notes,
    )


def main(argv: list[str]) -> None:
    """A jobq child (``jobq MODE KIND LOCATION N``), or both tables
    (``[N [ROUNDS]]``)."""
    if argv and argv[0] == "jobq":
        jobq_child(argv[1], argv[2], argv[3], int(argv[4]))
        return
    n = int(argv[0]) if argv else 2_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    for build in (table, enqueue_table):
        print(build(n, rounds).console(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
