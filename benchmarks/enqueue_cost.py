"""Instructions one ``enqueue`` costs on SQLite, counted by callgrind:
load-free, beside SqliteHuey's (``fsync=False``) as the peer to beat.

    python -m benchmarks.enqueue_cost                      # this tree
    python -m benchmarks.enqueue_cost --against ../before  # and another tree, same run

A run opens a fresh file and enqueues N jobs, one call each, from one
thread, no worker running: jobq with its defaults (``synchronous=NORMAL``,
checkpoints in its own thread, counted too), SqliteHuey with ``fsync=False``
(``synchronous=OFF``, SQLite's automatic checkpoints). N jobs' count taken
from 2N's is one enqueue's cost: imports and first uses drop out. Every
thread's instructions count, SQLite's C code included; the kernel's work
(the WAL's writes) does not.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

JOBS = 2_000
PAYLOAD = {"to": "ann@example.com", "template": "welcome", "user_id": 42}


def run(kind: str, directory: str, n: int) -> None:
    """Enqueue ``n`` jobs with ``kind``'s engine, in ``directory``."""
    import gc

    if kind == "huey":
        from huey import SqliteHuey

        huey = SqliteHuey("bench", filename=os.path.join(directory, "huey.db"),
                          results=False, fsync=False)  # fmt: skip
        enqueue = huey.task()(lambda payload: None)
    else:
        import jobq
        from jobq.stores import SqliteStore

        store = SqliteStore(os.path.join(directory, "jobs.db"))
        queue = jobq.JobQueue(lambda job: None, store=store)
        queue.stats()  # opened before the count's jobs
        enqueue = queue.enqueue
    gc.disable()  # a collection landing in one run and not the other is noise
    for _ in range(n):
        enqueue(PAYLOAD)


def instructions(tree: str, kind: str, n: int) -> int:
    """Instructions callgrind counts for one ``run`` under ``tree``."""
    from benchmarks.common import callgrind  # the parent's: not in ``--run``

    env = dict(os.environ, PYTHONPATH=tree, PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory() as scratch:
        return callgrind(
            [sys.executable, os.path.abspath(__file__), "--run", kind, scratch,
             str(n)],
            env,
        )  # fmt: skip


def per_enqueue(tree: str, kind: str, n: int) -> float:
    return (instructions(tree, kind, 2 * n) - instructions(tree, kind, n)) / n


def main() -> None:
    if sys.argv[1:2] == ["--run"]:
        kind, directory, n = sys.argv[2:5]
        run(kind, directory, int(n))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="another tree, measured first")
    parser.add_argument("-n", type=int, default=JOBS)
    args = parser.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [("before", args.against)] if args.against else []
    trees.append(("this tree", here))
    huey = per_enqueue(here, "huey", args.n)
    print(f"instructions per enqueue on SQLite, N={args.n}:")
    print(f"  SqliteHuey (fsync=False) {huey:10,.0f}")
    for name, tree in trees:
        count = per_enqueue(tree, "jobq", args.n)
        print(f"  jobq, {name:18s} {count:10,.0f}  {huey / count:.2f}x Huey's rate")


if __name__ == "__main__":
    main()
