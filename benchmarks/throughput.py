"""The in-process workloads: enqueue (1 and 8 producers), drain, end-to-end,
retry and a 5 ms handler with 4 and 32 workers; jobs/s.

Every contender is an ``Engine``: a queue with its workers, set up when the
``with`` block is entered (temp directory, store, schema, idle workers) and
removed when it is left, so that a round's clock times the work only. A
workload is a function of an engine factory and N; ``Workload`` joins one to
its table. The references and jobq with each store are built here; the peers
come from ``benchmarks.peers`` (Huey, persist-queue) and
``benchmarks.brokers`` (RQ, Procrastinate, PgQueuer), looked up when a table
is built.

Run alone: ``python -m benchmarks.throughput [WORKLOAD] [N]``; in the suite:
``python -m benchmarks``.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import functools
import importlib
import logging
import os
import queue as stdlib_queue
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

import jobq
from benchmarks.common import (
    DEADLINE,
    POSTGRES_URL,
    PRODUCERS,
    SLEEP,
    postgres_unavailable,
)
from benchmarks.harness import (
    FSYNCED,
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

Handler = Callable[[Any], None]


# -- what every job does ---------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What a round asks of an engine: the handler its workers run (it gets
    the payload), how many workers, and how many retries a failed job gets."""

    handler: Handler
    workers: int = WORKERS
    retries: int = 0


class Flaky(Exception):
    """The planned failure of the retry workload."""


class FailTwice:
    """Fails each job's first two attempts, passes the third to ``then``.

    Counts attempts per payload ``id``, the same for every contender, whether
    or not its queue tells a handler the attempt number."""

    def __init__(self, then: Handler) -> None:
        self.then = then
        self._attempts: dict[int, int] = {}
        self._lock = threading.Lock()

    def __call__(self, payload: Any) -> None:
        with self._lock:
            attempt = self._attempts.get(payload["id"], 0) + 1
            self._attempts[payload["id"]] = attempt
        if attempt <= 2:
            raise Flaky(f"attempt {attempt} of job {payload['id']}")
        self.then(payload)


class Sleeps:
    """A handler waiting on I/O: sleeps 5 ms, then passes the job on."""

    def __init__(self, then: Handler) -> None:
        self.then = then

    def __call__(self, payload: Any) -> None:
        time.sleep(SLEEP)
        self.then(payload)


def same_payload(_: int) -> Any:
    return PAYLOAD


def numbered_payload(i: int) -> Any:
    return {**PAYLOAD, "id": i}


@dataclass(frozen=True)
class Work:
    """The jobs of a workload: their handler (around the round's tally),
    their payloads, retries, and loggers to mute while they run."""

    handler: Callable[[Tally], Handler] = lambda tally: tally
    payload: Callable[[int], Any] = same_payload
    retries: int = 0
    #: The in-process contenders' loggers: each failed attempt of the retry
    #: workload logs a record (some with a traceback), muted for all alike.
    mute: tuple[str, ...] = ()


NOOP = Work()
FLAKY = Work(FailTwice, numbered_payload, retries=2, mute=("jobq", "huey"))
SLEEPY = Work(Sleeps)


@contextlib.contextmanager
def muted(names: Sequence[str]) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# -- engines -------------------------------------------------------------------


