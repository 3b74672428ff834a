"""Pausing, resuming and running periodic jobs by hand through the queue:
names checked, who asked kept, the next slots listed; and what each store
keeps of a pause across its formats (the SQLite and PostgreSQL migrations,
the JSON file's version 4 and 5). The store's own rules are in
``StoreContractTests``; the CLI, the dashboard and the frameworks have their
own tests."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import socket
import sqlite3
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from old_schemas import postgres_at, sqlite_at
from postgres_url import POSTGRES_URL

import jobq
from jobq import JobQueue
from jobq.stores import JsonFileStore, PostgresStore, SqliteStore
from jobq.stores.base import NO_SLOT, Signal, SlotState
from jobq.stores.jsonfile import formats as fmt
from jobq.stores.jsonfile.journal import encode_record
from jobq.stores.postgres.schema import SCHEMA_VERSION as POSTGRES_SCHEMA
from jobq.testing.clock import Clock
from jobq.testing.contract import slot_job

T0 = 1_800_000_000.0  # a multiple of 600


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def queue(clock: Clock) -> Iterator[JobQueue[Any]]:
    with JobQueue(clock=clock) as made:
        yield made


def declare(queue: JobQueue[Any], name: str = "tick", **options: Any) -> list[Any]:
    """Periodic job ``name`` every 10 minutes on ``queue``, looked at once;
    what it was called with (``scheduled_at``)."""
    calls: list[Any] = []

    def tick(scheduled_at: dt.datetime) -> None:
        calls.append(scheduled_at)

    queue.periodic(every=600, name=name, **options)(tick)
    assert queue.run_pending() == 0
    return calls


# -- names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action", ["pause_schedule", "resume_schedule", "run_schedule"]
)
def test_an_unknown_schedule_name_is_refused_naming_the_known_ones(
    queue: JobQueue[Any], action: str
) -> None:
    declare(queue)

    with pytest.raises(ValueError, match=r"no schedule 'tock'.*known: 'tick'"):
        getattr(queue, action)("tock")

    assert not queue.schedules()[0].paused
    assert queue.stats().pending == 0


@pytest.mark.parametrize("name", [None, 7, b"tick"])
def test_a_schedule_name_that_is_no_str_is_a_type_error(
    queue: JobQueue[Any], name: Any
) -> None:
    declare(queue)
    with pytest.raises(TypeError, match="a schedule's name is a str"):
        queue.pause_schedule(name)


def test_a_stored_schedule_no_code_declares_can_be_paused_but_not_run(
    tmp_path: Path, clock: Clock
) -> None:
    path = tmp_path / "jobs.db"
    with JobQueue(store=f"sqlite:///{path}", clock=clock) as app:
        declare(app, "gone")
        clock.advance(600)
        assert app.run_pending() == 1
    with JobQueue(store=f"sqlite:///{path}", clock=clock) as tool:
        assert tool.pause_schedule("gone", by="ann")
        with pytest.raises(ValueError, match="not declared by this process's code"):
            tool.run_schedule("gone")
        (shown,) = tool.schedules()

    assert (shown.orphaned, shown.paused, shown.paused_by) == (True, True, "ann")


def test_pause_and_resume_say_whether_they_changed_anything(
    queue: JobQueue[Any],
) -> None:
    declare(queue)
    assert queue.pause_schedule("tick")
    assert not queue.pause_schedule("tick")
    assert queue.resume_schedule("tick")
    assert not queue.resume_schedule("tick")


def test_a_pause_records_who_and_when_this_process_by_default(
    queue: JobQueue[Any], clock: Clock
) -> None:
    declare(queue)
    clock.advance(5)

    queue.pause_schedule("tick")

    (shown,) = queue.schedules()
    assert shown.paused_at == dt.datetime.fromtimestamp(clock(), dt.UTC)
    assert shown.paused_by == f"{socket.gethostname()} pid {os.getpid()}"


@pytest.mark.parametrize(("by", "error"), [(7, TypeError), ("", ValueError),
                                           ("x" * 201, ValueError)])  # fmt: skip
def test_a_bad_by_is_refused_and_nothing_is_paused(
    queue: JobQueue[Any], by: Any, error: type[Exception]
) -> None:
    declare(queue)
    with pytest.raises(error, match="by must be"):
        queue.pause_schedule("tick", by=by)
    assert not queue.schedules()[0].paused


# -- running by hand -----------------------------------------------------------------


def test_a_job_run_by_hand_is_marked_so_and_gets_the_time_it_was_asked_for(
    queue: JobQueue[Any], clock: Clock
) -> None:
    calls = declare(queue)
    clock.advance(61.5)

    added = queue.run_schedule("tick", by="ann")

    record = queue.get(added)
    assert record is not None
    assert record.key == "periodic:tick@2027-01-15T08:01:01.500000Z (run now)"
    assert dict(record.meta) == {"jobq.run_by": "ann"}
    assert (record.task, record.run_at) == ("tick", clock())
    assert queue.run_pending() == 1
    assert calls == [dt.datetime.fromtimestamp(clock(), dt.UTC)]


def test_a_run_by_hand_is_refused_while_the_schedule_s_job_is_live_with_skip(
    queue: JobQueue[Any], clock: Clock
) -> None:
    declare(queue)  # overlap="skip", the default
    clock.advance(600)
    assert queue.run_pending(0) == 0  # enqueues the slot's job, runs nothing
    (slot_job,) = queue.browse("due").jobs

    refused = queue.run_schedule("tick")

    assert refused == jobq.Enqueued(slot_job.id, True)
    assert queue.stats().pending == 1


def test_a_run_by_hand_runs_beside_a_live_job_with_overlap_allowed(
    queue: JobQueue[Any], clock: Clock
) -> None:
    declare(queue, overlap="allow")
    clock.advance(600)
    assert queue.run_pending(0) == 0  # enqueues the slot's job, runs nothing

    added = queue.run_schedule("tick")

    assert not added.duplicate
    assert queue.stats().pending == 2


def test_a_run_by_hand_is_announced_like_any_enqueued_job(
    queue: JobQueue[Any],
) -> None:
    declare(queue)
    seen: list[jobq.Event] = []
    queue.subscribe(seen.append)

    added = queue.run_schedule("tick")

    assert [(e.kind, e.job_id, e.task) for e in seen] == [
        (jobq.EventKind.ENQUEUED, added.id, "tick")
    ]


# -- what schedules() shows ------------------------------------------------------


def test_schedules_list_the_next_five_slots(queue: JobQueue[Any], clock: Clock) -> None:
    declare(queue)
    clock.advance(1)

    (shown,) = queue.schedules()

    first = dt.datetime.fromtimestamp(T0 + 600, dt.UTC)
    assert shown.next_slots == tuple(
        first + dt.timedelta(minutes=10 * n) for n in range(5)
    )
    assert shown.next_slot == first


def test_a_schedule_paused_before_its_first_slot_shows_no_last_slot(
    queue: JobQueue[Any],
) -> None:
    declare(queue)

    queue.pause_schedule("tick", by="ann")

    (shown,) = queue.schedules()
    assert (shown.last_slot, shown.last_job_id, shown.paused) == (None, None, True)
    assert shown.expression == "every 600s"


# -- stores: migrations and formats ----------------------------------------------


@contextlib.contextmanager
def opened_sqlite(path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(path)
    store.open(Signal(), dead_letter_limit=1000)
    try:
        yield store
    finally:
        store.close()


def test_a_version_9_sqlite_file_keeps_its_schedules_and_can_pause_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    sqlite_at(path, 9)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("INSERT INTO jobq_schedules VALUES ('s', 'e @ UTC', ?, 1)", (T0,))

    with opened_sqlite(path) as store:
        assert store.schedule_states() == [SlotState("s", "e @ UTC", T0, 1)]
        assert store.pause_schedule("s", T0 + 1, by="ann")
        assert store.schedule_states() == [
            SlotState("s", "e @ UTC", T0, 1, T0 + 1, "ann", None)
        ]


def test_a_version_8_postgres_schema_keeps_its_schedules_and_can_pause_them(
    postgres_schema: str,
) -> None:
    import psycopg
    from psycopg import sql

    schema = f"{postgres_schema}_{secrets.token_hex(3)}"
    postgres_at(POSTGRES_URL, schema, "q", 8)
    table = sql.Identifier(schema, "schedules")
    store = PostgresStore(POSTGRES_URL, schema=schema, queue="q", clock="queue")
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES ('q', 's', 'e @ UTC', %s, 1)").format(
                    table
                ),
                (T0,),
            )
        store.open(Signal(), dead_letter_limit=1000)

        assert store.migrate() == POSTGRES_SCHEMA
        assert store.schedule_states() == [SlotState("s", "e @ UTC", T0, 1)]
        assert store.pause_schedule("s", T0 + 1, by="ann")
        assert store.schedule_states() == [
            SlotState("s", "e @ UTC", T0, 1, T0 + 1, "ann", None)
        ]
    finally:
        store.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema))
            )


def json_store(path: Path, **options: Any) -> JsonFileStore:
    store = JsonFileStore(path, **options)
    store.open(Signal(), dead_letter_limit=1000)
    return store


def test_a_json_file_keeps_pauses_in_its_journal_and_its_snapshot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.json"
    owner = json_store(path)
    owner.pause_schedule("new", T0, by="ann")
    owner.pause_schedule("old", T0, by="bob")
    owner.resume_schedule("old", T0 + 1)
    expected = owner.schedule_states()
    from_journal = json_store(path, read_only=True)
    owner.save()
    from_snapshot = json_store(path, read_only=True)
    try:
        assert from_journal.schedule_states() == expected
        assert from_snapshot.schedule_states() == expected
        assert expected[0] == SlotState("new", "", NO_SLOT, None, T0, "ann", None)
        header = json.loads(path.read_text().split("\n")[0].split(', "jobs"')[0] + "}")
        assert header["version"] == fmt.VERSION == 5
        assert header["schedules"][0] == ["new", "", None, None, T0, "ann", None]
    finally:
        for store in (owner, from_journal, from_snapshot):
            store.close()


def test_a_version_4_json_file_loads_its_schedules_unpaused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    schedules = [["a", "e @ UTC", T0, None]]
    head = json.dumps({"format": "jobq", "version": 4, "seq": 1, "next_id": 1,
                       "schedules": schedules, "limits": []})  # fmt: skip
    body = (head[:-1] + ', "jobs": [\n\n]').encode()
    path.write_bytes(body + b', "crc32": %d}\n' % zlib.crc32(body))
    segment = tmp_path / "jobs.json.journal-1"
    record = json.dumps(["slot", "b", "e @ UTC", T0 + 60, 3]).encode()
    segment.write_bytes(b"JOBQ-JOURNAL 4\n" + encode_record(2, record))

    store = json_store(path)
    try:
        assert store.schedule_states() == [
            SlotState("a", "e @ UTC", T0, None),
            SlotState("b", "e @ UTC", T0 + 60, 3),
        ]
        assert store.pause_schedule("a", T0 + 1, by="ann")
    finally:
        store.close()


# -- a pause racing the slots of another process ----------------------------------


def shared_stores(kind: str, tmp_path: Path, schema: str | None) -> list[Any]:
    """Two stores over one place, as two processes have them, opened."""
    stores: list[Any] = []
    for _ in range(2):
        if kind == "sqlite":
            store: Any = SqliteStore(tmp_path / "jobs.db")
        else:
            store = PostgresStore(POSTGRES_URL, schema=schema, queue="race",
                                  clock="queue")  # fmt: skip
        store.open(Signal(), dead_letter_limit=1000)
        stores.append(store)
    return stores


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_once_a_pause_returns_no_slot_of_another_process_is_enqueued(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    schema = request.getfixturevalue("postgres_schema") if kind == "postgres" else None
    worker, tool = shared_stores(kind, tmp_path, schema)
    asked = threading.Condition()
    calls, taken, stop = [0], [], threading.Event()

    def take_slots() -> None:
        for n in range(1, 100_000):
            if stop.is_set():
                return
            slot = T0 + n
            job = slot_job(slot, "s")
            if worker.enqueue_slot("s", "e", slot, job, slot, skip_running=False):
                taken.append(slot)
            with asked:
                calls[0] += 1
                asked.notify_all()

    thread = threading.Thread(target=take_slots)
    thread.start()
    try:
        with asked:
            assert asked.wait_for(lambda: calls[0] >= 5, timeout=10)
        assert tool.pause_schedule("s", T0, by="ann")
        after_pause, target = len(taken), calls[0] + 50
        with asked:  # the worker asks for 50 more slots meanwhile
            assert asked.wait_for(lambda: calls[0] >= target, timeout=30)
    finally:
        stop.set()
        thread.join(10)
        for store in (worker, tool):
            store.close()

    assert after_pause >= 5
    assert len(taken) <= after_pause + 1  # at most the write already under way
