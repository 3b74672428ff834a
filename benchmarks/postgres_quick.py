"""PostgreSQL store figures: enqueue and drain throughput with 1, 2 and 4
processes, claims beside many delayed jobs, and how fast an idle worker sees a
job another process enqueued (LISTEN/NOTIFY, and polling with listen=False).

Run: ``python -m benchmarks.postgres_quick [N] [URL]`` (default 4,000 jobs per
figure, ``JOBQ_BENCH_POSTGRES`` or the local test server). Prints medians and
min-max of 3 rounds; every round uses a fresh schema, dropped afterwards.
Processes are real: each runs one JobQueue with 4 workers.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

import jobq
from benchmarks.harness import PAYLOAD, summary
from jobq.stores import PostgresStore

ROUNDS = 3
URL = os.environ.get("JOBQ_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")

# One process of a figure: waits for "go" on stdin, does its share, prints
# the seconds it took.
CHILD = r"""
import json, sys, threading, time
import jobq
from benchmarks.harness import PAYLOAD, summary
from jobq.stores import PostgresStore

url, schema, mode, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
payload = {"to": "ann@example.com", "template": "welcome", "user_id": 42}
store = PostgresStore(url, schema=schema, queue="bench", pool_size=8)
queue = jobq.JobQueue(lambda job: None, store=store)
queue.stats()  # open first: the timing is the work only
if mode == "wake":
    latencies = []
    ran = threading.Semaphore(0)

    def handler(job):
        latencies.append(time.time() - job.payload["sent"])
        ran.release()

    queue = jobq.JobQueue(handler, store=store).start(workers=4)
    print("ready", flush=True)
    for _ in range(n):
        ran.acquire()
    print(json.dumps(latencies), flush=True)
    queue.close()
    sys.exit()
print("ready", flush=True)
sys.stdin.readline()
start = time.perf_counter()
if mode == "enqueue":
    for _ in range(n):
        queue.enqueue(payload)
elif mode == "drain":
    queue.start(workers=4)
    while True:
        stats = queue.stats()
        if not (stats.pending or stats.running):
            break
        time.sleep(0.002)
print(time.perf_counter() - start, flush=True)
queue.close()
"""


class Schema:
    """A fresh schema for one round, dropped at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = f"jobq_bench_{secrets.token_hex(4)}"

    def __enter__(self) -> Schema:
        PostgresStore(self.url, schema=self.name).migrate()
        return self

    def __exit__(self, *exc: object) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(self.name))
            )

    def queue(self, **options: Any) -> jobq.JobQueue[Any]:
        store = PostgresStore(self.url, schema=self.name, queue="bench", **options)
        return jobq.JobQueue(lambda job: None, store=store)


def spawn(schema: Schema, mode: str, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, schema.url, schema.name, mode, str(n)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def in_processes(schema: Schema, mode: str, processes: int, n: int) -> float:
    """Start ``processes`` children, let them go at once; the wall time until
    the last one finished."""
    children = [spawn(schema, mode, n) for _ in range(processes)]
    for child in children:
        if child.stdout is None or child.stdout.readline() != "ready\n":
            raise RuntimeError("a child failed to start")
    start = time.perf_counter()
    for child in children:
        if child.stdin is None:
            raise RuntimeError("no pipe to a child")
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        out, _ = child.communicate(timeout=600)
        if child.returncode:
            raise RuntimeError(f"a child failed: {out}")
    return time.perf_counter() - start


def enqueue_rate(url: str, processes: int, n: int) -> float:
    """Jobs/s of ``processes`` processes each calling enqueue n/processes times."""
    with Schema(url) as schema:
        elapsed = in_processes(schema, "enqueue", processes, n // processes)
        with schema.queue() as queue:
            if queue.stats().pending != n // processes * processes:
                raise RuntimeError("jobs went missing")
    return n // processes * processes / elapsed


def enqueue_many_rate(url: str, n: int) -> float:
    with Schema(url) as schema, schema.queue() as queue:
        queue.stats()
        start = time.perf_counter()
        queue.enqueue_many([PAYLOAD] * n)
        return n / (time.perf_counter() - start)


def drain_rate(url: str, processes: int, n: int) -> float:
    """Jobs/s of ``processes`` processes (4 workers each) draining n jobs."""
    with Schema(url) as schema:
        with schema.queue() as queue:
            queue.enqueue_many([PAYLOAD] * n)
        elapsed = in_processes(schema, "drain", processes, 0)
        with schema.queue() as queue:
            if queue.stats().pending:
                raise RuntimeError("jobs left over")
    return n / elapsed


def claim_beside_future_jobs(url: str, future: int) -> float:
    """Microseconds per claim + finish with ``future`` delayed high-priority
    jobs beside 1,000 due ones (one thread)."""
    with Schema(url) as schema, schema.queue() as queue:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    """INSERT INTO {} (queue, state, payload, priority, run_at,
                        created_at, max_attempts)
                    SELECT 'bench', 'scheduled', '0', 9,
                           extract(epoch FROM now()) + 3600, 0, 5
                    FROM generate_series(1, %s)"""
                ).format(sql.Identifier(schema.name, "jobs")),
                (future,),
            )
            conn.execute(
                sql.SQL("ANALYZE {}").format(sql.Identifier(schema.name, "jobs"))
            )
        queue.enqueue_many([PAYLOAD] * 1000)
        store = queue.store
        start = time.perf_counter()
        for _ in range(1000):
            claim = store.claim(time.time())
            if claim is None:
                raise RuntimeError("a due job was not claimed")
            store.finish(claim, None, None, time.time())
        return (time.perf_counter() - start) / 1000 * 1e6


