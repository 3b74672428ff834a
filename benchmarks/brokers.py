"""Peers that need a service: RQ on the local Redis (db 15), Procrastinate
and PgQueuer on the local PostgreSQL (a fresh schema each round), with their
workers in processes of their own, as their users run them.

For the workload tables: ``contenders(workload) -> (contenders, notes)``,
``workload`` one of ``WORKLOADS`` (the names of ``benchmarks.throughput``'s
tables, and "latency"). The figure is jobs/s, except for "latency": the p99 of
enqueue->start in ms, one enqueue per ms to 4 idle workers; that contender's
``run`` keeps each round's p50 in ``run.p50s`` (``benchmarks.latency`` reads
it), and ``latency_samples(peer, n)`` gives a round's samples (ms) for
``peer`` in ``PEERS``.

A peer's worker runs as ``python -m benchmarks.brokers rq-worker ...``,
``... procrastinate-worker ...`` or ``... pgqueuer-worker ...`` (see
``main``), started and connected before the clock
(``benchmarks.children.Children``); the parent sees jobs finish in the
peer's own records (RQ's finished-job registry, Procrastinate's jobs table,
PgQueuer's log table), never by sleeping.

RQ: every worker is a ``SimpleWorker`` process (one job at a time, no fork
per job: the fastest RQ setup); burst mode where the queue is filled before
the workers start (drain), else a warm shutdown (SIGTERM) once every job ran.
Procrastinate: one worker process with ``concurrency`` async slots; its
handlers are ``async def``, its natural fast path; idle workers poll every
0.1 s, not 5 (``PROCRASTINATE_POLL``), or a retried job waits seconds.
PgQueuer: see ``benchmarks.pgqueuer_peer`` (its drivers and layouts).

Shares of N (``SCALES``) are set for the suite's N (50,000 jobs, 1,000
latency samples): about a second of work a round (RQ runs about 500 no-op
jobs/s with 4 workers), plus a second or two to start the workers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from benchmarks.children import (
    Children,
    count_processes,
    protocol_channel,
    ready_then_wait,
    send_report,
    wait_for,
)
from benchmarks.common import (
    POSTGRES_URL,
    PRODUCERS,
    SLEEP,
    Percentiles,
    paced,
    postgres_unavailable,
)
from benchmarks.harness import PAYLOAD, PERSISTED, WORKERS, Contender, measure, summary
from benchmarks.pgqueuer_peer import LAYOUTS, PgqueuerBroker, pgqueuer_worker

MODULE = "benchmarks.brokers"  # not __name__: that is "__main__" in a worker
REDIS_URL = "redis://127.0.0.1:6379/15"
RQ_QUEUE = "bench"
#: PgQueuer's peers by key: one per layout (driver, managers, batch).
PGQUEUER = {f"pgqueuer-{i}": layout for i, layout in enumerate(LAYOUTS)}
PEERS = ("rq", "procrastinate", *PGQUEUER)
WORKLOADS = (
    "enqueue",
    "enqueue8",
    "drain",
    "end_to_end",
    "retry",
    "sleep4",
    "sleep32",
    "latency",
)
WARM_UP = 1  # jobs run before the clock when workers wait for jobs
FAILURES = 2  # the retry workload: every job fails twice, then succeeds
#: How often an idle Procrastinate worker looks for jobs (its default: 5 s).
#: A new job wakes it by NOTIFY; a retried one does not, and would wait a poll.
PROCRASTINATE_POLL = 0.1
RETRY_NOTE = (
    f"Procrastinate's workers poll every {PROCRASTINATE_POLL} s (default 5 s): "
    "a job it retries gets no NOTIFY and waits for a poll."
)
#: The workers' log level: failure logging is muted for every contender of the
#: tables (the retry workload fails on purpose); failures are counted instead.
QUIET = "CRITICAL"

LATENCY_NOTE = (
    "RQ and Procrastinate: one enqueue per ms is more than their 4 workers run "
    "(about 500 no-op jobs/s here), so their queue grows during a round and "
    "their latency includes that wait, not only the wake-up."
)

#: (sent, latency) in seconds of the jobs this worker process's handlers
#: started: the parent puts every process's in the order they were sent.
STARTED: list[tuple[float, float]] = []


class Flaky(Exception):
    """The planned failure of the retry workload."""


# -- handlers: what the workers run (importable, for RQ) ----------------------


def noop(payload: dict[str, Any]) -> None:
    return None


def sleep(payload: dict[str, Any]) -> None:
    time.sleep(SLEEP)


def stamp(payload: dict[str, Any]) -> None:
    STARTED.append((payload["sent"], time.monotonic() - payload["sent"]))


def rq_flaky(payload: dict[str, Any]) -> None:
    """Fails while RQ has retries left for the job: twice, with Retry(max=2)."""
    from rq import get_current_job

    job = get_current_job()
    if job is not None and job.retries_left:
        raise Flaky


async def async_noop(payload: dict[str, Any]) -> None:
    return None


async def async_sleep(payload: dict[str, Any]) -> None:
    await asyncio.sleep(SLEEP)


async def async_stamp(payload: dict[str, Any]) -> None:
    stamp(payload)


async def async_flaky(context: Any, payload: dict[str, Any]) -> None:
    if context.job.attempts < FAILURES:
        raise Flaky


# -- one round's broker ---------------------------------------------------------


class Broker(Protocol):
    """A peer for one round, on a fresh store that it removes afterwards.

    ``task`` is one of "noop", "sleep", "stamp", "flaky"."""

    def enqueue(self, task: str, payload: dict[str, Any]) -> None: ...

    def enqueue_many(self, task: str, payloads: list[dict[str, Any]]) -> None: ...

    def worker(self, concurrency: int, until_empty: bool) -> list[str]:
        """The command (after ``python -m``) of one worker process."""
        ...

    def queued(self) -> int:
        """Jobs waiting for a worker."""
        ...

    def finished(self) -> int:
        """Jobs that succeeded so far."""
        ...

    def failed(self) -> int:
        """Jobs that failed for good (none should)."""
        ...


class RqBroker:
    """RQ on db 15 of the local Redis, flushed before and after the round."""

    def __init__(self) -> None:
        from redis import Redis
        from rq import Queue

        self.redis = Redis.from_url(REDIS_URL)
        self.redis.flushdb()
        self.queue = Queue(RQ_QUEUE, connection=self.redis)

    def close(self) -> None:
        self.redis.flushdb()
        self.redis.close()

    def _options(self, task: str) -> dict[str, Any]:
        from rq import Retry

        if task == "flaky":
            return {"retry": Retry(max=FAILURES, interval=0)}
        return {}

    def _function(self, task: str) -> str:
        return f"{MODULE}.{'rq_flaky' if task == 'flaky' else task}"

    def enqueue(self, task: str, payload: dict[str, Any]) -> None:
        self.queue.enqueue(self._function(task), payload, **self._options(task))

    def enqueue_many(self, task: str, payloads: list[dict[str, Any]]) -> None:
        from rq import Queue

        function, options = self._function(task), self._options(task)
        self.queue.enqueue_many(
            [Queue.prepare_data(function, (p,), **options) for p in payloads]
        )

    def worker(self, concurrency: int, until_empty: bool) -> list[str]:
        if concurrency != 1:
            raise ValueError("an RQ SimpleWorker runs one job at a time")
        return [MODULE, "rq-worker", "burst" if until_empty else "wait"]

    def queued(self) -> int:
        return self.queue.count

    def finished(self) -> int:
        return int(self.redis.zcard(self.queue.finished_job_registry.key))

    def failed(self) -> int:
        return int(self.redis.zcard(self.queue.failed_job_registry.key))


def procrastinate_app(connector: Any) -> Any:
    """An App with the benchmark's tasks, named like RQ's."""
    import procrastinate

    app = procrastinate.App(connector=connector)
    app.task(name="noop")(async_noop)
    app.task(name="sleep")(async_sleep)
    app.task(name="stamp")(async_stamp)
    retry = procrastinate.RetryStrategy(max_attempts=FAILURES, wait=0)
    app.task(name="flaky", retry=retry, pass_context=True)(async_flaky)
    return app


def search_path(schema: str) -> dict[str, Any]:
    """Connection options that put Procrastinate's tables in ``schema``."""
    return {"options": f"-c search_path={schema}"}


