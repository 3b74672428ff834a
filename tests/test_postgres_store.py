"""The PostgreSQL store: what only a database shared by many hosts has to get right.

URLs and options; the schema (version, advisory lock, ``migrate``, roles that
may not run DDL, names that need quoting); claims beside many future rows
(query plans); leases and fencing; the clock; connections that break or never
come; enqueue inside the caller's transaction; several processes sharing one
queue (each job once, a SIGKILLed worker's job finished by another, keys raced
by two processes, wake-ups through NOTIFY); a fork; a restart of the server.

Every test runs against the local server (``JOBQ_TEST_POSTGRES``), in the
session's schema under a queue name of its own, or in a schema of its own that
it drops. Other processes are real (``sys.executable``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from old_schemas import postgres_at, postgres_v1
from postgres_url import POSTGRES_URL
from psycopg import sql

import jobq
from jobq import JobState, StoreError
from jobq.activity import BUCKETS, DepthSample, RunningJob, TaskError, minute_of
from jobq.stores import MemoryStore, PostgresStore, store_from
from jobq.stores import postgres as postgres_module
from jobq.stores.base import Claim, Done, Failure, NewJob, Signal, capabilities_of
from jobq.stores.pages import JobQuery
from jobq.stores.postgres.activity import drop_params, minutes_params
from jobq.testing.contract.activity import beat, outcomes, process
from jobq.types import AttemptError, Limit

ROOT = Path(__file__).resolve().parents[1]
URL = POSTGRES_URL
WAIT = 30  # seconds; a cap so that a broken test fails instead of hanging
T0 = 1_800_000_000.0
MINUTE = minute_of(T0)


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(URL, autocommit=True)


def drop_schema(name: str) -> None:
    with admin() as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
        )


class PG:
    """The session's schema, a queue name of this test's, and stores on them
    that are closed after the test."""

    def __init__(self, schema: str) -> None:
        self.url = URL
        self.schema = schema
        self.queue = f"t-{secrets.token_hex(6)}"
        self.stores: list[PostgresStore] = []
        self.queues: list[jobq.JobQueue[Any]] = []

    def store(self, **options: Any) -> PostgresStore:
        options.setdefault("schema", self.schema)
        options.setdefault("queue", self.queue)
        store = PostgresStore(options.pop("url", self.url), **options)
        self.stores.append(store)
        return store

    def opened(self, dead_letter_limit: int = 1000, **options: Any) -> PostgresStore:
        store = self.store(**options)
        store.open(Signal(), dead_letter_limit=dead_letter_limit)
        return store

    def queue_of(self, handler: Any = None, **options: Any) -> jobq.JobQueue[Any]:
        store = options.pop("store", None) or self.store(
            **options.pop("store_options", {})
        )
        queue: jobq.JobQueue[Any] = jobq.JobQueue(handler, store=store, **options)
        self.queues.append(queue)
        return queue

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run ``query``; ``{jobs}``, ``{counts}``, ``{meta}``, ``{outcomes}``,
        ``{samples}`` name our tables."""
        tables = ("jobs", "counts", "meta", "outcomes", "samples")
        names = {t: sql.Identifier(self.schema, t) for t in tables}
        with admin() as conn:
            cur = conn.execute(sql.SQL(query).format(**names), params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def close(self) -> None:
        for queue in self.queues:
            queue.close(timeout=5)
        for store in self.stores:
            store.close()


@pytest.fixture
def pg(postgres_schema: str) -> Iterator[PG]:
    env = PG(postgres_schema)
    yield env
    env.close()


@pytest.fixture
def fresh_schema(postgres_schema: str) -> Iterator[str]:
    """A schema name nobody uses yet, dropped after the test."""
    name = f"{postgres_schema}_{secrets.token_hex(3)}"
    yield name
    drop_schema(name)


@pytest.fixture
def role(postgres_schema: str) -> Iterator[str]:
    """A login role with no privileges of its own, dropped after the test."""
    name = f"jobq_role_{secrets.token_hex(4)}"
    with admin() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    with admin() as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def url_as(role: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(URL)
    params["user"] = role
    return psycopg.conninfo.make_conninfo("", **params)


def limited_job(payload: Any, *limits: str, priority: int = 0,
                key: str | None = None) -> NewJob:  # fmt: skip
    return NewJob(json.dumps(payload), 0.0, key, priority, 5, limits=limits)


def new_job(payload: Any = None, *, run_at: float = 0.0, key: str | None = None,
            priority: int = 0, max_attempts: int = 5) -> NewJob:  # fmt: skip
    return NewJob(json.dumps(payload), run_at, key, priority, max_attempts)


def bury(job: jobq.Job[Any]) -> None:
    raise jobq.Fatal("no")


def error(at: float = T0) -> AttemptError:
    return AttemptError("ValueError", "boom", "", at)


# -- URLs, options, and what construction does not do -------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:5432/test",
        "postgres://postgres@127.0.0.1/test",
        "POSTGRESQL://postgres@127.0.0.1:5432/test?sslmode=disable",
        "postgresql://h1:5432,h2:5433/db",
        "postgresql:///test",
    ],
)
def test_postgresql_urls_build_a_postgres_store(url: str) -> None:
    store = store_from(url)

    assert isinstance(store, PostgresStore)
    assert store.conninfo.lower() == url.lower()
    assert (store.queue, store.schema, store.lease_seconds) == ("default", "jobq", 30.0)
    assert (store.claim_batch, capabilities_of(store).prefetch) == (16, True)


def test_take_ahead_false_makes_the_older_trade_for_this_store_only() -> None:
    older = PostgresStore(URL, take_ahead=False, claim_batch=32)

    assert capabilities_of(older).prefetch is False
    assert capabilities_of(PostgresStore(URL)).prefetch is True


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@h:port/db",
        "postgresql://u@h:99999/db",
        "postgresql://u@h/db?no_such_option=1",
        "postgres:/nohost/db",
        "postgresql:u@h/db",
    ],
)
def test_a_malformed_url_raises_value_error_at_construction(url: str) -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        jobq.JobQueue(None, store=url)


def test_messages_and_repr_never_show_the_password() -> None:
    store = PostgresStore("postgresql://ann:s3cret@127.0.0.1:1/db")
    with pytest.raises(ValueError, match="malformed") as bad:
        PostgresStore("postgresql://ann:s3cret@h:port/db")

    assert "s3cret" not in repr(store)
    assert "s3cret" not in str(bad.value)
    with pytest.raises(StoreError) as unreachable:
        store.check()
    assert "s3cret" not in str(unreachable.value)


@pytest.mark.parametrize(
    ("options", "exception"),
    [
        ({"lease_seconds": 0}, ValueError),
        ({"lease_seconds": float("inf")}, ValueError),
        ({"poll_interval": -1}, ValueError),
        ({"connect_timeout": "5"}, TypeError),
        ({"call_timeout": 0}, ValueError),
        ({"call_timeout": "30"}, TypeError),
        ({"pool_size": 0}, ValueError),
        ({"pool_size": 2.5}, TypeError),
        ({"clock": "host"}, ValueError),
        ({"queue": ""}, ValueError),
        ({"queue": "a\x00b"}, ValueError),
        ({"schema": "s" * 64}, ValueError),
        ({"listen": "postgresql://h:port/db"}, ValueError),
        ({"listen": 1}, TypeError),
    ],
)
def test_bad_options_are_rejected_at_construction(
    options: dict[str, Any], exception: type[Exception]
) -> None:
    with pytest.raises(exception):
        PostgresStore(URL, **options)


def test_constructing_a_queue_connects_to_nothing() -> None:
    before = set(threading.enumerate())

    queue = jobq.JobQueue(None, store="postgresql://postgres@127.0.0.1:1/test")
    started = set(threading.enumerate()) - before
    queue.close()  # never used: nothing to release either

    assert started == set()


