"""PgQueuer as a peer of ``benchmarks.brokers``: a fresh schema of the local
PostgreSQL for each round, its tables made by PgQueuer's own ``install``,
jobs enqueued through its synchronous psycopg API (one call per job, as a
web request would), run by one worker process of ``QueueManager``s.

Two drivers (``asyncpg``, ``psycopg``) and two layouts: PgQueuer's own
benchmark settings (``tools/benchmark.py``: 5 queue managers in one event
loop, each dequeuing batches of 10 on a connection of its own) and what its
``pgq run`` command starts by default (one queue manager, batches of 10).
Durability as configured: logged tables (``Durability.durable``); a job's
"successful" record is buffered for up to 0.1 s or ``batch`` jobs before
it is written (``JobStatusLogBuffer``), so a crash re-runs the jobs whose
records were in that buffer, and a job picked by a dead worker is picked
again after its heartbeat timeout (30 s).

The parent counts finished jobs in PgQueuer's log table, as it counts
Procrastinate's in its jobs table.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.children import protocol_channel, ready_then_wait, send_report
from benchmarks.common import POSTGRES_URL

MODULE = "benchmarks.brokers"  # the worker's entry point (see brokers.main)
QUIET = "CRITICAL"

#: (sent, latency) in seconds of the jobs this worker process started.
STARTED: list[tuple[float, float]] = []


@dataclass(frozen=True)
class Layout:
    """How PgQueuer's worker process runs: its driver, how many queue
    managers (each with a connection), and each one's dequeue batch."""

    driver: str  # "asyncpg" or "psycopg"
    managers: int
    batch: int
    why: str  # "its benchmark's settings" or "`pgq run`'s defaults"

    def label(self) -> str:
        return f"{self.driver}, {self.managers} x batch {self.batch}: {self.why}"


#: The layouts measured for every workload with workers.
LAYOUTS = (
    Layout("asyncpg", 5, 10, "its benchmark's settings"),
    Layout("psycopg", 5, 10, "its benchmark's settings"),
    Layout("asyncpg", 1, 10, "`pgq run`'s defaults"),
    Layout("psycopg", 1, 10, "`pgq run`'s defaults"),
)


def connect_options(schema: str) -> dict[str, Any]:
    """psycopg connection options that put PgQueuer's objects in ``schema``."""
    return {"options": f"-c search_path={schema}"}


class PgqueuerBroker:
    """PgQueuer in a schema of its own, created for the round and dropped
    after it; ``layout`` decides the worker process's command."""

    def __init__(self, layout: Layout) -> None:
        import psycopg
        from psycopg import sql

        self.layout = layout
        self.schema = f"pgqueuer_bench_{time.time_ns():x}"
        self.db = psycopg.connect(POSTGRES_URL, autocommit=True)
        self._name = sql.Identifier(self.schema)
        self.db.execute(sql.SQL("CREATE SCHEMA {}").format(self._name))
        self.db.execute(sql.SQL("SET search_path TO {}").format(self._name))
        self._local = threading.local()  # a connection per producer thread
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        try:
            asyncio.run(self._install())
        except BaseException:
            self.close()
            raise

    async def _install(self) -> None:
        import psycopg
        from pgqueuer.db import PsycopgDriver
        from pgqueuer.queries import Queries

        async with await psycopg.AsyncConnection.connect(
            POSTGRES_URL, autocommit=True, **connect_options(self.schema)
        ) as connection:
            await Queries(PsycopgDriver(connection)).install()

    def close(self) -> None:
        from psycopg import sql

        for connection in self._connections:
            connection.close()
        self.db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(self._name))
        self.db.close()

    def _queries(self) -> Any:
        """This thread's ``SyncQueries``, on a connection of its own."""
        queries = getattr(self._local, "queries", None)
        if queries is None:
            import psycopg
            from pgqueuer.db import SyncPsycopgDriver
            from pgqueuer.queries import SyncQueries

            connection = psycopg.connect(
                POSTGRES_URL, autocommit=True, **connect_options(self.schema)
            )
            with self._lock:
                self._connections.append(connection)
            queries = self._local.queries = SyncQueries(SyncPsycopgDriver(connection))
        return queries

    def enqueue(self, task: str, payload: dict[str, Any]) -> None:
        import json

        self._queries().enqueue(task, json.dumps(payload).encode())

    def enqueue_many(self, task: str, payloads: list[dict[str, Any]]) -> None:
        import json

        self._queries().enqueue(
            [task] * len(payloads),
            [json.dumps(p).encode() for p in payloads],
            [0] * len(payloads),
        )

    def worker(self, concurrency: int, until_empty: bool) -> list[str]:
        layout = self.layout
        mode = "drain" if until_empty else "continuous"
        return [
            MODULE,
            "pgqueuer-worker",
            self.schema,
            layout.driver,
            str(layout.managers),
            str(layout.batch),
            mode,
        ]

    def _count(self, query: str) -> int:
        row = self.db.execute(query).fetchone()
        return int(row[0]) if row else 0

    def queued(self) -> int:
        return self._count("SELECT count(*) FROM pgqueuer WHERE status = 'queued'")

    def finished(self) -> int:
        return self._count(
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        )

    def failed(self) -> int:
        return self._count(
            "SELECT count(*) FROM pgqueuer_log WHERE status IN ('exception', 'failed')"
        )


# -- the worker process ---------------------------------------------------------


async def _driver(name: str, schema: str) -> Any:
    if name == "asyncpg":
        import asyncpg  # type: ignore[import-untyped]
        from pgqueuer.db import AsyncpgDriver

        connection = await asyncpg.connect(
            POSTGRES_URL, server_settings={"search_path": schema}
        )
        return AsyncpgDriver(connection)
    import psycopg
    from pgqueuer.db import PsycopgDriver

    connection = await psycopg.AsyncConnection.connect(
        POSTGRES_URL, autocommit=True, **connect_options(schema)
    )
    return PsycopgDriver(connection)


def pgqueuer_worker(
    schema: str, driver: str, managers: int, batch: int, mode: str
) -> None:
    """One worker process: ``managers`` PgQueuer instances in one event
    loop, each on its own connection, as PgQueuer's benchmark runs them;
    "drain" stops once the queue is empty, "continuous" at SIGTERM."""
    import logging
    import signal

    from pgqueuer import PgQueuer, types
    from pgqueuer.models import Job

    channel = protocol_channel()
    logging.getLogger("pgqueuer").setLevel(QUIET)

    async def work() -> None:
        queuers = [PgQueuer(await _driver(driver, schema)) for _ in range(managers)]
        for queuer in queuers:

            @queuer.entrypoint("noop")
            async def noop(job: Job) -> None:
                return None

            @queuer.entrypoint("stamp")
            async def stamp(job: Job) -> None:
                import json

                sent = json.loads(job.payload or b"{}")["sent"]
                STARTED.append((sent, time.monotonic() - sent))

        def stop() -> None:
            for queuer in queuers:
                queuer.shutdown.set()

        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)
        await loop.run_in_executor(None, ready_then_wait, channel)
        execution = (
            types.QueueExecutionMode.drain
            if mode == "drain"
            else types.QueueExecutionMode.continuous
        )
        await asyncio.gather(
            *(q.run(batch_size=batch, mode=execution) for q in queuers)
        )

    asyncio.run(work())
    send_report(channel, {"latencies": STARTED})
