"""The benchmark suite: ``python -m benchmarks [--quick] [--out FILE]``.

Each workload module offers ``table(n, rounds) -> harness.Table``; add a new
one to ``WORKLOADS``. Prints each table and, with ``--out``, writes the
Markdown report (machine, versions, tables).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from benchmarks import growth, harness, latency, plot, processes, throughput, wakeups

# name -> (table(n, rounds), default N, quick N)
WORKLOADS: dict[str, tuple[Callable[[int, int], harness.Table], int, int]] = {
    "enqueue": (throughput.ENQUEUE.table, 50_000, 5_000),
    "enqueue8": (throughput.ENQUEUE8.table, 50_000, 5_000),
    "drain": (throughput.DRAIN.table, 50_000, 5_000),
    "end_to_end": (throughput.END_TO_END.table, 50_000, 5_000),
    "retry": (throughput.RETRY.table, 50_000, 5_000),
    "sleep4": (throughput.SLEEP4.table, 50_000, 5_000),
    "sleep32": (throughput.SLEEP32.table, 50_000, 5_000),
    "latency": (latency.table, 1_000, 200),
    "growth": (growth.table, 1_000_000, 10_000),
    "memory_per_job": (growth.memory_table, 100_000, 10_000),
    "load_time": (growth.load_table, 100_000, 10_000),
    "compaction": (growth.compaction_table, 1_000_000, 10_000),
    "processes": (processes.table, 2_000, 400),
    "processes-enqueue": (processes.enqueue_table, 2_000, 400),
    "wakeups": (wakeups.table, 5_000, 1_000),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument(
        "--quick", action="store_true", help="small N and 3 rounds: a smoke run"
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 5, quick 3)")
    parser.add_argument("--out", help="write the Markdown report to this file")
    parser.add_argument(
        "--plot", help="write the growth plot (PNG) here; default: next to --out"
    )
    parser.add_argument(
        "--only", choices=sorted(WORKLOADS), action="append", help="these workloads"
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 5)
    tables = []
    for name in args.only or WORKLOADS:
        run, n, quick_n = WORKLOADS[name]
        table = run(quick_n if args.quick else n, rounds)
        print(table.console(), flush=True)
        tables.append(table)
    if args.out:
        command = "python -m benchmarks " + " ".join(
            sys.argv[1:] if argv is None else argv
        )
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(harness.report(tables, command.strip()))
        print(f"wrote {args.out}")
    plot_path = args.plot or (
        args.out and os.path.join(os.path.dirname(args.out), growth.PLOT)
    )
    if plot_path and plot.write_growth(tables, plot_path):
        print(f"wrote {plot_path}")


if __name__ == "__main__":
    main()
