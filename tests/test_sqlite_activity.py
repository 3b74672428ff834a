"""Activity on SQLite: the schema (version 9) migrated from 8, reads that
touch only the minutes asked, beats from several processes at once adding
up exactly, and a beat that meets a locked file failing whole."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from old_schemas import sqlite_at

from jobq._worker.heartbeat import Heartbeat
from jobq._worker.tally import Tally, bucket
from jobq.activity import BUCKETS, Beat, ProcessInfo, TaskError, TaskOutcomes
from jobq.errors import StoreError
from jobq.stores import SqliteStore
from jobq.stores.base import Signal
from jobq.stores.sqlite import activity
from jobq.stores.sqlite.schema import GET_VERSION, SCHEMA_VERSION
from jobq.testing.clock import T0, Clock

MINUTE = T0  # a multiple of 60


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@contextlib.contextmanager
def opened(path: Path, **options: float) -> Iterator[SqliteStore]:
    store = SqliteStore(path, **options)
    store.open(Signal(), dead_letter_limit=1000)
    try:
        yield store
    finally:
        store.close()


def row(task: str | None, succeeded: int, failed: int = 0) -> TaskOutcomes:
    return TaskOutcomes(
        MINUTE, task, succeeded, failed, 0, 0, (1,) + (0,) * (BUCKETS - 1)
    )


def test_a_version_8_file_is_migrated_and_keeps_its_jobs(path: Path) -> None:
    sqlite_at(path, 8)
    with opened(path) as store:
        assert store.stats().pending == 2  # the old file's jobs, still there
        store.beat(Beat(None, [row("t", 1)], None, 15.0), T0)
        assert store.outcomes(MINUTE, T0) == [row("t", 1)]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute(GET_VERSION).fetchone() == (SCHEMA_VERSION,) == (12,)
    finally:
        conn.close()


def test_a_version_11_file_keeps_its_figures_and_adds_errors_to_them(
    path: Path,
) -> None:
    """Version 12 adds the newest error to the outcome rows already there:
    they keep their counts, with no error, until a beat brings one."""
    sqlite_at(path, 11)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO jobq_outcomes VALUES (?, 't', 3, 1, 0, 0, ?)",
            (MINUTE, json.dumps(row("t", 3, 1).durations)),
        )
    error = TaskError(T0, 2, "ValueError: x")
    with opened(path) as store:
        assert store.outcomes(MINUTE, T0) == [row("t", 3, 1)]
        store.beat(Beat(None, [row("t", 0, 1)._replace(error=error)], None, 15.0), T0)
        (merged,) = store.outcomes(MINUTE, T0)
        assert (merged.succeeded, merged.failed, merged.error) == (3, 2, error)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute(GET_VERSION).fetchone() == (SCHEMA_VERSION,) == (12,)


def test_the_reads_and_the_beat_search_by_primary_key(path: Path) -> None:
    with opened(path):
        pass
    conn = sqlite3.connect(path)
    try:
        plans = {
            name: " ".join(
                detail
                for *_, detail in conn.execute(
                    f"EXPLAIN QUERY PLAN {sql}", (0,) * sql.count("?")
                )
            )
            for name, sql in {
                "OUTCOMES": activity.OUTCOMES,
                "SAMPLES": activity.SAMPLES,
                "GET_OUTCOME": activity.GET_OUTCOME,
                "DROP_OUTCOMES": activity.DROP_OUTCOMES,
                "DROP_SAMPLES": activity.DROP_SAMPLES,
            }.items()
        }
    finally:
        conn.close()
    for name, plan in plans.items():
        assert "SEARCH" in plan, (name, plan)
        assert "SCAN" not in plan, (name, plan)


def test_beats_from_several_processes_at_once_add_up_exactly(path: Path) -> None:
    with opened(path):
        pass  # the schema, before four stores race
    errors: list[BaseException] = []

    def beat(number: int) -> None:
        try:
            with opened(path, busy_timeout=30.0) as store:
                for k in range(50):
                    info = ProcessInfo(f"p{number}", "h", number, T0, T0 + k, 2, 0)
                    store.beat(
                        Beat(info, [row("t", 1, 2), row(None, 1)], None, 15.0), T0
                    )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=beat, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    with opened(path) as store:
        found = store.outcomes(MINUTE, T0)
        assert [(r.task, r.succeeded, r.failed, r.durations[0]) for r in found] == [
            (None, 200, 0, 200),
            ("t", 200, 400, 200),
        ]
        assert [info.id for info in store.processes(T0 + 49)] == [
            "p0",
            "p1",
            "p2",
            "p3",
        ]


def test_a_beat_on_a_locked_file_fails_whole_and_the_counts_wait(path: Path) -> None:
    """A tally the store refuses (another process holds the write lock past
    the busy timeout) is given back, and written whole by the next try."""
    clock = Clock()
    with opened(path, busy_timeout=0.05) as store:
        heartbeat = Heartbeat(store, clock)
        tally = Tally()
        for _ in range(3):  # attempts of under 1 ms that returned
            tally.attempts.append(("t", bucket(0.0005), True))
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process writes, for long
        try:
            with pytest.raises(StoreError):
                heartbeat.hand_over(tally)
            with pytest.raises(StoreError):
                heartbeat.beat(tally, 4, {})
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert store.outcomes(MINUTE, T0) == []
        assert store.processes(T0) == []

        heartbeat.beat(tally, 4, {})
        (found,) = store.outcomes(MINUTE, T0)
        assert (found.task, found.succeeded, found.durations[0]) == ("t", 3, 3)
        assert [info.workers for info in store.processes(T0)] == [4]