def wake_up_latency(url: str, samples: int, listen: bool) -> list[float]:
    """Seconds from our enqueue to an idle worker of another process running it."""
    with Schema(url) as schema:
        child = spawn(schema, "wake", samples)
        if child.stdout is None or child.stdout.readline() != "ready\n":
            raise RuntimeError("the child failed to start")
        with schema.queue(listen=listen) as queue:
            queue.stats()
            for _ in range(samples):
                time.sleep(0.15)  # the workers are idle again
                queue.enqueue({"sent": time.time()})
        out, _ = child.communicate(timeout=60)
        return [float(x) for x in json.loads(out)]


def wake_up_latency_polling(url: str, samples: int) -> list[float]:
    """As ``wake_up_latency``, the worker side with ``listen=False``
    (PgBouncer in transaction mode) and the default poll."""
    latencies: list[float] = []
    ran = threading.Semaphore(0)

    def handler(job: jobq.Job[Any]) -> None:
        latencies.append(time.time() - job.payload["sent"])
        ran.release()

    with Schema(url) as schema:
        store = PostgresStore(url, schema=schema.name, queue="bench", listen=False)
        with jobq.JobQueue(handler, store=store).start(workers=4), schema.queue() as q:
            q.stats()
            for _ in range(samples):
                time.sleep(0.15)
                q.enqueue({"sent": time.time()})
                if not ran.acquire(timeout=10):
                    raise RuntimeError("the job never ran")
    return latencies


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4_000
    url = sys.argv[2] if len(sys.argv) > 2 else URL
    with psycopg.connect(url) as conn:
        version = conn.info.server_version
        row = conn.execute("SHOW synchronous_commit").fetchone()
    print(
        f"python {sys.version.split()[0]}, PostgreSQL {version // 10000}."
        f"{version % 10000}, synchronous_commit={row[0] if row else '?'}, "
        f"{os.cpu_count()} cpus, N={n}, {ROUNDS} rounds"
    )
    print("\nno-op jobs/s                              median  (min-max)")
    for processes in (1, 2, 4):
        values = [enqueue_rate(url, processes, n) for _ in range(ROUNDS)]
        print(f"enqueue, one call each, {processes} process(es) {summary(values)}")
    values = [enqueue_many_rate(url, n) for _ in range(ROUNDS)]
    print(f"enqueue_many, one call, 1 process     {summary(values)}")
    for processes in (1, 2, 4):
        values = [drain_rate(url, processes, n) for _ in range(ROUNDS)]
        print(f"drain, {processes} process(es) x 4 workers     {summary(values)}")
    print("\nclaim + finish beside delayed high-priority jobs (1 thread)")
    for future in (0, 100_000):
        micros = claim_beside_future_jobs(url, future)
        print(f"  {future:>7,} delayed jobs: {micros:6.0f} us per job")
    print("\ncross-process wake-up: enqueue in process B -> handler starts in A")
    for name, latencies in [
        ("LISTEN/NOTIFY", wake_up_latency(url, 30, True)),
        ("listen=False (polling)", wake_up_latency_polling(url, 10)),
    ]:
        ms = sorted(s * 1000 for s in latencies)
        print(
            f"  {name:24} median {statistics.median(ms):6.1f} ms, "
            f"p90 {ms[int(len(ms) * 0.9) - 1]:6.1f} ms, max {ms[-1]:6.1f} ms "
            f"({len(ms)} samples)"
        )


if __name__ == "__main__":
    main()
