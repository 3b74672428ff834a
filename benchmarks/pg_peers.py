"""jobq's PostgreSQL store beside the PostgreSQL peers, every one on the same
number of jobs: ``python -m benchmarks.pg_peers [N] [ROUNDS]``.

The suite's tables give each contender a share of N by its speed (jobq's
PostgreSQL store a hundredth, as a store of a few hundred jobs a second);
here jobq (its defaults, and ``claim_batch=32`` without taking ahead) and
PgQueuer in each layout run N jobs a round, Procrastinate a fifth of N (it
runs hundreds a second), in the suite's workloads: enqueue from 1 and 8
threads, drain, end to end. Interleaved rounds, as in the suite; each line
gives the median and range, and jobq's default's median over this one's.
"""

from __future__ import annotations

import dataclasses
import sys

from benchmarks import brokers, throughput
from benchmarks.harness import Contender, measure, summary

WORKLOADS = (
    throughput.ENQUEUE,
    throughput.ENQUEUE8,
    throughput.DRAIN,
    throughput.END_TO_END,
)
JOBQ = "jobq PostgreSQL"  # the store's defaults: what every ratio is of


def contenders(workload: throughput.Workload) -> tuple[list[Contender], list[str]]:
    """jobq's PostgreSQL contenders and the PostgreSQL peers, on N jobs."""
    ours = [
        throughput.jobq_contender(workload, name, kind, place, speed)
        for name, kind, place, speed in throughput.JOBQ_STORES
        if "PostgreSQL" in name
    ]
    peers, notes = brokers.contenders(workload.name)
    found = ours + [p for p in peers if p.package != "rq"]
    return [
        dataclasses.replace(c, scale=0.2 if c.package == "procrastinate" else 1.0)
        for c in found
    ], notes


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 10_000
    rounds = int(argv[1]) if len(argv) > 1 else 3
    for workload in WORKLOADS:
        found, notes = contenders(workload)
        results = measure(found, n, rounds)
        ours = next(r.median for r in results if r.contender.name == JOBQ)
        print(f"\n{workload.title}, N = {n:,}, {rounds} rounds (jobs/s)")
        for result in results:
            print(
                f"  {result.contender.name}: {summary(result.values)}"
                f"   jobq default / this: {ours / result.median:.2f}x",
                flush=True,
            )
        print(*(f"  {note}" for note in notes), sep="\n")


if __name__ == "__main__":
    main(sys.argv[1:])
