"""Faults: PostgreSQL connections killed or stalled under a queue at work.

- ``pg_terminate_backend`` on the queue's own connections (picked by their
  ``application_name``, never another test's) at random moments while 4
  threads enqueue and 4 workers run jobs that sometimes fail and retry;
- a connection cut between a commit's send and its answer (a proxy that
  passes the request on and resets the connection instead of the answer);
- a proxy that resets every connection, or blackholes them, for a while.

What must hold: every enqueue that returned is in the store; every one that
raised is absent unless it raised ``OutcomeUnknown`` (its commit's fate
unknown), so that the caller is never told "failed" of an unkeyed job that
then runs; a keyed enqueue retried after ``OutcomeUnknown`` finds its job;
no call blocks past its timeouts; the pool recovers without a restart.

``JOBQ_FAULT_SECONDS=<s>`` makes the loaded run longer (figures by hand).
"""

from __future__ import annotations

import collections
import os
import random
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from faults import Figures, TcpProxy, proxy_to, wait_for
from postgres_url import POSTGRES_URL

import jobq
from jobq import StoreError
from jobq.errors import OutcomeUnknown
from jobq.stores import PostgresStore

SECONDS = float(os.environ.get("JOBQ_FAULT_SECONDS", "4"))


@pytest.fixture
def queue_name() -> str:
    return f"conn-{secrets.token_hex(4)}"