def test_import_jobq_needs_no_driver_and_a_missing_one_says_how_to_install() -> None:
    code = """
import sys
import jobq
assert "psycopg" not in sys.modules, "import jobq imported psycopg"
sys.modules["psycopg"] = None  # as if it were not installed
try:
    jobq.JobQueue(None, store="postgresql://localhost/db")
except ImportError as exc:
    print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
        timeout=WAIT, check=True,
    )  # fmt: skip
    assert "pip install 'jobq[postgres]'" in done.stdout


# -- the schema ------------------------------------------------------------------------


def test_the_schema_is_created_on_first_use_with_its_version(
    pg: PG, fresh_schema: str
) -> None:
    queue = pg.queue_of(None, store_options={"schema": fresh_schema})

    queue.enqueue("x")

    with admin() as conn:
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s",
                (fresh_schema,),
            )
        }
        (version,) = conn.execute(
            sql.SQL("SELECT value FROM {} WHERE name = 'schema_version'").format(
                sql.Identifier(fresh_schema, "meta")
            )
        ).fetchone() or (None,)
    assert tables == {
        "jobs", "counts", "meta", "schedules", "limits", "limit_keys", "slots",
        "wakes", "deps", "processes", "outcomes", "samples",
    }  # fmt: skip
    assert version == postgres_module.SCHEMA_VERSION


def test_names_that_need_quoting_work_everywhere(pg: PG, postgres_schema: str) -> None:
    """Schema names only ever pass through ``sql.Identifier`` (the trigger
    function included), and queue names only as values."""
    odd = f'{postgres_schema}_we"ird $$ name'
    try:
        queue = pg.queue_of(
            bury, store_options={"schema": odd, "queue": "q'; DROP TABLE x; --"}
        )
        job = queue.enqueue({"to": "ann"}, key="k'1")
        assert queue.run_pending() == 1
        assert queue.stats().dead == 1
        assert queue.retry_dead(job)
        assert queue.stats().pending == 1
        assert queue.get(job) is not None
    finally:
        pg.close()
        drop_schema(odd)


def test_a_version_1_schema_is_migrated_when_opened_and_keeps_its_jobs(
    pg: PG, fresh_schema: str
) -> None:
    postgres_v1(URL, fresh_schema, pg.queue)

    store = pg.opened(schema=fresh_schema, clock="queue")

    records = [store.get(job_id, T0) for job_id in (1, 2, 3)]
    shown = [(r.state, r.payload, r.key, r.priority, r.task, r.attempts,
              r.last_error, [e.type for e in r.errors])
             for r in records if r is not None]  # fmt: skip
    assert shown == [
        (JobState.PENDING, "due", "k", 3, None, 0, None, []),
        (JobState.PENDING, {"n": 1}, None, 0, "mail.send", 1, "ValueError: x",
         ["ValueError"]),
        (JobState.DEAD, "dead", None, 0, None, 1, "Fatal: no", ["Fatal"]),
    ]  # fmt: skip
    new_fields = [(r.started_at, r.finished_at, r.timeout, dict(r.meta),
                   r.cancellation) for r in records if r is not None]  # fmt: skip
    assert new_fields == [(None, None, None, {}, None)] * 3
    assert store.migrate() == postgres_module.SCHEMA_VERSION == 11
    first = store.claim(T0 + 5)
    assert first is not None
    assert (first.id, first.meta, first.timeout) == (1, None, None)
    running = store.get(1, T0 + 5)
    assert running is not None
    assert (running.started_at, running.finished_at) == (T0 + 5, None)
    assert store.schedule_states() == []  # version 3's table is there
    minutes = store.finished_per_minute(T0 - 60, T0)  # version 4's index
    assert [(m.completed, m.died) for m in minutes] in ([], [(0, 0), (0, 0)])


def test_a_version_4_schema_is_migrated_to_cancelling_and_keeps_its_jobs_and_keys(
    pg: PG, fresh_schema: str
) -> None:
    """Version 5 widens the state check, adds the request's columns and
    rebuilds the key index without stopping jobs in it: the jobs, their ids
    and the key a pending job holds are as before."""
    postgres_at(URL, fresh_schema, pg.queue, 4)

    store = pg.opened(schema=fresh_schema, clock="queue")

    assert store.migrate() == postgres_module.SCHEMA_VERSION
    records = [store.get(job_id, T0) for job_id in (1, 2, 3)]
    assert [(r.state, r.key, r.cancellation) for r in records if r] == [
        (JobState.PENDING, "k", None),
        (JobState.PENDING, None, None),
        (JobState.DEAD, None, None),
    ]
    assert store.add([new_job("again", key="k")], T0)[0] == jobq.Enqueued(1, True)
    claim = store.claim(T0)
    assert claim is not None
    assert claim.id == 1
    assert store.cancel(1, T0, by="t", keep_until=T0 + 60) == "stopping"
    [added] = store.add([new_job("new", key="k")], T0)
    assert added.id > 3  # ids go on
    assert not added.duplicate  # the key is free
    assert store.fail_many([Failure(claim, error(), None)], T0) == [JobState.CANCELLED]
    assert store.cancel(2, T0, by="t", keep_until=T0 + 60) == "cancelled"
    assert store.stats().cancelled == 2


def test_a_version_5_schema_is_migrated_to_limits_and_keeps_its_jobs_and_keys(
    pg: PG, fresh_schema: str
) -> None:
    """Version 6 widens the state check, adds the limits' columns and tables
    and rebuilds the key index with held jobs in it: the jobs are as before,
    the pending one keeps its key, and limits work at once."""
    postgres_at(URL, fresh_schema, pg.queue, 5)

    store = pg.opened(schema=fresh_schema, clock="queue")

    assert store.migrate() == postgres_module.SCHEMA_VERSION == 11
    records = [store.get(job_id, T0) for job_id in (1, 2, 3)]
    assert [(r.state, r.key, r.limits, r.held_by) for r in records if r] == [
        (JobState.PENDING, "k", (), None),
        (JobState.PENDING, None, (), None),
        (JobState.DEAD, None, (), None),
    ]
    assert store.add([new_job("again", key="k")], T0)[0] == jobq.Enqueued(1, True)
    assert store.declare_limit(Limit("smtp", concurrency=1)) is None
    limited = [limited_job("m", "smtp", key=f"m{n}") for n in range(2)]
    ids = [added.id for added in store.add(limited, T0)]
    assert [c.id for c in store.claim_many(T0, 10)] == [1, ids[0]]
    held = store.get(ids[1], T0)
    assert held is not None
    assert (held.state, held.held_by) == (JobState.PENDING, "smtp")
    assert store.add([limited_job("m", "smtp", key="m1")], T0)[0].duplicate


def test_a_version_7_schema_is_migrated_to_activity_and_keeps_its_jobs(
    pg: PG, fresh_schema: str
) -> None:
    """Version 8 adds the activity's tables and changes no other: the jobs
    are as before, and beats and their reads work at once."""
    postgres_at(URL, fresh_schema, pg.queue, 7)

    store = pg.opened(schema=fresh_schema, clock="queue")

    assert store.migrate() == postgres_module.SCHEMA_VERSION == 11
    records = [store.get(job_id, T0) for job_id in (1, 2, 3)]
    assert [(r.state, r.key, r.task) for r in records if r] == [
        (JobState.PENDING, "k", None),
        (JobState.PENDING, None, "mail.send"),
        (JobState.DEAD, None, None),
    ]
    sample = DepthSample(MINUTE, 2, 0, 0, None)
    store.beat(beat(process("a", T0), (outcomes(MINUTE, "mail.send", 2),), sample), T0)
    assert [info.id for info in store.processes(T0)] == ["host-a:1:a"]
    assert store.outcomes(MINUTE, T0) == [outcomes(MINUTE, "mail.send", 2)]
    assert store.samples(MINUTE, T0) == [sample]


def test_a_version_10_schema_keeps_its_figures_and_adds_errors_to_them(
    pg: PG, fresh_schema: str
) -> None:
    """Version 11 adds the newest error to the outcome rows already there:
    they keep their counts, with no error, until a beat brings one."""
    postgres_at(URL, fresh_schema, pg.queue, 10)
    old = outcomes(MINUTE, "t", 3, 1)
    with admin() as conn:
        conn.execute(
            sql.SQL("INSERT INTO {} VALUES (%s, %s, true, 't', 3, 1, 0, 0, %s)").format(
                sql.Identifier(fresh_schema, "outcomes")
            ),
            (pg.queue, MINUTE, list(old.durations)),
        )
    store = pg.opened(schema=fresh_schema, clock="queue")
    error = TaskError(T0, 2, "ValueError: x")

    assert store.migrate() == postgres_module.SCHEMA_VERSION == 11
    assert store.outcomes(MINUTE, T0) == [old]
    store.beat(beat(None, (outcomes(MINUTE, "t", 0, 1, error=error),)), T0)
    assert store.outcomes(MINUTE, T0) == [outcomes(MINUTE, "t", 3, 2, error=error)]


def test_a_version_9_schema_is_migrated_and_its_retrying_job_listed_and_counted(
    pg: PG, fresh_schema: str
) -> None:
    """Version 10 adds ``jobs_retrying`` over the jobs already there: the old
    schema's job that failed once and is due in a minute is retrying."""
    postgres_at(URL, fresh_schema, pg.queue, 9)

    store = pg.opened(schema=fresh_schema, clock="queue")

    assert store.migrate() == postgres_module.SCHEMA_VERSION
    retrying = store.page_jobs(JobQuery("retrying"), T0)
    assert [(job.id, job.attempts) for job in retrying.jobs] == [(2, 1)]
    assert store.page_jobs(JobQuery("delayed"), T0).jobs == []
    with admin() as conn:
        found = conn.execute(
            "SELECT to_regclass(%s)", (f'"{fresh_schema}".jobs_retrying',)
        ).fetchone()
    assert found is not None
    assert found[0] is not None


def test_a_newer_schema_version_is_refused(pg: PG, fresh_schema: str) -> None:
    pg.store(schema=fresh_schema).migrate()
    with admin() as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET value = 99 WHERE name = 'schema_version'").format(
                sql.Identifier(fresh_schema, "meta")
            )
        )

    queue = pg.queue_of(None, store_options={"schema": fresh_schema})
    with pytest.raises(StoreError, match=r"newer jobq \(schema version 99"):
        queue.enqueue("x")
    with pytest.raises(StoreError, match="newer"):
        pg.store(schema=fresh_schema).migrate()


def test_migrate_waits_for_the_advisory_lock(pg: PG, fresh_schema: str) -> None:
    store = pg.store(schema=fresh_schema)
    done = threading.Event()
    with admin() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (store.lock_key,))
        thread = threading.Thread(target=lambda: (store.migrate(), done.set()))
        thread.start()
        blocked = not done.wait(0.3)
        holder.execute("SELECT pg_advisory_unlock(%s)", (store.lock_key,))
    thread.join(WAIT)

    assert blocked
    assert done.is_set()


def test_hosts_creating_one_schema_at_once_all_succeed(
    pg: PG, fresh_schema: str
) -> None:
    stores = [pg.store(schema=fresh_schema, queue=f"q{n}") for n in range(6)]
    barrier = threading.Barrier(len(stores))
    outcomes: list[Any] = []

    def start(store: PostgresStore) -> None:
        barrier.wait()
        try:
            store.open(Signal(), dead_letter_limit=10)
            outcomes.append(store.add([new_job("x")], time.time())[0].id)
        except Exception as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)

    assert all(isinstance(o, int) for o in outcomes), outcomes
    assert len(set(outcomes)) == len(stores)


def test_auto_migrate_false_never_creates_the_schema(pg: PG, fresh_schema: str) -> None:
    queue = pg.queue_of(
        None, store_options={"schema": fresh_schema, "auto_migrate": False}
    )

    with pytest.raises(StoreError, match=r"does not exist.*migrate\(\)"):
        queue.enqueue("x")
    assert pg.rows("SELECT 1 FROM pg_namespace WHERE nspname = %s", fresh_schema) == []


