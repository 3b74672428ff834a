"""Closing a queue under a handler that still uses its store never crashes
the process, on any store: the handler's next call gets ``QueueClosed`` or
``StoreError``. A few rounds in one child process per store (a crash is a
signal there, not the end of the test run); benchmarks/close_live.py runs
200 rounds per store."""

from __future__ import annotations

from pathlib import Path

import pytest
from close_live import run_child
from postgres_url import POSTGRES_URL

ROUNDS = 3


def test_closing_under_a_handler_that_enqueues_in_a_loop_never_crashes(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = str(tmp_path)
    if store_kind == "postgres":
        where = f"{POSTGRES_URL} {request.getfixturevalue('postgres_schema')}"

    done = run_child(store_kind, where, ROUNDS)

    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert done.stdout.startswith("ok"), done.stdout
