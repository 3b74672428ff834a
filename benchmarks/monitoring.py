"""The cost of monitoring: jobq's memory store with Prometheus metrics, and
with OpenTelemetry tracing, beside the same store without them, in the same
run (``python -m benchmarks --only end_to_end``).

Prometheus: ``instrument(queue)`` into a registry of its own, nothing
scraping. OpenTelemetry: the SDK's ``TracerProvider`` sampling every span,
each handed to a ``SimpleSpanProcessor`` whose exporter drops it, so the
figure is jobq's and the SDK's span cost, not a network's.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jobq
from benchmarks.harness import IN_MEMORY, Contender
from benchmarks.throughput import WORKLOADS as THROUGHPUT
from benchmarks.throughput import JobqEngine, Setup, Speed, memory_store

#: ``(queue, cleanup)``: turn one kind of monitoring on for a round.
Instrument = Callable[[jobq.JobQueue[Any], contextlib.ExitStack], None]


class InstrumentedEngine(JobqEngine):
    """jobq's memory store with monitoring turned on before the clock."""

    def __init__(self, setup: Setup, instrument: Instrument) -> None:
        super().__init__(setup, memory_store)
        self.instrument = instrument

    def open(self, cleanup: contextlib.ExitStack) -> None:
        super().open(cleanup)
        self.instrument(self.queue, cleanup)


def prometheus(queue: jobq.JobQueue[Any], cleanup: contextlib.ExitStack) -> None:
    from prometheus_client import CollectorRegistry

    from jobq.contrib.prometheus import instrument

    cleanup.callback(instrument(queue, CollectorRegistry()).close)


def opentelemetry(queue: jobq.JobQueue[Any], cleanup: contextlib.ExitStack) -> None:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from jobq.contrib.opentelemetry import instrument

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    cleanup.callback(provider.shutdown)
    cleanup.callback(instrument(queue, provider).close)


def opentelemetry_api(queue: jobq.JobQueue[Any], cleanup: contextlib.ExitStack) -> None:
    """Tracing with the API alone (no SDK): jobq's share of tracing's cost."""
    from opentelemetry.trace import NoOpTracerProvider

    from jobq.contrib.opentelemetry import instrument

    cleanup.callback(instrument(queue, NoOpTracerProvider()).close)


#: Variant name, its instrumentation, the module it needs.
VARIANTS: list[tuple[str, Instrument, str]] = [
    ("jobq memory + Prometheus", prometheus, "prometheus_client"),
    ("jobq memory + OpenTelemetry", opentelemetry, "opentelemetry.sdk"),
]


#: The workloads that run the variants: the end-to-end table, no-op jobs.
WORKLOADS = ("end_to_end",)


def contenders(workload: str) -> tuple[list[Contender], list[str]]:
    """The instrumented variants of jobq's memory store for ``workload`` (in
    ``WORKLOADS``); a note for each whose library is not installed."""
    found: list[Contender] = []
    notes: list[str] = []
    if workload not in WORKLOADS:
        return found, notes
    table = THROUGHPUT[workload]
    for name, instrument, module in VARIANTS:
        try:
            __import__(module)
        except ImportError:
            notes.append(
                f"{name}: `{module}` is not installed (the bench dependency group)."
            )
            continue
        engine = functools.partial(InstrumentedEngine, instrument=instrument)
        found.append(table.contender(name, IN_MEMORY, engine, Speed.FAST))
    return found, notes


# -- instructions per job (callgrind): load-independent -----------------------

#: ``python -m benchmarks.monitoring [--against OTHER_TREE]``: each variant's
#: instructions per no-op job, from callgrind runs of N and 2N jobs (their
#: difference over N, so the interpreter's start and the imports cancel out).
CALLGRIND_JOBS = 2_000

SETUPS: dict[str, Instrument | None] = {
    "none": None,
    "prometheus": prometheus,
    "opentelemetry": opentelemetry,
    "otel API only": opentelemetry_api,
}


def run_jobs(variant: str, n: int) -> None:
    """Enqueue ``n`` no-op jobs on the memory store and run them in this
    thread (``run_pending``): no worker threads, so the count is the same
    from one run to the next."""
    import gc

    with contextlib.ExitStack() as cleanup:
        queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
        cleanup.callback(queue.close)
        setup = SETUPS[variant]
        if setup is not None:
            setup(queue, cleanup)
        # What the imports made, out of the collector's way: a full
        # collection walking it in one count and not the other is noise.
        gc.collect()
        gc.freeze()
        for i in range(n):
            queue.enqueue({"n": i})
        queue.run_pending()


def instructions(tree: str, variant: str, n: int) -> int:
    """Instructions callgrind counts for ``run_jobs(variant, n)`` with
    ``tree``'s ``jobq``, start included. This file runs by its path, so the
    current directory stays off ``sys.path``; a virtualenv whose jobq is
    installed from a tree (editable) still lets ``PYTHONPATH`` come first."""
    import os
    import subprocess
    import sys

    from benchmarks.common import callgrind

    # One hash seed: sets laid out alike in every run, or their probing is noise.
    env = dict(os.environ, PYTHONPATH=tree, PYTHONHASHSEED="0")
    # A run first, not counted: it writes the bytecode caches of what the
    # variant imports, whose compiling would land in one count of two.
    run = [sys.executable, os.path.abspath(__file__), "--run", variant]
    subprocess.run([*run, "1"], capture_output=True, check=True, env=env)
    return callgrind([*run, str(n)], env)


def main() -> None:
    """``--against TREE``: that tree measured too, in the same run (each
    variant in both trees before the next variant)."""
    import argparse
    import os
    import sys

    if sys.argv[1:2] == ["--run"]:
        tree = os.environ.get("PYTHONPATH", "")
        if tree and not jobq.__file__.startswith(os.path.join(tree, "")):
            raise SystemExit(f"jobq was imported from {jobq.__file__}, not {tree}")
        run_jobs(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description="instructions per no-op job")
    parser.add_argument("--against", help="another tree (a checkout of main)")
    args = parser.parse_args()
    trees = [("before", os.path.abspath(args.against))] if args.against else []
    trees.append(("this tree", os.getcwd()))
    n = CALLGRIND_JOBS
    per_job: dict[tuple[str, str], float] = {}
    for variant in SETUPS:
        for _, tree in trees:
            once = instructions(tree, variant, n)
            per_job[tree, variant] = (instructions(tree, variant, 2 * n) - once) / n
    print(f"instructions per no-op job (callgrind, memory store, run_pending, N={n}):")
    for variant in SETUPS:
        shown = "   ".join(
            f"{name} {per_job[tree, variant]:9,.0f} "
            f"{per_job[tree, variant] / per_job[tree, 'none'] - 1:+6.1%}"
            for name, tree in trees
        )
        print(f"  {variant:14s} {shown}")


if __name__ == "__main__":
    main()
