"""PostgreSQL drain with default settings, before and after a change, one run.

    python -m benchmarks.pg_drain --against /work/main        # that tree and this
    python -m benchmarks.pg_drain --against ../before -n 10000 --rounds 3

Each round drains N queued no-op jobs with 4 workers (the clock runs from
starting the workers until the last job ran), in a fresh interpreter and a
fresh schema, once per tree; the trees take turns, so a machine whose load
changes meanwhile slows both alike. ``--against`` puts the other tree first
on ``PYTHONPATH``. ``--option name=value`` passes a store option (a JSON
value) to both (``claim_batch=32``), ``--after-option`` to this tree's only
(``take_ahead=false``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

URL = os.environ.get("JOBQ_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
WORKERS = 4


def drain(n: int, options: dict[str, Any]) -> float:
    """Jobs/s of ``WORKERS`` workers started on ``n`` queued no-op jobs."""
    import jobq
    from benchmarks.schemas import Schema
    from jobq.stores import PostgresStore

    left, done = [n], threading.Event()
    lock = threading.Lock()

    def handler(job: jobq.Job[Any]) -> None:
        with lock:
            left[0] -= 1
            if not left[0]:
                done.set()

    with Schema(URL) as schema:
        store = PostgresStore(URL, schema=schema.name, **options)
        queue = jobq.JobQueue(handler, store=store)
        try:
            queue.enqueue_many([{"n": 1}] * n)
            start = time.perf_counter()
            queue.start(workers=WORKERS)
            if not done.wait(600):
                raise RuntimeError("the drain did not end within 10 minutes")
            return n / (time.perf_counter() - start)
        finally:
            queue.close()


def run(tree: str, n: int, options: dict[str, Any]) -> float:
    """One round in a fresh interpreter whose path has ``tree`` alone (this
    file is loaded by its path: the other tree may not have it)."""
    code = (
        "import importlib.util as u, json, sys; "
        "s = u.spec_from_file_location('pg_drain', sys.argv[1]); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); "
        "print(m.drain(int(sys.argv[2]), json.loads(sys.argv[3])))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code, __file__, str(n), json.dumps(options)],
        env={**os.environ, "PYTHONPATH": tree},
        cwd=os.sep,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(output.split()[-1])


def _options(given: list[str]) -> dict[str, Any]:
    """``name=value`` pairs, each value JSON."""
    return {k: json.loads(v) for k, v in (o.split("=", 1) for o in given)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the other source tree")
    parser.add_argument("-n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--option", action="append", default=[])
    parser.add_argument("--after-option", action="append", default=[])
    args = parser.parse_args()
    both = _options(args.option)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {
        "before": (os.path.abspath(args.against), both),
        "after": (here, {**both, **_options(args.after_option)}),
    }
    rates: dict[str, list[float]] = {name: [] for name in trees}
    for number in range(args.rounds):
        for name, (tree, options) in trees.items():
            rate = run(tree, args.n, options)
            rates[name].append(rate)
            print(f"round {number + 1} {name}: {rate:,.0f} jobs/s", flush=True)
    for name, seen in rates.items():
        print(
            f"{name}: median {statistics.median(seen):,.0f} jobs/s "
            f"(range {min(seen):,.0f}-{max(seen):,.0f})"
        )
    ratios = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    print(f"after/before per round: {', '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
    main()
