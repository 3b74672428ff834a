"""The dashboard with a million jobs: how long a page of 50 rows and the
overview take to render, beside the store's own query time.

    python -m benchmarks.dashboard [--jobs 1000000] [--rounds 20]

Fills a SQLite file and a PostgreSQL schema with bulk SQL (800,000 due
jobs over 3 priorities, 90,000 delayed, 10,000 retrying after a failed
attempt (half of them due before every delayed job), 50,000 dead with an
error each,
50,000 completed kept with their results; and a day of figures, 10 tasks a
minute, each with failed attempts and an error, from four processes), then
renders each page through the WSGI application (as a browser's request
would, minus the network) and times the store calls it makes alone. Prints
the median of ``--rounds`` renders, in milliseconds.

The queue holds the figures of the minutes that ended (``jobq._figure_cache``)
and reads them again every five minutes: the renders after the first read
the last two minutes only. The last row times that read again (the day's
rows from the store), which one render in five minutes pays.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jobq
from benchmarks.common import POSTGRES_URL, postgres_unavailable
from jobq.activity import (
    BUCKETS,
    Beat,
    DepthSample,
    ProcessInfo,
    RunningJob,
    TaskError,
    TaskOutcomes,
    minute_of,
)
from jobq.stores import PostgresStore, SqliteStore
from jobq.web import make_app

DUE, DELAYED, RETRYING, COMPLETED = 0.8, 0.09, 0.01, 0.05  # the rest dead
TASKS = 10  # with figures every minute of the day
ERROR = json.dumps([["app.errors.Bounce", "mailbox full", "Traceback ...", 0.0]])
BOUNCE = "app.errors.Bounce: mailbox full"
#: The retrying jobs' due times: spread over two hours from 10 minutes on
#: (after the fill); the delayed jobs', one a second from 70 minutes on. So
#: half the retrying jobs are due before every delayed job.
RETRY_FROM, RETRY_SPREAD, DELAYED_FROM = 600.0, 7200.0, 4200.0


def shares(n: int) -> tuple[int, int, int, int, int]:
    """Due, delayed, retrying, dead and completed jobs, in id order."""
    due, delayed = int(n * DUE), int(n * DELAYED)
    retrying, completed = int(n * RETRYING), int(n * COMPLETED)
    return due, delayed, retrying, n - due - delayed - retrying - completed, completed


def retry_at(n: int, i: int, now: float) -> float:
    """When the ``i``-th retrying job is due, in id order."""
    return now + RETRY_FROM + RETRY_SPREAD * i / max(1, int(n * RETRYING))


def finished(n: int, i: int, now: float) -> float:
    """When the ``i``-th kept completed job finished: spread over the last
    500 seconds (inside the ten minutes the overview shows)."""
    return now - 500 + 500 * i / max(1, int(n * COMPLETED))


def fill_sqlite(path: Path, n: int, now: float) -> None:
    SqliteStore(path).migrate()
    due, delayed, retrying, dead, _ = shares(n)

    def rows() -> Iterator[tuple[Any, ...]]:
        for i in range(n):
            payload = json.dumps({"to": f"user{i}@example.com", "n": i})
            task = f"mail.send{i % 5}"
            past = now - n + i
            if i < due:
                yield ("ready", payload, i % 3, past, task, 0, None, "[]", None,
                       None, None, None)  # fmt: skip
            elif i < due + delayed:
                later = now + DELAYED_FROM + i - due
                yield ("scheduled", payload, 0, later, task, 0, None, "[]", None,
                       None, None, None)  # fmt: skip
            elif i < due + delayed + retrying:
                error = f"app.errors.Bounce: mailbox {i} full"
                yield ("scheduled", payload, 0, retry_at(n, i - due - delayed, now),
                       task, 1, error, ERROR, None, past, None, None)  # fmt: skip
            elif i < due + delayed + retrying + dead:
                error = f"app.errors.Bounce: mailbox {i} full"
                yield ("dead", payload, 0, past, task, 5, error, ERROR, i, past, None,
                       None)  # fmt: skip
            else:
                done = finished(n, i - due - delayed - retrying - dead, now)
                yield ("completed", payload, 0, past, task, 0, None, "[]", None, done,
                       '"sent"', now + 3600)  # fmt: skip

    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            """INSERT INTO jobq_jobs (state, payload, priority, run_at, task,
                attempts, last_error, errors, buried, created_at, max_attempts,
                finished_at, result, expires_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 5, ?, ?, ?)""",
            rows(),
        )


def fill_postgres(schema: str, n: int, now: float) -> None:
    import psycopg

    PostgresStore(POSTGRES_URL, schema=schema).migrate()
    due, delayed, retrying, dead, completed = shares(n)
    params = {
        "due": due, "delayed": due + delayed, "retrying": due + delayed + retrying,
        "dead_end": due + delayed + retrying + dead, "completed": max(1, completed),
        "now": now, "n": n, "error": ERROR, "spread": RETRY_SPREAD / max(1, retrying),
        "retry_from": RETRY_FROM, "delayed_from": DELAYED_FROM,
    }  # fmt: skip
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        # %(delayed)s, %(retrying)s, %(dead_end)s: where each share ends.
        conn.execute(
            f"""INSERT INTO "{schema}".jobs (queue, state, payload, priority, run_at,
                task, attempts, last_error, errors, buried, created_at, max_attempts,
                finished_at, result, expires_at)
            SELECT 'default',
                CASE WHEN i < %(due)s THEN 'ready'
                     WHEN i < %(retrying)s THEN 'scheduled'
                     WHEN i < %(dead_end)s THEN 'dead' ELSE 'completed' END,
                json_build_object('to', 'user' || i || '@example.com', 'n', i),
                CASE WHEN i < %(due)s THEN i %% 3 ELSE 0 END,
                CASE WHEN i < %(due)s THEN %(now)s - %(n)s + i
                     WHEN i < %(delayed)s THEN %(now)s + %(delayed_from)s + i - %(due)s
                     WHEN i < %(retrying)s
                     THEN %(now)s + %(retry_from)s + %(spread)s * (i - %(delayed)s)
                     ELSE %(now)s - %(n)s + i END,
                'mail.send' || (i %% 5),
                CASE WHEN i >= %(retrying)s AND i < %(dead_end)s THEN 5
                     WHEN i >= %(delayed)s AND i < %(retrying)s THEN 1 ELSE 0 END,
                CASE WHEN i >= %(delayed)s AND i < %(dead_end)s
                     THEN 'app.errors.Bounce: mailbox ' || i || ' full' END,
                CASE WHEN i >= %(delayed)s AND i < %(dead_end)s
                     THEN %(error)s::jsonb ELSE '[]'::jsonb END,
                CASE WHEN i >= %(retrying)s AND i < %(dead_end)s THEN i END,
                0, 5,
                CASE WHEN i >= %(delayed)s AND i < %(dead_end)s THEN %(now)s - %(n)s + i
                     WHEN i >= %(dead_end)s
                     THEN %(now)s - 500 + 500.0 * (i - %(dead_end)s) / %(completed)s
                END,
                CASE WHEN i >= %(dead_end)s THEN '"sent"'::json END,
                CASE WHEN i >= %(dead_end)s THEN %(now)s + 3600 END
            FROM generate_series(0, %(n)s - 1) AS i""",  # noqa: S608
            params,
        )
        conn.execute(f'VACUUM ANALYZE "{schema}".jobs')


def median_ms(call: Callable[[], object], rounds: int) -> float:
    call()  # warm: caches, prepared statements, templates
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def render(app: Any, path: str, expect: bytes = b"</html>") -> bytes:
    route, _, query = path.partition("?")
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": route, "QUERY_STRING": query,
        "REMOTE_ADDR": "127.0.0.1", "SCRIPT_NAME": "", "wsgi.input": io.BytesIO(),
    }  # fmt: skip
    status: list[str] = []
    body = b"".join(app(environ, lambda s, h: status.append(s)))
    if not status[0].startswith("200") or expect not in body:
        raise RuntimeError(f"{path}: {status[0]}")
    return body


def fill_activity(queue: jobq.JobQueue[Any], now: float) -> None:
    """A day of figures from four processes: per minute, ``TASKS`` tasks'
    outcomes and a depth sample, as their beats would have left them."""
    queue.stats()  # the store opened
    store: Any = queue.store
    first = minute_of(now) - 60 * 1439
    buckets = (0, 3, 30, 7) + (0,) * (BUCKETS - 4)
    for k in range(1440):
        minute = first + 60 * k
        rows = [TaskOutcomes(minute, f"mail.send{t}", 40, 2, 1, 0, buckets,
                             TaskError(minute + 30, k * TASKS + t, BOUNCE))
                for t in range(TASKS)]  # fmt: skip
        sample = DepthSample(minute, 800_000 + k, 4, 0, 1.5)
        store.beat(Beat(None, rows, sample, 15.0), now)
    for number in range(4):
        running = tuple(RunningJob(i, "mail.send1", now - i) for i in range(4))
        info = ProcessInfo(f"web-{number}:{number}:x", f"web-{number}", 100 + number,
                           now - 3600, now, 4, 4, running)  # fmt: skip
        store.beat(Beat(info, (), None, 15.0), now)


def read_day(queue: jobq.JobQueue[Any]) -> object:
    """What the queue reads when it reads a day's figures again: every
    task's rows and the samples of the minutes that ended."""
    store: Any = queue.store
    now = time.time()
    since = minute_of(now) - 60 * 1439
    return store.outcomes(since, now - 120), store.samples(since, now - 120)


