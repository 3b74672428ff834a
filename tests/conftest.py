"""Fixtures shared by the test suite: one behavioural suite runs on every store."""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from freezegun import freeze_time
from postgres_url import POSTGRES_URL

import jobq
from jobq.stores import JsonFileStore, MemoryStore, PostgresStore, SqliteStore, Store
from jobq.testing import T0, Clock

StoreFactory = Callable[..., Store]

STORES = ["memory", "json", "sqlite", "postgres"]


def pytest_configure(config: pytest.Config) -> None:
    # A shell starts a background job with SIGINT ignored, and every child
    # inherits that: the tests that press Ctrl-C on a server need it live.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers",
        "queue_clock: the test moves time with freezegun, so a store that orders "
        "jobs on a clock of its own (PostgreSQL, uses_own_clock) is built to follow "
        "the queue's clock instead (make_queue does that by itself for clock=...)",
    )


@pytest.fixture(scope="session")
def postgres_schema() -> Iterator[str]:
    """A fresh schema for this test session (``jobq_test_<random>``) in the
    database of ``POSTGRES_URL``, dropped at its end. Tests that need it skip
    when no server answers, unless JOBQ_REQUIRE_POSTGRES=1 (then they fail)."""
    import psycopg
    from psycopg import sql

    name = f"jobq_test_{secrets.token_hex(4)}"
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("JOBQ_REQUIRE_POSTGRES") == "1":
            raise
        pytest.skip(f"no PostgreSQL server at {POSTGRES_URL}: {exc}")
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
        )


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> StoreFactory:
    """Builds stores of the current kind; every call with one test shares the
    same place, so a second store sees what the first saved (a restart).

    PostgreSQL: one queue name per test in the session's schema. With
    ``queue_clock=True`` the store follows the queue's clock rather than the
    database's (for tests that inject a clock or freeze time)."""
    queue_name = f"test-{secrets.token_hex(6)}"

    def make(*, queue_clock: bool = False) -> Store:
        if store_kind == "memory":
            return MemoryStore()
        if store_kind == "sqlite":
            return SqliteStore(tmp_path / "jobs.db")
        if store_kind == "postgres":
            return PostgresStore(
                POSTGRES_URL,
                schema=request.getfixturevalue("postgres_schema"),
                queue=queue_name,
                clock="queue" if queue_clock else "database",
            )
        return JsonFileStore(tmp_path / "jobs.json")

    return make


@pytest.fixture
def make_queue(
    make_store: StoreFactory, request: pytest.FixtureRequest
) -> Iterator[Callable[..., jobq.JobQueue[Any]]]:
    """Builds queues over the current store kind and closes them after the test.

    A queue given ``clock=`` (or a test marked ``queue_clock``) gets a store
    that follows the queue's clock even where the store has one of its own."""
    queues: list[jobq.JobQueue[Any]] = []
    frozen = request.node.get_closest_marker("queue_clock") is not None

    def make(handler: Any = None, **options: Any) -> jobq.JobQueue[Any]:
        if "store" not in options:
            options["store"] = make_store(queue_clock=frozen or "clock" in options)
        queue: jobq.JobQueue[Any] = jobq.JobQueue(handler, **options)
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.close(timeout=5)


@pytest.fixture
def clock() -> Clock:
    """A wall clock the test moves by hand (``JobQueue(clock=clock)``)."""
    return Clock()


def _utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


@pytest.fixture
def host_time() -> Iterator[Callable[[float], float]]:
    """The host's clock (freezegun), which SQLite's leases follow whatever
    ``now`` a call is given: at ``T0`` at first; ``host_time(t)`` sets it to
    ``t`` and returns ``t``, to pass as that call's ``now`` too."""
    with freeze_time(_utc(T0)) as frozen:

        def at(seconds: float) -> float:
            frozen.move_to(_utc(seconds))
            return seconds

        yield at


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Child processes a test spawns (it appends them); any still running
    at the end is killed, and each is waited for."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)


@pytest.fixture(params=["sqlite", "postgres"])
def shared(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[str, Callable[[], Store]]:
    """A store shared between processes, for tests that run children: where
    it is, as JSON for a child (``{"sqlite": path}`` or ``{"postgres":
    [url, schema, queue]}``), and a factory of this process's stores on it."""
    if request.param == "sqlite":
        path = str(tmp_path / "jobs.db")
        return json.dumps({"sqlite": path}), lambda: SqliteStore(path)
    schema = request.getfixturevalue("postgres_schema")
    name = f"shared-{secrets.token_hex(4)}"
    where = json.dumps({"postgres": [POSTGRES_URL, schema, name]})
    return where, lambda: PostgresStore(POSTGRES_URL, schema=schema, queue=name)