def test_a_role_without_ddl_uses_a_migrated_schema(
    pg: PG, fresh_schema: str, role: str
) -> None:
    """The owner migrates and grants; the app's role may not create anything,
    and ``open`` only checks the version."""
    pg.store(schema=fresh_schema).migrate()
    with admin() as conn:
        schema = sql.Identifier(fresh_schema)
        who = sql.Identifier(role)
        for grant in (
            "GRANT USAGE ON SCHEMA {} TO {}",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}",
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {} TO {}",
        ):
            conn.execute(sql.SQL(grant).format(schema, who))  # type: ignore[arg-type]
    store = pg.store(url=url_as(role), schema=fresh_schema)
    ran: list[Any] = []
    queue = pg.queue_of(ran.append, store=store, max_attempts=1)

    store.check()
    queue.enqueue("x")
    assert queue.run_pending() == 1
    assert [job.payload for job in ran] == ["x"]


def test_a_role_that_may_not_create_the_schema_is_told_to_migrate(
    pg: PG, fresh_schema: str, role: str
) -> None:
    queue = pg.queue_of(
        None, store_options={"url": url_as(role), "schema": fresh_schema}
    )

    with pytest.raises(StoreError, match=r"may not create .*migrate\(\)"):
        queue.enqueue("x")


def test_check_names_the_privileges_a_role_lacks(
    pg: PG, fresh_schema: str, role: str
) -> None:
    pg.store(schema=fresh_schema).migrate()
    with admin() as conn:
        conn.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(fresh_schema), sql.Identifier(role)
            )
        )
        conn.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
                sql.Identifier(fresh_schema), sql.Identifier(role)
            )
        )
    store = pg.store(url=url_as(role), schema=fresh_schema)

    with pytest.raises(StoreError, match="INSERT on table") as lacking:
        store.check()
    assert "DELETE on table" in str(lacking.value)
    assert "USAGE on sequence" in str(lacking.value)


# -- claims: order, indexes, fencing ---------------------------------------------------


def explain(store: PostgresStore, query: bytes, params: dict[str, Any]) -> str:
    with admin() as conn:
        rows = conn.execute(b"EXPLAIN " + query, params).fetchall()
    return "\n".join(row[0] for row in rows)


def test_jobs_due_together_are_claimed_oldest_first_however_their_rows_lie(
    pg: PG, fresh_schema: str
) -> None:
    """Jobs of one priority and due time come in the order they were added
    even when their rows lie in another order: on a small table the claim
    scans the rows as they lie, and any update of a job (here the first one)
    writes its row anew after the others."""
    store = pg.opened(schema=fresh_schema, clock="queue")
    added = store.add([new_job(n) for n in range(3)], T0)
    with admin() as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET owner = 'moved' WHERE id = %s").format(
                sql.Identifier(fresh_schema, "jobs")
            ),
            (added[0].id,),
        )

    claims = store.claim_many(T0, 3)

    assert [c.id for c in claims] == [job.id for job in added]


def test_claims_use_the_partial_indexes_beside_many_future_jobs(pg: PG) -> None:
    """50,000 delayed high-priority jobs and 50,000 ready low-priority ones:
    the claim, its promotion step, next_due, recovery and stats read indexes
    (or the counts table) only."""
    store = pg.opened()
    pg.rows(
        """INSERT INTO {jobs} (queue, state, payload, priority, run_at, created_at,
                               max_attempts)
           SELECT %s, CASE WHEN n %% 2 = 0 THEN 'scheduled' ELSE 'ready' END, '0',
                  CASE WHEN n %% 2 = 0 THEN 9 ELSE 0 END,
                  extract(epoch FROM now())
                    + CASE WHEN n %% 2 = 0 THEN 3600 ELSE 0 END,
                  0, 5
           FROM generate_series(1, 100000) AS n""",
        pg.queue,
    )
    pg.rows("ANALYZE {jobs}")
    statements = store._sql
    common = {"q": pg.queue, "now": None}
    plans = {
        "claim": explain(store, statements.claim, {
            **common, "batch": 1000, "limit": 32, "start": 32, "token": 1,
            "lease": 30.0, "owner": "x"}),
        "next_due": explain(store, statements.next_due, common),
        "any_expired": explain(store, statements.any_expired, common),
        "held_key": explain(store, statements.held_key, {**common, "key": "k"}),
        "trim_dead": explain(store, statements.trim_dead, {**common, "limit": 10}),
        "stats": explain(store, statements.counts, common),
        "cancel": explain(store, statements.cancel, {
            **common, "id": 7, "by": "x", "keep_for": 60.0, "batch": 100}),
        "expired_cancelled": explain(store, statements.expired_cancelled, common),
        "cancelled_page": explain(store, statements.pages["cancelled"], {
            **common, "limit": 50, "c0": 1e308, "c1": 2**63 - 1, "task": None,
            "key": None, "error": None}),
    }  # fmt: skip

    assert "Index Scan using jobs_ready" in plans["claim"]
    assert "Index Scan using jobs_scheduled" in plans["claim"]
    assert "jobs_ready" in plans["next_due"]
    assert "jobs_scheduled" in plans["next_due"]
    assert "jobs_running" in plans["any_expired"]
    assert "jobs_live_keys" in plans["held_key"]
    assert "jobs_dead" in plans["trim_dead"]
    assert " on jobs" not in plans["stats"]
    assert "jobs_pkey" in plans["cancel"]
    assert "jobs_cancelled" in plans["cancel"]  # the purge
    assert "jobs_cancelled" in plans["expired_cancelled"]
    assert "jobs_cancelled" in plans["cancelled_page"]
    seq_scans = {name: "Seq Scan on jobs" in text for name, text in plans.items()}
    assert seq_scans == dict.fromkeys(plans, False), plans

    started = time.perf_counter()
    claims = [store.claim(time.time()) for _ in range(20)]
    took = time.perf_counter() - started
    assert all(c is not None and json.loads(c.payload) == 0 for c in claims)
    assert took < 1.0  # about a millisecond each; a scan of the rows takes ~100x
    assert store.stats().pending == 100000 - 20


def test_the_retrying_pages_and_count_read_their_index_beside_many_delayed_jobs(
    pg: PG,
) -> None:
    """50,000 delayed jobs due before 1,000 retrying ones: the retrying
    list's page and count read ``jobs_retrying`` alone (the count without
    the table), the delayed page ``jobs_scheduled``."""
    store = pg.opened()
    pg.rows(
        """INSERT INTO {jobs} (queue, state, payload, priority, run_at, created_at,
                               max_attempts, attempts)
           SELECT %s, 'scheduled', '0', 0,
                  extract(epoch FROM now()) + 3600 + n, 0, 5,
                  CASE WHEN n > 50000 THEN 1 ELSE 0 END
           FROM generate_series(1, 51000) AS n""",
        pg.queue,
    )
    pg.rows("VACUUM ANALYZE {jobs}")
    statements = store._sql
    page = {"q": pg.queue, "now": None, "limit": 51, "task": None, "key": None,
            "error": None, "c0": -1e308, "c1": 0}  # fmt: skip
    plans = {
        "retrying": explain(store, statements.pages["retrying"], page),
        "delayed": explain(store, statements.pages["delayed"], page),
        "count": explain(store, statements.retrying, {"q": pg.queue, "now": None}),
    }

    assert "Index Scan using jobs_retrying" in plans["retrying"]
    assert "Index Only Scan using jobs_retrying" in plans["count"]
    assert "jobs_scheduled" in plans["delayed"]
    seq_scans = {name: "Seq Scan on jobs" in text for name, text in plans.items()}
    assert seq_scans == dict.fromkeys(plans, False), plans
    assert store.stats().retrying == 1000
    assert len(store.page_jobs(JobQuery("retrying"), time.time()).jobs) == 50


def test_stops_requested_reads_the_claims_rows_beside_many_running_jobs(
    pg: PG,
) -> None:
    """The look every process holding claims makes every ``STOP_LOOK``
    seconds: its claims' rows by primary key, never the running ones."""
    store = pg.opened()
    pg.rows(
        """INSERT INTO {jobs} (queue, state, payload, priority, run_at, created_at,
                               max_attempts, token, lease_until)
           SELECT %s, 'running', '0', 0, 0, 0, 5, n, 1e12
           FROM generate_series(1, 20000) AS n""",
        pg.queue,
    )
    pg.rows("ANALYZE {jobs}")
    values = {"q": pg.queue, "ids": [7, 8], "tokens": [1, 2]}

    plan = explain(store, store._sql.stops_requested, values)

    assert "jobs_pkey" in plan
    assert "Seq Scan on jobs" not in plan
    assert "jobs_running" not in plan


def test_a_delayed_high_priority_job_is_promoted_and_wins_once_due(pg: PG) -> None:
    store = pg.opened(clock="queue")
    [low, high] = store.add(
        [new_job("low", priority=0), new_job("high", run_at=T0 + 10, priority=5)], T0
    )

    assert store.next_due() == 0.0  # "low" was due long before it was added
    first = store.claim(T0 + 10)
    second = store.claim(T0 + 10)

    assert first is not None
    assert second is not None
    assert (first.id, second.id) == (high.id, low.id)


def test_a_stale_token_changes_nothing(pg: PG) -> None:
    store = pg.opened(lease_seconds=30)
    [job] = store.add([new_job("x")], time.time())
    stale = store.claim(time.time())
    assert stale is not None
    pg.rows("UPDATE {jobs} SET lease_until = 0 WHERE id = %s", job.id)
    assert store.recover(time.time()) == 1
    current = store.claim(time.time())
    assert current is not None
    lease = pg.rows("SELECT lease_until FROM {jobs} WHERE id = %s", job.id)

    store.renew([stale], time.time())
    assert store.finish(stale, None, None, time.time()) is False
    assert store.fail(stale, error(), None, time.time()) is False

    assert pg.rows("SELECT lease_until FROM {jobs} WHERE id = %s", job.id) == lease
    record = store.get(job.id, time.time())
    assert record is not None
    assert (record.state, record.attempts) == (JobState.RUNNING, 1)
    assert record.errors[0].type == "jobq.errors.ProcessDied"
    store.renew([current], time.time())
    assert pg.rows("SELECT lease_until FROM {jobs} WHERE id = %s", job.id) > lease
    assert store.finish(current, None, None, time.time()) is True