def measure(
    name: str, queue: jobq.JobQueue[Any], n: int, now: float, rounds: int
) -> list[str]:
    fill_activity(queue, time.time())  # the last hour ends now, not at the fill
    app = make_app(queue)
    due, delayed, retrying, dead, completed = shares(n)
    middle = due // 2 - due // 2 % 3 + 1  # a priority-1 job halfway through
    deep = json.dumps([1, now - n + middle, middle + 1])  # (priority, run_at, id)
    if len(queue.browse("due", after=deep).jobs) != 50:
        raise RuntimeError("the deep page is not a full page")
    if render(app, "/jobs/due").count(b'<a href="/job/') != 50:
        raise RuntimeError("the first page is not a full page")
    one_dead = due + delayed + retrying + 5
    if b"app.errors.Bounce" not in render(app, f"/job/{one_dead}"):
        raise RuntimeError("the job page does not show the dead job")
    if BOUNCE.encode() not in render(app, "/tasks?range=24h"):
        raise RuntimeError("the tasks page does not show the last error")
    stats, hour = queue.stats(), queue.activity(60) or []
    counts = (stats.kept, stats.delayed, stats.retrying, stats.dead)
    if (
        counts != (completed, delayed + retrying, retrying, dead)
        or sum(m.succeeded for m in hour) != 60 * TASKS * 40
    ):
        raise RuntimeError(f"the overview's counts are wrong: {stats}, {hour[-1]}")
    for view in ("delayed", "retrying"):
        if render(app, f"/jobs/{view}").count(b'<a href="/job/') != 50:
            raise RuntimeError(f"the first page of {view} is not a full page")
    pages: list[tuple[str, str, Callable[[], object]]] = [
        (
            "overview (stats + the last hour's figures)",
            "/",
            lambda: (queue.stats(), queue.activity(60)),
        ),
        (
            "overview, the last day",
            "/?range=24h",
            lambda: (queue.stats(), queue.activity(1440)),
        ),
        ("processes", "/processes", queue.processes),
        ("tasks (the last hour)", "/tasks", lambda: queue.task_activity(60)),
        (
            "tasks, the last day",
            "/tasks?range=24h",
            lambda: queue.task_activity(1440),
        ),
        ("due, first page", "/jobs/due", lambda: queue.browse("due")),
        (
            "due, a page deep in",
            f"/jobs/due?after={deep}",
            lambda: queue.browse("due", after=deep),
        ),
        (
            "due, task filter",
            "/jobs/due?task=mail.send3",
            lambda: queue.browse("due", task="mail.send3"),
        ),
        (
            "delayed (half the retrying jobs due before)",
            "/jobs/delayed",
            lambda: queue.browse("delayed"),
        ),
        ("retrying", "/jobs/retrying", lambda: queue.browse("retrying")),
        (
            "retrying, error filter",
            "/jobs/retrying?error=mailbox+899",
            lambda: queue.browse("retrying", error="mailbox 899"),
        ),
        ("dead", "/jobs/dead", lambda: queue.browse("dead")),
        (
            "dead, error filter",
            "/jobs/dead?error=mailbox+94",
            lambda: queue.browse("dead", error="mailbox 94"),
        ),
        (
            "dead, error filter matching none (worst case: every dead job read)",
            "/jobs/dead?error=no+such+text",
            lambda: queue.browse("dead", error="no such text"),
        ),
        ("one job", f"/job/{one_dead}", lambda: queue.get(one_dead)),
    ]
    lines = []
    for title, path, query in pages:
        page_ms = median_ms(lambda p=path: render(app, p), rounds)
        store_ms = median_ms(query, rounds)
        lines.append(f"| {name} | {title} | {page_ms:.1f} | {store_ms:.1f} |")
        print(lines[-1], flush=True)
    alone: list[tuple[str, Callable[[], object]]] = [
        ("overview's stats alone", queue.stats),
        ("the last hour's figures alone", lambda: queue.activity(60)),
        ("the last day's figures alone", lambda: queue.activity(1440)),
        ("the last day's figures read again (every 5 min)", lambda: read_day(queue)),
    ]
    for title, query in alone:
        lines.append(f"| {name} | {title} | — | {median_ms(query, rounds):.1f} |")
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    now = time.time()
    print(f"{args.jobs:,} jobs; median of {args.rounds} renders, ms")
    print("| store | page | render (ms) | store query (ms) |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "jobs.db"
        started = time.perf_counter()
        fill_sqlite(path, args.jobs, now)
        print(f"(SQLite filled in {time.perf_counter() - started:.0f} s)", flush=True)
        with jobq.JobQueue(store=SqliteStore(path)) as queue:
            measure("SQLite", queue, args.jobs, now, args.rounds)
    reason = postgres_unavailable()
    if reason is not None:
        print(f"PostgreSQL skipped: {reason}")
        return
    import psycopg

    now = time.time()  # the figures are of the last hour: not SQLite's run's
    schema = f"jobq_bench_dash_{int(now)}"
    try:
        started = time.perf_counter()
        fill_postgres(schema, args.jobs, now)
        print(
            f"(PostgreSQL filled in {time.perf_counter() - started:.0f} s)", flush=True
        )
        store = PostgresStore(POSTGRES_URL, schema=schema)
        with jobq.JobQueue(store=store) as queue:
            measure("PostgreSQL", queue, args.jobs, now, args.rounds)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