class ProcrastinateBroker:
    """Procrastinate in a schema of its own on the local PostgreSQL, created
    with Procrastinate's tables for the round and dropped after it."""

    def __init__(self) -> None:
        import procrastinate
        import psycopg
        from psycopg import sql

        self.schema = f"procrastinate_bench_{time.time_ns():x}"
        self.db = psycopg.connect(POSTGRES_URL, autocommit=True)
        name = sql.Identifier(self.schema)
        self.db.execute(sql.SQL("CREATE SCHEMA {}").format(name))
        self.db.execute(sql.SQL("SET search_path TO {}").format(name))
        connector = procrastinate.SyncPsycopgConnector(
            conninfo=POSTGRES_URL, kwargs=search_path(self.schema)
        )
        self.app = procrastinate_app(connector)
        try:
            self.app.open()
            self.app.schema_manager.apply_schema()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        from psycopg import sql

        self.app.close()
        name = sql.Identifier(self.schema)
        self.db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(name))
        self.db.close()

    def enqueue(self, task: str, payload: dict[str, Any]) -> None:
        self.app.configure_task(task).defer(payload=payload)

    def enqueue_many(self, task: str, payloads: list[dict[str, Any]]) -> None:
        self.app.configure_task(task).batch_defer(*({"payload": p} for p in payloads))

    def worker(self, concurrency: int, until_empty: bool) -> list[str]:
        mode = "until-empty" if until_empty else "wait"
        return [MODULE, "procrastinate-worker", self.schema, str(concurrency), mode]

    def _count(self, status: str) -> int:
        row = self.db.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = %s", (status,)
        ).fetchone()
        return int(row[0]) if row else 0

    def queued(self) -> int:
        return self._count("todo")

    def finished(self) -> int:
        return self._count("succeeded")

    def failed(self) -> int:
        return self._count("failed")