def test_renewing_waits_for_no_row_while_holding_another(pg: PG) -> None:
    """A transaction that marks one held job started and ends another (a
    worker's ``finish_many``) locks them in its own order; a renewal that
    waited for one while holding the other would deadlock with it, and
    PostgreSQL would kill one of them after a second (the lease meanwhile
    unrenewed: seen as jobs given back, 100 jobs taking over 30 s)."""
    store = pg.opened(lease_seconds=30)
    store.add([new_job("a"), new_job("b")], time.time())
    first, second = store.claim_many(time.time(), 2)
    pg.rows("UPDATE {jobs} SET lease_until = 1 WHERE queue = %s", pg.queue)
    jobs = sql.Identifier(pg.schema, "jobs")
    touch = sql.SQL("UPDATE {} SET started_at = started_at WHERE id = %s").format(jobs)
    failed: list[BaseException] = []

    def renew() -> None:
        try:
            store.renew([first, second], time.time())
        except BaseException as exc:
            failed.append(exc)

    renewing = threading.Thread(target=renew)
    with admin() as conn, conn.transaction():
        conn.execute(touch, (second.id,))  # the write in flight holds the second
        renewing.start()
        wait_for(lambda: waiting_on_locks(conn) == 1)
        conn.execute(touch, (first.id,))  # and now wants the first
    renewing.join(WAIT)

    assert not renewing.is_alive()
    assert failed == []
    leases = pg.rows("SELECT lease_until FROM {jobs} WHERE queue = %s", pg.queue)
    assert all(until > time.time() + 20 for (until,) in leases)


def test_a_call_the_database_rolls_back_says_so_and_changes_nothing(pg: PG) -> None:
    """A deadlock is not a lost connection (whose outcome is unknown): the
    error says the call's transaction was rolled back, and it was."""
    store = pg.opened(lease_seconds=30)
    store.add([new_job("a"), new_job("b")], time.time())
    first, ahead = store.claim_many(time.time(), 2, start=1)
    jobs = sql.Identifier(pg.schema, "jobs")
    lock = sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR UPDATE").format(jobs)
    failed: list[BaseException] = []

    def finish() -> None:  # marks the second started, then ends the first
        try:
            store.finish_many([Done(first, None)], None, time.time(), starting=[ahead])
        except BaseException as exc:
            failed.append(exc)

    finishing = threading.Thread(target=finish)
    with admin() as conn, conn.transaction():
        conn.execute("SET LOCAL deadlock_timeout = '60s'")  # the call is the one ended
        conn.execute(lock, (first.id,))
        finishing.start()
        wait_for(lambda: waiting_on_locks(conn) == 1)
        conn.execute(lock, (ahead.id,))  # held by the call, which waits for us
        finishing.join(WAIT)

    assert not finishing.is_alive()
    [error] = failed
    assert type(error) is StoreError
    assert "rolled back the call's transaction" in str(error)
    assert "deadlock detected" in str(error)
    rows = "SELECT id, state, started_at IS NOT NULL FROM {jobs} WHERE queue = %s"
    assert sorted(pg.rows(rows, pg.queue)) == [
        (first.id, "running", True),
        (ahead.id, "running", False),
    ]


def test_recover_buries_an_expired_claim_out_of_attempts_and_trims(
    pg: PG, caplog: pytest.LogCaptureFixture
) -> None:
    store = pg.opened(dead_letter_limit=1)
    [old, job] = store.add([new_job("old", max_attempts=1),
                            new_job("x", max_attempts=1)], time.time())  # fmt: skip
    first = store.claim(time.time())
    assert first is not None
    assert store.fail(first, error(), None, time.time())
    assert store.claim(time.time()) is not None
    pg.rows("UPDATE {jobs} SET lease_until = 0 WHERE id = %s", job.id)

    assert store.recover(time.time()) == 1

    assert [r.id for r in store.list_jobs(JobState.DEAD)] == [job.id]
    assert f"dropped dead job {old.id}" in caplog.text


