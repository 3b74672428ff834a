"""Fault: a worker process frozen (a VM pause, a long GC, SIGSTOP) for longer
than its lease while it runs jobs, on SQLite and on PostgreSQL.

Worker A is stopped with SIGSTOP mid-job; worker B, started then, takes A's
jobs over once their leases expired (SQLite too: A's pid is still alive, so
only the lease frees them). After SIGCONT, A's outcomes for those jobs must
be refused by their fencing tokens, A must not renew the leases it lost nor
run a job a second time at once with B, and it must carry on with new jobs.
Counted as the partition test counts (``test_faults_partition``).

``JOBQ_FAULT_ROUNDS=<n>`` repeats the run (the figures reported by hand).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from faults import assert_only_jobs_in_flight_ran_twice, figures_of, take_over

from jobq.stores import Store

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
