"""Wake-ups across processes for the PostgreSQL store: LISTEN/NOTIFY.

A notification counts its jobs, and the listener wakes that many idle
workers, not all of them; one without a count (an enqueue in the caller's
transaction, an older jobq) wakes them all. Every store here polls only once
an hour, so only a notification can wake anything within the test's
patience. Waits are on conditions, capped by ``WAIT``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from idle_workers import IdleWorkers
from postgres_url import POSTGRES_URL
from psycopg import sql

from jobq.stores import PostgresStore
from jobq.stores.base import NewJob, Signal
from jobq.stores.postgres import wakeups
from jobq.stores.postgres.wakeups import Notifier, wake_count

ROOT = Path(__file__).resolve().parents[1]
URL = POSTGRES_URL
WAIT = 30.0
HOUR = 3600.0
#: How long a worker that should not be woken is given to be woken anyway.
QUIET_SPELL = 0.5

Opened = Callable[..., tuple[PostgresStore, Signal]]


@pytest.fixture
def opened(postgres_schema: str) -> Iterator[Opened]:
    """Opens stores on one queue of the session's schema (each with a Signal
    of its own); closes them after the test."""
    queue = f"wake-{secrets.token_hex(4)}"
    stores: list[PostgresStore] = []

    def make(**options: Any) -> tuple[PostgresStore, Signal]:
        options.setdefault("poll_interval", HOUR)
        store = PostgresStore(URL, schema=postgres_schema, queue=queue, **options)
        sig = Signal()
        store.open(sig, dead_letter_limit=10)
        stores.append(store)
        return store, sig

    yield make
    for store in stores:
        store.close()


def listening(store: PostgresStore) -> PostgresStore:
    deadline = time.monotonic() + WAIT
    while not store.listening:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    return store


def jobs(n: int) -> list[NewJob]:
    return [NewJob(str(i), 0.0, None, 0, 3) for i in range(n)]


ENQUEUE = """
import sys
from jobq.stores import PostgresStore
from jobq.stores.base import NewJob, Signal
store = PostgresStore(sys.argv[1], schema=sys.argv[2], queue=sys.argv[3], listen=False)
store.open(Signal(), dead_letter_limit=10)
store.add([NewJob(str(i), 0.0, None, 0, 3) for i in range(int(sys.argv[4]))], 0.0)
store.close()  # sends the notification still due first
"""


def test_another_process_enqueue_wakes_as_many_idle_workers_as_jobs(
    opened: Opened,
) -> None:
    store, sig = opened()
    listening(store)

    for n, expected in ((1, [True, False, False]), (2, [True, True, False])):
        idle = IdleWorkers(sig, 3)
        subprocess.run(
            [sys.executable, "-c", ENQUEUE, URL, store.schema, store.queue, str(n)],
            cwd=ROOT,
            check=True,
            timeout=WAIT,
        )
        assert idle.settle(n, QUIET_SPELL) == expected


def test_a_notification_without_a_count_wakes_every_idle_worker(
    opened: Opened,
) -> None:
    store, sig = opened()
    listening(store)
    idle = IdleWorkers(sig, 3, timeout=WAIT)

    with psycopg.connect(URL, autocommit=True) as conn:  # as an older jobq does
        conn.execute(
            "SELECT pg_notify(%s, %s)", (store.channel, f"older:{store.queue}")
        )

    assert idle.join() == [True, True, True]


def test_an_enqueue_in_the_callers_transaction_wakes_every_idle_worker(
    opened: Opened,
) -> None:
    store, sig = opened()
    producer, _ = opened(listen=False)
    listening(store)
    idle = IdleWorkers(sig, 3, timeout=WAIT)

    with psycopg.connect(URL) as conn:  # commits at the end of the block
        producer.add(jobs(2), time.time(), connection=conn)

    assert idle.join() == [True, True, True]  # PostgreSQL folds them into one


def test_own_and_other_queues_notifications_wake_nobody(opened: Opened) -> None:
    store, sig = opened()
    listening(store)
    idle = IdleWorkers(sig, 1, timeout=QUIET_SPELL)

    with psycopg.connect(URL, autocommit=True) as conn:
        for payload in (
            f"x/3:{store.queue}-other",
            f"{store._token}/3:{store.queue}",  # this store's own
            "garbage",
        ):
            conn.execute("SELECT pg_notify(%s, %s)", (store.channel, payload))

    assert idle.join() == [False]


#: The token of the listener in the payload tests (what its own Notifier sends).
ME = "me"


def count(payload: str, queue: str = "q") -> int | None:
    return wake_count(payload, queue=queue, token=ME)


def test_the_payload_of_a_notification() -> None:
    assert count("tok/3:q") == 3
    assert count("tok/3:q:x", queue="q:x") == 3  # a ':' in the queue's name
    assert count("tok:q") is None  # no count: all of them
    assert count("-:q") is None
    assert count("tok/x:q") is None
    assert count("tok/0:q") == 1
    assert count("tok/99999999:q") is None
    assert count("tok/9999999:q") == wakeups.MAX_COUNT
    assert count("me/3:q") == 0  # our own
    assert count("me:q") == 0
    assert count("tok/3:other") == 0  # another queue's


SENDER = "sender-of-q"


def test_the_notifier_sends_the_jobs_of_the_requests_it_covers() -> None:
    sent: list[str] = []
    first_sending = threading.Event()
    go_on = threading.Event()

    class Connection:
        def execute(self, query: Any, params: dict[str, str]) -> None:
            sent.append(params["message"])
            first_sending.set()
            go_on.wait(WAIT)

    @contextlib.contextmanager
    def connection() -> Iterator[Any]:
        yield Connection()

    notifier = Notifier(channel="c", queue="q", token=SENDER, connection=connection)
    notifier.request(2)
    assert first_sending.wait(WAIT)  # on its way, blocked
    notifier.request(3)
    notifier.request(1)  # these two coalesce into the next notification
    go_on.set()
    notifier.stop()
    notifier.join()

    assert sent == [f"{SENDER}/2:q", f"{SENDER}/4:q"]


def test_the_listener_waits_on_a_descriptor_beyond_1023(opened: Opened) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip("cannot open 1,200 files here")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    fillers: list[int] = []
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        fillers.append(null)
        while fillers[-1] < 1100:
            fillers.append(os.dup(null))
        store, sig = opened()  # its connections get descriptors beyond 1100
        listening(store)
        producer, _ = opened(listen=False)

        idle = IdleWorkers(sig, 1, timeout=WAIT)
        producer.add(jobs(1), time.time())

        assert idle.join() == [True]
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_renewing_finishing_and_claiming_notify_nobody(
    opened: Opened, postgres_schema: str
) -> None:
    store, sig = opened()
    producer, _ = opened(listen=False)
    listening(store)
    idle = IdleWorkers(sig, 1, timeout=WAIT)
    producer.add(jobs(1), time.time())
    assert idle.join() == [True]
    idle = IdleWorkers(sig, 1, timeout=QUIET_SPELL)

    [claim] = producer.claim_many(time.time(), 1)
    producer.renew([claim], time.time())
    producer.finish(claim, None, None, time.time())

    assert idle.join() == [False]
    with psycopg.connect(URL) as conn:
        table = sql.Identifier(postgres_schema, "jobs")
        count = conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE queue = %s").format(table),
            (store.queue,),
        ).fetchone()
    assert count == (0,)