def test_counts_stay_equal_to_the_rows(pg: PG) -> None:
    """The trigger-kept counts after a mix of every change, some concurrent."""
    stores = [pg.opened(dead_letter_limit=5, clock="queue") for _ in range(3)]

    def churn(store: PostgresStore, seed: int) -> None:
        now = T0
        for n in range(60):
            store.add([new_job(n, run_at=now + n % 3, key=f"k{n % 7}")], now)
            store.add([new_job(n), new_job(n + 1)], now)
            now += 1
            claim = store.claim(now)
            if claim is None:
                continue
            if (n + seed) % 4 == 0:
                store.finish(claim, None, None, now)
            elif (n + seed) % 4 == 1:
                store.fail(claim, error(now), None, now)
            elif (n + seed) % 4 == 2:
                store.fail(claim, error(now), now + 1, now)
            else:
                store.finish(claim, '"r"', now + 5, now)
            store.cancel(claim.id - 1, now, by="churn", keep_until=now + 5)

    threads = [
        threading.Thread(target=churn, args=(s, n)) for n, s in enumerate(stores)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert stores[0].stats().dead == 5
    # Which jobs died depends on how the threads interleaved: the oldest dead
    # job may have a key that a pending job holds, and revive refuses it then.
    oldest = stores[0].list_jobs(JobState.DEAD)[0]
    for holder in stores[0].list_jobs(JobState.PENDING):
        if oldest.key is not None and holder.key == oldest.key:
            assert stores[0].cancel(holder.id, T0 + 100, by="t", keep_until=T0)
    assert stores[0].revive(oldest.id, T0 + 100)

    counted = dict(pg.rows(
        "SELECT state, count(*) FROM {jobs} WHERE queue = %s GROUP BY state", pg.queue
    ))  # fmt: skip
    stats = stores[0].stats()
    assert stats.pending == counted.get("scheduled", 0) + counted.get("ready", 0)
    assert (stats.running, stats.dead) == (counted.get("running", 0), 4)
    kept = pg.rows(
        "SELECT state, sum(n) FROM {counts} WHERE queue = %s GROUP BY state", pg.queue
    )
    assert {state: int(n) for state, n in kept if n} == counted


def test_burials_at_once_keep_exactly_the_dead_letter_limit(
    pg: PG, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores bury a job each, one short of the limit, while the first
    one's burial has not committed yet: the second trims only once the first
    committed, so the list ends at the limit, not one beyond it."""
    app = f"jobq-test-{secrets.token_hex(4)}"
    first = pg.opened(dead_letter_limit=3)
    second = pg.opened(
        dead_letter_limit=3,
        url=psycopg.conninfo.make_conninfo(URL, application_name=app),
    )
    first.add([new_job(n, max_attempts=1) for n in range(4)], T0)
    for _ in range(2):
        claim = first.claim(T0)
        assert claim is not None
        assert first.fail(claim, error(), None, T0)
    mine, theirs = first.claim(T0), second.claim(T0)
    assert mine is not None
    assert theirs is not None
    trimmed, go_on = threading.Event(), threading.Event()
    trim = first._trim_dead

    def trim_and_wait(*args: Any) -> list[tuple[int, str | None]]:
        dropped = trim(*args)
        trimmed.set()
        go_on.wait(WAIT)  # the burial stays uncommitted meanwhile
        return dropped

    monkeypatch.setattr(first, "_trim_dead", trim_and_wait)
    burying = threading.Thread(target=first.fail, args=(mine, error(), None, T0))
    burying.start()
    assert trimmed.wait(WAIT)
    also = threading.Thread(target=second.fail, args=(theirs, error(), None, T0))
    also.start()
    waiting = "SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
    waiting += " AND wait_event_type = 'Lock'"
    deadline = time.monotonic() + WAIT
    while also.is_alive() and not pg.rows(waiting, app):  # done, or waits
        assert time.monotonic() < deadline
        time.sleep(0.01)
    go_on.set()
    burying.join(WAIT)
    also.join(WAIT)

    assert first.stats().dead == 3
    assert len(first.list_jobs(JobState.DEAD)) == 3


def test_queues_in_one_schema_never_see_each_others_jobs(pg: PG) -> None:
    mail = pg.opened(queue=f"{pg.queue}-mail")
    thumbs = pg.opened(queue=f"{pg.queue}-thumbs")
    [job] = mail.add([new_job("m", key="same")], time.time())

    assert thumbs.add([new_job("t", key="same")], time.time())[0].duplicate is False
    assert thumbs.get(job.id, time.time()) is None
    assert thumbs.cancel(job.id, time.time(), by="t", keep_until=0.0) is None
    claim = thumbs.claim(time.time())
    assert claim is not None
    assert json.loads(claim.payload) == "t"
    assert thumbs.claim(time.time()) is None
    assert (mail.stats().pending, thumbs.stats().running) == (1, 1)


# -- cancelling: the request lives in the row, seen by every store on it -------------


def test_a_cancel_from_another_store_reaches_the_claimer_through_stops_requested(
    pg: PG,
) -> None:
    """Two stores on one schema, as two processes: one runs the job, the
    other asks it to stop; only the current claim hears of it, and its
    failure ends the job cancelled, as the other store then sees it."""
    runner, admin_store = pg.opened(clock="queue"), pg.opened(clock="queue")
    [job, other] = runner.add([new_job("x", key="k"), new_job("y")], T0)
    claims = runner.claim_many(T0, 2)
    assert runner.stops_requested(claims) == []

    assert admin_store.cancel(job.id, T0 + 1, by="ops", keep_until=T0 + 60) == (
        "stopping"
    )
    assert admin_store.cancel(job.id, T0 + 2, by="again", keep_until=T0) == "stopping"

    assert runner.stops_requested(claims) == [job.id]
    stale = claims[0]._replace(token=claims[0].token + 1)
    assert runner.stops_requested([stale]) == []
    seen = admin_store.get(job.id, T0 + 3)
    assert seen is not None
    assert seen.stopping
    assert seen.cancellation == jobq.Cancellation(T0 + 1, "ops", 1)  # the first
    assert admin_store.add([new_job("z", key="k")], T0)[0].duplicate is False
    states = runner.fail_many(
        [Failure(c, error(T0 + 4), T0 + 5) for c in claims], T0 + 4
    )
    assert states == [JobState.CANCELLED, JobState.PENDING]
    ended = admin_store.get(job.id, T0 + 59)
    assert ended is not None
    assert (ended.state, ended.attempts, ended.last_error) == (
        JobState.CANCELLED, 1, "ValueError: boom")  # fmt: skip
    assert admin_store.get(job.id, T0 + 60) is None  # kept until the cancel's
    assert admin_store.stats().cancelled == 1  # on the queue's clock (before T0)
    [again] = [c for c in runner.claim_many(T0 + 5, 2) if c.id == other.id]
    assert runner.stops_requested([again]) == []
    assert admin_store.cancel(other.id, T0 + 6, by="ops", keep_until=T0 + 60)
    assert runner.finish(again, '"done"', T0 + 60, T0 + 7)  # its work is done
    done = admin_store.get(other.id, T0 + 7)
    assert done is not None
    assert (done.state, done.cancellation) == (JobState.COMPLETED, None)


def test_a_worker_never_starts_a_job_it_took_ahead_that_another_took_over(
    pg: PG, caplog: pytest.LogCaptureFixture
) -> None:
    """As after a SIGSTOP past the lease: while the worker's handler runs,
    its leases run out and another process recovers and claims the jobs it
    took ahead. When the handler returns, the worker starts none of them
    (each would then run twice at once) and carries on with new jobs."""
    entered, gate, last = threading.Event(), threading.Event(), threading.Event()
    ran = []

    def handler(job: jobq.Job[str]) -> None:
        ran.append(job.payload)
        if job.payload == "first":
            entered.set()
            assert gate.wait(WAIT)
        if job.payload == "last":
            last.set()

    queue = pg.queue_of(handler, store_options={"claim_batch": 4})
    queue.start(workers=1)
    queue.enqueue_many(["fast"] * 20)  # the worker learns its jobs are quick
    assert queue.join(timeout=WAIT)
    queue.enqueue_many(["first", "b", "c", "d"])  # one claim: b, c, d ahead
    assert entered.wait(WAIT)
    other = pg.opened()
    pg.rows("UPDATE {jobs} SET lease_until = 0 WHERE queue = %s", pg.queue)
    other.recover(time.time())
    taken_over = other.claim_many(time.time(), 10)
    assert {"b", "c", "d"} <= {json.loads(c.payload) for c in taken_over}

    gate.set()
    queue.enqueue("last")
    assert last.wait(WAIT)

    assert [p for p in ran if p not in ("fast", "first")] == ["last"]
    lost = [r.getMessage() for r in caplog.records if "taken ahead" in r.getMessage()]
    assert sum(int(message.split()[0]) for message in lost) == 3, lost


def test_a_stopping_job_whose_lease_ran_out_ends_cancelled_never_pending(
    pg: PG,
) -> None:
    store, other = pg.opened(), pg.opened()
    [job] = store.add([new_job("x", max_attempts=5)], time.time())
    claim = store.claim(time.time())
    assert claim is not None
    assert other.cancel(job.id, time.time(), by="t", keep_until=time.time() + 60)
    pg.rows("UPDATE {jobs} SET lease_until = 0 WHERE id = %s", job.id)

    assert other.recover(time.time()) == 1

    record = other.get(job.id, time.time())
    assert record is not None
    assert (record.state, record.attempts) == (JobState.CANCELLED, 1)
    assert record.errors[-1].type == "jobq.errors.ProcessDied"
    assert other.claim(time.time()) is None
    assert (other.stats().pending, other.stats().cancelled) == (0, 1)


def test_requests_at_once_see_each_other(pg: PG) -> None:
    """Two cancels of one job wait on its row: the one that writes second
    finds the first's request (stopping: it keeps it; pending: the job is
    cancelled already, so it changes nothing)."""
    stores = [pg.opened(clock="queue") for _ in range(4)]  # a connection each
    [pending, running] = stores[0].add([new_job("p"), new_job("r")], T0 + 1)
    pg.rows("UPDATE {jobs} SET state = 'running' WHERE id = %s", running.id)
    outcomes: dict[tuple[int, int], str | None] = {}

    def cancel(n: int, job_id: int) -> None:
        store = stores[n + 2 * (job_id == running.id)]
        outcomes[n, job_id] = store.cancel(
            job_id, T0 + n, by=f"s{n}", keep_until=T0 + 60
        )

    with admin() as conn, conn.transaction():
        conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE id IN (%s, %s) FOR UPDATE").format(
                sql.Identifier(pg.schema, "jobs")
            ),
            (pending.id, running.id),
        )
        threads = [threading.Thread(target=cancel, args=(n, job.id))
                   for n in range(2) for job in (pending, running)]  # fmt: skip
        for thread in threads:
            thread.start()
        wait_for(lambda: waiting_on_locks(conn) == 4)
    for thread in threads:
        thread.join(WAIT)

    assert sorted(map(str, (outcomes[0, pending.id], outcomes[1, pending.id]))) == [
        "None", "cancelled"]  # fmt: skip
    assert (outcomes[0, running.id], outcomes[1, running.id]) == (
        "stopping", "stopping")  # fmt: skip
    record = stores[0].get(running.id, T0)
    assert record is not None
    assert record.cancellation is not None
    assert record.cancellation.attempt == 1


def waiting_on_locks(conn: psycopg.Connection[Any]) -> int:
    """How many sessions wait for a lock ``conn``'s session holds, or for
    one that a session waiting for it holds (the second request for a row
    waits for the first)."""
    row = conn.execute(
        """WITH first AS (SELECT pid FROM pg_stat_activity
                          WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid)))
           SELECT count(*) FROM pg_stat_activity
           WHERE pg_blocking_pids(pid)
               && (SELECT pg_backend_pid() || array_agg(pid) FROM first)"""
    ).fetchone()
    return int(row[0]) if row else 0


# -- the clock -------------------------------------------------------------------------


def test_the_database_clock_orders_jobs_whatever_the_hosts_clock_says(pg: PG) -> None:
    """A host whose clock is an hour ahead: delays still mean seconds on the
    database's clock, and an idle worker neither spins nor oversleeps."""
    ran: list[float] = []
    queue = pg.queue_of(lambda job: ran.append(time.monotonic()),
                        clock=lambda: time.time() + 3600)  # fmt: skip
    store = queue.store
    assert isinstance(store, PostgresStore)
    assert store.uses_own_clock
    claims = 0
    claim = store.claim

    def counting_claim(now: float) -> Claim | None:
        nonlocal claims
        claims += 1
        return claim(now)

    store.claim = counting_claim  # type: ignore[method-assign]
    job = queue.enqueue("later", delay=0.5)
    record = queue.get(job)
    assert record is not None
    assert abs(record.run_at - (time.time() + 0.5)) < 5  # not an hour ahead

    begun = time.monotonic()
    queue.start(workers=2)
    assert queue.join(timeout=WAIT)

    assert 0.4 < ran[0] - begun < 1.5
    assert claims < 30  # idle workers waited for the due time


# -- connections that break or never come ----------------------------------------------


def test_enqueue_to_an_unreachable_server_is_a_clear_store_error() -> None:
    queue = jobq.JobQueue(None, store="postgresql://postgres@127.0.0.1:1/test")
    try:
        with pytest.raises(StoreError, match=r"127\.0\.0\.1:1.*refused"):
            queue.enqueue("x")
        assert isinstance(queue.store, PostgresStore)
        with pytest.raises(StoreError, match="refused"):
            queue.store.check()
    finally:
        queue.close()


def test_a_missing_database_is_named_at_first_use() -> None:
    store = PostgresStore(URL.rsplit("/", 1)[0] + "/no_such_db_jobq")

    with pytest.raises(StoreError, match="no_such_db_jobq"):
        store.check()


def test_connections_the_server_closed_are_replaced_without_errors(pg: PG) -> None:
    """``pg_terminate_backend`` every connection of the queue: the next calls
    work on new ones, and the listener listens again by itself."""
    ran = threading.Event()
    queue = pg.queue_of(lambda job: ran.set()).start(workers=2)
    store = queue.store
    assert isinstance(store, PostgresStore)
    queue.enqueue("warm-up")
    assert queue.join(timeout=WAIT)
    ran.clear()

    with admin() as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s",
            (f"jobq:{pg.queue}",),
        ).fetchone()
    assert killed is not None
    assert killed[0] >= 2  # the pool's connection and the listener

    time.sleep(0.3)  # the listener noticed at once; give it time to reconnect
    wait_for(lambda: store.listening)
    queue.enqueue("after")
    assert ran.wait(WAIT)
    assert queue.join(timeout=WAIT)


def test_listen_false_polls_for_jobs_of_other_processes(pg: PG) -> None:
    ran = threading.Event()
    worker = pg.queue_of(
        lambda job: ran.set(),
        store_options={"listen": False, "poll_interval": 0.05},
    ).start(workers=1)
    other = pg.queue_of(None)
    worker.stats()  # open: its idle worker now sleeps
    time.sleep(0.1)

    begun = time.monotonic()
    other.enqueue("x")

    assert ran.wait(WAIT)
    assert time.monotonic() - begun < 0.5


# -- enqueue inside the caller's transaction -------------------------------------------


def test_enqueue_in_the_callers_transaction_exists_only_if_it_commits(pg: PG) -> None:
    ran: list[Any] = []
    queue = pg.queue_of(lambda job: ran.append(job.payload))
    with psycopg.connect(URL) as conn:
        conn.execute("SELECT 1")  # the caller's transaction is open
        rolled = queue.enqueue("rolled back", connection=conn)
        assert queue.get(rolled) is None  # not visible before the commit
        conn.rollback()

        committed = queue.enqueue_many(["a", "b"], connection=conn, key="k")
        assert queue.stats().pending == 0
        conn.commit()

    assert queue.get(rolled) is None
    assert [e.duplicate for e in committed] == [False, True]
    assert queue.stats().pending == 1
    assert queue.run_pending() == 1
    assert ran == ["a"]