class Engine(abc.ABC):
    """One contender's queue and its workers for one round.

    Entering sets everything up (``open``) before any clock starts; leaving
    stops the workers and removes what entering made: ``open`` adds each
    teardown to ``cleanup`` as it goes, so they run in reverse order, and
    only for what was made if ``open`` fails halfway."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self._cleanup = contextlib.ExitStack()

    def __enter__(self) -> Self:
        with contextlib.ExitStack() as cleanup:
            self.open(cleanup)
            self._cleanup = cleanup.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._cleanup.close()

    @abc.abstractmethod
    def open(self, cleanup: contextlib.ExitStack) -> None:
        """Set up the queue (no worker takes a job yet)."""

    @abc.abstractmethod
    def enqueue(self, payload: Any) -> None: ...

    def enqueue_many(self, payloads: Sequence[Any]) -> None:
        """Fill the queue before a drain: in one call where the queue can."""
        for payload in payloads:
            self.enqueue(payload)

    @abc.abstractmethod
    def start(self) -> None:
        """Let ``setup.workers`` workers take jobs."""


EngineFactory = Callable[[Setup], Engine]


def temp_dir(cleanup: contextlib.ExitStack) -> str:
    """A directory for this round, removed at its end."""
    return cleanup.enter_context(tempfile.TemporaryDirectory(prefix="jobq-bench-"))


class ThreadPoolEngine(Engine):
    """What a user writes by hand: each job submitted to a
    ThreadPoolExecutor. Until ``start`` its threads are held at a gate, so
    jobs submitted before wait as a queue's do; a failed job is submitted
    again until its retries are spent."""

    def open(self, cleanup: contextlib.ExitStack) -> None:
        self._gate = threading.Event()
        self._pool = ThreadPoolExecutor(self.setup.workers)
        cleanup.callback(self._pool.shutdown)
        cleanup.callback(self._gate.set)
        cleanup.callback(self._pool.shutdown, wait=False, cancel_futures=True)
        for _ in range(self.setup.workers):
            self._pool.submit(self._gate.wait)  # one per thread: all held
        # Without retries the pool runs the handler itself, as bare as it gets.
        self._run = self._attempt if self.setup.retries else self.setup.handler

    def enqueue(self, payload: Any) -> None:
        self._pool.submit(self._run, payload)

    def start(self) -> None:
        self._gate.set()

    def _attempt(self, payload: Any, attempt: int = 1) -> None:
        try:
            self.setup.handler(payload)
        except Exception:  # noqa: BLE001 - a failed attempt is retried or dropped
            if attempt <= self.setup.retries:
                self._pool.submit(self._attempt, payload, attempt + 1)


#: What a FIFO's worker gets: (payload, attempt) and the token it
#: acknowledges the item with; None: stop.
Got = tuple[tuple[Any, int], Any] | None


class Fifo(Protocol):
    """queue.Queue, or a persistent queue with its methods."""

    def put(self, item: Any) -> object: ...

    def get(self) -> Any: ...


class ThreadedEngine(Engine):
    """Hand-rolled workers around a FIFO, as users of ``queue.Queue`` and
    persist-queue write them: get an item, run the handler, acknowledge; a
    failed attempt goes back into the FIFO with its number. An item is
    ``(payload, attempt)``; None tells one worker to stop."""

    def open(self, cleanup: contextlib.ExitStack) -> None:
        self.fifo = self.open_fifo(cleanup)
        self._threads: list[threading.Thread] = []
        cleanup.callback(self._stop_workers)

    @abc.abstractmethod
    def open_fifo(self, cleanup: contextlib.ExitStack) -> Fifo: ...

    def get(self) -> Got:
        """The next item (blocking) and its token, or None to stop."""
        item = self.fifo.get()
        return None if item is None else (item, None)

    def done(self, token: Any) -> None:
        """Acknowledge an item once its attempt ran."""

    def enqueue(self, payload: Any) -> None:
        self.fifo.put((payload, 1))

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._work, daemon=True)
            for _ in range(self.setup.workers)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        handler, retries = self.setup.handler, self.setup.retries
        while (got := self.get()) is not None:
            (payload, attempt), token = got
            try:
                handler(payload)
            except Exception:  # noqa: BLE001 - a failed attempt is retried or dropped
                if attempt <= retries:
                    self.fifo.put((payload, attempt + 1))
            self.done(token)

    def _stop_workers(self) -> None:
        for _ in self._threads:
            self.fifo.put(None)
        for thread in self._threads:
            thread.join(DEADLINE)
            if thread.is_alive():
                raise RuntimeError("a worker thread did not stop")


class PlainQueueEngine(ThreadedEngine):
    """The ceiling for handing work between Python threads: queue.Queue."""

    def open_fifo(self, cleanup: contextlib.ExitStack) -> Fifo:
        return stdlib_queue.Queue()


#: Where a jobq contender keeps its jobs for one round: the ``store``
#: argument of JobQueue (None, a path or URL, a store), made in the round's
#: cleanup (temp dir, schema).
StorePlace = Callable[[contextlib.ExitStack], object]


class JobqEngine(Engine):
    """jobq with one store: workers started by ``start``; retries without
    delay (``base_delay=0``) for the retry workload."""

    def __init__(self, setup: Setup, place: StorePlace) -> None:
        super().__init__(setup)
        self.place = place

    def open(self, cleanup: contextlib.ExitStack) -> None:
        handler = self.setup.handler
        self.queue: jobq.JobQueue[Any] = jobq.JobQueue(
            lambda job: handler(job.payload),
            store=self.place(cleanup),
            max_attempts=self.setup.retries + 1,
            base_delay=0,
        )
        cleanup.callback(self.queue.close)
        self.queue.stats()  # opens the store

    def enqueue(self, payload: Any) -> None:
        self.queue.enqueue(payload)

    def enqueue_many(self, payloads: Sequence[Any]) -> None:
        self.queue.enqueue_many(payloads)

    def start(self) -> None:
        self.queue.start(workers=self.setup.workers)


def memory_store(_: contextlib.ExitStack) -> None:
    return None


def json_store(cleanup: contextlib.ExitStack) -> str:
    """The JSON store as configured by default: every change journaled."""
    return os.path.join(temp_dir(cleanup), "jobs.json")


def json_fsync_store(cleanup: contextlib.ExitStack) -> Store:
    return JsonFileStore(os.path.join(temp_dir(cleanup), "jobs.json"), fsync=True)


def sqlite_store(cleanup: contextlib.ExitStack) -> str:
    """The SQLite store as configured by default (WAL, synchronous=NORMAL)."""
    return f"sqlite:///{temp_dir(cleanup)}/jobs.db"


def sqlite_full_store(cleanup: contextlib.ExitStack) -> Store:
    """synchronous=FULL: a fsync at every commit."""
    return SqliteStore(os.path.join(temp_dir(cleanup), "jobs.db"), synchronous="FULL")


def postgres_store(cleanup: contextlib.ExitStack, **options: Any) -> object:
    """A fresh schema on the local server, dropped at the round's end; the
    store's defaults unless ``options`` say otherwise."""
    from benchmarks.schemas import Schema  # needs psycopg
    from jobq.stores import PostgresStore

    schema = cleanup.enter_context(Schema(POSTGRES_URL))
    return PostgresStore(POSTGRES_URL, schema=schema.name, **options)


