"""What the commands print: the results of ``jobq.admin.operations`` as text
for people or as JSON, each function taking values and returning the text.

Stored text is data from whoever enqueued the job or raised the error, so
everything shown from a job (payload, key, task, errors, tracebacks, result)
passes through ``escape``: control characters such as ESC, line breaks in
one-line fields, and other non-printable characters appear as escapes like
``\\x1b`` and ``\\n``, never raw, so a job cannot drive the terminal. JSON
output is ASCII-only, with stable keys; times in it are epoch seconds.

Every function returns whole lines (each ending in a newline) for a
front-end to write as they are: ``jobq``, ``flask jobq`` and ``manage.py
jobq`` print the same text.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from jobq.activity import ProcessInfo
from jobq.types import (
    Cancellation,
    JobRecord,
    JobState,
    LimitUsage,
    Schedule,
    Stats,
)

if TYPE_CHECKING:  # operations imports this module
    from jobq.admin.family import Family, Relative

__all__ = [
    "ERROR_WIDTH",
    "KEY_WIDTH",
    "buried_at",
    "cancel",
    "cancellation",
    "cancelled",
    "dead",
    "deleted",
    "escape",
    "family",
    "job",
    "job_details",
    "job_summary",
    "limit_usage",
    "limits",
    "migration",
    "plural",
    "process_info",
    "processes",
    "purged",
    "retried",
    "schedule_changed",
    "schedule_run",
    "schedules",
    "stats",
    "to_json",
    "when",
]

#: Characters of a text column in ``jobq dead`` beyond which it is cut.
KEY_WIDTH = 32
ERROR_WIDTH = 72

_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str, *, keep: str = "") -> str:
    """``text`` safe to write to a terminal.

    Every non-printable character (``str.isprintable``: control characters
    such as ESC and line breaks, C1 controls, bidirectional overrides, lone
    surrogates) becomes an escape as ``repr`` writes it (``\\x1b``, ``\\n``,
    ``\\u202e``); printable text, non-ASCII letters included, stays as it is.
    Characters in ``keep`` (e.g. ``"\\n"`` for a traceback) stay too.
    """
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or ch in keep else _escape_char(ch) for ch in text
    )


def _escape_char(ch: str) -> str:
    named = _NAMED_ESCAPES.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


# -- JSON ------------------------------------------------------------------------


def job_summary(record: JobRecord[Any]) -> dict[str, Any]:
    """A job as ``jobq dead --json`` lists it (stable keys; times are epoch
    seconds; ``buried_at`` is ``null`` unless the job is dead)."""
    return {
        "id": record.id,
        "state": str(record.state),
        "attempts": record.attempts,
        "max_attempts": record.max_attempts,
        "priority": record.priority,
        "key": record.key,
        "task": record.task,
        "created_at": record.created_at,
        "run_at": record.run_at,
        "buried_at": buried_at(record),
        "last_error": record.last_error,
        "payload": record.payload,
    }


def job_details(
    record: JobRecord[Any], relatives: Family | None = None
) -> dict[str, Any]:
    """A job as ``jobq show --json`` prints it: the summary plus ``result``,
    its last attempt's ``started_at`` and ``finished_at``, ``timeout``,
    ``meta``, ``cancellation``, ``limits`` (the names it runs under, ``[]``
    for none), ``held_by`` (the limit key holding it back while it waits,
    else ``null``), ``errors`` (one object per kept failed attempt, oldest
    first), and its workflow: ``parents``, ``waiting_on`` and ``children``
    (ids), ``after_failure`` (``null`` without parents) and ``relatives``
    (``family``: those of them looked up, with their states)."""
    details = job_summary(record)
    details["result"] = record.result
    details["started_at"] = record.started_at
    details["finished_at"] = record.finished_at
    details["timeout"] = record.timeout
    details["meta"] = dict(record.meta)
    details["cancellation"] = cancellation(record.cancellation)
    details["limits"] = list(record.limits)
    details["held_by"] = record.held_by
    details["errors"] = [
        {
            "type": error.type,
            "message": error.message,
            "traceback": error.traceback,
            "at": error.at,
        }
        for error in record.errors
    ]
    details["parents"] = list(record.parents)
    details["waiting_on"] = list(record.waiting_on)
    details["children"] = list(record.children)
    details["after_failure"] = record.after_failure
    details["relatives"] = family(relatives)
    return details


def family(relatives: Family | None) -> dict[str, Any]:
    """A job's looked-up parents and children as JSON: ``parents`` and
    ``children``, each a list of ``{"id", "task", "state"}`` (``state``
    ``null``: the store no longer holds it), and ``more_parents`` and
    ``more_children``, how many more there are (not looked up)."""
    if relatives is None:
        return {"parents": [], "children": [], "more_parents": 0, "more_children": 0}
    return {
        "parents": [_relative(one) for one in relatives.parents],
        "children": [_relative(one) for one in relatives.children],
        "more_parents": relatives.more_parents,
        "more_children": relatives.more_children,
    }


def _relative(one: Relative) -> dict[str, Any]:
    state = None if one.state is None else str(one.state)
    return {"id": one.id, "task": one.task, "state": state}


def buried_at(record: JobRecord[Any]) -> float | None:
    """When a dead job died: the time of its last failed attempt."""
    if record.state != JobState.DEAD or not record.errors:
        return None
    return record.errors[-1].at


def cancellation(request: Cancellation | None) -> dict[str, Any] | None:
    """A job's cancellation as JSON: ``at`` (epoch seconds), ``by``, and
    ``attempt`` (``null``: it was pending)."""
    if request is None:
        return None
    return {"at": request.at, "by": request.by, "attempt": request.attempt}


def limit_usage(usage: LimitUsage) -> dict[str, Any]:
    """A limit as ``jobq limits --json`` lists it (stable keys): ``name``
    (exact, or a family's pattern such as ``account:*``), ``family``,
    ``concurrency`` and ``rate`` (``"10/s"``; ``null``: no such bound),
    ``burst`` (with a rate, else ``null``), and now: ``running`` (attempts
    under it) and ``waiting`` (jobs it holds back), a family's summed over
    its keys."""
    return {
        "name": usage.name,
        "family": usage.name.endswith(":*"),
        "concurrency": usage.concurrency,
        "rate": usage.rate,
        "burst": None if usage.rate is None else usage.burst,
        "running": usage.running,
        "waiting": usage.waiting,
    }


def to_json(value: Any) -> str:
    """``value`` as indented ASCII-only JSON, one trailing newline."""
    return json.dumps(value, indent=2, ensure_ascii=True) + "\n"


# -- the commands' output --------------------------------------------------------


def stats(counts: Stats, *, as_json: bool = False) -> str:
    """Pending (delayed included), delayed (retrying included), retrying
    (after a failed attempt), waiting (for a parent), running and dead jobs,
    completed and cancelled ones kept, and the worker threads this process's
    queue abandoned at a time limit."""
    shown = {
        "pending": counts.pending,
        "delayed": counts.delayed,
        "retrying": counts.retrying,
        "waiting": counts.waiting,
        "running": counts.running,
        "dead": counts.dead,
        "kept": counts.kept,
        "cancelled": counts.cancelled,
        "abandoned": counts.abandoned,
    }
    if as_json:
        return to_json(shown)
    return _fields([(name, str(count)) for name, count in shown.items()])


def schedules(shown: Sequence[Schedule], *, as_json: bool = False) -> str:
    """The periodic jobs: declared ones, then orphaned ones (kept by the
    store, declared by no code loaded here); times in UTC. JSON adds the
    next slots (``next_slots``) and the pause (``paused``, ``paused_at``,
    ``paused_by``)."""
    if as_json:
        return to_json([
            {
                "name": s.name,
                "expression": s.expression,
                "tz": s.tz,
                "next_slot": _epoch(s.next_slot),
                "next_slots": [_epoch(slot) for slot in s.next_slots],
                "last_slot": _epoch(s.last_slot),
                "last_job_id": s.last_job_id,
                "orphaned": s.orphaned,
                "paused": s.paused,
                "paused_at": _epoch(s.paused_at),
                "paused_by": s.paused_by,
            }
            for s in shown
        ])  # fmt: skip
    if not shown:
        return "no schedules\n"
    headers = ["NAME", "EXPRESSION", "TZ", "NEXT (UTC)", "LAST (UTC)", "LAST JOB"]
    rows = [
        [
            escape(s.name) + _schedule_notes(s),
            escape(s.expression),
            escape(s.tz),
            when(_epoch(s.next_slot)),
            when(_epoch(s.last_slot)),
            "-" if s.last_job_id is None else str(s.last_job_id),
        ]
        for s in shown
    ]
    return _table(headers, rows)


def _schedule_notes(shown: Schedule) -> str:
    """What the NAME column adds: orphaned, paused (by whom)."""
    notes = " (orphaned)" if shown.orphaned else ""
    if shown.paused:
        notes += f" (paused by {escape(shown.paused_by or '?')})"
    return notes


def schedule_changed(
    name: str, action: str, changed: bool, *, as_json: bool = False
) -> str:
    """What ``pause-schedule`` (``action`` "paused") or ``resume-schedule``
    ("resumed") did: ``changed``, or nothing since it was so already."""
    if as_json:
        return to_json({"name": name, action: True, "changed": changed})
    if not changed:
        state = "paused" if action == "paused" else "not paused"
        return f"schedule {name!r} was {state} already: nothing changed\n"
    return f"schedule {name!r} {action}\n"


def schedule_run(name: str, job_id: int, *, as_json: bool = False) -> str:
    """A job of schedule ``name`` enqueued by hand (``run-schedule``)."""
    if as_json:
        return to_json({"name": name, "id": job_id})
    return f"schedule {name!r} runs now: job {job_id}\n"


def limits(shown: Sequence[LimitUsage], *, as_json: bool = False) -> str:
    """The limits the store holds, by name: their bounds ("-": none), and
    the attempts running and the jobs waiting under each now (a family's
    summed over its keys, each of which has the family's bounds)."""
    if as_json:
        return to_json([limit_usage(usage) for usage in shown])
    if not shown:
        return "no limits\n"
    headers = ["NAME", "CONCURRENCY", "RATE", "BURST", "RUNNING", "WAITING"]
    rows = [
        [
            escape(usage.name) + (" (each key)" if usage.name.endswith(":*") else ""),
            _count(usage.concurrency),
            _optional(usage.rate),
            "-" if usage.rate is None else str(usage.burst),
            str(usage.running),
            str(usage.waiting),
        ]
        for usage in shown
    ]
    return _table(headers, rows, left=True)


def process_info(info: ProcessInfo) -> dict[str, Any]:
    """A process as ``jobq processes --json`` lists it (stable keys): ``id``,
    ``host``, ``pid``, ``started`` and ``seen`` (epoch seconds), ``workers``,
    ``busy``, ``idle``, ``gone`` and ``running``: its jobs, each with ``id``,
    ``task`` and ``started``."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "started": info.started,
        "seen": info.seen,
        "workers": info.workers,
        "busy": info.busy,
        "idle": info.idle,
        "gone": info.gone,
        "running": [
            {"id": job.id, "task": job.task, "started": job.started}
            for job in info.running
        ],
    }


def processes(
    shown: Sequence[ProcessInfo] | None, now: float, *, as_json: bool = False
) -> str:
    """The processes serving the queue: host, pid, when each started and was
    last seen, its workers (busy of all) and the jobs it runs, each with how
    long it has run; a gone one (unseen past its lease) says so."""
    if shown is None:
        if as_json:
            return to_json(None)
        return "this store keeps no figures of the processes serving it\n"
    if as_json:
        return to_json([process_info(info) for info in shown])
    if not shown:
        return "no process serves this queue (none runs workers)\n"
    headers = ["HOST", "PID", "STARTED (UTC)", "SEEN (UTC)", "BUSY", "RUNNING"]
    rows = [
        [
            escape(info.host) + (" (gone)" if info.gone else ""),
            str(info.pid),
            when(info.started),
            when(info.seen),
            f"{info.busy}/{info.workers}",
            ", ".join(
                f"{job.id} {escape(job.task or '-')} {max(now - job.started, 0):.0f}s"
                for job in info.running
            )
            or "-",
        ]
        for info in shown
    ]
    return _table(headers, rows, left=True)


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _epoch(moment: dt.datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def dead(records: Sequence[JobRecord[Any]], *, as_json: bool = False) -> str:
    """The dead-letter list, oldest first: a table, or a JSON array."""
    if as_json:
        return to_json([job_summary(record) for record in records])
    if not records:
        return "no dead jobs\n"
    with_task = any(record.task is not None for record in records)
    headers = ["ID", "ATTEMPTS", "BURIED (UTC)", "CREATED (UTC)", "KEY"]
    headers += ["TASK"] if with_task else []
    headers += ["LAST ERROR"]
    rows = []
    for record in records:
        row = [
            str(record.id),
            f"{record.attempts}/{record.max_attempts}",
            when(buried_at(record)),
            when(record.created_at),
            _optional(record.key, KEY_WIDTH),
        ]
        row += [_optional(record.task, KEY_WIDTH)] if with_task else []
        row += [_optional(record.last_error, ERROR_WIDTH)]
        rows.append(row)
    return _table(headers, rows)


def job(
    record: JobRecord[Any], relatives: Family | None = None, *, as_json: bool = False
) -> str:
    """One job in any state, with its workflow (its parents and children,
    with their states as ``relatives`` gives them) and every kept error and
    its traceback."""
    if as_json:
        return to_json(job_details(record, relatives))
    fields = [
        ("id", str(record.id)),
        ("state", str(record.state)),
        ("attempts", f"{record.attempts} of {record.max_attempts} failed"),
        ("priority", str(record.priority)),
        ("key", _optional(record.key)),
        ("task", _optional(record.task)),
        ("created", when(record.created_at) + " UTC"),
    ]
    if record.state == JobState.PENDING:
        fields.append(("due", when(record.run_at) + " UTC"))
    if record.after_failure is not None:
        fields.append(("after failure", record.after_failure))
    if record.state == JobState.WAITING:
        fields.append(("waiting on", _ids(record.waiting_on)))
    if record.limits:
        fields.append(("limits", ", ".join(escape(name) for name in record.limits)))
    if record.held_by is not None:
        fields.append(("held by", escape(record.held_by)))
    if record.state == JobState.DEAD:
        fields.append(("buried", when(buried_at(record)) + " UTC"))
    if record.cancellation is not None:
        fields.append(_cancellation_field(record.state, record.cancellation))
    if record.started_at is not None:
        ended = "running" if record.finished_at is None else when(record.finished_at)
        fields.append(("attempted", f"{when(record.started_at)} UTC to {ended}"))
    if record.timeout is not None:
        fields.append(("timeout", f"{record.timeout:g} s"))
    if record.meta:
        fields.append(("meta", _json_text(dict(record.meta))))
    fields.append(("last error", _optional(record.last_error)))
    fields.append(("payload", _json_text(record.payload)))
    if record.state == JobState.COMPLETED:
        fields.append(("result", _json_text(record.result)))
    lines = [_fields(fields)]
    lines += _relatives(record, relatives)
    count = len(record.errors)
    for number, error in enumerate(record.errors, 1):
        heading = f"error {number} of {count}, at {when(error.at)} UTC"
        message = f"{error.type}: {error.message}" if error.message else error.type
        lines.append(f"\n{heading}\n  {escape(message)}\n")
        lines.extend(
            f"    {line}\n"
            for line in escape(error.traceback.rstrip("\n"), keep="\n").splitlines()
        )
    return "".join(lines)


def _relatives(record: JobRecord[Any], relatives: Family | None) -> list[str]:
    """The parents and children sections of ``jobq show``: a table each,
    with their states (``gone``: no longer stored), or their ids alone when
    not looked up."""
    if relatives is None:
        listed = (("parents", record.parents), ("children", record.children))
        return [f"\n{name}: {_ids(ids)}\n" for name, ids in listed if ids]
    sections = []
    for name, found, more in (
        ("parents", relatives.parents, relatives.more_parents),
        ("children", relatives.children, relatives.more_children),
    ):
        if not found:
            continue
        rows = [
            [str(one.id), _relative_state(one, record), _optional(one.task, KEY_WIDTH)]
            for one in found
        ]
        table = _table(["ID", "STATE", "TASK"], rows)
        sections.append(f"\n{name}\n")
        sections.extend(f"  {line}" for line in table.splitlines(keepends=True))
        if more:
            sections.append(f"  and {more} more\n")
    return sections


def _relative_state(one: Relative, record: JobRecord[Any]) -> str:
    """A relative's state, ``gone`` if no longer stored; ``, waited on``
    for a parent ``record`` still waits for."""
    state = "gone" if one.state is None else str(one.state)
    return f"{state}, waited on" if one.id in record.waiting_on else state


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(str(job_id) for job_id in ids) or "-"


def _cancellation_field(state: JobState, request: Cancellation) -> tuple[str, str]:
    """``cancelled`` (when, by whom, what it stopped) or, for a running job
    asked to stop, ``stopping`` (when, by whom)."""
    asked = f"{when(request.at)} UTC by {escape(request.by)}"
    if state == JobState.RUNNING:
        return ("stopping", f"asked {asked}")
    return ("cancelled", f"{asked}, {_stopped(request.attempt)}")


def _stopped(attempt: int | None) -> str:
    return "while pending" if attempt is None else f"stopping attempt {attempt}"


def cancelled(records: Sequence[JobRecord[Any]], *, as_json: bool = False) -> str:
    """The cancelled jobs kept, newest first: a table, or a JSON array (each
    job's summary with its ``cancellation``)."""
    if as_json:
        return to_json([
            {**job_summary(record), "cancellation": cancellation(record.cancellation)}
            for record in records
        ])  # fmt: skip
    if not records:
        return "no cancelled jobs\n"
    with_task = any(record.task is not None for record in records)
    headers = ["ID", "CANCELLED (UTC)", "BY", "STOPPED", "KEY"]
    headers += ["TASK"] if with_task else []
    rows = []
    for record in records:
        request = record.cancellation
        row = [
            str(record.id),
            when(None if request is None else request.at),
            _optional(None if request is None else request.by, KEY_WIDTH),
            _stopped(None if request is None else request.attempt),
            _optional(record.key, KEY_WIDTH),
        ]
        row += [_optional(record.task, KEY_WIDTH)] if with_task else []
        rows.append(row)
    return _table(headers, rows)


#: What ``jobq cancel`` says of each outcome (``operations.Cancel.outcome``).
_CANCEL_TEXT = {
    "cancelled": "job {id} cancelled",
    "stopping": "job {id} is running: asked to stop (it ends cancelled when its "
    "handler stops; see jobq show {id})",
    "completed": "job {id} completed: its handler returned after the request, "
    "so its work is done",
    "stopped": "job {id} stopped",
}


#: What ``jobq cancel`` adds of a job it cancelled, by the state it was in.
_CANCELLED_WAS = {
    JobState.PENDING: " (it was pending)",
    JobState.WAITING: " (it was waiting for a parent)",
}


def cancel(job_id: int, was: JobState, outcome: str, *, as_json: bool = False) -> str:
    """What ``jobq cancel`` did to a job that was pending, waiting or running
    (``was``): its ``outcome``, ``cancelled``, ``stopping``, ``completed``
    or ``stopped``."""
    if as_json:
        return to_json({"id": job_id, "was": str(was), "outcome": outcome})
    text = _CANCEL_TEXT[outcome].format(id=job_id)
    if outcome == "cancelled":
        text += _CANCELLED_WAS.get(was, " (it stopped)")
    return text + "\n"


def retried(job_id: int, *, as_json: bool = False) -> str:
    """A dead job made pending again."""
    if as_json:
        return to_json({"id": job_id, "retried": True})
    return f"job {job_id} is pending again\n"


def deleted(job_id: int, *, as_json: bool = False) -> str:
    """A dead job removed."""
    if as_json:
        return to_json({"id": job_id, "deleted": True})
    return f"job {job_id} deleted\n"


def purged(count: int, *, as_json: bool = False) -> str:
    """Every dead job removed: how many."""
    if as_json:
        return to_json({"deleted": count})
    return f"deleted {plural(count, 'dead job')}\n"


def migration(store: str, version: int | None, *, as_json: bool = False) -> str:
    """``store``'s schema at ``version`` now; ``None``: a store without a
    schema (JSON file, memory), nothing to migrate."""
    if as_json:
        return to_json({"store": store, "schema_version": version})
    if version is None:
        return f"{escape(store)} has no schema: nothing to migrate\n"
    return f"{escape(store)}: jobq schema at version {version}\n"


# -- pieces ----------------------------------------------------------------------


def when(epoch: float | None) -> str:
    """Epoch seconds as UTC time for people; ``-`` for none."""
    if epoch is None:
        return "-"
    try:
        moment = dt.datetime.fromtimestamp(epoch, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return repr(epoch)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def plural(count: int, noun: str) -> str:
    """``1 dead job``, ``2 dead jobs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _json_text(value: Any) -> str:
    """A payload or result as one escaped line of JSON."""
    return escape(json.dumps(value, ensure_ascii=False))


def _optional(text: str | None, width: int | None = None) -> str:
    if text is None:
        return "-"
    shown = escape(text)
    return shown if width is None else _cut(shown, width)


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, left: bool = False
) -> str:
    """Columns padded to their widest cell; the first column right-aligned
    (ids), unless ``left`` (names)."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [
            cell.rjust(width) if i == 0 and not left else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip() + "\n")
    return "".join(lines)


def _fields(fields: Sequence[tuple[str, str]]) -> str:
    width = max(len(name) for name, _ in fields)
    return "".join(f"{name.ljust(width)}  {value}\n" for name, value in fields)