@contextlib.contextmanager
def fresh(peer: str) -> Iterator[Broker]:
    broker: RqBroker | ProcrastinateBroker | PgqueuerBroker
    if peer == "rq":
        broker = RqBroker()
    elif peer in PGQUEUER:
        broker = PgqueuerBroker(PGQUEUER[peer])
    else:
        broker = ProcrastinateBroker()
    try:
        yield broker
    finally:
        broker.close()


@dataclass(frozen=True)
class Workers:
    """How a peer's job slots are laid out: processes x slots in each."""

    processes: int
    concurrency: int

    @classmethod
    def usual(cls, peer: str, slots: int) -> Workers:
        """``slots`` the way the peer's users get them: RQ one SimpleWorker
        process per slot; Procrastinate one process with that concurrency;
        PgQueuer one process in its layout, whatever ``slots``."""
        if peer in PGQUEUER:
            return cls(1, PGQUEUER[peer].managers)
        return cls(slots, 1) if peer == "rq" else cls(1, slots)

    def commands(self, broker: Broker, until_empty: bool) -> list[list[str]]:
        return [broker.worker(self.concurrency, until_empty)] * self.processes

    def label(self, peer: str) -> str:
        if peer == "rq":
            return f"{self.processes} SimpleWorker{'s' * (self.processes > 1)}"
        if peer in PGQUEUER:
            return PGQUEUER[peer].label()
        return f"{count_processes(self.processes)} x concurrency {self.concurrency}"


# -- the workloads ------------------------------------------------------------


