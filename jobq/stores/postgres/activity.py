"""The PostgreSQL store's figures (``ActivityStore``, schema version 8;
the errors, 11): a beat's rows as ``statements.PUT_PROCESS`` and
``ADD_OUTCOMES`` take them, and the rows read back as ``jobq.activity``
gives them.

Text goes in as ``_rules.storable`` makes it (NUL written ``\\x00``, a lone
surrogate escaped), as jobq records error texts: PostgreSQL's text holds no
NUL, and a name it refused would fail every later beat too, since a beat
that fails gives its tally back for the next one. A job's task can hold
neither (``add`` refuses it), so only a beat built by hand meets this.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from jobq._rules import storable
from jobq.activity import (
    BUCKETS,
    GONE_KEPT,
    KEPT,
    ProcessInfo,
    RunningJob,
    TaskOutcomes,
    minute_of,
)
from jobq.stores._activity import _buckets, error_from, merged


def process_params(info: ProcessInfo, gone_after: float) -> dict[str, Any]:
    """``PUT_PROCESS``'s values for a process's row: ``running`` as JSON
    text of [id, task, started] (ASCII: any task round-trips)."""
    running = [[job.id, job.task, job.started] for job in info.running]
    return {
        "id": storable(info.id), "host": storable(info.host), "pid": info.pid,
        "started": info.started, "seen": info.seen, "gone_after": gone_after,
        "workers": info.workers, "busy": info.busy, "running": json.dumps(running),
    }  # fmt: skip


def process_from_row(row: Sequence[Any]) -> ProcessInfo:
    """A process as ``statements.PROCESSES`` selects it."""
    id_, host, pid, started, seen, workers, busy, running, gone = row
    jobs = tuple(
        RunningJob(job_id, task, at) for job_id, task, at in json.loads(running)
    )
    return ProcessInfo(id_, host, pid, started, seen, workers, busy, jobs, gone)


def outcome_arrays(rows: Sequence[TaskOutcomes]) -> dict[str, Any]:
    """``ADD_OUTCOMES``'s arrays, one item per (minute, task): rows of one
    key merged first (an upsert may not change a row twice), each row's
    durations exactly ``BUCKETS`` counts, laid end to end."""
    by_key: dict[tuple[float, str | None], TaskOutcomes] = {}
    for row in rows:
        task = None if row.task is None else storable(row.task)
        row = row._replace(task=task, durations=_buckets(row.durations))
        by_key[row.minute, task] = merged(by_key.get((row.minute, task)), row)
    kept = list(by_key.values())
    errors = [row.error or (None, None, None) for row in kept]
    return {
        "minutes": [row.minute for row in kept],
        "tasks": [row.task for row in kept],
        "succeeded": [row.succeeded for row in kept],
        "failed": [row.failed for row in kept],
        "dead": [row.dead for row in kept],
        "cancelled": [row.cancelled for row in kept],
        "durations": [count for row in kept for count in row.durations],
        "buckets": BUCKETS,
        "error_ats": [at for at, _, _ in errors],
        "error_jobs": [job for _, job, _ in errors],
        "errors": [None if text is None else storable(text) for _, _, text in errors],
    }


def outcome_from_row(row: Sequence[Any]) -> TaskOutcomes:
    """An outcome row as ``statements.OUTCOMES`` selects it."""
    minute, task, succeeded, failed, dead, cancelled, durations, *error = row
    return TaskOutcomes(minute, task, succeeded, failed, dead, cancelled,
                        tuple(durations), error_from(*error))  # fmt: skip


def drop_params(now: float) -> dict[str, float]:
    """``DROP_OLD_ACTIVITY``'s values: figures of the minutes before the
    one a day (``KEPT``) before ``now``, processes gone ``GONE_KEPT`` ago."""
    return {"now": now, "oldest": minute_of(now - KEPT), "gone_kept": GONE_KEPT}


def minutes_params(since: float, now: float) -> dict[str, float]:
    """A read's range: the minutes of ``since`` to ``now``."""
    return {"first": minute_of(since), "last": minute_of(now)}
