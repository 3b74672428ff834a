"""What every benchmark shares: the payload, rounds interleaved between
contenders, medians with min-max, ratios to a named reference, and the
Markdown report with the machine and the versions it ran on.

A workload module builds a list of ``Contender`` (a name, a class for
like-for-like ratios, and ``run(n) -> jobs/s`` that times only the work),
hands it to ``measure`` and turns the result into a ``Table``.
"""

from __future__ import annotations

import gc
import importlib.metadata
import os
import platform
import sqlite3
import statistics
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

PAYLOAD = {"to": "ann@example.com", "template": "welcome", "user_id": 42}
WORKERS = 4

# Contender classes: a ratio to "the best peer" compares within a class only.
REFERENCE = "reference"
IN_MEMORY = "in-memory"
PERSISTED = "persisted"  # survives a crash of the process
FSYNCED = "persisted, fsync"  # also an OS crash or power loss: fsync per change
STDLIB = "stdlib"  # a contender's package when it needs nothing installed


def noop(_: Any) -> None:
    return None


class Tally:
    """A handler that counts its calls and sets ``done`` at the n-th: how a
    run knows that every job ran, the same for every contender."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.count = 0
        self.done = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, *_: Any) -> None:
        with self._lock:
            self.count += 1
            if self.count == self.n:
                self.done.set()

    def wait(self, timeout: float = 600) -> None:
        if not self.done.wait(timeout):
            raise RuntimeError(f"only {self.count} of {self.n} jobs ran")


@dataclass(frozen=True)
class Contender:
    name: str
    kind: str  # REFERENCE, IN_MEMORY, PERSISTED or FSYNCED
    run: Callable[[int], float]  # the figure for n jobs (jobs/s, ms, ...)
    package: str = "jobq"  # whose version the report names ("stdlib": none)
    #: The share of N this contender runs: slow peers (a few hundred jobs/s)
    #: run fewer jobs so that a round stays short; rates stay comparable.
    scale: float = 1.0

    def jobs(self, n: int) -> int:
        return max(int(n * self.scale), 1)


@dataclass
class Result:
    contender: Contender
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)


def measure(
    contenders: Sequence[Contender], n: int, rounds: int, *, progress: bool = True
) -> list[Result]:
    """``rounds`` rounds of every contender, interleaved (round 1 of each, then
    round 2 of each...) and in a rotated order each round, so a noisy
    neighbour hits every contender alike rather than one of them."""
    results = [Result(c) for c in contenders]
    for i in range(rounds):
        order = results[i % len(results) :] + results[: i % len(results)]
        for result in order:
            gc.collect()
            contender = result.contender
            result.values.append(contender.run(contender.jobs(n)))
            if progress:
                print(
                    f"  round {i + 1}/{rounds} {result.contender.name}: "
                    f"{result.values[-1]:,.2f}",
                    file=sys.stderr,
                    flush=True,
                )
    return results


def ratio(results: Sequence[Result], reference: str) -> dict[str, float]:
    """Each contender's median over the named reference's median."""
    base = next(r for r in results if r.contender.name == reference).median
    return {r.contender.name: r.median / base for r in results}


def best_of_class(
    results: Sequence[Result],
    kind: str,
    *,
    exclude: str,
    lower_is_better: bool = False,
) -> Result | None:
    """The best contender of ``kind`` whose package is not ``exclude``
    (the best peer to compare jobq with), or None."""
    peers = [
        r
        for r in results
        if r.contender.kind == kind and r.contender.package != exclude
    ]
    if not peers:
        return None
    pick = min if lower_is_better else max
    return pick(peers, key=lambda r: r.median)


def summary(values: Sequence[float], width: int = 10, decimals: int = 0) -> str:
    """``median  (min-max)`` for a console line."""
    f = f",.{decimals}f"
    return (
        f"{statistics.median(values):{width}{f}}  ({min(values):{f}}-{max(values):{f}})"
    )


def machine() -> dict[str, str]:
    return {
        "cpus": str(os.cpu_count()),
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "SQLite": sqlite3.sqlite_version,
    }


def versions(packages: Iterable[str]) -> dict[str, str]:
    found = {}
    for package in dict.fromkeys(packages):
        if package == STDLIB:
            continue
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


@dataclass
class Table:
    """One workload's results, with what a reader needs to weigh them."""

    title: str
    description: str
    unit: str
    n: int
    rounds: int
    results: list[Result]
    reference: str  # the contender every ratio is taken to
    notes: list[str] = field(default_factory=list)
    #: Latencies and costs: smaller is better, and the best peer is the
    #: smallest. Ratios stay "this / that" either way.
    lower_is_better: bool = False
    decimals: int = 0

    def markdown(self) -> str:
        ratios = ratio(self.results, self.reference)
        better = "lower" if self.lower_is_better else "higher"
        scaled = [r.contender for r in self.results if r.contender.scale != 1]
        lines = [
            f"## {self.title}",
            "",
            self.description,
            "",
            f"N = {self.n:,} jobs, {self.rounds} rounds interleaved; "
            f"median and min-max of the rounds, in {self.unit} ({better} is "
            "better).",
            *(
                f"{c.name} runs {c.jobs(self.n):,} jobs a round (it is slow)."
                for c in scaled
            ),
            "",
            "| contender | class | median | min-max | x "
            f"{self.reference} | x best peer of its class |",
            "|---|---|--:|--:|--:|--:|",
        ]
        for r in self.results:
            c = r.contender
            peer = "-"
            if c.package == "jobq":
                best = best_of_class(
                    self.results,
                    c.kind,
                    exclude="jobq",
                    lower_is_better=self.lower_is_better,
                )
                if best is not None:
                    peer = f"{r.median / best.median:.3g} ({best.contender.name})"
            f = f",.{self.decimals}f"
            lines.append(
                f"| {c.name} | {c.kind} | {r.median:{f}} | "
                f"{r.low:{f}}-{r.high:{f}} | {ratios[c.name]:.3g} | {peer} |"
            )
        lines.extend(f"\n{note}" for note in self.notes)
        return "\n".join(lines) + "\n"

    def console(self) -> str:
        ratios = ratio(self.results, self.reference)
        head = f"{self.title}: N={self.n:,}, {self.rounds} rounds, {self.unit}"
        f = f",.{self.decimals}f"
        rows = [
            (
                r.contender.name,
                f"{r.median:{f}}",
                f"({r.low:{f}}-{r.high:{f}})",
                f"{ratios[r.contender.name]:.3g}",
            )
            for r in self.results
        ]
        rows.insert(0, ("", "median", "(min-max)", f"x {self.reference}"))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [head]
        lines.extend(
            f"{a:{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}  {d:>{widths[3]}}"
            for a, b, c, d in rows
        )
        lines.extend(self.notes)
        return "\n".join(lines)


def report(tables: Sequence[Table], command: str) -> str:
    """The Markdown document: machine and versions first, then each table."""
    packages = ["jobq"] + [r.contender.package for t in tables for r in t.results]
    lines = [
        "# jobq benchmarks",
        "",
        f"Written by `{command}`.",
        "",
        "Figures from one run on one machine: compare the ratios, measured side",
        "by side, rather than the absolute numbers.",
        "",
        "| machine | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in machine().items()),
        "",
        "| package | version |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in versions(packages).items()),
        "",
    ]
    return "\n".join(lines) + "\n" + "\n".join(t.markdown() for t in tables)
