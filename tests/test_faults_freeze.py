"""Fault: a worker process frozen (a VM pause, a long GC, SIGSTOP) for longer
than its lease while it runs jobs, on SQLite and on PostgreSQL.

Worker A is stopped with SIGSTOP mid-job; worker B, started then, takes A's
jobs over once their leases expired (SQLite too: A's pid is still alive, so
only the lease frees them). After SIGCONT, A's outcomes for those jobs must
be refused by their fencing tokens, A must not renew the leases it lost nor
run a job a second time at once with B, and it must carry on with new jobs.
Counted as the partition test counts (``test_faults_partition``). Two
in-process tests pin the cases down without signals: a freeze between a
claim and its handler, and the rule that tells a worker its lease may have
run out (``jobq._worker.leases``).

``JOBQ_FAULT_ROUNDS=<n>`` repeats the run (the figures reported by hand).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faults import (
    WAIT,
    assert_only_jobs_in_flight_ran_twice,
    figures_of,
    take_over,
    wait_for,
)

import jobq
from jobq._worker.leases import HeldClaims
from jobq.stores import PostgresStore, SqliteStore, Store
from jobq.stores.base import Claim, Signal

ROUNDS = int(os.environ.get("JOBQ_FAULT_ROUNDS", "1"))
LEASE = 1.0


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_a_worker_frozen_past_its_lease_loses_nothing_and_carries_on(
    shared: tuple[str, Callable[[], Store]], tmp_path: Path, round_: int
) -> None:
    where, make = shared
    store = make()
    run = take_over(
        where, store, tmp_path / "log",
        cut=lambda a: os.kill(a.pid, signal.SIGSTOP),
        heal=lambda a: os.kill(a.pid, signal.SIGCONT),
        cut_off={}, jobs=30, lease=LEASE, outage=4 * LEASE,
    )  # fmt: skip
    store.close()
    figures = figures_of("freeze", "sqlite" if "sqlite" in where else "postgres", run)
    figures.report()
    assert (figures.lost, figures.recorded_twice, figures.stuck) == (0, 0, 0)
    assert_only_jobs_in_flight_ran_twice(run)


def leased_store(where: str, lease: float) -> Store:
    """A store of this process on the shared store ``where``, with ``lease``."""
    place = json.loads(where)
    if "sqlite" in place:
        return SqliteStore(place["sqlite"], lease_seconds=lease)
    url, schema, name = place["postgres"]
    return PostgresStore(url, schema=schema, queue=name, lease_seconds=lease)


def test_a_job_claimed_just_before_a_freeze_past_its_lease_is_not_run_after_it(
    shared: tuple[str, Callable[[], Store]],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The freeze lands after the claim's answer came and before the worker
    called the handler: no store call stands between them. Meanwhile the
    lease runs out and another process recovers the job and runs it. Thawed,
    the worker gives the claim back instead of running the job a second
    time, and carries on with new jobs."""
    where, _ = shared
    store = leased_store(where, 0.5)
    frozen, thaw, carried_on = threading.Event(), threading.Event(), threading.Event()
    claim_many = store.claim_many

    def freezing(*args: Any, **kwargs: Any) -> list[Claim]:
        claims = claim_many(*args, **kwargs)
        if claims and not frozen.is_set():
            frozen.set()
            assert thaw.wait(WAIT)
        return claims

    monkeypatch.setattr(store, "claim_many", freezing)
    ran: list[str] = []

    def handler(job: jobq.Job[str]) -> None:
        ran.append(job.payload)
        if job.payload == "after":
            carried_on.set()

    queue = jobq.JobQueue(handler, store=store)
    other = leased_store(where, 0.5)
    other.open(Signal(), dead_letter_limit=10)
    try:
        job = queue.enqueue("before")
        queue.start(workers=1)
        assert frozen.wait(WAIT)
        taken: list[Claim] = []

        def taken_over() -> bool:  # once the lease ran out: by either recovery
            other.recover(time.time())
            taken.extend(other.claim_many(time.time(), 1))
            return bool(taken)

        wait_for(taken_over)
        assert [claim.id for claim in taken] == [job.id]
        assert other.finish(taken[0], None, time.time() + 60, time.time())

        with caplog.at_level(logging.WARNING, logger="jobq"):
            thaw.set()
            queue.enqueue("after")
            assert carried_on.wait(WAIT)
        assert ran == ["after"]
        assert any(
            f"job {job.id}: its lease may have run out" in r.getMessage()
            for r in caplog.records
        )
        record = queue.get(job.id)
        assert record is not None
        assert record.state is jobq.JobState.COMPLETED
    finally:
        thaw.set()
        queue.close(timeout=WAIT)
        other.close()


def test_a_lease_is_known_to_hold_from_before_each_call_that_took_or_renewed_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted from just before the call (the store began the lease no
    earlier); a renewal that came back after the lease may have run out
    proves nothing (another process may have recovered the claim first)."""
    now = [95.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    a, b = (Claim(n, n, "null", 1, 5, None, None, 0.0) for n in (1, 2))
    held = HeldClaims(10.0)
    held.hold([a, b], since=90.0)
    assert not held.lapsed(a)
    now[0] = 99.0  # renewed by a call sent at 95, back before 100
    held.renewed([a], sent=95.0)
    now[0] = 100.0
    assert not held.lapsed(a)
    assert held.lapsed(b)  # not renewed: 90 + 10
    held.renewed([b], sent=99.0)  # back after b's lease may have run out
    assert held.lapsed(b)
    now[0] = 105.0
    assert held.lapsed(a)  # 95 + 10
    held.forget([a, b])
    assert held.claims() == []
    assert not held.lapsed(a)  # no longer held: not this table's to say
    unleased = HeldClaims(None)  # a store without leases: nothing lapses
    unleased.hold([a], since=0.0)
    assert not unleased.lapsed(a)
