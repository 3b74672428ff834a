"""Activity in the SQLite store (see "Activity" in ``jobq.stores.base``):
the registry of processes, the outcomes per minute and task, the depth
samples, in three small tables (schema version 9; the newest error per
minute and task, 12) that no job's statement touches. A beat is one write
transaction; reads touch the minutes asked.

Plain jobs (no task) are kept under the task ``''``, a name no task can
have (``jobq.tasks.task_name`` refuses it): a primary key holds no NULL.
The duration buckets are a JSON list, summed in Python under the write
lock (a beat writes a few rows), not ``BUCKETS`` columns."""

from __future__ import annotations

import json
import sqlite3

from jobq.activity import (
    GONE_KEPT,
    KEPT,
    Beat,
    DepthSample,
    MinuteOutcomes,
    ProcessInfo,
    RunningJob,
    TaskOutcomes,
    minute_of,
)
from jobq.stores._activity import error_from, merged

PLAIN = ""  # the task of plain jobs, in the tables

PUT_PROCESS = """INSERT OR REPLACE INTO jobq_processes (id, host, pid, started,
        seen, gone_after, workers, busy, running) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"""
GET_OUTCOME = """SELECT succeeded, failed, dead, cancelled, durations, error_at,
        error_job, error
    FROM jobq_outcomes WHERE minute = ? AND task = ?"""
PUT_OUTCOME = """INSERT OR REPLACE INTO jobq_outcomes (minute, task, succeeded,
        failed, dead, cancelled, durations, error_at, error_job, error)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
PUT_SAMPLE = """INSERT OR IGNORE INTO jobq_samples (minute, pending, running,
        waiting, latency) VALUES (?, ?, ?, ?, ?)"""
DROP_OUTCOMES = "DELETE FROM jobq_outcomes WHERE minute < ?"
DROP_SAMPLES = "DELETE FROM jobq_samples WHERE minute < ?"
DROP_GONE = "DELETE FROM jobq_processes WHERE seen + gone_after + ? < ?"
LEAVE = "DELETE FROM jobq_processes WHERE id = ?"
PROCESSES = """SELECT id, host, pid, started, seen, gone_after, workers, busy,
        running FROM jobq_processes ORDER BY host, started, id"""
OUTCOMES = """SELECT minute, task, succeeded, failed, dead, cancelled, durations,
        error_at, error_job, error
    FROM jobq_outcomes WHERE minute BETWEEN ? AND ? ORDER BY minute, task"""
MINUTE_OUTCOMES = """SELECT minute, sum(succeeded), sum(failed), sum(dead),
        sum(cancelled)
    FROM jobq_outcomes WHERE minute BETWEEN ? AND ? GROUP BY minute ORDER BY minute"""
SAMPLES = """SELECT minute, pending, running, waiting, latency FROM jobq_samples
    WHERE minute BETWEEN ? AND ? ORDER BY minute"""


def write_beat(conn: sqlite3.Connection, beat: Beat, now: float) -> None:
    """``ActivityStore.beat`` in the caller's write transaction."""
    info = beat.process
    if info is not None:
        running = json.dumps([[job.id, job.task, job.started] for job in info.running])
        conn.execute(PUT_PROCESS, (info.id, info.host, info.pid, info.started,
                                   info.seen, beat.gone_after, info.workers,
                                   info.busy, running))  # fmt: skip
    for row in beat.outcomes:
        task = PLAIN if row.task is None else row.task
        found = conn.execute(GET_OUTCOME, (row.minute, task)).fetchone()
        total = merged(
            None if found is None else _outcome(row.minute, task, *found), row
        )
        error = total.error or (None, None, None)
        conn.execute(PUT_OUTCOME, (total.minute, task, total.succeeded, total.failed,
                                   total.dead, total.cancelled,
                                   json.dumps(total.durations), *error))  # fmt: skip
    sample = beat.sample
    if sample is not None:
        conn.execute(PUT_SAMPLE, sample)
    oldest = minute_of(now - KEPT)
    conn.execute(DROP_OUTCOMES, (oldest,))
    conn.execute(DROP_SAMPLES, (oldest,))
    conn.execute(DROP_GONE, (GONE_KEPT, now))


def _outcome(
    minute: float, task: str, succeeded: int, failed: int, dead: int,
    cancelled: int, durations: str, error_at: float | None, error_job: int | None,
    error: str | None,
) -> TaskOutcomes:  # fmt: skip
    name = None if task == PLAIN else task
    buckets = tuple(json.loads(durations))
    error_seen = error_from(error_at, error_job, error)
    return TaskOutcomes(float(minute), name, succeeded, failed, dead, cancelled,
                        buckets, error_seen)  # fmt: skip


def read_processes(conn: sqlite3.Connection, now: float) -> list[ProcessInfo]:
    found = []
    for row in conn.execute(PROCESSES):
        id_, host, pid, started, seen, gone_after, workers, busy, running = row
        jobs = tuple(RunningJob(*job) for job in json.loads(running))
        gone = now > seen + gone_after
        info = ProcessInfo(id_, host, pid, started, seen, workers, busy, jobs, gone)
        found.append(info)
    return found


def read_outcomes(
    conn: sqlite3.Connection, since: float, now: float
) -> list[TaskOutcomes]:
    rows = conn.execute(OUTCOMES, (minute_of(since), minute_of(now)))
    return [_outcome(*row) for row in rows]


def read_minute_outcomes(
    conn: sqlite3.Connection, since: float, now: float
) -> list[MinuteOutcomes]:
    rows = conn.execute(MINUTE_OUTCOMES, (minute_of(since), minute_of(now)))
    return [MinuteOutcomes(float(row[0]), *row[1:]) for row in rows]


def read_samples(
    conn: sqlite3.Connection, since: float, now: float
) -> list[DepthSample]:
    rows = conn.execute(SAMPLES, (minute_of(since), minute_of(now)))
    return [
        DepthSample(float(minute), pending, running, waiting, latency)
        for minute, pending, running, waiting, latency in rows
    ]


def leave(conn: sqlite3.Connection, process_id: str) -> None:
    conn.execute(LEAVE, (process_id,))
