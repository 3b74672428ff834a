"""An idle queue costs (next to) no CPU: 32 idle workers on SQLite and on
PostgreSQL, measured over 2 s of wall time once the queue is idle.

Two measures:

- the stores' own threads (SQLite's watcher, PostgreSQL's listener and
  notifier) block until something happens: none of them runs even once in
  those 2 s (counted as the kernel's context switches of each thread, Linux
  only), where the SQLite watcher used to poll ``data_version`` 20 times a
  second;
- the whole process's CPU time (``time.process_time()``) stays below
  ``CPU_BOUND`` of the 2 s, whatever runs: idle workers still take a look of
  their own once a second (``MAX_IDLE_WAIT``), 32 reads a second here.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_url import POSTGRES_URL

import jobq
from jobq.stores import PostgresStore, SqliteStore, Store

URL = POSTGRES_URL
WORKERS = 32
SPELL = 2.0  # seconds of wall time measured
#: The most CPU time the idle process may use over the spell: 5 % of a core.
CPU_BOUND = 0.05 * SPELL
#: Names of the stores' own threads (their prefixes).
STORE_THREADS = ("jobq-sqlite-watch-", "jobq-postgres-listen-", "jobq-postgres-notify-")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        yield SqliteStore(tmp_path / "jobs.db")
    else:
        schema = request.getfixturevalue("postgres_schema")
        yield PostgresStore(URL, schema=schema, queue=f"idle-{secrets.token_hex(4)}")


def switches(thread: threading.Thread) -> int:
    """How many times the kernel switched ``thread`` in (voluntarily or not)."""
    with open(f"/proc/self/task/{thread.native_id}/status", encoding="ascii") as f:
        fields = dict(line.split(":", 1) for line in f)
    return sum(
        int(fields[name])
        for name in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
    )


def test_an_idle_queue_of_32_workers_costs_no_cpu(store: Store) -> None:
    ran = threading.Event()
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: ran.set(), store=store)
    queue.start(workers=WORKERS)
    try:
        queue.enqueue("wake everything up once")  # the notifier's thread too
        assert ran.wait(30)
        assert queue.join(timeout=30)
        time.sleep(1.5)  # every worker has gone back to sleep

        threads = [t for t in threading.enumerate() if t.name.startswith(STORE_THREADS)]
        assert threads  # the store's wake-up thread at least
        on_linux = os.path.isdir(f"/proc/self/task/{threading.get_native_id()}")
        before = {t: switches(t) for t in threads} if on_linux else {}
        cpu = time.process_time()
        time.sleep(SPELL)
        used = time.process_time() - cpu
        after = {t: switches(t) for t in threads} if on_linux else {}
    finally:
        queue.close()

    woke = {t.name: after[t] - before[t] for t in before}
    assert woke == dict.fromkeys(woke, 0), "a store's thread woke up while idle"
    assert used < CPU_BOUND, f"{used:.3f} s of CPU in {SPELL} s idle"