#: What workers may claim at once in the ``claim_batch`` contenders (JSON and
#: SQLite default to 1, PostgreSQL to 16 taken ahead; see ``Store.claim_batch``).
BATCH = 32


def json_batch_store(cleanup: contextlib.ExitStack) -> Store:
    path = os.path.join(temp_dir(cleanup), "jobs.json")
    return JsonFileStore(path, claim_batch=BATCH)


def sqlite_batch_store(cleanup: contextlib.ExitStack) -> Store:
    return SqliteStore(os.path.join(temp_dir(cleanup), "jobs.db"), claim_batch=BATCH)


#: PostgreSQL takes jobs ahead by default (``claim_batch`` 16, each outcome
#: written before the next job starts); this contender makes the older trade
#: the JSON and SQLite ones make: a batch's outcomes written together.
postgres_batch_store = functools.partial(
    postgres_store, claim_batch=BATCH, take_ahead=False
)


# -- the workloads ---------------------------------------------------------------


def enqueue_all(engine: Engine, payloads: Sequence[Any], producers: int = 1) -> None:
    """Enqueue one by one, split between ``producers`` threads."""
    if producers == 1:
        for payload in payloads:
            engine.enqueue(payload)
        return
    share = len(payloads) // producers
    with ThreadPoolExecutor(producers) as pool:
        futures = [
            pool.submit(enqueue_all, engine, payloads[i * share : (i + 1) * share])
            for i in range(producers)
        ]
    for future in futures:
        future.result()  # a producer's error fails the round


def enqueue_rate(engine: EngineFactory, n: int, producers: int = 1) -> float:
    """Jobs/s of ``producers`` threads enqueueing n jobs in all; no worker
    takes a job meanwhile."""
    n -= n % producers
    with engine(Setup(Tally(n))) as queue:
        start = time.perf_counter()
        enqueue_all(queue, [PAYLOAD] * n, producers)
        return n / (time.perf_counter() - start)


def drain_rate(engine: EngineFactory, n: int) -> float:
    """Jobs/s of 4 workers, started on n queued jobs, until the last ran."""
    tally = Tally(n)
    with engine(Setup(tally)) as queue:
        queue.enqueue_many([PAYLOAD] * n)
        start = time.perf_counter()
        queue.start()
        tally.wait(DEADLINE)
        return n / (time.perf_counter() - start)


def end_to_end_rate(
    engine: EngineFactory, n: int, work: Work = NOOP, workers: int = WORKERS
) -> float:
    """Jobs/s of one producer enqueueing n jobs one by one while the workers
    run them, until the last has succeeded."""
    tally = Tally(n)
    payloads = [work.payload(i) for i in range(n)]
    setup = Setup(work.handler(tally), workers, work.retries)
    with muted(work.mute), engine(setup) as queue:
        queue.start()
        start = time.perf_counter()
        enqueue_all(queue, payloads)
        tally.wait(DEADLINE)
        return n / (time.perf_counter() - start)