def finish(broker: Broker, children: Children, n: int) -> float:
    """Wait until n jobs succeeded; the clock's end. Raises on a failure."""
    end = wait_for(broker.finished, n, children)
    if failed := broker.failed():
        raise RuntimeError(f"{failed} jobs failed")
    return end


@contextlib.contextmanager
def idle_workers(peer: str, slots: int) -> Iterator[tuple[Broker, Children]]:
    """A fresh broker and the peer's workers for ``slots`` jobs at a time,
    idle in their loop: a warm-up job has run (the one job ``finished``
    counts before the round's). Stopped (warm shutdown) at the end."""
    with (
        fresh(peer) as broker,
        Children(
            Workers.usual(peer, slots).commands(broker, until_empty=False)
        ) as children,
    ):
        children.go()
        broker.enqueue("noop", PAYLOAD)
        finish(broker, children, WARM_UP)
        yield broker, children
        children.stop()  # if the round did not already


def enqueue_rate(peer: str, n: int, producers: int = 1) -> float:
    """Jobs/s of ``producers`` threads enqueueing n jobs in all, no workers."""
    share = n // producers
    with fresh(peer) as broker:
        broker.enqueue("noop", PAYLOAD)  # connections open before the clock

        def produce() -> None:
            for _ in range(share):
                broker.enqueue("noop", PAYLOAD)

        with concurrent.futures.ThreadPoolExecutor(producers) as pool:
            start = time.perf_counter()
            for future in [pool.submit(produce) for _ in range(producers)]:
                future.result()  # a failed enqueue fails the round
            elapsed = time.perf_counter() - start
        if (queued := broker.queued()) != share * producers + 1:
            raise RuntimeError(f"{queued} jobs queued, {share * producers + 1} sent")
        return share * producers / elapsed


def drain_rate(peer: str, n: int, workers: Workers | None = None) -> float:
    """Jobs/s of the peer's workers (4 slots, as usual for the peer, unless
    ``workers`` says otherwise) running n no-op jobs queued first."""
    workers = workers or Workers.usual(peer, WORKERS)
    with fresh(peer) as broker:
        broker.enqueue_many("noop", [PAYLOAD] * n)
        with Children(workers.commands(broker, until_empty=True)) as children:
            start = children.go()
            return n / (finish(broker, children, n) - start)


def run_with_workers(peer: str, task: str, n: int, slots: int = WORKERS) -> float:
    """Jobs/s of one producer enqueueing n ``task`` jobs one by one while the
    peer's idle workers run them; until the last has succeeded."""
    with idle_workers(peer, slots) as (broker, children):
        start = time.perf_counter()
        for _ in range(n):
            broker.enqueue(task, PAYLOAD)
        return n / (finish(broker, children, WARM_UP + n) - start)


def latency_samples(peer: str, n: int) -> list[float]:
    """Enqueue->start latencies (ms) of n jobs enqueued at the latency
    table's pace to the peer's 4 idle workers (each payload carries its
    enqueue time)."""
    with idle_workers(peer, WORKERS) as (broker, children):
        paced(functools.partial(broker.enqueue, "stamp"), n)
        finish(broker, children, WARM_UP + n)
        reports = children.stop()
    samples = [s * 1000 for _, s in sorted(p for r in reports for p in r["latencies"])]
    if len(samples) != n:
        raise RuntimeError(f"{len(samples)} latencies for {n} jobs")
    return samples


# -- contenders -----------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """A peer as the tables name it and as ``harness.versions`` looks it up."""

    key: str  # "rq", "procrastinate" or a key of PGQUEUER
    label: str
    package: str

    def workers(self, slots: int) -> str:
        return Workers.usual(self.key, slots).label(self.key)


RQ = Peer("rq", "RQ", "rq")
PROCRASTINATE = Peer("procrastinate", "Procrastinate", "procrastinate")
PGQUEUERS = tuple(Peer(key, "PgQueuer", "pgqueuer") for key in PGQUEUER)

