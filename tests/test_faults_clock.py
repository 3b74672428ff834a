"""Fault: a worker whose clock is 10 minutes ahead of or behind the others'
(injected through the queue's ``clock=``, as a host with a wrong clock).

Worker N runs two long jobs, renewing their leases; worker S, skewed, then
joins the same queue, and a job delayed by 2 s is enqueued. S must not take
N's live claims (nor recover them as expired), and the delayed job must not
run early by more than S's skew.

Both stores give and judge leases on a clock every process shares, never on
the queue's: PostgreSQL on the database server's, SQLite on the host's
(``time.time()``). PostgreSQL also keeps due times on the server's clock
(the default ``clock="database"``), so S runs nothing early at all; SQLite
keeps them on each queue's clock (on one host, only a queue given a clock of
its own can be off), so S, ahead, may run the delayed job as soon as its
clock says it is due: early by less than its skew.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from faults import Figures, Log, Worker, wait_for, workers

import jobq
from jobq.stores import Store
from jobq.testing import Clock

LEASE = 1.0


@pytest.mark.parametrize("skew", [600.0, -600.0])
def test_a_skewed_worker_steals_no_claim_and_runs_nothing_early_beyond_its_skew(
    shared: tuple[str, Callable[[], Store]], tmp_path: Path, skew: float
) -> None:
    where, make = shared
    kind = "sqlite" if "sqlite" in where else "postgres"
    log_path = tmp_path / "log"
    store = make()
    queue: jobq.JobQueue[object] = jobq.JobQueue(store=store)
    with workers() as started:
        n = Worker(where, log_path, lease=LEASE, sleep=4 * LEASE)
        started.append(n)
        long_jobs = {queue.enqueue(f"long {i}").id for i in range(2)}
        wait_for(lambda: long_jobs <= set(Log.read(log_path).started))
        s = Worker(where, log_path, lease=LEASE, sleep=0.0, skew=skew)
        started.append(s)
        enqueued_at = time.time()
        delayed = queue.enqueue("delayed", delay=2.0).id
        assert queue.join(timeout=60)
        for worker in started:
            worker.finish()
    stats = queue.stats()
    queue.close()
    log = Log.read(log_path)
    twice = {job for job, pids in log.started.items() if len(pids) > 1}
    first_start = min(at for (what, job, _), at in log.times.items()
                      if what == "started" and job == delayed)  # fmt: skip
    early = first_start - (enqueued_at + 2.0)
    Figures(f"clock {skew:+g} s", kind, runs=sum(map(len, log.started.values())),
            acknowledged=3, duplicates=len(twice),
            stuck=stats.running + stats.pending,
            notes={"delayed_job_late_by_s": round(early, 3)}).report()  # fmt: skip
    assert twice == set()
    assert {log.started[job][0] for job in long_jobs} == {n.pid}
    # PostgreSQL: due on the server's clock, which the enqueue's agrees with;
    # SQLite: due on S's clock too, which is ahead by ``skew``.
    allowed = max(skew, 0.0) if kind == "sqlite" else 0.0
    assert early > -allowed - 0.05


@pytest.mark.parametrize("skew", [600.0, -600.0])
def test_a_skewed_process_runs_no_periodic_slot_twice(
    shared: tuple[str, Callable[[], Store]], skew: float
) -> None:
    """Two queues on one store declare the same schedule, one with a clock
    ``skew`` seconds off; as both clocks move on (20 minutes of each) and each
    runs its due jobs, every slot is enqueued once, by whichever looks first
    (the one ahead, early by its skew), and runs once."""
    _, make = shared
    start = time.time()
    ran: list[str] = []
    clocks = [Clock(start), Clock(start + skew)]
    queues = []
    for clock in clocks:
        queue: jobq.JobQueue[object] = jobq.JobQueue(store=make(), clock=clock)

        def report(scheduled_at: str) -> None:
            ran.append(scheduled_at)

        queue.periodic(every=60, name="report")(report)
        queues.append(queue)
    try:
        for _ in range(40):  # 30 s steps: 20 minutes on each clock
            for clock, queue in zip(clocks, queues, strict=True):
                clock.advance(30)
                queue.run_pending()
        assert ran  # the slots ran...
        assert len(ran) == len(set(ran))  # ...each once
    finally:
        for queue in queues:
            queue.close()