def test_enqueue_in_a_transaction_block_of_an_autocommit_connection(pg: PG) -> None:
    queue = pg.queue_of(None)
    with psycopg.connect(URL, autocommit=True) as conn:
        with contextlib.suppress(ZeroDivisionError), conn.transaction():
            queue.enqueue("x", connection=conn)
            1 / 0  # noqa: B018 - the caller's transaction fails
        assert queue.stats().pending == 0
        with conn.transaction():
            job = queue.enqueue("y", connection=conn)

    record = queue.get(job)
    assert record is not None
    assert record.payload == "y"


def test_connection_must_be_a_psycopg_connection_and_other_stores_refuse_it(
    pg: PG,
) -> None:
    queue = pg.queue_of(None)
    with pytest.raises(TypeError, match="psycopg 3 connection"):
        queue.enqueue("x", connection=object())
    memory = jobq.JobQueue(None)
    with pytest.raises(TypeError, match="MemoryStore cannot add jobs in the caller"):
        memory.enqueue("x", connection=object())
    assert memory.stats().pending == 0


# -- several processes -----------------------------------------------------------------

CHILD = r"""
import json, logging, os, sys, threading, time
import jobq
logging.basicConfig(level=logging.WARNING)  # to the test's captured stderr
from jobq.stores import PostgresStore

config = json.loads(sys.argv[1])
out = open(config["out"], "a", buffering=1) if config.get("out") else None
store = PostgresStore(config["url"], schema=config["schema"], queue=config["queue"],
                      lease_seconds=config.get("lease", 30.0))
if "batch_seconds" in config:  # how long a handler may take for batches to grow
    import jobq._worker.pool
    jobq._worker.pool.BATCH_SECONDS = config["batch_seconds"]
started = threading.Event()

def handler(job):
    out.write(json.dumps({"id": job.id, "pid": os.getpid(), "attempt": job.attempt,
                          "at": time.time(), "payload": job.payload}) + "\n")
    if config["mode"] == "hang" or job.payload == "hang":
        time.sleep(3600)
    time.sleep(config.get("sleep", 0))

queue = jobq.JobQueue(handler, store=store)
if config["mode"] == "keys":
    queue.stats()  # open before the start line
    print("ready", flush=True)
    time.sleep(max(config["start_at"] - time.time(), 0))
    got = [[k, *(lambda e: [e.id, e.duplicate])(queue.enqueue(k, key=k))]
           for k in config["keys"]]
    print(json.dumps(got), flush=True)
else:
    queue.start(workers=config.get("workers", 1))
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
queue.close(timeout=10)
"""