#: What PgQueuer runs: its enqueue does not depend on the layout (measured
#: once, through its synchronous psycopg API); the retry and sleep
#: workloads are not written for it.
PGQUEUER_WORKLOADS = ("enqueue", "enqueue8", "drain", "end_to_end", "latency")
PGQUEUER_NOTE = (
    "PgQueuer: enqueued one job per call through its synchronous psycopg API "
    "(`SyncQueries`, a connection per producer thread); run by one worker "
    "process of queue managers (a connection each) in the layouts named; "
    "logged tables, its success records buffered up to 0.1 s or a batch "
    "before they are written (a crash re-runs those jobs)."
)


#: Workloads where one producer enqueues while the workers run: task, slots.
WITH_WORKERS = {
    "end_to_end": ("noop", WORKERS),
    "retry": ("flaky", WORKERS),
    "sleep4": ("sleep", 4),
    "sleep32": ("sleep", 32),
}


def runs(peer: Peer, workload: str) -> tuple[Callable[[int], float], str]:
    """The round of ``workload`` for ``peer``, and what the contender's name
    adds (producers, worker layout)."""
    key = peer.key
    if workload in WITH_WORKERS:
        task, slots = WITH_WORKERS[workload]
        return lambda n: run_with_workers(key, task, n, slots), peer.workers(slots)
    if workload == "enqueue":
        return lambda n: enqueue_rate(key, n), "1 producer"
    if workload == "enqueue8":
        return (
            lambda n: enqueue_rate(key, n, PRODUCERS),
            f"{PRODUCERS} producer threads",
        )
    if workload == "drain":
        return lambda n: drain_rate(key, n), peer.workers(WORKERS)
    return Percentiles(functools.partial(latency_samples, key)), peer.workers(WORKERS)


#: The share of N each peer runs a round, by workload: about a second of
#: work at the suite's N (50,000 jobs; 1,000 latency samples).
SCALES = {
    "enqueue": 0.02,
    "enqueue8": 0.02,
    "drain": 0.01,
    "end_to_end": 0.01,
    "retry": 0.005,
    "sleep4": 0.01,
    "sleep32": 0.01,
    "latency": 1.0,
}
#: PgQueuer's shares: it runs thousands of jobs a second.
PGQUEUER_SCALES = {
    "enqueue": 0.1,
    "enqueue8": 0.2,
    "drain": 0.2,
    "end_to_end": 0.1,
    "latency": 1.0,
}


def available(peer: Peer) -> str | None:
    """None if the peer can run here, else why not (the table's note)."""
    try:
        __import__(peer.package)
    except ImportError:
        return (
            f"{peer.label} is not installed (`pip install -e . --group bench`): "
            "skipped."
        )
    if peer.key == "rq" and not redis_available():
        return f"{peer.label}: no Redis at {REDIS_URL}: skipped."
    if peer.key != "rq" and (why := postgres_unavailable()):
        return f"{peer.label}: {why}: skipped."
    return None


def redis_available() -> bool:
    try:
        from redis import Redis

        Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception:  # noqa: BLE001 - any failure means: skip RQ
        return False
    return True


