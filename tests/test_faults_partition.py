"""Fault: a worker host cut off from PostgreSQL while it runs jobs.

Worker A reaches the server through a TCP proxy on 127.0.0.1 that the test
blackholes: nothing passes either way and no connection is accepted, as in a
network partition (what A sent waits, as TCP retransmits it, and arrives when
the path heals). The cut lasts longer than A's lease, while worker B, on
the server's side, takes A's jobs over once their leases expired. When the
path heals, A's late outcomes must be refused by their fencing tokens and A
must reconnect by itself and carry on. Counted as Jepsen's total-queue
checker does: acknowledged, lost (0), run twice (only the jobs A was running
at the cut), recorded twice (0), stuck (0), and the time A took to come back.

``JOBQ_FAULT_ROUNDS=<n>`` repeats the run (the figures reported by hand).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from faults import (
    assert_only_jobs_in_flight_ran_twice,
    figures_of,
    proxy_to,
    take_over,
)
from postgres_url import POSTGRES_URL

from jobq.stores import PostgresStore

ROUNDS = int(os.environ.get("JOBQ_FAULT_ROUNDS", "1"))
LEASE = 1.0


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_a_worker_cut_off_mid_job_loses_nothing_and_comes_back_by_itself(
    postgres_schema: str, tmp_path: Path, round_: int
) -> None:
    name = f"partition-{secrets.token_hex(4)}"
    store = PostgresStore(POSTGRES_URL, schema=postgres_schema, queue=name)
    with proxy_to(POSTGRES_URL) as proxy:
        shared = f'{{"postgres": ["{POSTGRES_URL}", "{postgres_schema}", "{name}"]}}'
        far = f'["{proxy.url(POSTGRES_URL)}", "{postgres_schema}", "{name}"]'
        run = take_over(
            shared, store, tmp_path / "log",
            cut=lambda _: proxy.blackhole(), heal=lambda _: proxy.heal(),
            cut_off={"store_override": far, "connect_timeout": 2.0},
            jobs=30, lease=LEASE, outage=4 * LEASE,
        )  # fmt: skip
    store.close()
    figures = figures_of("partition", "postgres", run)
    figures.report()
    assert (figures.lost, figures.recorded_twice, figures.stuck) == (0, 0, 0)
    assert_only_jobs_in_flight_ran_twice(run)