def terminate(queue_name: str) -> int:
    """End the server processes of our queue's connections; how many."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s AND pid <> pg_backend_pid()",
            (f"jobq:{queue_name}"[:63],),
        ).fetchone()
    return int(row[0]) if row else 0


class Producers:
    """Threads that enqueue serials until stopped, sorting each by what its
    ``enqueue`` did: returned, raised ``OutcomeUnknown``, raised another
    ``StoreError``; and the longest any call took."""

    def __init__(self, queue: jobq.JobQueue[Any], threads: int) -> None:
        self.queue = queue
        self.acknowledged: set[int] = set()
        self.unknown: set[int] = set()
        self.refused: set[int] = set()
        self.longest = 0.0
        self._serial = iter(range(1, 10**9))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]
        for thread in self._threads:
            thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                serial = next(self._serial)
            began = time.monotonic()
            try:
                self.queue.enqueue(serial)
            except OutcomeUnknown:
                outcome = self.unknown
            except StoreError:
                outcome = self.refused
            else:
                outcome = self.acknowledged
            took = time.monotonic() - began
            with self._lock:
                outcome.add(serial)
                self.longest = max(self.longest, took)
            if outcome is not self.acknowledged:
                time.sleep(0.01)

    @property
    def attempted(self) -> int:
        return len(self.acknowledged) + len(self.unknown) + len(self.refused)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


@pytest.fixture
def quiet(caplog: pytest.LogCaptureFixture) -> None:
    """The outages are logged at length; keep the output readable."""
    caplog.set_level("CRITICAL", logger="jobq")
    caplog.set_level("CRITICAL", logger="psycopg")


def check(
    figures: Figures, producers: Producers, ran: collections.Counter[int]
) -> None:
    """Nothing acknowledged lost, nothing refused run, nothing unexpected."""
    lost = producers.acknowledged - set(ran)
    refused_but_ran = producers.refused & set(ran)
    unexpected = set(ran) - set(range(1, producers.attempted + 1))
    figures.acknowledged = len(producers.acknowledged)
    figures.lost = len(lost)
    figures.runs = sum(ran.values())
    figures.duplicates = sum(1 for n in ran.values() if n > 1)
    figures.notes.update(
        refused=len(producers.refused), unknown=len(producers.unknown),
        unknown_present=len(producers.unknown & set(ran)),
        refused_but_ran=len(refused_but_ran),
        longest_enqueue_s=round(producers.longest, 3),
    )  # fmt: skip
    figures.report()
    assert (lost, refused_but_ran, unexpected) == (set(), set(), set())


def test_connections_killed_at_random_moments_lose_nothing_and_never_lie(
    postgres_schema: str, queue_name: str, quiet: None
) -> None:
    rng = random.Random()
    ran: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def handler(job: jobq.Job[int]) -> None:
        if job.attempt == 1 and rng.random() < 0.2:
            raise RuntimeError("fails once, then retries")
        with lock:
            ran[job.payload] += 1

    store = PostgresStore(POSTGRES_URL, schema=postgres_schema, queue=queue_name,
                          lease_seconds=1.0, connect_timeout=5.0)  # fmt: skip
    queue = jobq.JobQueue(handler, store=store, max_attempts=100, base_delay=0.01)
    queue.start(workers=4)
    producers = Producers(queue, threads=4)
    kills = 0
    try:
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.005, 0.1))
            kills += terminate(queue_name)
    finally:
        producers.stop()
    try:
        assert queue.join(timeout=60)
        stats = queue.stats()
    finally:
        queue.close(timeout=10)
    figures = Figures("connections killed", "postgres", stuck=stats.running)
    figures.notes["terminated"] = kills
    check(figures, producers, ran)
    assert kills > 0


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    with proxy_to(POSTGRES_URL) as proxy:
        yield proxy


def far_store(
    proxy: TcpProxy, postgres_schema: str, queue_name: str, **options: Any
) -> PostgresStore:
    """A store of ``queue_name`` that reaches the server through ``proxy``."""
    options = {"listen": False, "pool_size": 2, "connect_timeout": 2.0, **options}
    return PostgresStore(proxy.url(POSTGRES_URL), schema=postgres_schema,
                         queue=queue_name, **options)  # fmt: skip


def test_an_enqueue_whose_answer_is_lost_raises_outcome_unknown_and_its_job_exists(
    proxy: TcpProxy, postgres_schema: str, queue_name: str, quiet: None
) -> None:
    # One connection: the answer cut is the enqueue's, never a second pool
    # connection's handshake still under way.
    store = far_store(proxy, postgres_schema, queue_name, pool_size=1)
    queue = jobq.JobQueue(store=store)
    queue.stats()  # opened: the schema is there, a connection waits in the pool
    proxy.cut_answer()
    with pytest.raises(OutcomeUnknown):
        queue.enqueue("sent, answer lost")
    [job] = queue.store.list_jobs(jobq.JobState.PENDING)
    assert job.payload == "sent, answer lost"
    queue.close()


def test_a_keyed_enqueue_retried_after_outcome_unknown_finds_its_job(
    proxy: TcpProxy, postgres_schema: str, queue_name: str, quiet: None
) -> None:
    # One connection: the answer cut is the enqueue's, never a second pool
    # connection's handshake still under way.
    store = far_store(proxy, postgres_schema, queue_name, pool_size=1)
    queue = jobq.JobQueue(store=store)
    queue.stats()
    proxy.cut_answer()
    with pytest.raises(OutcomeUnknown):
        queue.enqueue("welcome", key="welcome:ann")
    again = queue.enqueue("welcome", key="welcome:ann")
    assert again.duplicate
    assert [job.id for job in queue.store.list_jobs(jobq.JobState.PENDING)] == [
        again.id
    ]
    queue.close()


@pytest.mark.parametrize("fault", ["reset", "blackhole"])
def test_a_stalled_or_reset_path_fails_calls_in_time_and_the_pool_recovers(
    proxy: TcpProxy, postgres_schema: str, queue_name: str, quiet: None, fault: str
) -> None:
    """For ``OUTAGE`` seconds every connection through the proxy is reset (or
    blackholed); enqueues from 2 threads meanwhile raise ``StoreError``
    within the store's timeouts instead of hanging; afterwards the same
    queue enqueues and runs jobs again without a restart."""
    ran: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def handler(job: jobq.Job[int]) -> None:
        with lock:
            ran[job.payload] += 1

    store = far_store(proxy, postgres_schema, queue_name, lease_seconds=1.0,
                      call_timeout=2.0)  # fmt: skip
    queue = jobq.JobQueue(handler, store=store, base_delay=0.01).start(workers=2)
    producers = Producers(queue, threads=2)
    try:
        wait_for(lambda: len(ran) > 20)
        getattr(proxy, fault)()
        time.sleep(OUTAGE)
        during = producers.attempted
        proxy.heal()
        healed = time.monotonic()
        wait_for(lambda: len(producers.acknowledged & set(ran)) > 0
                 and max(producers.acknowledged) > during)  # fmt: skip
        back_after = time.monotonic() - healed
    finally:
        producers.stop()
    try:
        assert queue.join(timeout=60)
        stats = queue.stats()
    finally:
        queue.close(timeout=10)
    figures = Figures(f"proxy {fault}s connections", "postgres", stuck=stats.running)
    figures.notes["back_after_s"] = round(back_after, 3)
    check(figures, producers, ran)
    assert producers.refused | producers.unknown  # the outage was felt
    # connect_timeout (2 s) for a connection and 2 s more to find why none
    # came, or a connection at once and call_timeout (2 s) for the answer;
    # 1 s to spare on a busy machine.
    assert producers.longest < 2.0 + 2.0 + 1.0


OUTAGE = 5.0
