"""The ``jobq`` command: every command against the JSON, SQLite and PostgreSQL
stores, called in-process through ``main`` (``worker`` also as a subprocess
that is stopped with a signal).

What must hold beyond "it prints the right thing":
- ``--json`` output parses, has stable keys and is ASCII only;
- exit status 0 done, 1 no such job / not dead / store failure, 2 usage;
- nothing from a job reaches the terminal raw: ESC, line breaks, C1 controls
  and bidi overrides in payloads, keys and errors are shown escaped;
- read-only commands on a JSON store never take its owner's lock, so an app
  that (re)starts while someone looks still owns its file;
- ``worker`` runs the handler of ``--app``'s queue and exits 0 on SIGTERM or
  SIGINT, waiting no longer than ``--shutdown-timeout`` for running jobs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from limits_helpers import WhileHeld, hold_one, needs_limits
from old_schemas import postgres_v1, sqlite_v1
from postgres_url import POSTGRES_URL
from workflow_helpers import build, step

import jobq
from jobq import cli
from jobq.activity import ProcessInfo, RunningJob
from jobq.admin import operations
from jobq.cli import render
from jobq.stores import JsonFileStore, PostgresStore, SqliteStore, Store
from jobq.stores.base import ScheduleStore
from jobq.stores.jsonfile.fileio import OwnerLock
from jobq.stores.postgres.schema import SCHEMA_VERSION as POSTGRES_SCHEMA
from jobq.stores.sqlite.schema import SCHEMA_VERSION as SQLITE_SCHEMA
from jobq.testing.clock import T0

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30.0  # seconds; a cap so that a broken worker fails a test, never hangs it
FAR = 3600.0  # a delay that keeps a job pending for the whole test

#: Text that would drive a terminal if written raw: colour, a line break, a
#: carriage return, the C1 control sequence introducer and a bidi override.
NASTY = "\x1b[31mred\nsecond line\r\x9b2J\u202eevil"
RAW = ("\x1b", "\x9b", "\u202e", "\r")


@dataclass
class Result:
    code: int
    out: str
    err: str


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Result:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def fail(job: jobq.Job[Any]) -> None:
    raise ValueError(job.payload.get("error", "boom"))


@dataclass
class Target:
    """A persistent store the command can reach, and queues on it for setup."""

    kind: str
    args: list[str]
    new_store: Callable[[], Store]
    queues: list[jobq.JobQueue[Any]] = field(default_factory=list)

    def queue(self, handler: Any = fail, **options: Any) -> jobq.JobQueue[Any]:
        queue: jobq.JobQueue[Any] = jobq.JobQueue(
            handler, store=self.new_store(), **options
        )
        self.queues.append(queue)
        return queue

    def seed(
        self, dead: Sequence[Any] = (), pending: Sequence[Any] = (), **enqueue: Any
    ) -> tuple[list[int], list[int]]:
        """Bury the ``dead`` payloads (each fails once: ``{"error": ...}``
        sets the message), add the ``pending`` ones for later, release the store."""
        queue = self.queue(fail, max_attempts=1)
        dead_ids = [queue.enqueue(p, **enqueue).id for p in dead]
        queue.run_pending()
        pending_ids = [queue.enqueue(p, delay=FAR).id for p in pending]
        queue.close()
        return dead_ids, pending_ids


@pytest.fixture(params=["json", "sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    yield from _target(request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def shared_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A store that another process may change while this one runs its jobs."""
    yield from _target(request, tmp_path)


def _target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    kind = str(request.param)
    if kind == "json":
        path = tmp_path / "jobs.json"
        made = Target(kind, ["--store", str(path)], lambda: JsonFileStore(path))
    elif kind == "sqlite":
        path = tmp_path / "jobs.db"
        made = Target(kind, ["--store", f"sqlite:///{path}"], lambda: SqliteStore(path))
    else:
        schema = request.getfixturevalue("postgres_schema")
        name = f"cli-{secrets.token_hex(4)}"
        made = Target(
            kind,
            ["--store", POSTGRES_URL, "--schema", schema, "--queue", name],
            lambda: PostgresStore(POSTGRES_URL, schema=schema, queue=name),
        )
    yield made
    for queue in made.queues:
        queue.close(timeout=5)


# -- stats, dead, show ---------------------------------------------------------


