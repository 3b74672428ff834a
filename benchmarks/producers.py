"""One producer thread against eight, enqueueing one job per call, per store.

    python -m benchmarks.producers                      # this tree
    python -m benchmarks.producers --against ../before  # and another tree, same run
    python -m benchmarks.producers --stores postgres --rounds 7 --jobs 2000

Each figure is one fresh process that opens a fresh store (a new file, or a
new PostgreSQL schema), then times ``threads`` threads calling
``enqueue`` N/``threads`` times each; no worker runs. Rounds interleave the
trees, stores and thread counts, so that load on a shared machine falls on
all of them alike; the report gives each one's median rate, its range, and
the ratio of 8 threads to 1 (what group commit is for: see
``jobq.stores._group``). ``--against`` runs every figure also with another
tree first on ``PYTHONPATH``, so a change is measured before and after in
one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.common import POSTGRES_URL

PAYLOAD = {"to": "ann@example.com", "template": "welcome", "user_id": 42}
THREADS = (1, 8)


def rate(kind: str, threads: int, n: int) -> float:
    """Jobs/s of ``threads`` threads enqueueing ``n`` jobs in all, in this
    process, on a fresh store of ``kind``."""
    import contextlib

    import jobq
    from jobq.stores import PostgresStore, SqliteStore

    with contextlib.ExitStack() as cleanup:
        store: object
        if kind == "sqlite":
            where = cleanup.enter_context(tempfile.TemporaryDirectory())
            store = SqliteStore(os.path.join(where, "jobs.db"))
        else:
            from benchmarks.schemas import Schema

            schema = cleanup.enter_context(Schema(POSTGRES_URL))
            store = PostgresStore(POSTGRES_URL, schema=schema.name)
        queue = cleanup.enter_context(jobq.JobQueue(lambda job: None, store=store))
        queue.stats()  # opened before the clock starts
        share = n // threads
        ready = threading.Barrier(threads + 1)

        def produce() -> None:
            ready.wait()
            for _ in range(share):
                queue.enqueue(PAYLOAD)

        pool = [threading.Thread(target=produce) for _ in range(threads)]
        for thread in pool:
            thread.start()
        ready.wait()
        start = time.perf_counter()
        for thread in pool:
            thread.join()
        return share * threads / (time.perf_counter() - start)


def measure(tree: str, kind: str, threads: int, n: int) -> float:
    """``rate`` in a fresh process, with ``tree`` first on ``PYTHONPATH``."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, here])}
    command = [sys.executable, "-m", "benchmarks.producers", "--one", kind,
               str(threads), str(n)]  # fmt: skip
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", help="another tree, measured in the same run")
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=4000, help="jobs per figure")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, threads, n = args.one
        print(f"{rate(kind, int(threads), int(n)):.1f}")
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this tree": here}
    if args.against:
        trees = {"against": os.path.abspath(args.against), **trees}
    figures: dict[tuple[str, str, int], list[float]] = {}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            for kind in args.stores:
                for threads in THREADS:
                    key = (name, kind, threads)
                    figures.setdefault(key, []).append(
                        measure(tree, kind, threads, args.jobs)
                    )
    print(f"{args.rounds} rounds interleaved, {args.jobs} jobs a figure, jobs/s")
    print("| tree | store | threads | median | min-max | x 1 thread |")
    print("|---|---|--:|--:|--:|--:|")
    for (name, kind, threads), rates in figures.items():
        one = statistics.median(figures[name, kind, 1])
        median = statistics.median(rates)
        spread = f"{min(rates):,.0f}-{max(rates):,.0f}"
        print(f"| {name} | {kind} | {threads} | {median:,.0f} | {spread} | "
              f"{median / one:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
