"""The cost of growth: what jobq's operations cost as the queue gets big, what
a pending job costs in memory, how long a big store takes to load, and how
much a JSON compaction slows the producer and workers running meanwhile.

Four workloads of ``python -m benchmarks`` (see ``WORKLOADS`` there):

- ``growth``: microseconds per ``enqueue``, ``claim`` + ``finish`` and
  ``stats()`` with 1k, 10k, 100k and 1M jobs already queued, for every store
  (the costs must stay flat); ``benchmarks.plot`` draws them;
- ``memory_per_job``: bytes per pending job in the memory store, against a
  plain ``queue.Queue`` holding the same payload dicts;
- ``load_time``: milliseconds to open a store of N jobs (JSON snapshot plus
  journal, SQLite), against ``json.load`` of the bare payloads;
- ``compaction``: JSON snapshot time with N/10 and N jobs queued, alone and
  under traffic, and the traffic's throughput with and without it.

Run alone: ``python -m benchmarks.growth [N]`` (every workload at N jobs).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import queue as stdlib_queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import jobq
from benchmarks.common import POSTGRES_URL, postgres_unavailable
from benchmarks.harness import (
    IN_MEMORY,
    PAYLOAD,
    PERSISTED,
    REFERENCE,
    STDLIB,
    WORKERS,
    Contender,
    Table,
    Tally,
    measure,
)
from jobq.stores import JsonFileStore, SqliteStore, Store

#: The growth plot's file name, beside the Markdown report.
PLOT = "growth.png"
#: Queue sizes the growth table measures at (those up to its N).
SIZES = (1_000, 10_000, 100_000, 1_000_000)
#: Operations per timed batch; a figure is the median of the batches.
BATCH = 1_000
#: Jobs per ``enqueue_many`` when filling a queue.
FILL_BATCH = 10_000
#: One queued job in this many is delayed (by an hour), the rest are due.
DELAYED_EVERY = 10
#: PostgreSQL fills at about 10k jobs/s: 1M would take minutes.
POSTGRES_MOST = 100_000
#: PostgreSQL's operations take about a millisecond (a commit each).
POSTGRES_BATCH = 250
#: A JSON store's ``compact_bytes`` that never triggers a compaction: only
#: explicit saves compact.
NEVER = 1 << 40
#: The allowed drift of a cost from the smallest queue to the largest.
FLAT = 0.30
#: Jobs the compaction traffic's producer may be ahead of its workers.
BACKLOG = 1_000


def progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def fill(queue: jobq.JobQueue[Any], count: int, *, delayed_every: int = 0) -> None:
    """Add ``count`` jobs in big batches; with ``delayed_every``, one in that
    many is delayed by an hour (the mix a busy queue holds). Delayed jobs get
    a higher priority than due ones: a claim that walked past future rows to
    find a due job would cost more with every delayed job."""
    delayed = count // delayed_every if delayed_every else 0
    for total, delay, priority in ((count - delayed, 0, 0), (delayed, 3600, 1)):
        for start in range(0, total, FILL_BATCH):
            size = min(FILL_BATCH, total - start)
            queue.enqueue_many([PAYLOAD] * size, delay=delay, priority=priority)


# -- the stores ---------------------------------------------------------------


@dataclass(frozen=True)
class StoreKind:
    """A store under test: how to make one in a temp directory, the most
    jobs it is filled with (``None``: every size), and operations per timed
    batch (fewer where one costs a round trip to a server)."""

    name: str
    make: Callable[[str], contextlib.AbstractContextManager[Store | None]]
    most: int | None = None
    batch: int = BATCH


@contextlib.contextmanager
def memory_store(_: str) -> Iterator[None]:
    yield None


@contextlib.contextmanager
def json_store(directory: str) -> Iterator[Store]:
    """Compacting only when told: a compaction the fill set off would run on
    (seconds at 1M jobs) into the timed batches. The compaction table
    measures what compactions cost."""
    yield JsonFileStore(os.path.join(directory, "jobs.json"), compact_bytes=NEVER)


@contextlib.contextmanager
def sqlite_store(directory: str) -> Iterator[Store]:
    yield SqliteStore(os.path.join(directory, "jobs.db"))


@contextlib.contextmanager
def postgres_store(_: str) -> Iterator[Store]:
    """A store in a schema of its own, dropped afterwards (close the queue
    first: dropping waits for its connections' locks)."""
    from benchmarks.schemas import Schema  # needs psycopg
    from jobq.stores import PostgresStore

    with Schema(POSTGRES_URL) as schema:
        yield PostgresStore(POSTGRES_URL, schema=schema.name)


def store_kinds() -> tuple[list[StoreKind], list[str]]:
    """The stores that can run here, and a note for each that cannot."""
    kinds = [
        StoreKind("jobq memory", memory_store),
        StoreKind("jobq JSON (journal)", json_store),
        StoreKind("jobq SQLite", sqlite_store),
    ]
    missing = postgres_unavailable()
    if missing is None:
        kinds.append(
            StoreKind("jobq PostgreSQL", postgres_store, POSTGRES_MOST, POSTGRES_BATCH)
        )
        return kinds, []
    return kinds, [f"{missing}: the PostgreSQL store was skipped."]


# -- tables of text cells ------------------------------------------------------


def cell(values: Sequence[float], decimals: int) -> str:
    """``median (min-max)``, as the harness's tables show a figure."""
    f = f",.{decimals}f"
    return f"{statistics.median(values):{f}} ({min(values):{f}}-{max(values):{f}})"


@dataclass
class GridTable(Table):
    """A table of preformatted cells, for figures that do not fit one row per
    contender (the harness's ``Table``): same heading, setup line and notes.

    ``results`` stays empty (every figure here is jobq's) and ``reference``
    unused; ``labels`` is how many leading columns are text."""

    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    labels: int = 1
    setup: str = ""

    def markdown(self) -> str:
        align = ["---"] * self.labels + ["--:"] * (len(self.columns) - self.labels)
        lines = [
            f"## {self.title}",
            "",
            self.description,
            "",
            self.setup,
            "",
            "| " + " | ".join(self.columns) + " |",
            "|" + "|".join(align) + "|",
            *("| " + " | ".join(row) + " |" for row in self.rows),
        ]
        lines.extend(f"\n{note}" for note in self.notes)
        return "\n".join(lines) + "\n"

    def console(self) -> str:
        grid = [self.columns, *self.rows]
        widths = [max(len(row[i]) for row in grid) for i in range(len(self.columns))]

        def line(row: Sequence[str]) -> str:
            return "  ".join(
                f"{text:{'<' if i < self.labels else '>'}{widths[i]}}"
                for i, text in enumerate(row)
            ).rstrip()

        head = f"{self.title}: N={self.n:,}, {self.rounds} rounds, {self.unit}"
        return "\n".join([head, *map(line, grid), *self.notes])


# -- growth: cost per operation by queue size ----------------------------------

OPERATIONS = ("enqueue", "claim+finish", "stats()")


@dataclass
class Curve:
    """One store's cost of one operation: per queue size, µs per operation of
    each timed batch."""

    store: str
    operation: str
    samples: dict[int, list[float]] = field(default_factory=dict)

    def median(self, size: int) -> float:
        return statistics.median(self.samples[size])

    def fastest(self, size: int) -> float:
        return min(self.samples[size])

    @property
    def growth(self) -> float:
        """The cost with the most jobs queued over the cost with the fewest,
        each the fastest of its batches: a busy neighbour only ever slows a
        batch down."""
        return self.fastest(max(self.samples)) / self.fastest(min(self.samples))


@dataclass
class GrowthTable(GridTable):
    """The growth grid, with the curves behind it (``benchmarks.plot``)."""

    curves: list[Curve] = field(default_factory=list)

    def markdown(self) -> str:
        """The grid, then the plot ``python -m benchmarks --out`` writes
        beside the report."""
        return super().markdown() + f"\n![cost per operation by jobs queued]({PLOT})\n"


def claim_and_finish(store: Store) -> Callable[[], None]:
    """One job through the store as a worker takes it: claim, then finish."""

    def run() -> None:
        now = time.time()
        claim = store.claim(now)
        if claim is None:
            raise RuntimeError("no due job to claim: the queue ran dry")
        store.finish(claim, None, None, now)

    return run


def micros_per_call(operation: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        operation()
    return (time.perf_counter() - start) / calls * 1e6


def operations(queue: jobq.JobQueue[Any]) -> dict[str, Callable[[], object]]:
    """The timed operations on one queue. A round enqueues as many jobs as it
    claims, so the queue keeps its size."""
    return {
        "enqueue": lambda: queue.enqueue(PAYLOAD),
        "claim+finish": claim_and_finish(queue.store),
        "stats()": queue.stats,
    }


def grow(kind: StoreKind, sizes: Sequence[int], batches: int) -> list[Curve]:
    """One store of each size, filled first; then ``batches`` rounds, each
    timing one batch of every operation at every size in turn (after an
    untimed warm-up): a slow spell of the machine lands on every size
    alike instead of passing for growth."""
    curves = {name: Curve(kind.name, name) for name in OPERATIONS}
    with contextlib.ExitStack() as stack:
        timed: dict[int, dict[str, Callable[[], object]]] = {}
        for size in sizes:
            if kind.most is not None and size > kind.most:
                break
            directory = stack.enter_context(tempfile.TemporaryDirectory())
            store = stack.enter_context(kind.make(directory))
            queue = stack.enter_context(jobq.JobQueue(None, store=store))
            fill(queue, size, delayed_every=DELAYED_EVERY)
            queue.save()  # the JSON snapshot, a SQLite checkpoint: before the clock
            timed[size] = operations(queue)
            for operation in timed[size].values():
                micros_per_call(operation, kind.batch // 4)
            progress(f"{kind.name}: {size:,} queued")
        gc.collect()
        for _ in range(batches):
            for size, named in timed.items():
                for name, operation in named.items():
                    micros = micros_per_call(operation, kind.batch)
                    curves[name].samples.setdefault(size, []).append(micros)
        for size in timed:
            progress(
                f"{kind.name}, {size:,} queued: "
                + ", ".join(
                    f"{c.operation} {c.median(size):,.1f}" for c in curves.values()
                )
                + " µs"
            )
    return list(curves.values())


def growth_rows(curves: Sequence[Curve], sizes: Sequence[int]) -> list[list[str]]:
    rows = []
    for curve in curves:
        cells = [
            cell(curve.samples[size], 1) if size in curve.samples else "-"
            for size in sizes
        ]
        largest = max(curve.samples)
        ratio = f"{curve.growth:.2f}"
        if largest != sizes[-1]:
            ratio += f" (at {largest:,})"
        rows.append([curve.store, curve.operation, *cells, ratio])
    return rows


def growth_notes(curves: Sequence[Curve], sizes: Sequence[int]) -> list[str]:
    short = [c.store for c in curves if max(c.samples) < sizes[-1]]
    notes = [
        f"{store} is filled to {POSTGRES_MOST:,} jobs only (enqueue_many runs "
        "at about 10k jobs/s there, and the store has no bulk load); its ratio "
        "is to that size."
        for store in dict.fromkeys(short)
    ]
    drifting = [
        f"{c.store} {c.operation} ({c.growth:.2f})"
        for c in curves
        if abs(c.growth - 1) > FLAT
    ]
    if drifting:
        notes.append(
            f"Outside ±{FLAT:.0%} from {sizes[0]:,} to the largest queue: "
            + ", ".join(drifting)
            + "."
        )
    else:
        notes.append(f"Every cost stays within ±{FLAT:.0%} from {sizes[0]:,} up.")
    return notes


def table(n: int, rounds: int) -> GrowthTable:
    """The growth workload: sizes up to ``n``, ``rounds`` batches per figure."""
    sizes = [size for size in SIZES if size <= n] or [n]
    kinds, notes = store_kinds()
    curves = [curve for kind in kinds for curve in grow(kind, sizes, rounds)]
    return GrowthTable(
        title="Cost per operation as the queue grows",
        description=(
            "Microseconds per operation with this many jobs already queued "
            f"(one in {DELAYED_EVERY} delayed by an hour, with a higher "
            "priority; the rest due), in one thread: `queue.enqueue(payload)`; "
            "a worker's `store.claim(now)` then `store.finish(...)`; "
            f"`queue.stats()`. One store of each size is filled first; each "
            f"round then runs a batch of {BATCH:,} of each operation "
            f"({POSTGRES_BATCH} for PostgreSQL, where each is a round trip) at "
            "every size in turn, so a queue keeps its size and a slow spell "
            "of the machine hits every size alike. The last column is the cost at the "
            "largest size over the cost at the smallest, each the fastest of "
            "its batches: 1.00 is flat. The JSON "
            "store compacts only when told here (a snapshot in the background "
            "would land in some batches and not others); the compaction table "
            "shows what a snapshot costs."
        ),
        unit="µs per operation",
        n=sizes[-1],
        rounds=rounds,
        results=[],
        reference="",
        notes=notes + growth_notes(curves, sizes),
        lower_is_better=True,
        decimals=1,
        columns=[
            "store",
            "operation",
            *(f"{s:,} queued" for s in sizes),
            f"x {sizes[-1]:,} / {sizes[0]:,}",
        ],
        rows=growth_rows(curves, sizes),
        labels=2,
        setup=(
            f"Median and min-max of {rounds} batches per size, in µs per "
            "operation (lower is better)."
        ),
        curves=curves,
    )


# -- memory per pending job ----------------------------------------------------


def payloads(start: int, count: int) -> list[dict[str, Any]]:
    """Distinct payload dicts (a user id each), as real jobs carry."""
    return [dict(PAYLOAD, user_id=i) for i in range(start, start + count)]


@contextlib.contextmanager
def plain_queue_holding(n: int) -> Iterator[object]:
    held: stdlib_queue.Queue[dict[str, Any]] = stdlib_queue.Queue()
    for payload in payloads(0, n):
        held.put(payload)
    yield held


@contextlib.contextmanager
def jobq_memory_holding(n: int) -> Iterator[object]:
    with jobq.JobQueue(None) as queue:
        for start in range(0, n, FILL_BATCH):
            queue.enqueue_many(payloads(start, min(FILL_BATCH, n - start)))
        yield queue


def bytes_per_job(
    holding: Callable[[int], contextlib.AbstractContextManager[object]], n: int
) -> float:
    """Python memory still allocated (tracemalloc) while ``holding`` keeps n
    pending jobs, per job."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with holding(n):
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / n


def memory_table(n: int, rounds: int) -> Table:
    contenders = [
        Contender(
            "queue.Queue of payload dicts",
            REFERENCE,
            lambda size: bytes_per_job(plain_queue_holding, size),
            STDLIB,
        ),
        Contender(
            "jobq memory",
            IN_MEMORY,
            lambda size: bytes_per_job(jobq_memory_holding, size),
        ),
    ]
    return Table(
        title="Memory per pending job",
        description=(
            "Python memory held per pending job (tracemalloc, after a full "
            "collection) with N jobs queued, each with its own small payload "
            "dict; jobq keeps a payload as JSON text with its job's state."
        ),
        unit="bytes per job",
        n=n,
        rounds=rounds,
        results=measure(contenders, n, rounds),
        reference=contenders[0].name,
        lower_is_better=True,
    )


# -- load time -------------------------------------------------------------------


def millis_to_open(store: Store, expected: int) -> float:
    """Milliseconds from a new queue's first call to its answer (the store
    opens then: it loads the file, or connects and checks the schema)."""
    queue: jobq.JobQueue[Any] = jobq.JobQueue(None, store=store)
    try:
        start = time.perf_counter()
        pending = queue.stats().pending
        elapsed = time.perf_counter() - start
    finally:
        queue.close()
    if pending != expected:
        raise RuntimeError(f"opened {pending:,} pending jobs, not {expected:,}")
    return elapsed * 1000


class LoadFiles:
    """The stores of n jobs the load contenders open, written once per table.

    The JSON store holds half its jobs in a snapshot and half in the journal
    after it (about the most it holds before compacting); it is copied aside
    while open, since closing it compacts the journal away, and every round
    opens a fresh copy, since opening changes the files too."""

    def __init__(self, directory: str, n: int) -> None:
        self.directory = directory
        self.n = n
        self.plain = os.path.join(directory, "payloads.json")
        self.json = os.path.join(directory, "json")
        self.sqlite = os.path.join(directory, "jobs.db")
        with open(self.plain, "w", encoding="utf-8") as out:
            json.dump([PAYLOAD] * n, out)
        self._write_json()
        with jobq.JobQueue(None, store=SqliteStore(self.sqlite)) as queue:
            fill(queue, n, delayed_every=DELAYED_EVERY)

    def _write_json(self) -> None:
        source = os.path.join(self.directory, "source")
        os.mkdir(source)
        store = JsonFileStore(os.path.join(source, "jobs.json"), compact_bytes=NEVER)
        with jobq.JobQueue(None, store=store) as queue:
            fill(queue, self.n // 2, delayed_every=DELAYED_EVERY)
            queue.save()
            fill(queue, self.n - self.n // 2, delayed_every=DELAYED_EVERY)
            shutil.copytree(source, self.json, ignore=shutil.ignore_patterns("*.lock"))

    def load_plain(self, _: int) -> float:
        start = time.perf_counter()
        with open(self.plain, encoding="utf-8") as file:
            json.load(file)
        return (time.perf_counter() - start) * 1000

    def open_json(self, _: int) -> float:
        with tempfile.TemporaryDirectory(dir=self.directory) as scratch:
            copy = os.path.join(scratch, "json")
            shutil.copytree(self.json, copy)
            store = JsonFileStore(os.path.join(copy, "jobs.json"))
            return millis_to_open(store, self.n)

    def open_sqlite(self, _: int) -> float:
        return millis_to_open(SqliteStore(self.sqlite), self.n)


def load_table(n: int, rounds: int) -> Table:
    with tempfile.TemporaryDirectory() as directory:
        files = LoadFiles(directory, n)
        contenders = [
            Contender("json.load of the payloads", REFERENCE, files.load_plain, STDLIB),
            Contender("jobq JSON (snapshot + journal)", PERSISTED, files.open_json),
            Contender("jobq SQLite", PERSISTED, files.open_sqlite),
        ]
        results = measure(contenders, n, rounds)
    return Table(
        title="Time to open a store",
        description=(
            "Milliseconds from a new queue's first call to its answer with N "
            "jobs stored (one in 10 delayed): the JSON store reads its "
            "snapshot (half the jobs) and replays its journal (the other half); "
            "SQLite connects and checks its schema. The reference reads a JSON "
            "list of the same N payloads."
        ),
        unit="ms",
        n=n,
        rounds=rounds,
        results=results,
        reference=contenders[0].name,
        lower_is_better=True,
        decimals=1,
    )


# -- compaction under traffic ----------------------------------------------------


@dataclass(frozen=True)
class Window:
    """What the traffic did while something ran in the main thread."""

    seconds: float
    ran: int
    longest_enqueue: float

    @property
    def rate(self) -> float:
        return self.ran / self.seconds


class Traffic:
    """A producer enqueueing no-op jobs without pause, at most ``BACKLOG``
    ahead of ``WORKERS`` workers running them: the work a compaction of the
    JSON store slows down. ``queue`` is usable before ``running`` starts it."""

    def __init__(self, store: Store) -> None:
        self.tally = Tally(sys.maxsize)
        self.queue: jobq.JobQueue[Any] = jobq.JobQueue(self._handle, store=store)
        self.room = threading.Semaphore(BACKLOG)
        self.enqueued = 0
        self.longest = 0.0  # the longest enqueue since the window began (s)
        self._stop = threading.Event()
        self._producer = threading.Thread(target=self._produce, name="producer")

    def _handle(self, _: object) -> None:
        self.tally()
        self.room.release()

    def _produce(self) -> None:
        while not self._stop.is_set():
            if not self.room.acquire(timeout=0.05):
                continue
            began = time.perf_counter()
            self.queue.enqueue(PAYLOAD)
            took = time.perf_counter() - began
            self.enqueued += 1
            self.longest = max(self.longest, took)

    @contextlib.contextmanager
    def running(self) -> Iterator[Traffic]:
        """Workers and producer on; on exit, every job produced has run."""
        self.queue.start(workers=WORKERS)
        self._producer.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._producer.join()
            self._drain()
            self.queue.stop()

    def _drain(self) -> None:
        deadline = time.monotonic() + 60
        while self.tally.count < self.enqueued:
            if time.monotonic() > deadline:
                raise RuntimeError("the traffic's jobs did not all run")
            time.sleep(0.01)

    def window(self, action: Callable[[], object]) -> Window:
        """What the traffic did while ``action`` ran in this thread."""
        ran, self.longest = self.tally.count, 0.0
        start = time.perf_counter()
        action()
        seconds = time.perf_counter() - start
        if not self._producer.is_alive():
            raise RuntimeError("the producer died (its traceback is above)")
        return Window(seconds, self.tally.count - ran, self.longest)


@dataclass
class CompactionRuns:
    """One queue size's figures over the rounds."""

    size: int
    alone: list[float] = field(default_factory=list)  # snapshot, no traffic (s)
    during: list[Window] = field(default_factory=list)  # traffic + snapshot
    without: list[Window] = field(default_factory=list)  # traffic, as long


def seconds_of(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def compact_under_traffic(size: int, rounds: int) -> CompactionRuns:
    """``size`` jobs delayed an hour (only the snapshot sees them); then
    ``rounds`` snapshots alone, and with traffic ``rounds`` times a snapshot
    and a window as long without one. Only these saves compact."""
    runs = CompactionRuns(size)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "jobs.json")
        traffic = Traffic(JsonFileStore(path, compact_bytes=NEVER))
        with traffic.queue as queue:
            fill(queue, size, delayed_every=1)
            runs.alone.extend(seconds_of(queue.save) for _ in range(rounds))
            with traffic.running():
                for _ in range(rounds):
                    during = traffic.window(queue.save)
                    runs.during.append(during)
                    runs.without.append(
                        traffic.window(functools.partial(time.sleep, during.seconds))
                    )
    progress(
        f"compaction of {size:,}: {statistics.median(runs.alone) * 1000:,.0f} ms "
        f"alone, traffic {statistics.median(w.rate for w in runs.during):,.0f} "
        f"jobs/s during, {statistics.median(w.rate for w in runs.without):,.0f} "
        "without"
    )
    return runs


def compaction_rows(runs: CompactionRuns) -> list[list[str]]:
    size = f"{runs.size:,}"
    without = statistics.median(w.rate for w in runs.without)
    during = statistics.median(w.rate for w in runs.during)

    def longest(windows: list[Window]) -> str:
        return cell([w.longest_enqueue * 1000 for w in windows], 1)

    return [
        [size, "snapshot alone", cell([s * 1000 for s in runs.alone], 0),
         "-", "-", "-"],
        [size, "traffic alone", "-", cell([w.rate for w in runs.without], 0),
         "1.00", longest(runs.without)],
        [size, "traffic + snapshot",
         cell([w.seconds * 1000 for w in runs.during], 0),
         cell([w.rate for w in runs.during], 0), f"{during / without:.2f}",
         longest(runs.during)],
    ]  # fmt: skip


def compaction_table(n: int, rounds: int) -> GridTable:
    """The JSON store's compaction with n/10 and n jobs queued."""
    sizes = sorted({max(n // 10, 1), n})
    rows = [row for size in sizes for row in compaction_rows(
        compact_under_traffic(size, rounds))]  # fmt: skip
    return GridTable(
        title="JSON store: compaction under traffic",
        description=(
            "The JSON store compacts its journal into a snapshot of every job. "
            "With this many jobs queued (delayed an hour), the time of one "
            "snapshot (`queue.save()`) alone, then under traffic: a producer "
            "enqueueing no-op jobs one by one (at most "
            f"{BACKLOG:,} ahead) while {WORKERS} workers run them, with and "
            "without a snapshot running (windows of the same length). Jobs run "
            "per second over the window, the ratio of the two, and the longest "
            "single enqueue (a stall the producer saw)."
        ),
        unit="ms and jobs/s",
        n=n,
        rounds=rounds,
        results=[],
        reference="",
        columns=[
            "jobs queued",
            "while",
            "snapshot, ms",
            "jobs run/s",
            "x traffic alone",
            "longest enqueue, ms",
        ],
        rows=rows,
        labels=2,
        setup=(
            f"Median and min-max of {rounds} rounds per size; snapshot time "
            "and the longest enqueue lower is better, jobs run/s higher."
        ),
    )


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    for build in (table, memory_table, load_table, compaction_table):
        print(build(n, 3).console(), flush=True)


if __name__ == "__main__":
    main()