class Child:
    def __init__(self, pg: PG, out: Path | None, **config: Any) -> None:
        config = {"url": URL, "schema": pg.schema, "queue": pg.queue,
                  "out": str(out) if out else None, **config}  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(config)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ready(self) -> None:
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "ready\n"

    def line(self) -> Any:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def finish(self) -> None:
        self.proc.communicate(timeout=WAIT)
        assert self.proc.returncode == 0

    def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.communicate(timeout=WAIT)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for(condition: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_jobs_taken_ahead_by_a_killed_worker_run_once_with_no_attempt_counted(
    pg: PG, tmp_path: Path, children: list[Child]
) -> None:
    out = tmp_path / "ran.jsonl"
    child = Child(pg, out, mode="run", lease=1.0, batch_seconds=1.0)
    children.append(child)
    child.ready()
    queue = pg.queue_of(None)
    queue.enqueue_many(list(range(100)))  # handlers faster than 1 s: claims grow
    wait_for(lambda: len(records(out)) == 100)
    jobs = [e.id for e in queue.enqueue_many(["hang", *range(9)])]
    wait_for(lambda: records(out)[-1]["payload"] == "hang")
    query = """SELECT id FROM {jobs}
        WHERE queue = %s AND state = 'running' AND started_at IS NULL"""
    ahead = {job for (job,) in pg.rows(query, pg.queue)}
    assert ahead, "the claim took no job ahead of the one that hangs"
    child.kill()
    seen: dict[int, tuple[int, int]] = {}

    def handler(running: jobq.Job[Any]) -> None:
        record = rescuer.get(running.id)
        assert record is not None
        seen[running.id] = (running.attempt, len(record.errors))

    rescuer = pg.queue_of(handler, store_options={"lease_seconds": 1.0})
    rescuer.start(workers=1)
    assert rescuer.join(timeout=WAIT)

    assert sorted(seen) == jobs  # each once here, and none in the killed child
    assert [r["id"] for r in records(out)][100:] == [jobs[0]]
    assert seen[jobs[0]] == (2, 1)  # the one that started: a failed attempt
    assert {seen[job] for job in ahead} == {(1, 0)}  # taken ahead: no attempt


def test_three_processes_share_a_queue_and_run_every_job_once(
    pg: PG, tmp_path: Path, children: list[Child]
) -> None:
    out = tmp_path / "ran.jsonl"
    children.extend(Child(pg, out, mode="run", workers=2, sleep=0.002)
                    for _ in range(3))  # fmt: skip
    for child in children:
        child.ready()
    queue = pg.queue_of(None)

    jobs = [queue.enqueue({"n": n}).id for n in range(150)]
    jobs += [e.id for e in queue.enqueue_many([{"n": n} for n in range(150)])]
    assert queue.join(timeout=WAIT)
    for child in children:
        child.finish()

    ran = records(out)
    assert sorted(r["id"] for r in ran) == sorted(jobs)
    per_process = collections.Counter(r["pid"] for r in ran)
    assert len(per_process) == 3
    assert min(per_process.values()) >= len(jobs) // 20, per_process


def test_a_killed_workers_job_is_finished_by_another_after_its_lease(
    pg: PG, tmp_path: Path, children: list[Child]
) -> None:
    out = tmp_path / "ran.jsonl"
    child = Child(pg, out, mode="hang", lease=1.0)
    children.append(child)
    child.ready()
    queue = pg.queue_of(None)
    job = queue.enqueue("mail")
    wait_for(lambda: bool(records(out)))
    child.kill()
    [(lease_until,)] = pg.rows("SELECT lease_until FROM {jobs} WHERE id = %s", job.id)
    seen: list[Any] = []

    def handler(running: jobq.Job[Any]) -> None:
        record = rescuer.get(running.id)
        assert record is not None
        seen.append((running.attempt, record.errors))

    rescuer = pg.queue_of(handler, store_options={"lease_seconds": 1.0})
    rescuer.start(workers=1)
    assert rescuer.join(timeout=WAIT)

    [(attempt, errors)] = seen
    assert attempt == 2
    [died] = errors
    assert died.type == "jobq.errors.ProcessDied"
    assert died.at >= lease_until  # recovered on the database's clock, after expiry
    assert rescuer.get(job) is None


def test_two_processes_racing_to_enqueue_the_same_keys_get_one_job_each(
    pg: PG, children: list[Child]
) -> None:
    keys = [f"key-{n}" for n in range(100)]
    start_at = time.time() + 1.0
    children.extend(Child(pg, None, mode="keys", keys=keys, start_at=start_at)
                    for _ in range(2))  # fmt: skip
    for child in children:
        child.ready()
    first, second = (child.line() for child in children)
    for child in children:
        child.finish()

    for (key, id1, dup1), (_, id2, dup2) in zip(first, second, strict=True):
        assert id1 == id2, key
        assert sorted([dup1, dup2]) == [False, True], key
    assert pg.rows(
        "SELECT key, count(*) FROM {jobs} WHERE queue = %s GROUP BY key"
        " HAVING count(*) > 1", pg.queue
    ) == []  # fmt: skip
    assert len(pg.rows("SELECT id FROM {jobs} WHERE queue = %s", pg.queue)) == 100


def test_an_idle_worker_in_another_process_wakes_through_notify(
    pg: PG, tmp_path: Path, children: list[Child]
) -> None:
    out = tmp_path / "ran.jsonl"
    child = Child(pg, out, mode="run", workers=1)
    children.append(child)
    child.ready()
    queue = pg.queue_of(None)
    queue.stats()
    latencies = []
    for n in range(7):
        time.sleep(0.05)  # the worker is idle again
        sent = time.time()
        queue.enqueue(n)
        wait_for(lambda n=n: len(records(out)) > n)  # type: ignore[misc]
        latencies.append(records(out)[n]["at"] - sent)
    child.finish()

    # Idle workers also look every second on their own: polling alone would
    # give a median near 0.5 s (below 0.2 s by luck about 3 % of the time).
    # With NOTIFY it is a few milliseconds.
    assert sorted(latencies)[3] < 0.2, latencies


def test_a_store_closed_right_after_an_enqueue_still_sends_its_wake_up(
    pg: PG,
) -> None:
    """Notifications go out after the commit, from a thread of the store:
    ``close`` sends the one still due before it returns."""
    ran = threading.Semaphore(0)
    ran_at: list[float] = []

    def handler(job: jobq.Job[Any]) -> None:
        ran_at.append(time.monotonic())
        ran.release()

    pg.queue_of(handler).start(workers=1).stats()
    latencies = []
    for _ in range(3):
        with jobq.JobQueue(None, store=pg.store()) as sender:
            sender.enqueue("warm-up")  # starts the store's notifying thread
            assert ran.acquire(timeout=WAIT)
            time.sleep(0.1)  # the worker and that thread are idle
            sent = time.monotonic()
            sender.enqueue("timed")
        assert ran.acquire(timeout=WAIT)
        latencies.append(ran_at[-1] - sent)

    # Polling alone: each below 0.25 s by luck about a quarter of the time.
    assert max(latencies) < 0.25, latencies


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_uses_connections_of_its_own(pg: PG) -> None:
    queue = pg.queue_of(lambda job: None)
    queue.enqueue("parent")
    store = queue.store
    assert isinstance(store, PostgresStore)
    parent_pool = store._pool
    with warnings.catch_warnings():  # 3.12+: forking with threads running
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report through the exit status, never return
        ok = False
        try:
            ok = store._pool is None and queue.enqueue("child").id > 0
            ok = ok and store._pool is not parent_pool and queue.run_pending() == 2
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert queue.stats().pending == 0  # the parent's connections still work
    queue.enqueue("parent again")
    assert queue.run_pending() == 1


# -- the server restarts under load ----------------------------------------------------


def cluster() -> list[str] | None:
    """``pg_ctlcluster`` arguments for the local server, if this process may
    restart it (root, Debian's tools, and the server's cluster name), and
    ``JOBQ_NO_POSTGRES_RESTART`` does not ask to spare a shared server."""
    if os.geteuid() != 0 or shutil.which("pg_ctlcluster") is None:
        return None
    if os.environ.get("JOBQ_NO_POSTGRES_RESTART") == "1":
        return None
    try:
        with admin() as conn:
            row = conn.execute(
                "SELECT current_setting('cluster_name'),"
                " coalesce(inet_server_addr() << '127.0.0.0/8'"
                " OR inet_server_addr() = '::1', true)"  # NULL: a local socket
            ).fetchone()
    except psycopg.Error:
        return None
    if row is None or not row[1]:
        return None  # not a server on this host
    version, _, name = row[0].partition("/")
    return [version, name] if version and name else None


@pytest.mark.skipif(
    cluster() is None,
    reason="needs root, pg_ctlcluster and a local cluster (and no "
    "JOBQ_NO_POSTGRES_RESTART=1)",
)
def test_a_database_restart_under_load_loses_nothing_acknowledged(
    pg: PG, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("CRITICAL", logger="jobq")  # the outage is logged at length
    caplog.set_level("CRITICAL", logger="psycopg")
    ran: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def handler(job: jobq.Job[Any]) -> None:
        with lock:
            ran[job.payload] += 1

    queue = pg.queue_of(
        handler, store_options={"lease_seconds": 2.0, "connect_timeout": 10.0}
    ).start(workers=4)
    store = queue.store
    assert isinstance(store, PostgresStore)
    acknowledged: list[int] = []
    attempted = 0
    refused = 0
    stop = threading.Event()

    def produce() -> None:
        nonlocal attempted, refused
        while not stop.is_set():
            attempted += 1
            try:
                queue.enqueue(attempted)
            except StoreError:
                refused += 1
                time.sleep(0.05)
            else:
                acknowledged.append(attempted)
            time.sleep(0.001)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_for(lambda: len(ran) > 200)
        args = cluster()
        assert args is not None
        tool = shutil.which("pg_ctlcluster")
        assert tool is not None
        subprocess.run([tool, *args, "restart"], check=True, timeout=120)
        restarted_at = len(acknowledged)
        wait_for(lambda: len(acknowledged) > restarted_at + 200)
    finally:
        stop.set()
        producer.join(WAIT)

    assert queue.join(timeout=WAIT)
    lost = set(acknowledged) - set(ran)
    unexpected = set(ran) - set(range(1, attempted + 1))
    assert (lost, unexpected) == (set(), set())
    assert all(n in ran for n in acknowledged[restarted_at:])  # workers came back
    wait_for(lambda: store.listening)


# -- limits ---------------------------------------------------------------------------


def test_the_limits_statements_read_indexes_beside_many_jobs(pg: PG) -> None:
    """100,000 jobs, 20,000 of them held by 2,000 keys: releasing, the
    claim's steps, next_due, usage and the due page (held jobs of every key
    in run order) read the indexes of their tables."""
    store = pg.opened()
    store.declare_limit(Limit("account:*", concurrency=1))
    pg.rows(
        """INSERT INTO {jobs} (queue, state, payload, priority, run_at, created_at,
                               max_attempts, limits, held_by)
           SELECT %s, CASE WHEN n %% 5 = 0 THEN 'held' ELSE 'ready' END, '0', 0,
                  n, 0, 5, ARRAY['account:' || (n %% 2000)],
                  CASE WHEN n %% 5 = 0 THEN 'account:' || (n %% 2000) END
           FROM generate_series(1, 100000) AS n""",
        pg.queue,
    )
    pg.rows("ANALYZE {jobs}")
    statements = store._sql
    common = {"q": pg.queue, "now": None}
    keys = {**common, "keys": ["account:1", "account:2"]}
    plans = {
        "releasable": explain(store, statements.releasable, common),
        "release_held": explain(store, statements.release_held, {
            **keys, "counts": [1, 1], "ready": [None, None]}),
        "limited_pick": explain(store, statements.limited_pick, {
            **common, "batch": 1000, "limit": 8}),
        "lock_keys": explain(store, statements.lock_keys, keys),
        "key_use": explain(store, statements.key_use, keys),
        "next_due": explain(store, statements.next_due, common),
        "due_page": explain(store, statements.pages["due"], {
            **common, "limit": 50, "c0": 2**63 - 1, "c1": -1e308, "c2": 0,
            "task": None, "key": None, "error": None}),
    }  # fmt: skip

    assert "jobs_held" in plans["release_held"]
    assert "jobs_held_order" in plans["due_page"]  # every key's, in run order
    assert "limit_keys_ready" in plans["releasable"]
    assert "jobs_held" in plans["releasable"]
    assert "jobs_ready" in plans["limited_pick"]
    assert "limit_keys_ready" in plans["next_due"]
    seq_scans = {name: "Seq Scan on jobs" in text for name, text in plans.items()}
    assert seq_scans == dict.fromkeys(plans, False), plans


def test_two_stores_never_run_one_keys_jobs_at_once(pg: PG) -> None:
    """Two stores (as two processes) claim from threads at once, batches of
    3, under a family of keys with ``concurrency=1``: no key ever has two
    claims at once, and every job runs once."""
    stores = [pg.opened(), pg.opened()]
    stores[0].declare_limit(Limit("account:*", concurrency=1))
    jobs = [limited_job(n, f"account:{n % 4}") for n in range(120)]
    stores[0].add(jobs, time.time())
    lock = threading.Lock()
    holding: collections.Counter[str] = collections.Counter()
    most = collections.Counter[str]()
    ran: list[int] = []

    def work(store: PostgresStore) -> None:
        deadline = time.monotonic() + WAIT
        while len(ran) < len(jobs) and time.monotonic() < deadline:
            claims = store.claim_many(time.time(), 3)
            with lock:
                for claim in claims:
                    holding[claim.limits[0]] += 1
                    most[claim.limits[0]] = max(most[claim.limits[0]],
                                               holding[claim.limits[0]])  # fmt: skip
                    ran.append(claim.id)
            with lock:
                for claim in claims:
                    holding[claim.limits[0]] -= 1
            store.finish_many([Done(c, None) for c in claims], None, time.time())

    threads = [threading.Thread(target=work, args=(stores[n % 2],)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(ran) == len(set(ran)) == len(jobs)
    assert set(most.values()) == {1}
    assert stores[1].limit_usage(time.time())[0].running == 0


def test_held_jobs_are_released_in_their_order_as_slots_free(pg: PG) -> None:
    """A key held full: its held jobs start in priority, then due order as
    the running one ends, whichever way (a success, a failure, a release)."""
    store = pg.opened(clock="queue")
    store.declare_limit(Limit("smtp", concurrency=1))
    first_id = store.add([limited_job("first", "smtp", priority=10)], T0)[0].id
    low, high, mid = (store.add([limited_job(p, "smtp", priority=p)], T0)[0].id
                      for p in (1, 9, 5))  # fmt: skip
    claim = store.claim(T0)
    assert claim is not None
    assert claim.id == first_id
    assert store.claim_many(T0, 10) == []
    usage = store.limit_usage(T0)
    assert [(u.name, u.running, u.waiting) for u in usage] == [("smtp", 1, 3)]
    assert store.stats().pending == 3

    order = []
    store.finish(claim, None, None, T0)
    claim = store.claim(T0)
    assert claim is not None
    order.append(claim.id)
    store.fail(claim, error(), T0 + 60, T0)
    claim = store.claim(T0)
    assert claim is not None
    order.append(claim.id)
    store.release([claim], T0)
    claim = store.claim(T0)
    assert claim is not None
    order.append(claim.id)

    assert order == [high, mid, mid]
    assert store.claim_many(T0, 10) == []
    assert store.get(low, T0) is not None
    assert store.get(low, T0).held_by == "smtp"  # type: ignore[union-attr]
    assert store.cancel(low, T0, by="t", keep_until=T0 + 60) == "cancelled"
    cancelled = store.get(low, T0)
    assert cancelled is not None
    assert (cancelled.state, cancelled.held_by) == (JobState.CANCELLED, None)


def test_the_due_page_lists_held_jobs_among_the_due_ones_page_by_page(
    pg: PG,
) -> None:
    """Held jobs are pending and due: the due page lists them with the
    ready ones in run order (priority, then due time, then id), two at a
    time, none twice, none left out."""
    store = pg.opened(clock="queue")
    for name in ("smtp", "api"):
        store.declare_limit(Limit(name, concurrency=1))
        store.add([limited_job("running", name, priority=9)], T0)
    assert len(store.claim_many(T0, 2)) == 2  # both keys full
    keys = ((3, "smtp"), (5, "api"), (3, "api"), (1, "smtp"))
    held = [store.add([limited_job(p, name, priority=p)], T0)[0].id for p, name in keys]
    assert store.claim_many(T0, 10) == []  # all held
    ready = [store.add([new_job(p, priority=p)], T0)[0].id for p in (5, 3, 0)]

    seen, after = [], None
    while True:
        page = store.page_jobs(JobQuery("due", limit=2, after=after), T0)
        seen += [(job.id, job.held_by) for job in page.jobs]
        after = page.after
        if after is None:
            break

    priority = dict(zip(held + ready, (3, 5, 3, 1, 5, 3, 0), strict=True))
    in_order = sorted(held + ready, key=lambda job_id: (-priority[job_id], job_id))
    assert [job_id for job_id, _ in seen] == in_order
    assert [job_id for job_id, held_by in seen if held_by] == [
        job_id for job_id in in_order if job_id in held
    ]


# -- activity --------------------------------------------------------------------------


def hold_outcome_row(holder: psycopg.Connection[Any], pg: PG, task: str) -> None:
    """In ``holder``'s transaction, the row of ``MINUTE`` and ``task`` added
    and not committed: a beat adding to it waits until ``holder`` ends."""
    holder.execute(
        sql.SQL("INSERT INTO {} VALUES (%s, %s, true, %s, 0, 0, 0, 0, %s)").format(
            sql.Identifier(pg.schema, "outcomes")
        ),
        (pg.queue, MINUTE, task, [0] * BUCKETS),
    )


def test_beats_of_two_stores_at_once_add_up_and_never_deadlock(pg: PG) -> None:
    """Two stores (as two processes) beat from threads at once, the same
    minute's 30 tasks and plain jobs listed in opposite orders, and its
    sample. Each locks the rows in the key's order: while a session holds
    the middle task's row, one beat waits for it and the other for that
    beat (had each locked them as listed, each would hold one half and wait
    for the other's: a deadlock once the row is free). Then 20 beats each
    at once: every count arrives."""
    stores = [pg.opened(), pg.opened()]
    tasks: list[str | None] = [None, *(f"task-{n:02d}" for n in range(30))]
    failed: list[BaseException] = []

    def beating(index: int, beats: int) -> None:
        order = tasks if index == 0 else tasks[::-1]
        try:
            for n in range(beats):
                rows = tuple(outcomes(MINUTE, t, 1, 1, ran=(0.003,)) for t in order)
                sample = DepthSample(MINUTE, index, 0, 0, None)
                stores[index].beat(beat(process(f"p{index}", T0 + n), rows, sample), T0)
        except BaseException as exc:
            failed.append(exc)

    def at_once(beats: int, holder: psycopg.Connection[Any] | None = None) -> None:
        threads = [threading.Thread(target=beating, args=(i, beats)) for i in (0, 1)]
        for thread in threads:
            thread.start()
        if holder is not None:
            wait_for(lambda: waiting_on_locks(holder) == 2)
            holder.rollback()
        for thread in threads:
            thread.join(WAIT)

    with psycopg.connect(URL) as holder:
        hold_outcome_row(holder, pg, "task-15")
        at_once(1, holder)
    at_once(20)

    assert failed == []
    total = 2 * 21
    assert stores[0].outcomes(MINUTE, T0) == [
        outcomes(MINUTE, t, total, total, ran=(0.003,) * total) for t in tasks
    ]
    assert len(stores[1].samples(MINUTE, T0)) == 1
    assert [info.seen for info in stores[1].processes(T0)] == [T0 + 19] * 2


def test_task_names_are_kept_and_ordered_as_the_memory_store_keeps_them(
    pg: PG,
) -> None:
    """Plain jobs (``None``) and a task named "" are two rows, and names
    sort by code point whatever the database's collation, as Python sorts:
    the rows read are the memory store's, in its order."""
    names = [None, "", "b", "B", "a", "é", "Z", "x'; DROP TABLE jobs; --",
             'q"uote', "\\", "a" * 1000, "✓", "$$ $body$"]  # fmt: skip
    rows = tuple(
        outcomes(MINUTE + 60 * (n % 2), name, n + 1, ran=(0.01 * n,))
        for n, name in enumerate(names)
    )
    stores = (pg.opened(), MemoryStore())
    for store in stores:
        store.beat(beat(None, rows), T0 + 60)

    found = [store.outcomes(MINUTE, T0 + 60) for store in stores]
    assert found[0] == found[1]
    assert len(found[0]) == len(names)


def test_text_postgresql_cannot_hold_is_written_escaped_never_failing_beats(
    pg: PG,
) -> None:
    """A job's task never holds NUL (the jobs table refuses it), but a beat
    built by hand may: such names are written as jobq writes error texts
    (NUL as "\\x00", a lone surrogate escaped), since a beat that failed
    gives its tally back and would fail again each time. The running jobs
    keep their tasks exactly (JSON text)."""
    store = pg.opened()
    running = (RunningJob(1, "n\x00ul", T0), RunningJob(2, "s\udcffx", T0))
    info = process("a\x00b", T0, busy=2, running=running)
    rows = (outcomes(MINUTE, "n\x00ul", 1), outcomes(MINUTE, "s\udcffx", 2))

    store.beat(beat(info, rows), T0)

    assert [(row.task, row.succeeded) for row in store.outcomes(MINUTE, T0)] == [
        ("n\\x00ul", 1), ("s\\udcffx", 2)]  # fmt: skip
    (found,) = store.processes(T0)
    assert (found.id, found.host) == ("host-a\\x00b:1:a\\x00b", "host-a\\x00b")
    assert found.running == running
    store.leave(info.id)  # the id as the process knows it
    assert store.processes(T0) == []


def test_counts_are_64_bit_and_a_beat_past_that_writes_nothing(pg: PG) -> None:
    """Counts add up to 2**63 - 1; a beat whose sum would pass it is a
    ``StoreError`` and one transaction: its process row and its other
    rows are not written either."""
    store = pg.opened()
    store.beat(beat(None, (outcomes(MINUTE, "t", 2**62, 1, 0, 2**40),)), T0)
    store.beat(beat(None, (outcomes(MINUTE, "t", 2**62 - 1, 1),)), T0)
    summed = outcomes(MINUTE, "t", 2**63 - 1, 2, 0, 2**40)

    rows = (outcomes(MINUTE, "a", 1), outcomes(MINUTE, "t", 1))
    with pytest.raises(StoreError, match="bigint out of range"):
        store.beat(beat(process("a", T0), rows), T0)

    assert store.outcomes(MINUTE, T0) == [summed]
    assert store.processes(T0) == []


def test_a_process_running_thousands_of_jobs_is_kept_whole(pg: PG) -> None:
    store = pg.opened()
    running = tuple(
        RunningJob(n, None if n % 3 == 0 else f"task-{n % 7}", T0 - n / 1000)
        for n in range(1, 5001)
    )
    info = process("a", T0, workers=5000, busy=5000, running=running)

    store.beat(beat(info), T0)

    assert store.processes(T0) == [info]


def test_a_beat_whose_connection_dies_midway_is_a_store_error_writing_nothing(
    pg: PG,
) -> None:
    """Another session holds the row of the beat's tally: the beat waits
    inside its transaction, its process row written, and its connection is
    ended there, as by a server going away. ``StoreError``, none of its
    rows, and the next beat works on a new connection."""
    store = pg.opened()
    failed: list[BaseException] = []
    rows = (outcomes(MINUTE, "t", 1),)

    def beating() -> None:
        try:
            store.beat(beat(process("a", T0), rows), T0)
        except BaseException as exc:
            failed.append(exc)

    with psycopg.connect(URL) as holder:
        hold_outcome_row(holder, pg, "t")
        thread = threading.Thread(target=beating)
        thread.start()
        wait_for(lambda: waiting_on_locks(holder) == 1)
        with admin() as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE %s = ANY(pg_blocking_pids(pid))",
                (holder.info.backend_pid,),
            )
        thread.join(WAIT)
        holder.rollback()

    assert len(failed) == 1
    assert isinstance(failed[0], StoreError)
    assert "connection lost" in str(failed[0])
    assert store.processes(T0) == []
    assert store.outcomes(MINUTE, T0) == []
    store.beat(beat(process("a", T0), rows), T0)
    assert store.outcomes(MINUTE, T0) == list(rows)


def test_queues_in_one_schema_never_see_each_others_figures(pg: PG) -> None:
    mine, other = pg.opened(), pg.opened(queue=f"{pg.queue}-other")
    sample = DepthSample(MINUTE, 1, 0, 0, None)
    mine.beat(beat(process("a", T0), (outcomes(MINUTE, "t", 1),), sample), T0)

    assert (other.processes(T0), other.outcomes(MINUTE, T0)) == ([], [])
    assert other.samples(MINUTE, T0) == []
    other.beat(beat(process("a", T0), (outcomes(MINUTE, "t", 5),)), T0 + 60)
    other.leave("host-a:1:a")
    assert [info.id for info in mine.processes(T0)] == ["host-a:1:a"]
    assert mine.outcomes(MINUTE, T0 + 60) == [outcomes(MINUTE, "t", 1)]


def test_the_activity_reads_and_drops_read_only_the_minutes_asked(pg: PG) -> None:
    """A day of outcomes (20 tasks) and samples: reading an hour, and the
    beat's drop of what is older than a day, are ranges of the primary
    keys; no statement reads the jobs."""
    store = pg.opened()
    pg.rows(
        """INSERT INTO {outcomes}
           SELECT %s, %s + 60 * m, true, 'task-' || t, 1, 0, 0, 0,
                  array_fill(0::bigint, ARRAY[%s::integer])
           FROM generate_series(-1439, 0) AS m, generate_series(1, 20) AS t""",
        pg.queue,
        MINUTE,
        BUCKETS,
    )
    pg.rows(
        """INSERT INTO {samples} SELECT %s, %s + 60 * m, 1, 0, 0, NULL
           FROM generate_series(-1439, 0) AS m""",
        pg.queue,
        MINUTE,
    )
    pg.rows("ANALYZE {outcomes}")
    pg.rows("ANALYZE {samples}")
    statements = store._sql
    hour = {"q": pg.queue, **minutes_params(MINUTE - 3540, T0)}
    drop = {"q": pg.queue, **drop_params(T0 + 120)}  # the oldest minute goes
    plans = {
        "outcomes": explain(store, statements.outcomes, hour),
        "samples": explain(store, statements.samples, hour),
        "drop": explain(store, statements.drop_old_activity, drop),
    }

    assert "outcomes_pkey" in plans["outcomes"]
    assert "samples_pkey" in plans["samples"]
    assert "outcomes_pkey" in plans["drop"]
    assert "samples_pkey" in plans["drop"]
    assert "Sort" not in plans["outcomes"]  # the key's order is the rows'
    unwanted = ("Seq Scan on outcomes", "Seq Scan on samples", " jobs")
    scans = {name: any(w in text for w in unwanted) for name, text in plans.items()}
    assert scans == dict.fromkeys(plans, False), plans
    assert len(store.outcomes(MINUTE - 3540, T0)) == 60 * 20