def test_stats_as_text_and_json(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    target.seed(dead=[{"n": 1}], pending=[{"n": 2}, {"n": 3}])

    text = run(capsys, "stats", *target.args)
    as_json = run(capsys, "stats", "--json", *target.args)

    assert text.code == 0
    assert text.out.split() == [
        "pending", "2", "delayed", "2", "retrying", "0", "waiting", "0", "running",
        "0", "dead", "1", "kept", "0", "cancelled", "0", "abandoned", "0",
    ]  # fmt: skip
    assert as_json.code == 0
    assert json.loads(as_json.out) == {
        "pending": 2,
        "delayed": 2,
        "retrying": 0,
        "waiting": 0,
        "running": 0,
        "dead": 1,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }


def test_dead_lists_an_aligned_table_oldest_first(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    long_error = "x" * 500
    (first, second), _ = target.seed(
        dead=[{"error": "no such address"}, {"error": long_error}], pending=["p"]
    )

    result = run(capsys, "dead", *target.args)

    assert result.code == 0
    header, *rows = result.out.splitlines()
    assert header.split() == [
        "ID", "ATTEMPTS", "BURIED", "(UTC)", "CREATED", "(UTC)", "KEY", "LAST", "ERROR"
    ]  # fmt: skip
    assert [row.split()[0] for row in rows] == [str(first), str(second)]
    assert rows[0].split()[1] == "1/1"
    assert "ValueError: no such address" in rows[0]
    assert long_error not in result.out  # cut, with a mark
    assert rows[1].endswith("...")
    column = header.index("LAST ERROR")
    assert rows[0][column:].startswith("ValueError")  # aligned under its header


def test_dead_json_has_stable_keys(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (job,), _ = target.seed(dead=[{"error": "bad", "to": "ann"}], key="mail:ann")

    result = run(capsys, "dead", "--json", *target.args)

    assert result.code == 0
    (listed,) = json.loads(result.out)
    assert list(listed) == [
        "id", "state", "attempts", "max_attempts", "priority", "key", "task",
        "created_at", "run_at", "buried_at", "last_error", "payload",
    ]  # fmt: skip
    assert listed["id"] == job
    assert listed["state"] == "dead"
    assert listed["attempts"] == listed["max_attempts"] == 1
    assert listed["key"] == "mail:ann"
    assert listed["last_error"] == "ValueError: bad"
    assert listed["payload"] == {"error": "bad", "to": "ann"}
    assert listed["buried_at"] >= listed["created_at"] > 0


def test_dead_with_no_dead_jobs(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    target.seed(pending=["waiting"])

    assert run(capsys, "dead", *target.args).out == "no dead jobs\n"
    assert json.loads(run(capsys, "dead", "--json", *target.args).out) == []


def test_show_prints_every_field_and_each_traceback(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = target.queue(fail, max_attempts=2, base_delay=0.0, jitter=False)
    job = queue.enqueue(
        {"error": "first"}, key="k1", priority=3, timeout=30, meta={"request": "r1"}
    ).id
    queue.run_pending()  # fails; retried at once (base_delay 0)
    queue.run_pending()  # fails again: dead
    record = queue.get(job)
    queue.close()
    assert record is not None
    assert record.started_at is not None
    assert record.finished_at is not None

    text = run(capsys, "show", str(job), *target.args)
    details = run(capsys, "show", str(job), "--json", *target.args)

    assert text.code == 0
    fields = dict(
        line.split(None, 1) if " " in line else (line, "")
        for line in text.out.split("\n\n")[0].splitlines()
    )
    assert fields["id"] == str(job)
    assert fields["state"] == "dead"
    assert fields["priority"] == "3"
    assert fields["key"] == "k1"
    assert fields["attempted"] == (
        f"{render.when(record.started_at)} UTC to {render.when(record.finished_at)}"
    )
    assert fields["timeout"] == "30 s"
    assert fields["meta"] == '{"request": "r1"}'
    assert "last error  ValueError: first" in text.out
    assert 'payload     {"error": "first"}' in text.out
    assert text.out.count("Traceback (most recent call last):") == 2
    assert "error 2 of 2, at " in text.out
    assert details.code == 0
    shown = json.loads(details.out)
    assert shown["state"] == "dead"
    assert shown["attempts"] == 2
    assert shown["result"] is None
    assert [e["type"] for e in shown["errors"]] == ["ValueError", "ValueError"]
    assert all("Traceback" in e["traceback"] for e in shown["errors"])
    assert list(shown["errors"][0]) == ["type", "message", "traceback", "at"]
    assert (shown["started_at"], shown["finished_at"]) == (
        record.started_at,
        record.finished_at,
    )
    assert (shown["timeout"], shown["meta"]) == (30, {"request": "r1"})


def test_show_a_pending_job(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    _, (job,) = target.seed(pending=[["a", 1]])

    result = run(capsys, "show", str(job), "--json", *target.args)

    shown = json.loads(result.out)
    assert (shown["state"], shown["payload"], shown["errors"]) == (
        "pending",
        ["a", 1],
        [],
    )
    assert shown["buried_at"] is None
    assert "due " in run(capsys, "show", str(job), *target.args).out


def test_show_of_no_such_job_exits_1(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    target.seed(pending=["p"])

    result = run(capsys, "show", "999999", *target.args)

    assert result.code == 1
    assert result.out == ""
    assert result.err == "jobq show: no job 999999\n"


@pytest.mark.parametrize("command", ["show", "retry", "delete"])
def test_an_id_beyond_64_bits_is_no_such_job(
    target: Target, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    target.seed(dead=[{"n": 1}])
    huge = "99999999999999999999999"

    result = run(capsys, command, huge, *target.args)

    assert result.code == 1
    assert result.err == f"jobq {command}: no job {huge}\n"


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_show_lists_a_job_s_parents_and_children_with_their_states(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = target.queue(step, max_attempts=1, keep_completed=600)
    flow = build(queue)
    queue.close()

    text = run(capsys, "show", str(flow.child), *target.args)
    details = json.loads(
        run(capsys, "show", str(flow.child), "--json", *target.args).out
    )
    orphan = run(capsys, "show", str(flow.orphan), *target.args)

    assert text.code == 0
    fields, parents, children = text.out.split("\n\n")
    assert "\nafter failure  wait\n" in fields
    assert f"\nwaiting on     {flow.dead}\n" in fields
    assert rows(parents) == [
        ["parents"],
        ["ID", "STATE", "TASK"],
        [str(flow.dead), "dead,", "waited", "on", "-"],
        [str(flow.done), "completed", "-"],
    ]
    assert rows(children) == [
        ["children"], ["ID", "STATE", "TASK"], [str(flow.grandchild), "waiting", "-"],
    ]  # fmt: skip
    assert [str(flow.gone), "gone", "-"] in rows(orphan.out)
    assert "waiting on" not in orphan.out  # it is pending
    assert details["parents"] == [flow.dead, flow.done]
    assert details["waiting_on"] == [flow.dead]
    assert details["children"] == [flow.grandchild]
    assert details["after_failure"] == "wait"
    assert details["relatives"] == {
        "parents": [
            {"id": flow.dead, "task": None, "state": "dead"},
            {"id": flow.done, "task": None, "state": "completed"},
        ],
        "children": [{"id": flow.grandchild, "task": None, "state": "waiting"}],
        "more_parents": 0,
        "more_children": 0,
    }


def test_stats_counts_waiting_jobs_and_cancel_cancels_one(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = target.queue(step, max_attempts=1, keep_completed=600)
    flow = build(queue)
    queue.close()

    stats = json.loads(run(capsys, "stats", "--json", *target.args).out)
    cancelled = run(capsys, "cancel", str(flow.grandchild), *target.args)
    deleted = run(capsys, "delete", str(flow.dead), *target.args)
    child = run(capsys, "show", str(flow.child), *target.args)

    assert (stats["waiting"], stats["pending"]) == (2, 1)  # child, grandchild; orphan
    assert cancelled.out == (
        f"job {flow.grandchild} cancelled (it was waiting for a parent)\n"
    )
    assert deleted.code == 0
    assert "\nstate          cancelled\n" in child.out
    assert f"UTC by parent job {flow.dead} was deleted, while pending" in child.out
    assert [str(flow.dead), "gone,", "waited", "on", "-"] in rows(child.out)
    after = json.loads(run(capsys, "stats", "--json", *target.args).out)
    assert after["waiting"] == 0


def test_show_looks_up_so_many_relatives_and_counts_the_others(
    capsys: pytest.CaptureFixture[str],
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(step, keep_completed=600)
    parent = queue.enqueue("fan out").id
    queue.enqueue_many(range(operations.RELATIVES_SHOWN + 3), after=[parent])
    record = operations.show(queue, parent)

    relatives = operations.family(queue, record)
    text = render.job(record, relatives)
    shown = json.loads(render.job(record, relatives, as_json=True))

    assert len(relatives.children) == operations.RELATIVES_SHOWN
    assert relatives.more_children == 3
    assert text.endswith("  and 3 more\n")
    assert len(shown["children"]) == operations.RELATIVES_SHOWN + 3
    assert shown["relatives"]["more_children"] == 3
    assert f"\nchildren: {parent + 1}, " in render.job(record)  # not looked up
    queue.close()


# -- escaping ------------------------------------------------------------------


def test_payloads_keys_and_errors_are_shown_escaped(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (job,), _ = target.seed(dead=[{"error": NASTY, "text": NASTY}], key=f"k{NASTY}")

    listing = run(capsys, "dead", *target.args)
    shown = run(capsys, "show", str(job), *target.args)

    for output in (listing.out, shown.out):
        assert not any(raw in output for raw in RAW)
        assert "\\x1b[31mred\\nsecond line\\r\\x9b2J\\u202eevil" in output
    assert len(listing.out.splitlines()) == 2  # the header and one row
    # One-line fields stay on one line; a traceback keeps its own line breaks
    # (indented under its heading) but nothing else raw.
    assert f"key         k{cli.escape(NASTY)}\n" in shown.out
    assert "payload     {" in shown.out
    payload_line = next(ln for ln in shown.out.splitlines() if ln.startswith("payload"))
    assert "\\u001b[31mred\\nsecond line" in payload_line  # JSON's escapes


def test_json_output_is_ascii_and_exact(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (job,), _ = target.seed(dead=[{"error": NASTY, "text": NASTY}], key=NASTY)

    listing = run(capsys, "dead", "--json", *target.args)
    shown = run(capsys, "show", str(job), "--json", *target.args)

    for output in (listing.out, shown.out):
        assert output.isascii()
        assert not any(raw in output for raw in RAW)
    (listed,) = json.loads(listing.out)
    assert listed["payload"] == {"error": NASTY, "text": NASTY}
    assert listed["key"] == NASTY
    assert listed["last_error"] == f"ValueError: {NASTY}"
    assert json.loads(shown.out)["errors"][0]["message"] == NASTY


def test_error_messages_about_jobs_are_escaped(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (job,), _ = target.seed(dead=[{"error": "x"}], key=NASTY)
    holder = target.queue(fail)
    holder.enqueue("holds the key", key=NASTY, delay=FAR)
    holder.close()

    result = run(capsys, "retry", str(job), *target.args)

    assert result.code == 1
    assert not any(raw in result.err for raw in RAW)
    assert "key" in result.err


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text", "plain text"),
        ("é ü 日本 ✓", "é ü 日本 ✓"),  # printable non-ASCII stays
        ("\x1b[31m", "\\x1b[31m"),
        ("a\nb\tc\rd", "a\\nb\\tc\\rd"),
        ("\x00\x7f\x9b", "\\x00\\x7f\\x9b"),
        ("\u202e\u2028\ufeff", "\\u202e\\u2028\\ufeff"),
        ("\udcff", "\\udcff"),  # a lone surrogate
        ("\U000e0001", "\\U000e0001"),  # a tag character
    ],
)
def test_escape(text: str, shown: str) -> None:
    assert cli.escape(text) == shown


def test_escape_can_keep_line_breaks() -> None:
    assert cli.escape("a\n\x1bb", keep="\n") == "a\n\\x1bb"


# -- cancel, cancelled ---------------------------------------------------------


def test_cancel_a_pending_job_keeps_it_cancelled(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    _, (job, other) = target.seed(pending=["p", "q"])

    result = run(capsys, "cancel", str(job), *target.args)
    as_json = run(capsys, "cancel", str(other), "--json", *target.args)

    assert (result.code, result.err) == (0, "")
    assert result.out == f"job {job} cancelled (it was pending)\n"
    assert json.loads(as_json.out) == {
        "id": other,
        "was": "pending",
        "outcome": "cancelled",
    }
    shown = json.loads(run(capsys, "show", str(job), "--json", *target.args).out)
    assert shown["state"] == "cancelled"
    assert shown["cancellation"]["by"] == "jobq cancel"
    assert shown["cancellation"]["attempt"] is None
    text = run(capsys, "show", str(job), *target.args).out
    assert "by jobq cancel, while pending" in text
    counts = json.loads(run(capsys, "stats", "--json", *target.args).out)
    assert (counts["pending"], counts["cancelled"]) == (0, 2)


def test_cancel_refuses_a_dead_a_cancelled_and_a_missing_job(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (dead,), (pending,) = target.seed(dead=[1], pending=[2])

    refused = run(capsys, "cancel", str(dead), *target.args)
    missing = run(capsys, "cancel", "999999", "--json", *target.args)

    assert (refused.code, refused.out) == (1, "")
    assert refused.err == (
        f"jobq cancel: job {dead} is dead; only a pending, waiting or running job "
        "can be cancelled\n"
    )
    assert (missing.code, missing.out) == (1, "")
    assert missing.err == "jobq cancel: no job 999999\n"
    assert run(capsys, "cancel", str(pending), *target.args).code == 0
    again = run(capsys, "cancel", str(pending), *target.args)
    assert again.code == 1
    assert "is cancelled; only a pending, waiting or running job" in again.err


def test_cancelled_lists_the_kept_cancelled_jobs(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    _, (job,) = target.seed(pending=[{"n": 1}])
    assert run(capsys, "cancelled", *target.args).out == "no cancelled jobs\n"
    run(capsys, "cancel", str(job), *target.args)

    text = run(capsys, "cancelled", *target.args)
    as_json = run(capsys, "cancelled", "--json", *target.args)

    assert text.code == 0
    header, row = text.out.splitlines()
    assert header.split() == ["ID", "CANCELLED", "(UTC)", "BY", "STOPPED", "KEY"]
    assert row.split()[0] == str(job)
    assert "jobq cancel  while pending" in row
    (listed,) = json.loads(as_json.out)
    assert (listed["id"], listed["state"]) == (job, "cancelled")
    assert listed["cancellation"]["by"] == "jobq cancel"


def _record(state: jobq.JobState, attempt: int | None) -> jobq.JobRecord[Any]:
    return jobq.JobRecord(
        id=7, payload="p", attempts=0, state=state, run_at=0.0, created_at=0.0,
        last_error=None, key=None, priority=0, result=None, task=None, errors=(),
        max_attempts=5, started_at=None if attempt is None else 60.0,
        cancellation=jobq.Cancellation(at=120.0, by=NASTY, attempt=attempt),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("state", "attempt", "line"),
    [
        ("cancelled", None, "cancelled   {at} by {by}, while pending"),
        ("cancelled", 2, "cancelled   {at} by {by}, stopping attempt 2"),
        ("running", 1, "stopping    asked {at} by {by}"),
    ],
)  # fmt: skip
def test_show_says_who_cancelled_a_job_when_and_what_it_stopped(
    state: str, attempt: int | None, line: str
) -> None:
    record = _record(jobq.JobState(state), attempt)

    text = render.job(record)
    as_json = json.loads(render.job(record, as_json=True))

    at = "1970-01-01 00:02:00 UTC"
    assert line.format(at=at, by=render.escape(NASTY)) in text.splitlines()
    assert not any(raw in text for raw in RAW)
    assert as_json["cancellation"] == {"at": 120.0, "by": NASTY, "attempt": attempt}


def test_cancel_says_what_it_did() -> None:
    pending, running = jobq.JobState.PENDING, jobq.JobState.RUNNING

    assert (
        render.cancel(3, pending, "cancelled") == "job 3 cancelled (it was pending)\n"
    )
    assert render.cancel(3, running, "cancelled") == "job 3 cancelled (it stopped)\n"
    assert render.cancel(3, running, "stopping").startswith("job 3 is running: asked")
    assert "its work is done" in render.cancel(3, running, "completed")
    assert json.loads(render.cancel(3, running, "stopped", as_json=True)) == {
        "id": 3,
        "was": "running",
        "outcome": "stopped",
    }


def _cooperative(started: threading.Event, release: threading.Event) -> Any:
    """A handler that runs lines of its own until ``release``: a cancellation
    reaches it at once."""

    def handler(job: jobq.Job[Any]) -> None:
        started.set()
        while not release.wait(0.01):
            pass

    return handler


def _blocked(started: threading.Event, release: threading.Event) -> Any:
    """A handler blocked in one call until ``release``: no line of its own
    runs meanwhile, so a cancellation waits for it (or for the grace)."""

    def handler(job: jobq.Job[Any]) -> None:
        started.set()
        release.wait(WAIT)

    return handler


def _running(target: Target, make: Callable[..., Any]) -> tuple[int, threading.Event]:
    """A job running in this process on ``target``'s store (the command is
    another queue on it, as another process's would be); the event releases
    its handler."""
    started, release = threading.Event(), threading.Event()
    queue = target.queue(make(started, release), timeout_grace=WAIT)
    job = queue.enqueue("x").id
    queue.start(workers=1)
    assert started.wait(WAIT)
    return job, release


def test_cancel_wait_stops_a_running_job_from_another_queue(
    shared_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    job, release = _running(shared_target, _cooperative)
    try:
        result = run(
            capsys, "cancel", str(job), "--wait", str(WAIT), *shared_target.args
        )
    finally:
        release.set()

    assert (result.code, result.err) == (0, "")
    assert result.out == f"job {job} cancelled (it stopped)\n"
    shown = json.loads(run(capsys, "show", str(job), "--json", *shared_target.args).out)
    assert shown["state"] == "cancelled"
    assert shown["cancellation"]["by"] == "jobq cancel"
    assert shown["cancellation"]["attempt"] == 1


def test_cancel_asks_a_running_job_to_stop_and_show_says_stopping(
    shared_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    job, release = _running(shared_target, _blocked)
    try:
        result = run(capsys, "cancel", str(job), "--json", *shared_target.args)
        text = run(capsys, "show", str(job), *shared_target.args).out
    finally:
        release.set()

    assert result.code == 0
    assert json.loads(result.out) == {
        "id": job,
        "was": "running",
        "outcome": "stopping",
    }
    assert "stopping" in text
    assert "by jobq cancel" in text


def test_cancel_wait_exits_3_while_the_job_still_runs(
    shared_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    job, release = _running(shared_target, _blocked)
    try:
        result = run(capsys, "cancel", str(job), "--wait", "0.2", *shared_target.args)
        stopping = run(capsys, "show", str(job), "--json", *shared_target.args)
    finally:
        release.set()

    assert (result.code, result.out) == (3, "")
    assert result.err == (
        f"jobq cancel: job {job} was asked to stop but still runs after 0.2 s; "
        "it ends cancelled when its handler stops\n"
    )
    assert json.loads(stopping.out)["state"] == "running"
    assert json.loads(stopping.out)["cancellation"]["by"] == "jobq cancel"


@pytest.mark.parametrize("wait", ["-1", "nan", "soon"])
def test_cancel_wait_must_be_seconds(
    target: Target, capsys: pytest.CaptureFixture[str], wait: str
) -> None:
    assert run(capsys, "cancel", "1", "--wait", wait, *target.args).code == 2


# -- retry, delete, purge-dead -------------------------------------------------


def test_retry_makes_a_dead_job_pending(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (job,), _ = target.seed(dead=[{"n": 1}], pending=["p"])

    result = run(capsys, "retry", str(job), *target.args)

    assert (result.code, result.out) == (0, f"job {job} is pending again\n")
    shown = json.loads(run(capsys, "show", str(job), "--json", *target.args).out)
    assert (shown["state"], shown["attempts"]) == ("pending", 0)

    again = run(capsys, "retry", str(job), *target.args)
    assert again.code == 1
    assert (
        again.err == f"jobq retry: job {job} is pending, not dead; it was not retried\n"
    )
    missing = run(capsys, "retry", "999999", "--json", *target.args)
    assert (missing.code, missing.out, missing.err) == (
        1,
        "",
        "jobq retry: no job 999999\n",
    )


def test_retry_json(target: Target, capsys: pytest.CaptureFixture[str]) -> None:
    (job,), _ = target.seed(dead=[1])

    result = run(capsys, "retry", str(job), "--json", *target.args)

    assert json.loads(result.out) == {"id": job, "retried": True}


def test_delete_removes_a_dead_job_only(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (job,), (waiting,) = target.seed(dead=[1], pending=[2])

    result = run(capsys, "delete", str(job), "--json", *target.args)

    assert result.code == 0
    assert json.loads(result.out) == {"id": job, "deleted": True}
    assert run(capsys, "show", str(job), *target.args).code == 1
    assert run(capsys, "delete", str(job), *target.args).code == 1
    pending = run(capsys, "delete", str(waiting), *target.args)
    assert pending.code == 1
    assert "is pending, not dead" in pending.err
    assert run(capsys, "show", str(waiting), *target.args).code == 0


def test_purge_dead_refuses_without_yes(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    target.seed(dead=[1, 2, 3], pending=[4])

    refused = run(capsys, "purge-dead", *target.args)

    assert refused.code == 2
    assert refused.out == ""
    assert "3 dead jobs" in refused.err
    assert "--yes" in refused.err
    counts = json.loads(run(capsys, "stats", "--json", *target.args).out)
    assert counts == {
        "pending": 1,
        "delayed": 1,
        "retrying": 0,
        "waiting": 0,
        "running": 0,
        "dead": 3,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }


def test_purge_dead_with_yes_deletes_every_dead_job(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    target.seed(dead=[1, 2, 3], pending=[4])

    result = run(capsys, "purge-dead", "--yes", "--json", *target.args)

    assert result.code == 0
    assert json.loads(result.out) == {"deleted": 3}
    counts = json.loads(run(capsys, "stats", "--json", *target.args).out)
    assert counts == {
        "pending": 1,
        "delayed": 1,
        "retrying": 0,
        "waiting": 0,
        "running": 0,
        "dead": 0,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }
    assert (
        run(capsys, "purge-dead", "--yes", *target.args).out == "deleted 0 dead jobs\n"
    )


# -- usage errors and finding the store ----------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nonsense"],
        ["show"],
        ["show", "x", "--store", "jobs.json"],
        ["show", "0", "--store", "jobs.json"],
        ["stats", "--store", "redis://localhost"],
        ["stats", "--store", "sqlite://host/jobs.db"],
        ["stats", "--store", "jobs.json", "--queue", "mail"],
        ["stats", "--store", "jobs.json", "--app", "somewhere:queue"],
        ["stats", "--app", "no_such_module_for_jobq_tests:queue"],
        ["stats", "--app", "jobq"],
        ["stats", "--app", "jobq:no_such_attribute"],
        ["stats", "--app", "jobq:Job"],
        ["worker", "--store", "jobs.json"],
        ["worker", "--app", "jobq:JobQueue", "--workers", "0"],
        ["worker", "--app", "jobq:JobQueue", "--shutdown-timeout", "-1"],
    ],
)
def test_usage_errors_exit_2(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.delenv(cli.STORE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path])  # --app may add the directory

    result = run(capsys, *argv)

    assert result.code == 2
    assert result.out == ""
    assert "error" in result.err
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_no_store_named_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cli.STORE_ENV, raising=False)

    result = run(capsys, "stats")

    assert result.code == 2
    assert "--store" in result.err
    assert cli.STORE_ENV in result.err


def test_store_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.db"
    with jobq.JobQueue(store=f"sqlite:///{path}") as queue:
        queue.enqueue("x", delay=FAR)
    monkeypatch.setenv(cli.STORE_ENV, f"sqlite:///{path}")

    result = run(capsys, "stats", "--json")

    assert json.loads(result.out)["pending"] == 1


@pytest.mark.parametrize("spec", ["missing.json", "sqlite:///missing.db"])
def test_a_store_file_that_does_not_exist_is_not_created(
    spec: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)

    for argv in (["stats"], ["retry", "1"], ["purge-dead", "--yes"]):
        result = run(capsys, *argv, "--store", spec)

        assert result.code == 1
        assert "no " in result.err
        assert "missing" in result.err
    assert list(tmp_path.iterdir()) == []


def test_a_missing_postgres_schema_is_an_error_and_not_created(
    postgres_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    missing = f"{postgres_schema}_missing"

    result = run(capsys, "stats", "--store", POSTGRES_URL, "--schema", missing)

    assert result.code == 1
    assert "does not exist" in result.err
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (missing,)
        ).fetchone()
    assert row == (0,)


def test_help_and_version_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--help").code == 0
    assert run(capsys, "worker", "--help").code == 0
    version = run(capsys, "--version")
    assert (version.code, version.out) == (0, f"jobq {jobq.__version__}\n")


def test_build_parser_names_every_command() -> None:
    parser = cli.build_parser()

    for command in cli.COMMANDS:
        with_id = ("show", "retry", "delete", "cancel")
        with_name = ("pause-schedule", "resume-schedule", "run-schedule")
        argv = [command, "1"] if command in with_id + with_name else [command]
        assert parser.parse_args(argv).command == command


def test_console_script_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    assert project["scripts"]["jobq"] == "jobq.cli:main"


# -- --app ---------------------------------------------------------------------


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], str]:
    """Writes a module holding ``queue = jobq.JobQueue(handle, store=store)``
    (``None``: memory); returns its ``--app`` spec (each module gets a new
    name: imports are cached)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(store: str | None) -> str:
        name = f"cli_test_app_{secrets.token_hex(4)}"
        (tmp_path / f"{name}.py").write_text(
            "import jobq\n"
            "def handle(job):\n"
            "    raise ValueError('app handler')\n"
            f"queue = jobq.JobQueue(handle, store={store!r}, max_attempts=1)\n"
        )
        monkeypatch.delitem(sys.modules, name, raising=False)
        return f"{name}:queue"

    return make


def test_app_names_the_store(
    app_module: Callable[[str | None], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "jobs.db"
    with jobq.JobQueue(fail, store=f"sqlite:///{path}", max_attempts=1) as queue:
        dead = queue.enqueue({"n": 1}).id
        queue.run_pending()
    app = app_module(f"sqlite:///{path}")

    listing = run(capsys, "dead", "--json", "--app", app)
    retried = run(capsys, "retry", str(dead), "--app", app)

    assert [job["id"] for job in json.loads(listing.out)] == [dead]
    assert retried.code == 0


def test_app_with_a_memory_queue_is_refused(
    app_module: Callable[[str | None], str], capsys: pytest.CaptureFixture[str]
) -> None:
    app = app_module(None)

    result = run(capsys, "stats", "--app", app)

    assert result.code == 2
    assert "memory" in result.err


APP_COMMANDS = [
    ["stats"], ["dead"], ["show", "1"], ["retry", "1"], ["delete", "1"],
    ["schedules"], ["pause-schedule", "x"], ["run-schedule", "x"],
    ["purge-dead", "--yes"], ["dashboard", "--bind", "127.0.0.1:0"],
]  # fmt: skip


def serve_nothing(app: Any, host: str, port: int) -> tuple[Callable[[], None], int]:
    """The dashboard's server, listening nowhere and returning at once."""
    return (lambda: None), port


@pytest.mark.parametrize("kind", ["json", "sqlite"])
@pytest.mark.parametrize("argv", APP_COMMANDS, ids=lambda argv: argv[0])
def test_a_missing_store_of_the_app_is_an_error_and_not_created(
    kind: str,
    argv: list[str],
    app_module: Callable[[str | None], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("jobq.cli.dashboard._server", serve_nothing)
    data = tmp_path / "data"
    data.mkdir()
    path = data / "jobs.json" if kind == "json" else data / "jobs.db"
    app = app_module(str(path) if kind == "json" else f"sqlite:///{path}")

    result = run(capsys, *argv, "--app", app)

    assert result.code == 1
    label = "JSON" if kind == "json" else "SQLite"
    assert result.err == (
        f"jobq {argv[0]}: no {label} store at {path} (the app's store): a command "
        "never creates one; check the path, or "
        + ("start the app, which creates it" if kind == "json"
           else "create it by starting the app or with migrate")
        + "\n"
    )  # fmt: skip
    assert list(data.iterdir()) == []


@pytest.fixture
def missing_schema(postgres_schema: str) -> Iterator[str]:
    """A PostgreSQL schema that does not exist (dropped afterwards, should a
    failing test have created it)."""
    import psycopg
    from psycopg import sql

    name = f"{postgres_schema}_{secrets.token_hex(3)}"
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
        )


@pytest.mark.parametrize("argv", APP_COMMANDS, ids=lambda argv: argv[0])
def test_a_missing_postgres_schema_of_the_app_is_an_error_and_not_created(
    argv: list[str],
    missing_schema: str,
    app_module: Callable[[str | None], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psycopg

    monkeypatch.setattr("jobq.cli.dashboard._server", serve_nothing)
    missing = missing_schema
    name = f"cli_test_pg_app_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(
        "import jobq\n"
        "from jobq.stores import PostgresStore\n"
        f"queue = jobq.JobQueue(store=PostgresStore({POSTGRES_URL!r}, "
        f"schema={missing!r}))\n"
    )
    monkeypatch.delitem(sys.modules, name, raising=False)

    result = run(capsys, *argv, "--app", f"{name}:queue")

    assert result.code == 1
    assert result.err.count("\n") == 1
    assert f"the jobq schema {missing!r} does not exist" in result.err
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (missing,)
        ).fetchone()
    assert row == (0,)


def test_queue_for_command_refuses_a_missing_store_and_gives_the_app_its_own_back(
    missing_schema: str, tmp_path: Path
) -> None:
    store = PostgresStore(POSTGRES_URL, schema=missing_schema)
    app = jobq.JobQueue[Any](store=store)
    on_disk = jobq.JobQueue[Any](store=SqliteStore(tmp_path / "gone.db"))

    with (
        pytest.raises(jobq.StoreError, match="does not exist"),
        cli.queue_for_command(app, read_only=True) as used,
    ):
        cli.stats(used)
    with (
        pytest.raises(cli.CommandError, match="no SQLite store at"),
        cli.queue_for_command(on_disk, read_only=True),
    ):
        pass

    assert store.auto_migrate  # the app, going on, still creates its schema
    assert list(tmp_path.iterdir()) == []
    app.close()


# -- the JSON store: looking never takes the owner's lock ----------------------


@pytest.fixture
def json_target(tmp_path: Path) -> Iterator[Target]:
    path = tmp_path / "jobs.json"
    made = Target("json", ["--store", str(path)], lambda: JsonFileStore(path))
    yield made
    for queue in made.queues:
        queue.close(timeout=5)


@pytest.mark.parametrize(
    "argv",
    [["stats"], ["dead"], ["dead", "--json"], ["show", "1"], ["purge-dead"]],
)
def test_read_only_commands_never_take_the_json_lock(
    argv: list[str],
    json_target: Target,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    app_module: Callable[[str | None], str],
) -> None:
    json_target.seed(dead=[1], pending=[2])  # closed: no one owns the file now

    def refuse(lock: OwnerLock) -> None:
        raise AssertionError(f"{argv[0]} took the lock of {lock.path}")

    monkeypatch.setattr(OwnerLock, "acquire", refuse)
    via_store = run(capsys, *argv, *json_target.args)
    via_app = run(capsys, *argv, "--app", app_module(json_target.args[1]))

    assert via_store.code == via_app.code == (2 if argv == ["purge-dead"] else 0)
    assert via_store.out == via_app.out


def test_an_owner_can_start_while_the_command_reads(
    json_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    json_target.seed(dead=[1])
    args = cli.build_parser().parse_args(["stats", "--json", *json_target.args])
    reader = cli.queue_from_args(args, read_only=True)  # what `jobq stats` opens
    before = cli.stats(reader)  # the reader is open; no one owned the file

    owner = json_target.queue(fail)
    owner.enqueue("added by the owner", delay=FAR)  # no StoreLocked: it owns the file
    after = cli.stats(reader)  # and the reader sees what the owner wrote
    reader.close()

    assert before.pending == 0
    assert after.pending == 1
    lock = OwnerLock(str(json_target.args[1]))
    with pytest.raises(jobq.StoreLocked):
        lock.acquire()  # still the owner's


def test_reading_while_an_owner_runs_and_changing_is_refused(
    json_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    (job,), _ = json_target.seed(dead=[1])
    owner = json_target.queue(fail)
    owner.enqueue("x", delay=FAR)

    looked = run(capsys, "stats", "--json", *json_target.args)
    changed = run(capsys, "retry", str(job), *json_target.args)

    assert json.loads(looked.out) == {
        "pending": 1,
        "delayed": 1,
        "retrying": 0,
        "waiting": 0,
        "running": 0,
        "dead": 1,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }
    assert changed.code == 1
    assert str(os.getpid()) in changed.err  # names the owner
    assert "owns" in changed.err
    assert owner.get(job).state == jobq.JobState.DEAD  # type: ignore[union-attr]


def test_read_only_json_store_refuses_changes(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    with jobq.JobQueue(fail, store=path, max_attempts=1) as owner:
        dead = owner.enqueue(1).id
        owner.run_pending()
    before = sorted(p.name for p in tmp_path.iterdir())
    queue = jobq.JobQueue(fail, store=JsonFileStore(path, read_only=True))

    assert queue.stats().dead == 1
    with pytest.raises(jobq.StoreError, match="read-only"):
        queue.enqueue(2)
    with pytest.raises(jobq.StoreError, match="read-only"):
        queue.retry_dead(dead)
    with pytest.raises(jobq.StoreError, match="read-only"):
        queue.start(workers=1)
    queue.close()

    assert sorted(p.name for p in tmp_path.iterdir()) == before
    OwnerLock(str(path)).acquire()  # free


# -- migrate -------------------------------------------------------------------


def test_migrate_creates_a_sqlite_store_and_its_schema(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "jobs.db"
    url = f"sqlite:///{path}"

    created = run(capsys, "migrate", "--store", url)
    again = run(capsys, "migrate", "--json", "--store", url)
    looked = run(capsys, "stats", "--json", "--store", url)

    assert created.code == 0, created.err
    assert (
        created.out
        == f"the SQLite file {path}: jobq schema at version {SQLITE_SCHEMA}\n"
    )
    assert again.code == 0, again.err
    assert json.loads(again.out) == {
        "store": f"the SQLite file {path}",
        "schema_version": SQLITE_SCHEMA,
    }
    assert json.loads(looked.out) == {
        "pending": 0,
        "delayed": 0,
        "retrying": 0,
        "waiting": 0,
        "running": 0,
        "dead": 0,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }


def test_migrate_brings_a_sqlite_file_of_schema_version_1_to_version_5(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "jobs.db"
    sqlite_v1(path)
    url = f"sqlite:///{path}"

    migrated = run(capsys, "migrate", "--store", url)
    looked = run(capsys, "stats", "--json", "--store", url)

    assert migrated.code == 0, migrated.err
    assert (
        migrated.out
        == f"the SQLite file {path}: jobq schema at version {SQLITE_SCHEMA}\n"
    )
    assert json.loads(looked.out) == {
        "pending": 2,
        "delayed": 1,
        "retrying": 1,
        "waiting": 0,
        "running": 0,
        "dead": 1,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }


def test_migrate_brings_a_postgres_schema_of_version_1_to_version_6(
    postgres_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg
    from psycopg import sql

    schema = f"{postgres_schema}_v1"
    args = ["--store", POSTGRES_URL, "--schema", schema, "--queue", "old"]
    postgres_v1(POSTGRES_URL, schema, "old")
    try:
        migrated = run(capsys, "migrate", "--json", *args)
        looked = run(capsys, "stats", "--json", *args)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)
                )
            )

    assert migrated.code == 0, migrated.err
    assert json.loads(migrated.out)["schema_version"] == POSTGRES_SCHEMA
    assert json.loads(looked.out) == {
        "pending": 2,
        "delayed": 1,
        "retrying": 1,
        "waiting": 0,
        "running": 0,
        "dead": 1,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }


def test_migrate_refuses_a_sqlite_file_of_a_newer_jobq(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import sqlite3

    path = tmp_path / "jobs.db"
    assert run(capsys, "migrate", "--store", f"sqlite:///{path}").code == 0
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE jobq_meta SET value = 99 WHERE name = 'schema_version'")

    result = run(capsys, "migrate", "--store", f"sqlite:///{path}")

    assert result.code == 1
    assert "newer jobq" in result.err


def test_migrate_creates_a_postgres_schema(
    postgres_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg
    from psycopg import sql

    schema = f"{postgres_schema}_migrated"
    args = ["--store", POSTGRES_URL, "--schema", schema]
    try:
        missing = run(capsys, "stats", *args)  # the other commands create nothing
        created = run(capsys, "migrate", "--json", *args)
        looked = run(capsys, "stats", "--json", *args)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)
                )
            )

    assert missing.code == 1
    assert created.code == 0, created.err
    assert json.loads(created.out)["schema_version"] >= 1
    assert schema in json.loads(created.out)["store"]
    assert json.loads(looked.out) == {
        "pending": 0,
        "delayed": 0,
        "retrying": 0,
        "waiting": 0,
        "running": 0,
        "dead": 0,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }


@pytest.mark.parametrize("memory", [False, True])
def test_migrate_of_a_store_without_a_schema_has_nothing_to_do(
    memory: bool,
    app_module: Callable[[str | None], str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    where = ["--app", app_module(None)] if memory else ["--store", "jobs.json"]

    result = run(capsys, "migrate", *where)

    assert result.code == 0, result.err
    assert result.out.endswith("has no schema: nothing to migrate\n")
    assert not (tmp_path / "jobs.json").exists()


# -- worker --------------------------------------------------------------------

HELPER = """
import os, threading, time
import jobq

DONE = os.environ["JOBQ_TEST_DONE"]

def note(text):
    with open(DONE, "a") as f:
        f.write(text + "\\n")

def handle(job):
    if "sleep" in job.payload:
        note(f"sleeping in thread {threading.get_native_id()}")
        time.sleep(job.payload["sleep"])
    if "error" in job.payload:
        note("failing")
        raise jobq.Fatal(job.payload["error"])
    note(f"done {job.payload['n']}")

queue = jobq.JobQueue(handle, store=os.environ["JOBQ_TEST_STORE"], max_attempts=1)
"""


class Worker:
    """``python -m jobq.cli worker --app tests_helper_module:queue`` on a store;
    its stderr goes to a file, so a test can read it while the worker runs."""

    def __init__(self, tmp_path: Path, store: str, *options: str) -> None:
        (tmp_path / "tests_helper_module.py").write_text(HELPER)
        self.done = tmp_path / "done.txt"
        self.log = tmp_path / "worker.err"
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
            JOBQ_TEST_DONE=str(self.done),
            JOBQ_TEST_STORE=store,
        )
        env.pop(cli.STORE_ENV, None)
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jobq.cli", "worker",
                 "--app", "tests_helper_module:queue", *options],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )  # fmt: skip

    @property
    def err(self) -> str:
        return self.log.read_text()

    def wait_for(self, *lines: str, file: Path | None = None) -> None:
        """Until ``file`` (the handler's notes by default) has all ``lines``."""
        file = file or self.done
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            if file.exists() and all(line in file.read_text() for line in lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.end()
        raise AssertionError(f"the worker did not write {lines}: {self.err}")

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str, float]:
        """Send ``signum``; the exit status, stderr and seconds until exit."""
        started = time.monotonic()
        self.proc.send_signal(signum)
        out = self.end()
        assert out == ""
        return self.proc.returncode, self.err, time.monotonic() - started

    def end(self) -> str:
        try:
            out, _ = self.proc.communicate(timeout=WAIT)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                self.proc.communicate()
        return out


@pytest.fixture(params=["json", "sqlite"])
def worker_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "json":
        return str(tmp_path / "jobs.json")
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"]
)
def test_worker_runs_jobs_and_exits_0_on_a_signal(
    worker_store: str,
    tmp_path: Path,
    signum: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with jobq.JobQueue(store=worker_store) as queue:
        queue.enqueue({"n": 1})
        queue.enqueue({"n": 2})
        queue.enqueue({"error": NASTY})
    worker = Worker(tmp_path, worker_store, "--workers", "2")

    worker.wait_for("done 1", "done 2", "failing")  # a running job is waited for
    code, err, took = worker.stop(signum)

    assert code == 0, err
    assert took < 10
    assert "worker" in err
    assert "started: 2 workers" in err
    assert f"stopping ({signal.Signals(signum).name})" in err
    assert "stopped" in err
    # The dead job was logged (the app configured no logging), escaped.
    assert "is dead" in err
    assert not any(raw in err for raw in RAW)
    assert "\\x1b[31mred" in err
    counts = run(capsys, "stats", "--json", "--store", worker_store)
    assert json.loads(counts.out) == {
        "pending": 0,
        "delayed": 0,
        "retrying": 0,
        "waiting": 0,
        "running": 0,
        "dead": 1,
        "kept": 0,
        "cancelled": 0,
        "abandoned": 0,
    }


def test_worker_waits_for_a_running_job_no_longer_than_its_shutdown_timeout(
    worker_store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with jobq.JobQueue(store=worker_store) as queue:
        job = queue.enqueue({"sleep": 60, "n": 1}).id
    worker = Worker(tmp_path, worker_store, "--shutdown-timeout", "0.5")

    worker.wait_for("sleeping")
    code, err, took = worker.stop()

    assert code == 0, err
    assert took < 5
    assert "waiting up to 0.5 s" in err
    # The job was not lost: it is still running as stored (its lease or the
    # next owner turns it into a failed attempt, and it runs again).
    shown = json.loads(
        run(capsys, "show", str(job), "--json", "--store", worker_store).out
    )
    assert shown["state"] in ("running", "pending")


def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    with jobq.JobQueue(store=store) as queue:
        queue.enqueue({"sleep": 60, "n": 1})
    worker = Worker(tmp_path, store)  # waits up to 30 s for running jobs
    worker.wait_for("sleeping")
    worker.proc.send_signal(signal.SIGTERM)
    worker.wait_for("stopping (SIGTERM)", file=worker.log)

    code, err, took = worker.stop(signal.SIGINT)

    assert code == 128 + signal.SIGINT
    assert took < 5
    assert "second signal" in err


@pytest.mark.skipif(sys.platform != "linux", reason="kill() of a thread id: Linux")
def test_a_second_signal_exits_at_once_whichever_thread_it_reaches(
    tmp_path: Path,
) -> None:
    """The kernel hands a signal to any thread of the process; Python runs its
    handler in the main thread, which must not be in a long wait then (a
    signal of another thread does not interrupt it). Linux's kill() of a
    thread id hands the signal to that thread: here, the sleeping job's."""
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    with jobq.JobQueue(store=store) as queue:
        queue.enqueue({"sleep": 60, "n": 1})
    worker = Worker(tmp_path, store, "--shutdown-timeout", "20")
    worker.wait_for("sleeping")
    job_thread = int(worker.done.read_text().split("sleeping in thread ")[1].split()[0])
    worker.proc.send_signal(signal.SIGTERM)
    worker.wait_for("stopping (SIGTERM)", file=worker.log)

    started = time.monotonic()
    os.kill(job_thread, signal.SIGINT)
    worker.end()
    took = time.monotonic() - started

    assert worker.proc.returncode == 128 + signal.SIGINT
    assert took < 5
    assert "second signal" in worker.err


def test_worker_of_a_json_store_another_process_owns_exits_1(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.json"
    with jobq.JobQueue(store=path) as owner:
        owner.enqueue({"n": 1}, delay=FAR)
        worker = Worker(tmp_path, str(path))
        worker.end()
        err = worker.err

    assert worker.proc.returncode == 1
    assert "StoreLocked" not in err  # a message, not a traceback
    assert str(os.getpid()) in err


def test_run_worker_can_be_reused_with_a_stop_event(tmp_path: Path) -> None:
    done: list[Any] = []
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        done.append, store=f"sqlite:///{tmp_path / 'jobs.db'}"
    )
    queue.enqueue("first")
    stop = threading.Event()

    def stop_when_done() -> None:
        deadline = time.monotonic() + WAIT
        while not done and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()

    threading.Thread(target=stop_when_done, daemon=True).start()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    cli.run_worker(queue, workers=1, shutdown_timeout=5.0, err=io.StringIO(), stop=stop)

    assert [job.payload for job in done] == ["first"]
    with pytest.raises(jobq.QueueClosed):
        queue.stats()  # closed by the worker command
    assert handlers == {sig: signal.getsignal(sig) for sig in handlers}  # restored


# -- schedules ------------------------------------------------------------------------


def test_schedules_with_store_alone_lists_every_stored_one_as_orphaned(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    from jobq.testing.clock import Clock

    clock = Clock(600 * 3_000_000)
    queue = target.queue(clock=clock)
    queue.periodic(cron="*/10 * * * *", tz="Europe/Berlin", name="feeds.poll")(
        lambda: None
    )
    queue.run_pending()
    clock.advance(600)
    assert queue.run_pending() == 1
    last_job = queue.schedules()[0].last_job_id
    queue.close()

    text = run(capsys, "schedules", *target.args)
    as_json = run(capsys, "schedules", "--json", *target.args)

    assert (text.code, as_json.code) == (0, 0), text.err
    assert text.out.splitlines()[1].split()[:2] == ["feeds.poll", "(orphaned)"]
    assert json.loads(as_json.out) == [
        {
            "name": "feeds.poll",
            "expression": "*/10 * * * *",
            "tz": "Europe/Berlin",
            "next_slot": None,
            "next_slots": [],
            "last_slot": clock.now,
            "last_job_id": last_job,
            "orphaned": True,
            "paused": False,
            "paused_at": None,
            "paused_by": None,
        }
    ]
    assert as_json.out.isascii()


APP_WITH_SCHEDULES = """
import jobq
queue = jobq.JobQueue(store="sqlite:///jobs.db")

@queue.periodic(every=3600, name="hourly")
def hourly():
    pass
"""


def test_schedules_with_app_lists_the_declared_ones_and_the_orphans(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app_with_schedules.py").write_text(APP_WITH_SCHEDULES)
    with jobq.JobQueue(store=SqliteStore(tmp_path / "jobs.db")) as old:
        old.periodic(every=60, name="removed")(lambda: None)
        old.schedules()  # creates the file
        store = old.store
        assert isinstance(store, SqliteStore)
        store.enqueue_slot("removed", "every 60s @ UTC", 60.0,
                           old.prepare([{}])[0], 60.0, skip_running=False)  # fmt: skip

    result = run(capsys, "schedules", "--app", "app_with_schedules:queue")

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "EXPRESSION", "TZ"]
    assert lines[1].split()[:4] == ["hourly", "every", "3600s", "UTC"]
    assert lines[2].split()[:2] == ["removed", "(orphaned)"]
    assert "1970-01-01 00:01:00" in lines[2]


# -- pause-schedule, resume-schedule, run-schedule ------------------------------------


def stored_schedule(target: Target, name: str = "feeds.poll") -> None:
    """A schedule the store keeps (one slot taken), its code gone."""
    from jobq.testing.clock import Clock

    clock = Clock(600 * 3_000_000)
    queue = target.queue(clock=clock)
    queue.periodic(every=600, name=name)(lambda: None)
    queue.run_pending()
    clock.advance(600)
    assert queue.run_pending() == 1
    queue.close()


def shown_schedule(target: Target, capsys: pytest.CaptureFixture[str]) -> Any:
    listed = run(capsys, "schedules", "--json", *target.args)
    assert listed.code == 0, listed.err
    (shown,) = json.loads(listed.out)
    return shown


def test_pause_and_resume_schedule_with_store_alone_change_the_stored_schedule(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    stored_schedule(target)

    paused = run(capsys, "pause-schedule", "feeds.poll", *target.args)
    shown = shown_schedule(target, capsys)
    resumed = run(capsys, "resume-schedule", "feeds.poll", "--json", *target.args)

    assert (paused.code, resumed.code) == (0, 0), paused.err + resumed.err
    assert paused.out == "schedule 'feeds.poll' paused\n"
    assert (shown["paused"], shown["paused_by"]) == (True, "jobq")
    assert json.loads(resumed.out) == {
        "name": "feeds.poll", "resumed": True, "changed": True,
    }  # fmt: skip
    assert not shown_schedule(target, capsys)["paused"]


def test_pausing_a_paused_schedule_says_nothing_changed(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    stored_schedule(target)
    assert run(capsys, "pause-schedule", "feeds.poll", *target.args).code == 0

    again = run(capsys, "pause-schedule", "feeds.poll", *target.args)
    table = run(capsys, "schedules", *target.args)

    assert again.code == 0
    assert again.out == "schedule 'feeds.poll' was paused already: nothing changed\n"
    assert "(paused by jobq)" in table.out.splitlines()[1]


@pytest.mark.parametrize("command", ["pause-schedule", "resume-schedule"])
def test_an_unknown_schedule_is_an_error_naming_the_known_ones(
    target: Target, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    stored_schedule(target)

    result = run(capsys, command, "feeds.pol", *target.args)

    assert result.code == 1
    assert result.err == (
        f"jobq {command}: no schedule 'feeds.pol': none is declared on this queue "
        "or stored (known: 'feeds.poll')\n"
    )
    assert not shown_schedule(target, capsys)["paused"]


def test_a_schedule_name_that_drives_the_terminal_is_shown_escaped(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = target.queue()  # a name no task may have, but a store may hold
    queue.stats()  # opens the store
    store = queue.store
    assert isinstance(store, ScheduleStore)
    store.enqueue_slot("\x1b[31mred\u202e", "every 600s @ UTC", 600.0,
                       queue.prepare([{}])[0], 600.0, skip_running=False)  # fmt: skip
    queue.close()

    paused = run(capsys, "pause-schedule", "\x1b[31mred\u202e", *target.args)
    unknown = run(capsys, "pause-schedule", "\x1b[2J", *target.args)
    table = run(capsys, "schedules", *target.args)

    assert paused.code == 0, paused.err
    assert paused.out == "schedule '\\x1b[31mred\\u202e' paused\n"
    assert unknown.code == 1
    for text in (paused.out, unknown.err, table.out):
        assert "\x1b" not in text
        assert "\u202e" not in text


def test_run_schedule_with_store_alone_needs_the_code_that_declares_it(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    stored_schedule(target)

    result = run(capsys, "run-schedule", "feeds.poll", *target.args)

    assert result.code == 1
    assert "not declared by this process's code" in result.err
    assert "--app" in result.err


def test_run_schedule_with_app_enqueues_one_job_now(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app_to_run.py").write_text(APP_WITH_SCHEDULES)  # a module of its own
    with jobq.JobQueue(store=SqliteStore(tmp_path / "jobs.db")) as app:
        app.stats()  # creates the file

    result = run(
        capsys, "run-schedule", "hourly", "--json", "--app", "app_to_run:queue"
    )
    refused = run(capsys, "run-schedule", "hourly", "--app", "app_to_run:queue")

    assert result.code == 0, result.err
    job_id = json.loads(result.out)["id"]
    with jobq.JobQueue(store=SqliteStore(tmp_path / "jobs.db")) as look:
        record = look.get(job_id)
    assert record is not None
    assert (record.state, record.task) == (jobq.JobState.PENDING, "hourly")
    assert record.key is not None
    assert record.key.endswith(" (run now)")
    assert dict(record.meta) == {"jobq.run_by": "jobq"}
    assert refused.code == 1  # overlap="skip": its job is still pending
    assert refused.err == (
        f"jobq run-schedule: schedule 'hourly' was not run: its job {job_id} is "
        "still pending or running, and it skips overlapping runs (overlap='skip')\n"
    )


# -- limits ------------------------------------------------------------------------

USAGES = [
    jobq.LimitUsage("account:*", 1, None, 1, 3, 120),
    jobq.LimitUsage("api", None, "100/m", 10, 0, 4),
    jobq.LimitUsage("smtp", 2, "10/s", 1, 2, 0),
]


def test_limits_as_a_table_and_as_json_with_stable_keys() -> None:
    text = render.limits(USAGES)
    as_json = render.limits(USAGES, as_json=True)

    assert [line.split() for line in text.splitlines()] == [
        ["NAME", "CONCURRENCY", "RATE", "BURST", "RUNNING", "WAITING"],
        ["account:*", "(each", "key)", "1", "-", "-", "3", "120"],
        ["api", "-", "100/m", "10", "0", "4"],
        ["smtp", "2", "10/s", "1", "2", "0"],
    ]
    assert json.loads(as_json) == [
        {"name": "account:*", "family": True, "concurrency": 1, "rate": None,
         "burst": None, "running": 3, "waiting": 120},
        {"name": "api", "family": False, "concurrency": None, "rate": "100/m",
         "burst": 10, "running": 0, "waiting": 4},
        {"name": "smtp", "family": False, "concurrency": 2, "rate": "10/s",
         "burst": 1, "running": 2, "waiting": 0},
    ]  # fmt: skip
    assert as_json.isascii()
    assert render.limits([]) == "no limits\n"
    assert render.limits([], as_json=True) == "[]\n"


def test_a_limit_s_name_reaches_the_terminal_escaped() -> None:
    text = render.limits([jobq.LimitUsage(NASTY, 1, None, 1, 0, 0)])

    assert not any(raw in text for raw in RAW)
    assert "\\x1b[31mred\\nsecond line" in text


def test_show_prints_a_job_s_limits_and_the_one_holding_it() -> None:
    record: jobq.JobRecord[Any] = jobq.JobRecord(
        id=7, payload={"to": "ann"}, attempts=0, state=jobq.JobState.PENDING,
        run_at=0.0, created_at=0.0, last_error=None, key=None, priority=0,
        result=None, task="mail.send", errors=(), max_attempts=3,
        limits=("smtp", f"account:{NASTY}"), held_by="smtp",
    )  # fmt: skip

    text = render.job(record)
    details = json.loads(render.job(record, as_json=True))

    lines = text.splitlines()
    assert "limits      smtp, account:\\x1b[31mred\\nsecond line" in "\n".join(lines)
    assert "held by     smtp" in lines
    assert not any(raw in text for raw in RAW)
    assert (details["limits"], details["held_by"]) == (["smtp", f"account:{NASTY}"],
                                                       "smtp")  # fmt: skip
    free = render.job(replace(record, limits=(), held_by=None))
    assert "limits" not in free
    assert "held by" not in free


def test_limits_of_a_store_that_holds_none(
    target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    _, (job,) = target.seed(pending=[1])

    text = run(capsys, "limits", *target.args)
    as_json = run(capsys, "limits", "--json", *target.args)
    shown = run(capsys, "show", str(job), "--json", *target.args)

    assert (text.code, text.out) == (0, "no limits\n"), text.err
    assert (as_json.code, shown.code) == (0, 0), as_json.err + shown.err
    assert json.loads(as_json.out) == []
    assert (json.loads(shown.out)["limits"], json.loads(shown.out)["held_by"]) == (
        [], None
    )  # fmt: skip


def test_limits_and_show_while_a_job_is_held(
    shared_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    # A store shared between processes: a JSON file's reader (the command)
    # sees the declarations, not the owner's running and held counts.
    target = shared_target
    handler: WhileHeld[tuple[Result, Result, Result]] = WhileHeld()
    queue = target.queue(handler)
    needs_limits(queue)
    queue.limit("smtp", concurrency=1, rate="10/s")
    queue.limit("account:*", concurrency=1)

    def look(held: int) -> tuple[Result, Result, Result]:
        return (
            run(capsys, "limits", *target.args),
            run(capsys, "limits", "--json", *target.args),
            run(capsys, "show", str(held), *target.args),
        )

    _, _, (text, as_json, shown) = hold_one(queue, handler, look, also=("account:42",))

    assert (text.code, as_json.code, shown.code) == (0, 0, 0), text.err + shown.err
    assert [line.split() for line in text.out.splitlines()[1:]] == [
        ["account:*", "(each", "key)", "1", "-", "-", "0", "0"],
        ["smtp", "1", "10/s", "1", "1", "1"],
    ]
    assert json.loads(as_json.out)[1] == {
        "name": "smtp", "family": False, "concurrency": 1, "rate": "10/s",
        "burst": 1, "running": 1, "waiting": 1,
    }  # fmt: skip
    assert "held by     smtp\n" in shown.out
    assert "limits      smtp, account:42\n" in shown.out


# -- what the command shares lives in jobq.admin; its first names still work ---


def test_the_shared_parts_keep_the_names_they_had_here() -> None:
    import jobq.admin
    import jobq.cli.operations
    import jobq.cli.queues
    import jobq.cli.render

    for name in jobq.admin.operations.__all__:
        assert getattr(jobq.cli.operations, name) is getattr(
            jobq.admin.operations, name
        )
    for name in jobq.admin.render.__all__:
        assert getattr(jobq.cli.render, name) is getattr(jobq.admin.render, name)
    assert cli.queue_for_command is jobq.cli.queues.queue_for_command
    assert cli.queue_for_command is jobq.admin.queue_for_command
    assert cli.add_worker_arguments is jobq.admin.arguments.add_worker_arguments
    for name, shared in jobq.admin.arguments.SUBCOMMANDS.items():
        assert cli.COMMANDS[name].help == shared.help
        assert cli.COMMANDS[name].add_arguments is shared.add_arguments


# -- processes -------------------------------------------------------------------

PROCESSES = [
    ProcessInfo("web-1:42:ab", "web-1", 42, T0 - 3600, T0 - 2, 4, 2, (
        RunningJob(7, "mail.send", T0 - 30), RunningJob(9, NASTY, T0 - 1.4),
    )),
    ProcessInfo("web-2:43:cd", "web-2", 43, T0 - 600, T0 - 90, 2, 0, (), gone=True),
]  # fmt: skip


def test_processes_as_a_table_and_as_json_with_stable_keys() -> None:
    text = render.processes(PROCESSES, T0)
    as_json = render.processes(PROCESSES, T0, as_json=True)

    lines = text.splitlines()
    assert lines[0].split() == ["HOST", "PID", "STARTED", "(UTC)", "SEEN", "(UTC)",
                                "BUSY", "RUNNING"]  # fmt: skip
    assert lines[1].startswith("web-1 ")
    assert " 2/4 " in lines[1]
    assert lines[1].endswith("7 mail.send 30s, 9 \\x1b[31mred\\nsecond line\\r"
                             "\\x9b2J\\u202eevil 1s")  # fmt: skip
    assert lines[2].startswith("web-2 (gone) ")
    assert lines[2].split()[-2:] == ["0/2", "-"]
    assert not any(raw in text for raw in RAW)
    shown = json.loads(as_json)
    assert shown[0] == {
        "id": "web-1:42:ab", "host": "web-1", "pid": 42, "started": T0 - 3600,
        "seen": T0 - 2, "workers": 4, "busy": 2, "idle": 2, "gone": False,
        "running": [{"id": 7, "task": "mail.send", "started": T0 - 30},
                    {"id": 9, "task": NASTY, "started": T0 - 1.4}],
    }  # fmt: skip
    assert shown[1]["gone"] is True
    assert as_json.isascii()
    assert (
        render.processes([], T0) == "no process serves this queue (none runs workers)\n"
    )
    assert render.processes(None, T0) == (
        "this store keeps no figures of the processes serving it\n"
    )
    assert json.loads(render.processes(None, T0, as_json=True)) is None


def test_processes_lists_the_processes_serving_a_shared_store(
    shared_target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    release, entered = threading.Event(), threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        entered.set()
        release.wait(60)

    serving = shared_target.queue(handler)
    job = serving.enqueue("blocks")
    serving.start(workers=2)
    try:
        assert entered.wait(60)
        deadline = time.monotonic() + 30
        while True:  # the registry follows the process's beat (every 5 s)
            shown = run(capsys, "processes", "--json", *shared_target.args)
            listed = json.loads(shown.out)
            if listed and listed[0]["busy"] == 1:
                break
            assert time.monotonic() < deadline, listed
            threading.Event().wait(0.05)
        text = run(capsys, "processes", *shared_target.args)
    finally:
        release.set()
    serving.stop(timeout=30)
    after = run(capsys, "processes", *shared_target.args)

    (process,) = listed
    assert (process["pid"], process["workers"], process["idle"]) == (os.getpid(), 2, 1)
    assert [running["id"] for running in process["running"]] == [job.id]
    assert text.code == 0
    assert " 1/2 " in text.out.splitlines()[1]
    assert (after.code, after.out) == (
        0, "no process serves this queue (none runs workers)\n"
    )  # fmt: skip
