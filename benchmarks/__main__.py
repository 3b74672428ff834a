"""The benchmark suite: ``python -m benchmarks [--quick] [--out FILE]``.

Each workload module offers ``table(n, rounds) -> harness.Table``; add a new
one to ``WORKLOADS``. Prints each table and, with ``--out``, writes the
Markdown report (machine, versions, tables).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from benchmarks import harness, throughput

# name -> (table(n, rounds), default N, quick N)
WORKLOADS: dict[str, tuple[Callable[[int, int], harness.Table], int, int]] = {
    "throughput": (throughput.table, 50_000, 5_000),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument(
        "--quick", action="store_true", help="small N and 3 rounds: a smoke run"
    )
    parser.add_argument("--rounds", type=int, help="rounds (default 5, quick 3)")
    parser.add_argument("--out", help="write the Markdown report to this file")
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


if __name__ == "__main__":
    main()
