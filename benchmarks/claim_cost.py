"""Instructions one claim costs, per store, counted by callgrind: load-free.

    python -m benchmarks.claim_cost                      # this tree
    python -m benchmarks.claim_cost --against ../before  # and another tree, same run
    python -m benchmarks.claim_cost --postgres postgresql://postgres@127.0.0.1/test

A run adds N no-op jobs to a fresh store and claims them one at a time
(``claim_many(now, 1)``), no limit declared; another run only adds them. The
difference over N is what a claim costs in this process (for PostgreSQL the
client's share: the server's work is not counted). Whole jobs, no
``after=``: runs that also finish each (``finish_many``, not kept), and runs
through a queue (``enqueue``, then ``run_pending``), each with N and 2N jobs,
whose difference over N is one job's cost. ``--against`` runs the
same script with another tree first on ``PYTHONPATH``, so a change to the
claim path is measured before and after in one run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

JOBS = 2_000
PAYLOAD = '{"args": [], "kwargs": {}}'
SCHEMA = "jobq_claim_cost"  # created by each PostgreSQL run, dropped after it


def open_store(kind: str, where: str) -> Any:
    """A fresh, opened store of ``kind``; ``where`` is a directory or a DSN."""
    from jobq.stores import Signal

    store = new_store(kind, where)
    store.open(Signal(), dead_letter_limit=1_000)
    return store


def new_store(kind: str, where: str) -> Any:
    """A fresh store of ``kind``, not opened yet."""
    from jobq.stores import MemoryStore

    store: Any
    if kind == "memory":
        store = MemoryStore()
    elif kind == "sqlite":
        from jobq.stores import SqliteStore

        # Nothing in the background while callgrind counts: no polling, and
        # FULL, whose commits checkpoint the WAL themselves (with NORMAL a
        # thread does, at times that make the WAL's size, and each lookup's
        # cost, differ from run to run).
        store = SqliteStore(os.path.join(where, "claims.db"), poll_interval=3600,
                            synchronous="FULL")  # fmt: skip
    else:
        from jobq.stores import PostgresStore

        store = PostgresStore(where, schema=SCHEMA, poll_interval=3600)
    return store


#: What a run does: add the jobs, add and claim them, or add, claim and
#: finish them; or, through a queue with a no-op handler, enqueue the jobs
#: and run them.
MODES = ("add", "claim", "job", "queue")


def run(kind: str, where: str, n: int, mode: str) -> None:
    """Add ``n`` jobs in batches of 100, then claim each alone (and finish
    it) as ``mode`` says."""
    import gc

    import jobq
    from jobq.stores.base import Done, NewJob

    tree = os.environ["JOBQ_CLAIM_COST_TREE"]
    if not os.path.abspath(jobq.__file__).startswith(os.path.abspath(tree) + os.sep):
        raise SystemExit(
            f"jobq was imported from {jobq.__file__}, not {tree}: an editable"
            " install wins over PYTHONPATH; use a virtualenv without jobq in it"
        )

    if mode == "queue":
        run_queue(new_store(kind, where), n)
        return
    store = open_store(kind, where)
    gc.disable()  # a collection landing in one run and not the other is noise
    now = 1_000.0
    for start in range(0, n, 100):
        store.add([NewJob(PAYLOAD, now, None, 0, 3)] * min(100, n - start), now)
    if mode == "claim":
        for _ in range(n):
            store.claim_many(now + 1, 1)
    elif mode == "job":
        for _ in range(n):
            claim = store.claim_many(now + 1, 1)[0]
            store.finish_many([Done(claim, None)], None, now + 1)
    store.close()


def run_queue(store: Any, n: int) -> None:
    """Through the public API: ``enqueue`` each job, then ``run_pending``."""
    import gc

    import jobq

    queue = jobq.JobQueue(lambda job: None, store=store)
    queue.stats()  # opened before the count's jobs
    gc.disable()
    for _ in range(n):
        queue.enqueue(None)
    queue.run_pending()
    queue.close()


def instructions(tree: str, kind: str, where: str, mode: str, n: int) -> int:
    """Instructions callgrind counts for one ``run`` under ``tree``."""
    from benchmarks.common import callgrind  # the parent's: not in ``--run``

    # One hash seed: sets laid out alike in every run, or their probing is noise.
    # The script by its path, not ``-m``: the current directory stays off
    # ``sys.path``, so ``jobq`` comes from ``tree``.
    env = dict(os.environ, PYTHONPATH=tree,
               PYTHONHASHSEED="0", JOBQ_CLAIM_COST_TREE=tree)  # fmt: skip
    return callgrind(
        [sys.executable, os.path.abspath(__file__), "--run", kind, where,
         str(n), mode],
        env,
    )  # fmt: skip


def counted(tree: str, kind: str, where: str, mode: str, n: int) -> int:
    """``instructions`` on a store of its own: a new directory or schema."""
    if kind != "postgres":
        with tempfile.TemporaryDirectory() as scratch:
            return instructions(tree, kind, scratch, mode, n)
    import psycopg

    try:
        return instructions(tree, kind, where, mode, n)
    finally:
        with psycopg.connect(where, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def per_claim(tree: str, kind: str, where: str, n: int) -> float:
    added = counted(tree, kind, where, "add", n)
    return (counted(tree, kind, where, "claim", n) - added) / n


def per_job(tree: str, kind: str, where: str, n: int) -> float:
    """N jobs' cost taken from 2N's: what one run costs once (imports, the
    first use of each path) drops out."""
    once = counted(tree, kind, where, "job", n)
    return (counted(tree, kind, where, "job", 2 * n) - once) / n


def per_queue_job(tree: str, kind: str, where: str, n: int) -> float:
    once = counted(tree, kind, where, "queue", n)
    return (counted(tree, kind, where, "queue", 2 * n) - once) / n


def main() -> None:
    if sys.argv[1:2] == ["--run"]:
        kind, where, n, mode = sys.argv[2:6]
        run(kind, where, int(n), mode)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="another tree, measured first")
    parser.add_argument("--postgres", help="a DSN: measure PostgreSQL too")
    parser.add_argument("-n", type=int, default=JOBS)
    parser.add_argument("--stores", default="memory,sqlite", help="of memory,sqlite")
    args = parser.parse_args()
    here = os.getcwd()
    trees = [("before", args.against)] if args.against else []
    trees.append(("this tree", here))
    stores = [(kind, "") for kind in args.stores.split(",") if kind]
    if args.postgres:
        stores.append(("postgres", args.postgres))
    for title, measure in (
        ("per claim_many(now, 1), no limit declared", per_claim),
        ("per job in the store (add, claim, finish), no after=", per_job),
        ("per job through the queue (enqueue, run_pending), no after=", per_queue_job),
    ):
        print(f"instructions {title}, N={args.n}:")
        for kind, where in stores:
            counts = [measure(tree, kind, where, args.n) for _, tree in trees]
            shown = "  ".join(
                f"{name} {count:10,.0f}"
                for (name, _), count in zip(trees, counts, strict=True)
            )
            change = f"  {counts[-1] / counts[0] - 1:+.1%}" if len(counts) > 1 else ""
            print(f"  {kind:9s} {shown}{change}")


if __name__ == "__main__":
    main()