#: A workload's round for one engine: N -> the figure.
Round = Callable[[int], float]


def runner(
    rate: Callable[..., float], **options: Any
) -> Callable[[EngineFactory], Round]:
    """A workload's runner: ``rate(engine, n, **options)`` for each engine."""

    def bind(engine: EngineFactory) -> Round:
        return functools.partial(rate, engine, **options)

    return bind


class Speed(enum.Enum):
    """How many jobs a contender gets through, roughly: a workload gives
    slower ones a smaller share of N so that every round stays short."""

    FAST = "memory"  # tens of thousands of jobs/s
    FILE = "file"  # a file write per change: thousands
    SYNC = "sync"  # a fsync or a server round trip per change: hundreds


def per_speed(fast: float, file: float, sync: float) -> dict[Speed, float]:
    """The share of N each speed runs in a workload (N is about 50,000 for
    the jobs/s tables): a round of any contender takes about a second."""
    return {Speed.FAST: fast, Speed.FILE: file, Speed.SYNC: sync}


NOOP_SHARES = per_speed(1.0, 0.2, 0.01)


@dataclass(frozen=True)
class Workload:
    """One table: its round, how its figure reads, and who runs it."""

    name: str
    title: str
    description: str
    runner: Callable[[EngineFactory], Round]  # an engine's round
    workers: int = WORKERS
    shares: Mapping[Speed, float] = field(default_factory=lambda: NOOP_SHARES)
    unit: str = "jobs/s"
    lower_is_better: bool = False
    decimals: int = 0
    #: More contenders of this workload only (name -> contenders and notes).
    more: Callable[[], tuple[list[Contender], list[str]]] | None = None

    @property
    def reference(self) -> str:
        """The contender every ratio is taken to."""
        return f"ThreadPoolExecutor({self.workers})"

    def contender(
        self,
        name: str,
        kind: str,
        engine: EngineFactory,
        speed: Speed = Speed.FAST,
        package: str = "jobq",
    ) -> Contender:
        return Contender(
            name, kind, self.runner(engine), package, scale=self.shares[speed]
        )

    def contenders(self) -> tuple[list[Contender], list[str]]:
        """The references, jobq with every store, then the peers'; notes for
        those that cannot run here."""
        found = [
            self.contender(self.reference, REFERENCE, ThreadPoolEngine, package=STDLIB),
            self.contender(
                f"queue.Queue + {self.workers} threads",
                REFERENCE,
                PlainQueueEngine,
                package=STDLIB,
            ),
        ]
        jobqs, notes = jobq_contenders(self)
        found += jobqs
        sources = [
            functools.partial(peer_contenders, module, self.name)
            for module in PEER_MODULES
        ]
        if self.more is not None:
            sources.insert(0, self.more)
        for source in sources:
            more, more_notes = source()
            found += more
            notes += more_notes
        return found, notes

    def table(self, n: int, rounds: int) -> Table:
        found, notes = self.contenders()
        return Table(
            title=self.title,
            description=self.description,
            unit=self.unit,
            n=n,
            rounds=rounds,
            results=measure(found, n, rounds),
            reference=self.reference,
            notes=notes,
            lower_is_better=self.lower_is_better,
            decimals=self.decimals,
        )


#: jobq's contenders: name, class, store, speed.
JOBQ_STORES: list[tuple[str, str, StorePlace, Speed]] = [
    ("jobq memory", IN_MEMORY, memory_store, Speed.FAST),
    ("jobq JSON (journal)", PERSISTED, json_store, Speed.FILE),
    ("jobq JSON fsync", FSYNCED, json_fsync_store, Speed.SYNC),
    ("jobq SQLite", PERSISTED, sqlite_store, Speed.FILE),
    ("jobq SQLite FULL", FSYNCED, sqlite_full_store, Speed.SYNC),
    ("jobq PostgreSQL", PERSISTED, postgres_store, Speed.SYNC),
    (f"jobq JSON claim_batch={BATCH}", PERSISTED, json_batch_store, Speed.FILE),
    (f"jobq SQLite claim_batch={BATCH}", PERSISTED, sqlite_batch_store, Speed.FILE),
    (
        f"jobq PostgreSQL claim_batch={BATCH}",
        PERSISTED,
        postgres_batch_store,
        Speed.SYNC,
    ),
]