def contenders(workload: str) -> tuple[list[Contender], list[str]]:
    """RQ's and Procrastinate's contenders for ``workload``, and a note for
    each that cannot run here."""
    if workload not in WORKLOADS:
        raise ValueError(f"no workload {workload!r}: one of {WORKLOADS}")
    found: list[Contender] = []
    notes: list[str] = []
    for peer in (RQ, PROCRASTINATE, *PGQUEUERS):
        if peer.package == "pgqueuer" and (
            workload not in PGQUEUER_WORKLOADS
            or (workload.startswith("enqueue") and peer != PGQUEUERS[0])
        ):
            continue
        if (why := available(peer)) is not None:
            if why not in notes:
                notes.append(why)
        elif peer.key == "rq" and workload == "sleep32":
            notes.append(
                "RQ with 32 workers skipped: that is 32 worker processes, one "
                "job at a time each, too heavy for this machine."
            )
        else:
            run, detail = runs(peer, workload)
            if peer.package == "pgqueuer" and workload.startswith("enqueue"):
                detail = f"psycopg sync, {detail}"
            found.append(
                Contender(
                    f"{peer.label} ({detail})",
                    PERSISTED,
                    run,
                    peer.package,
                    scale=(PGQUEUER_SCALES if peer.package == "pgqueuer" else SCALES)[
                        workload
                    ],
                )
            )
    if any(c.package == "pgqueuer" for c in found):
        notes.append(PGQUEUER_NOTE)
    if workload == "latency" and found:
        notes.append(LATENCY_NOTE)
    if workload == "retry" and any(c.package == "procrastinate" for c in found):
        notes.append(RETRY_NOTE)
    return found, notes


# -- worker processes -----------------------------------------------------------


def rq_worker(mode: str) -> None:
    """One RQ SimpleWorker on the benchmark queue: "burst" stops when the
    queue is empty, "wait" at SIGTERM (RQ's warm shutdown). It says "ready"
    when it first looks for a job, its start-up (registration, cleaning of
    registries) done, and waits for "go" there."""
    from redis import Redis
    from rq import Queue, SimpleWorker

    channel = protocol_channel()

    class ReadyWorker(SimpleWorker):
        started = False

        def dequeue_job_and_maintain_ttl(self, *args: Any, **kwargs: Any) -> Any:
            if not self.started:
                self.started = True
                ready_then_wait(channel)
            return super().dequeue_job_and_maintain_ttl(*args, **kwargs)

    redis = Redis.from_url(REDIS_URL)
    worker = ReadyWorker([Queue(RQ_QUEUE, connection=redis)], connection=redis)
    worker.work(burst=mode == "burst", logging_level=QUIET)
    send_report(channel, {"latencies": STARTED})


def procrastinate_worker(schema: str, concurrency: int, mode: str) -> None:
    """One Procrastinate worker: "until-empty" stops when it caught up
    (``wait=False``), "wait" at SIGTERM (its graceful stop)."""
    import procrastinate

    channel = protocol_channel()
    connector = procrastinate.PsycopgConnector(
        conninfo=POSTGRES_URL, kwargs=search_path(schema)
    )
    app = procrastinate_app(connector)
    logging.getLogger("procrastinate").setLevel(QUIET)

    async def work() -> None:
        async with app.open_async():
            await app.check_connection_async()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, ready_then_wait, channel)
            await app.run_worker_async(
                concurrency=concurrency,
                wait=mode == "wait",
                fetch_job_polling_interval=PROCRASTINATE_POLL,
            )

    asyncio.run(work())
    send_report(channel, {"latencies": STARTED})


def main(argv: list[str]) -> None:
    """Worker processes: ``rq-worker MODE``, ``procrastinate-worker SCHEMA
    CONCURRENCY MODE``, ``pgqueuer-worker SCHEMA DRIVER MANAGERS BATCH
    MODE``; else one workload's contenders (``WORKLOAD [N]``)."""
    if argv[0] == "rq-worker":
        rq_worker(argv[1])
    elif argv[0] == "procrastinate-worker":
        procrastinate_worker(argv[1], int(argv[2]), argv[3])
    elif argv[0] == "pgqueuer-worker":
        pgqueuer_worker(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5])
    else:
        n = int(argv[1]) if len(argv) > 1 else 50_000
        found, notes = contenders(argv[0])
        for result in measure(found, n, 1):
            print(result.contender.name, summary(result.values, decimals=1))
        print(*notes, sep="\n")


if __name__ == "__main__":
    # Through the imported module: RQ imports the handlers from it, and the
    # worker must report the STARTED list they append to.
    from benchmarks import brokers

    brokers.main(sys.argv[1:])
