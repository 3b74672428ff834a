"""What the job page says of a job in words, worked out here so that the
templates only lay it out: its attempts ("succeeded on attempt 3 of 5"),
its ``meta`` without the keys jobq keeps for itself, a task's arguments,
and tracebacks with jobq's own frames told apart from the application's."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import jobq
from jobq.tasks import InvalidTaskPayload, task_arguments
from jobq.types import JobRecord, JobState

#: The ``meta`` keys jobq sets itself: the Django Tasks backend's, which
#: rebuild the enqueued ``Task`` and pair the job with its announcement
#: (``jobq.contrib.django._tasks_backend``). The job page folds them away;
#: every other key is the application's, and shown.
INTERNAL_META = frozenset({
    "django.queue_name",
    "django.run_after",
    "django.backend",
    "django.announcement",
})  # fmt: skip

#: The folder of the installed ``jobq`` package: a traceback's frame in a
#: file below it is jobq's own, not the application's.
JOBQ_FOLDER = os.path.dirname(os.path.abspath(jobq.__file__)) + os.sep

#: The first line of a traceback's frame, in a plain traceback or inside an
#: exception group's (whose lines start with ``|``).
_FRAME = re.compile(r'(?P<lead>[ |]*)File "(?P<file>[^"]*)", line \d+')


def compact(value: Any) -> str:
    """A JSON value on one line (escaped by the template like any text)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class MetaRows(NamedTuple):
    """A job's ``meta`` as (key, value as JSON) rows, sorted by key: the
    application's keys, and those jobq keeps for itself."""

    shown: list[tuple[str, str]]
    internal: list[tuple[str, str]]


def meta_rows(meta: Mapping[str, str]) -> MetaRows:
    rows = MetaRows([], [])
    for key in sorted(meta):
        kept = rows.internal if key in INTERNAL_META else rows.shown
        kept.append((key, compact(meta[key])))
    return rows


class Arguments(NamedTuple):
    """A named task's arguments, each value as JSON: positional ones in
    order, keyword ones by name."""

    positional: list[str]
    keyword: list[tuple[str, str]]


def arguments(record: JobRecord[Any]) -> Arguments | None:
    """The arguments a named task's job is called with; ``None`` for a
    plain job, or a payload that is not a task's (shown as JSON)."""
    if record.task is None:
        return None
    try:
        args, kwargs = task_arguments(record.payload)
    except InvalidTaskPayload:
        return None
    return Arguments(
        [compact(value) for value in args],
        [(name, compact(kwargs[name])) for name in sorted(kwargs)],
    )


def attempts(record: JobRecord[Any]) -> str:
    """Where a job stands among its attempts, in words (``attempts``
    counts the failed ones)."""
    failed, most = record.attempts, record.max_attempts
    state = record.state
    if state is JobState.COMPLETED:
        return f"succeeded on attempt {failed + 1} of {most}"
    if state is JobState.RUNNING:
        return f"attempt {failed + 1} of {most} running"
    if state is JobState.DEAD:
        return _died(failed, most)
    if state is JobState.CANCELLED:
        return _cancelled(record)
    if failed == 0:
        return f"no attempt yet (up to {most})"
    return f"{failures(record)}; attempt {failed + 1} is next"


def failures(record: JobRecord[Any]) -> str:
    """How many of its attempts a job failed: "failed 2 of 5 attempts" (the
    Retrying list adds when the next one is)."""
    return f"failed {record.attempts} of {record.max_attempts} attempts"


def _died(failed: int, most: int) -> str:
    if failed >= most:
        return f"failed {failed} of {most} attempts"
    if failed == 0:
        return f"dead before any attempt ran (up to {most})"
    return f"died on attempt {failed} of {most}"


def _cancelled(record: JobRecord[Any]) -> str:
    request = record.cancellation
    if request is not None and request.attempt is not None:
        return f"cancelled during attempt {request.attempt} of {record.max_attempts}"
    if record.attempts:
        return (
            f"cancelled while pending, after {record.attempts} of "
            f"{record.max_attempts} attempts failed"
        )
    return "cancelled before any attempt ran"


class TracebackPart(NamedTuple):
    """A run of a traceback's text: the application's lines (``frames``
    0), or ``frames`` consecutive frames of jobq's own, to fold away."""

    text: str
    frames: int


def traceback_parts(text: str) -> list[TracebackPart]:
    """``text`` cut into runs of jobq's frames and runs of everything else;
    the runs' texts, joined, are ``text`` again (nothing is lost)."""
    parts: list[TracebackPart] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        end, ours = _frame_at(lines, i)
        _append(parts, "".join(lines[i:end]), 1 if ours else 0)
        i = end
    return parts


def _frame_at(lines: list[str], i: int) -> tuple[int, bool]:
    """Where the frame that starts at line ``i`` ends (its source lines are
    indented deeper than its ``File`` line), and whether it is jobq's; a
    line that starts no frame ends at once, as the application's."""
    found = _FRAME.match(lines[i])
    if found is None:
        return i + 1, False
    body = found.group("lead") + "  "
    end = i + 1
    while (
        end < len(lines)
        and lines[end].startswith(body)
        and not _FRAME.match(lines[end])
    ):
        end += 1
    return end, found.group("file").startswith(JOBQ_FOLDER)


def _append(parts: list[TracebackPart], text: str, frames: int) -> None:
    """Add a run, joined to the last one if it is of the same kind."""
    if parts and (parts[-1].frames > 0) == (frames > 0):
        last = parts.pop()
        text, frames = last.text + text, last.frames + frames
    parts.append(TracebackPart(text, frames))