def jobq_contender(
    workload: Workload, name: str, kind: str, place: StorePlace, speed: Speed
) -> Contender:
    engine = functools.partial(JobqEngine, place=place)
    return workload.contender(name, kind, engine, speed)


def jobq_contenders(workload: Workload) -> tuple[list[Contender], list[str]]:
    found, notes = [], []
    for name, kind, place, speed in JOBQ_STORES:
        if "PostgreSQL" in name and (why := postgres_unavailable()):
            notes.append(f"{name}: {why}: skipped.")
        else:
            found.append(jobq_contender(workload, name, kind, place, speed))
    return found, notes


#: Modules with more contenders, each offering ``contenders(workload) ->
#: (contenders, notes)``. Imported when a table is built: they import this
#: module, and one that is missing is skipped with a note.
PEER_MODULES = ("benchmarks.peers", "benchmarks.brokers", "benchmarks.monitoring")


def peer_contenders(module: str, workload: str) -> tuple[list[Contender], list[str]]:
    try:
        contenders = importlib.import_module(module).contenders
    except (ImportError, AttributeError) as exc:
        return [], [f"`{module}` is not available ({exc}): its peers are skipped."]
    found, notes = contenders(workload)
    return list(found), list(notes)


ENQUEUE = Workload(
    "enqueue",
    "Enqueue throughput, 1 producer",
    "One thread enqueues no-op jobs with a small JSON payload one by one; no "
    "worker takes a job meanwhile (the ThreadPoolExecutor's threads are held "
    "busy). The clock stops when the last enqueue returns.",
    runner(enqueue_rate),
)
ENQUEUE8 = Workload(
    "enqueue8",
    f"Enqueue throughput, {PRODUCERS} producer threads",
    f"As the 1-producer table, with {PRODUCERS} threads enqueueing N/"
    f"{PRODUCERS} jobs each at once: what contention costs.",
    runner(enqueue_rate, producers=PRODUCERS),
    shares=per_speed(1.0, 0.2, 0.005),
)
DRAIN = Workload(
    "drain",
    "Drain throughput, 4 workers",
    "N no-op jobs are queued first; the clock runs from starting 4 workers "
    "until the last job has run.",
    runner(drain_rate),
)
END_TO_END = Workload(
    "end_to_end",
    "End-to-end throughput, 4 workers",
    "One producer enqueues no-op jobs with a small JSON payload one by one "
    "while 4 workers run them; the clock stops when the last has run. Workers "
    "are started and stores opened before the clock.",
    runner(end_to_end_rate),
)
RETRY = Workload(
    "retry",
    "Retry throughput, 4 workers (every job fails twice)",
    "As end-to-end, but each job's handler raises on its first two attempts "
    "and succeeds on the third; retries without delay (jobq `base_delay=0`, "
    "Huey `retries=2, retry_delay=0`; by hand where a queue has no retries: "
    "the job is put back). Jobs/s counts jobs, not attempts. Failure logging "
    "is muted for every contender.",
    runner(end_to_end_rate, work=FLAKY),
    shares=per_speed(0.02, 0.01, 0.002),
)


def sleep_workload(workers: int, shares: Mapping[Speed, float]) -> Workload:
    return Workload(
        f"sleep{workers}",
        f"A 5 ms handler (I/O-bound), {workers} workers",
        f"As end-to-end, with a handler that sleeps 5 ms and {workers} workers "
        f"(threads) for every contender: at most {workers / SLEEP:,.0f} jobs/s.",
        runner(end_to_end_rate, work=SLEEPY, workers=workers),
        workers=workers,
        shares=shares,
    )


SLEEP4 = sleep_workload(4, per_speed(0.006, 0.006, 0.002))
SLEEP32 = sleep_workload(32, per_speed(0.05, 0.02, 0.005))

#: This module's workloads by name (the latency table is in benchmarks.latency).
WORKLOADS = {
    w.name: w for w in (ENQUEUE, ENQUEUE8, DRAIN, END_TO_END, RETRY, SLEEP4, SLEEP32)
}


# -- for the other modules' tables ---------------------------------------------

REFERENCE_NAME = END_TO_END.reference


def thread_pool(n: int) -> float:
    """End-to-end jobs/s of the bare ThreadPoolExecutor(4)."""
    return end_to_end_rate(ThreadPoolEngine, n)


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "end_to_end"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
    print(WORKLOADS[name].table(n, 5).console())


if __name__ == "__main__":
    main()
