"""Periodic jobs in one process: slots, DST, catch-up, overlap, clock steps,
changed and removed schedules, bad declarations. Time moves by hand (a
``Clock`` or freezegun); several processes are in test_periodic_processes.py,
the store's own rules in ``StoreContractTests``."""

from __future__ import annotations

import datetime as dt
import logging
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from freezegun import freeze_time
from older_store import OlderStore

import jobq
from jobq import JobQueue, Retry, Schedule
from jobq._periodic.slots import CronSlots, EverySlots
from jobq.stores import MemoryStore, SqliteStore
from jobq.testing.clock import Clock
from jobq.testing.contract import slot_job

BERLIN = ZoneInfo("Europe/Berlin")
UTC = dt.UTC


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    """Epoch seconds of a wall time in Berlin."""
    return dt.datetime(year, month, day, hour, minute, tzinfo=BERLIN).timestamp()


class Calls:
    """A periodic function that records the slots it ran for."""

    def __init__(self) -> None:
        self.slots: list[dt.datetime] = []

    def __call__(self, scheduled_at: dt.datetime) -> None:
        self.slots.append(scheduled_at)


def walk(queue: JobQueue[Any], clock: Clock, until: float, step: float) -> int:
    """Move the clock by ``step`` up to ``until``, running what is due each time."""
    ran = 0
    while clock.now < until:
        clock.advance(step)
        ran += queue.run_pending()
    return ran


# -- slots --------------------------------------------------------------------------


def test_every_slots_are_multiples_of_the_period_since_the_epoch() -> None:
    slots = EverySlots(600)

    assert slots.after(1_800_000_000) == 1_800_000_600
    assert slots.after(1_800_000_001) == 1_800_000_600
    assert slots.at_or_before(1_800_000_599.9) == 1_800_000_000
    assert slots.at_or_before(1_800_000_600) == 1_800_000_600
    assert slots.between(1_800_000_000, 1_800_003_000, 3) == [
        1_800_001_800, 1_800_002_400, 1_800_003_000,
    ]  # fmt: skip
    assert slots.between(1_800_000_000, 1_800_000_599, 3) == []


def test_cron_slots_in_berlin() -> None:
    slots = CronSlots("*/15  9 * * *", "Europe/Berlin")

    assert slots.expression == "*/15 9 * * *"
    assert slots.after(at(2026, 6, 1, 9, 0)) == at(2026, 6, 1, 9, 15)
    assert slots.at_or_before(at(2026, 6, 1, 9, 0)) == at(2026, 6, 1, 9, 0)
    assert slots.at_or_before(at(2026, 6, 1, 9, 0) - 0.5) == at(2026, 5, 31, 9, 45)
    assert slots.between(at(2026, 6, 1, 9, 0), at(2026, 6, 1, 12), 10) == [
        at(2026, 6, 1, 9, 15), at(2026, 6, 1, 9, 30), at(2026, 6, 1, 9, 45),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("start", "days", "expected"),
    [
        # Spring forward (29 March 2026): 02:00 does not exist; it runs at 03:00.
        (at(2026, 3, 28), 3, ["2026-03-28T02:00:00+01:00", "2026-03-29T03:00:00+02:00",
                              "2026-03-30T02:00:00+02:00"]),
        # Fall back (25 October 2026): 02:00 happens twice; it runs once.
        (at(2026, 10, 24), 3, ["2026-10-24T02:00:00+02:00", "2026-10-25T02:00:00+02:00",
                               "2026-10-26T02:00:00+01:00"]),
    ],
    ids=["spring-forward", "fall-back"],
)  # fmt: skip
def test_a_nightly_cron_in_berlin_runs_once_each_day_across_a_dst_change(
    start: float, days: int, expected: list[str]
) -> None:
    clock = Clock(start)
    calls = Calls()
    with JobQueue(clock=clock) as queue:
        queue.periodic(cron="0 2 * * *", tz="Europe/Berlin", name="nightly")(calls)
        assert queue.run_pending() == 0

        ran = walk(queue, clock, start + days * 86400, step=300)

    assert ran == days
    assert [slot.isoformat() for slot in calls.slots] == expected
    assert all(slot.tzinfo == BERLIN for slot in calls.slots)


# -- a queue's schedules --------------------------------------------------------------


def test_a_periodic_task_is_a_named_task_with_retries() -> None:
    clock = Clock(600 * 3_000_000)
    attempts: list[int] = []

    with JobQueue(clock=clock, base_delay=1, jitter=False) as queue:

        @queue.periodic(every=600, name="flaky", max_attempts=2, priority=3)
        def flaky() -> None:
            attempts.append(1)
            raise ValueError("down")

        assert queue.run_pending() == 0  # the first look: from the next slot on
        clock.advance(600)
        assert queue.run_pending() == 1
        clock.advance(1)
        assert queue.run_pending() == 1

        assert queue.tasks["flaky"] is flaky
        (dead,) = queue.dead_jobs()
    assert (dead.task, dead.priority, dead.attempts, dead.key) == (
        "flaky", 3, 2, "periodic:flaky@2027-01-15T08:10:00Z",
    )  # fmt: skip
    assert dead.payload == {"args": [], "kwargs": {}}
    assert len(attempts) == 2


def test_freezegun_moves_the_schedules_of_a_queue_on_the_real_clock() -> None:
    calls = Calls()
    with freeze_time("2026-05-01 00:00:00") as frozen, JobQueue() as queue:
        queue.periodic(every=dt.timedelta(minutes=10), name="purge")(calls)
        assert queue.run_pending() == 0
        frozen.tick(dt.timedelta(minutes=10))
        assert queue.run_pending() == 1

    assert calls.slots == [dt.datetime(2026, 5, 1, 0, 10, tzinfo=UTC)]


def test_running_workers_enqueue_each_slot_as_it_falls_due() -> None:
    ran = threading.Event()
    queue: JobQueue[Any] = JobQueue()
    queue.periodic(every=1, name="second")(ran.set)
    queue.start(workers=2)
    try:
        assert ran.wait(10)
    finally:
        queue.close(timeout=5)


def test_a_slot_falls_due_on_time_while_every_worker_is_busy() -> None:
    """The only worker runs a long job: the watchdog enqueues the slot."""
    started, release, enqueued = threading.Event(), threading.Event(), threading.Event()
    queue: JobQueue[Any] = JobQueue()

    @queue.task(name="long")
    def long_job() -> None:
        started.set()
        release.wait(30)

    queue.periodic(every=1, name="second", overlap="allow")(lambda: None)

    def on_enqueued(event: jobq.Event) -> None:
        if event.kind == "enqueued" and event.task == "second" and started.is_set():
            enqueued.set()

    queue.subscribe(on_enqueued)
    queue.start(workers=1)
    try:
        long_job.enqueue()
        assert started.wait(10)
        assert enqueued.wait(10)
        assert not release.is_set()  # the worker is still in the long job
    finally:
        release.set()
        queue.close(timeout=5)


def test_a_slot_job_is_announced_like_any_enqueued_job() -> None:
    clock = Clock(3_600_000.5)
    events: list[tuple[str, str | None]] = []
    queue: JobQueue[Any] = JobQueue(clock=clock)
    queue.periodic(every=60, name="minute")(lambda: None)
    queue.subscribe(lambda event: events.append((event.kind, event.task)))
    clock.advance(60)
    assert queue.run_pending() == 1

    assert events == [("enqueued", "minute"), ("started", "minute"),
                      ("succeeded", "minute")]  # fmt: skip
    queue.close()


def test_after_downtime_the_latest_missed_slot_runs_once(tmp_path: Path) -> None:
    assert catch_up_after_downtime(tmp_path, "latest") == ["03:00"]


def test_after_downtime_no_missed_slot_runs_with_catch_up_none(tmp_path: Path) -> None:
    assert catch_up_after_downtime(tmp_path, "none") == []


def test_after_downtime_every_missed_slot_runs_with_catch_up_all(
    tmp_path: Path,
) -> None:
    missed = catch_up_after_downtime(tmp_path, "all")
    assert missed == [f"{h:02}:{m:02}" for h in (1, 2) for m in (0, 20, 40)] + ["03:00"]


def test_catch_up_all_is_bounded_by_max_catch_up(tmp_path: Path) -> None:
    missed = catch_up_after_downtime(tmp_path, "all", max_catch_up=2)
    assert missed == ["02:40", "03:00"]


def catch_up_after_downtime(
    tmp_path: Path, catch_up: Any, max_catch_up: int = 100
) -> list[str]:
    """A process runs the 00:40 slot of a 20-minute schedule and stops; the
    next starts at 03:05: the slots it runs at once (UTC times)."""
    path = tmp_path / "jobs.db"
    clock = Clock(dt.datetime(2026, 5, 1, 0, 30, tzinfo=UTC).timestamp())
    with JobQueue(store=SqliteStore(path), clock=clock) as first:
        first.periodic(every=1200, name="sync")(Calls())
        assert walk(first, clock, clock.now + 600, step=60) == 1  # 00:40
    clock.now = dt.datetime(2026, 5, 1, 3, 5, tzinfo=UTC).timestamp()
    calls = Calls()
    with JobQueue(store=SqliteStore(path), clock=clock) as second:
        second.periodic(
            every=1200, name="sync", catch_up=catch_up, max_catch_up=max_catch_up
        )(calls)
        second.run_pending()
        missed = [slot.strftime("%H:%M") for slot in calls.slots]
        assert walk(second, clock, clock.now + 900, step=60) == 1  # 03:20, as usual
    return missed


def test_a_slot_is_skipped_while_the_previous_one_waits_for_a_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(600 * 3_000_000)
    with JobQueue(clock=clock, base_delay=3600, jitter=False) as queue:

        @queue.periodic(every=600, name="report")
        def report() -> None:
            raise Retry("the database is busy")

        assert queue.run_pending() == 0
        clock.advance(600)
        assert queue.run_pending() == 1  # failed: pending for an hour
        clock.advance(600)
        with caplog.at_level(logging.INFO, logger="jobq"):
            assert queue.run_pending() == 0
        assert queue.stats().pending == 1
        (record,) = [r for r in caplog.records if "skipped the slot" in r.message]
        assert record.message.startswith(
            "periodic report: skipped the slot 2027-01-15T08:20:00Z"
        )
        (schedule,) = queue.schedules()
        assert (record.job_id, record.task) == (schedule.last_job_id, "report")
    assert schedule.last_slot == dt.datetime(2027, 1, 15, 8, 20, tzinfo=UTC)


def test_overlapping_slots_are_enqueued_when_allowed() -> None:
    clock = Clock(600 * 3_000_000)
    with JobQueue(clock=clock, base_delay=3600, jitter=False) as queue:

        @queue.periodic(every=600, name="report", overlap="allow")
        def report() -> None:
            raise Retry("the database is busy")

        ran = walk(queue, clock, clock.now + 1800, step=600)
        assert (ran, queue.stats().pending) == (3, 3)


def test_a_clock_stepped_back_never_enqueues_a_slot_twice() -> None:
    clock = Clock(600 * 3_000_000)
    calls = Calls()
    with JobQueue(clock=clock) as queue:
        queue.periodic(every=60, name="m")(calls)
        assert walk(queue, clock, clock.now + 120, step=60) == 2
        clock.advance(-170)  # NTP steps the clock back
        assert walk(queue, clock, clock.now + 170, step=10) == 0
        assert walk(queue, clock, clock.now + 60, step=10) == 1

    assert len(calls.slots) == len(set(calls.slots)) == 3


def test_a_clock_stepped_forward_enqueues_the_latest_slot_at_once() -> None:
    clock = Clock(600 * 3_000_000)
    calls = Calls()
    with JobQueue(clock=clock) as queue:
        queue.periodic(every=60, name="m")(calls)
        assert walk(queue, clock, clock.now + 60, step=60) == 1
        clock.advance(3600.5)
        assert queue.run_pending() == 1

    assert calls.slots[-1].timestamp() == clock.now - 0.5


class FailingOnce(MemoryStore):
    """A memory store whose first ``enqueue_slot`` fails, as a database may."""

    failed = False

    def enqueue_slot(self, *args: Any, **kwargs: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise jobq.StoreError("the database went away")
        return super().enqueue_slot(*args, **kwargs)


def test_a_slot_the_store_failed_to_take_is_asked_again_a_second_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(600 * 3_000_000)
    calls = Calls()
    with JobQueue(store=FailingOnce(), clock=clock) as queue:
        queue.periodic(every=600, name="m")(calls)
        queue.run_pending()
        clock.advance(600)
        assert queue.run_pending() == 0
        assert "periodic m: enqueueing the slot" in caplog.text
        clock.advance(0.5)
        assert queue.run_pending() == 0  # not before RETRY_AFTER
        clock.advance(0.5)
        assert queue.run_pending() == 1

    assert calls.slots == [dt.datetime.fromtimestamp(600 * 3_000_001, UTC)]


def test_a_changed_expression_takes_effect_without_a_burst(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    clock = Clock(3600 * 500_000)
    with JobQueue(store=SqliteStore(path), clock=clock) as first:
        first.periodic(every=3600, name="sync", catch_up="all")(Calls())
        assert walk(first, clock, clock.now + 3600, step=600) == 1
    clock.advance(1800)
    with JobQueue(store=SqliteStore(path), clock=clock) as second:
        second.periodic(every=60, name="sync", catch_up="all")(Calls())
        assert second.run_pending() == 0  # not the 30 minutes of every=60 slots
        assert walk(second, clock, clock.now + 60, step=60) == 1
        (schedule,) = second.schedules()
    assert schedule.expression == "every 60s"


def test_a_changed_period_is_seen_however_many_digits_it_has(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    clock = Clock(1_000_000 * 1800)
    with JobQueue(store=SqliteStore(path), clock=clock) as first:
        first.periodic(every=1_000_000, name="sync", catch_up="all")(Calls())
        assert walk(first, clock, clock.now + 1_000_000, step=100_000) == 1
    clock.advance(5_000_000)
    with JobQueue(store=SqliteStore(path), clock=clock) as second:
        second.periodic(every=1_000_001, name="sync", catch_up="all")(Calls())
        assert second.run_pending() == 0  # not 5 slots of every=1000001
        (schedule,) = second.schedules()
    assert schedule.expression == "every 1000001s"


@pytest.mark.parametrize(
    ("period", "expression"),
    [(600, "every 600s"), (600.0, "every 600s"), (0.1, "every 0.1s"),
     (1_000_000, "every 1000000s"), (dt.timedelta(days=1, microseconds=1),
                                     "every 86400.000001s")],
)  # fmt: skip
def test_every_is_shown_and_stored_with_its_exact_period(
    period: float | dt.timedelta, expression: str
) -> None:
    with JobQueue(clock=Clock()) as queue:
        queue.periodic(every=period, name="p")(no_arguments)
        (schedule,) = queue.schedules()
    assert schedule.expression == expression


@pytest.mark.parametrize(
    ("stored", "period", "caught_up"),
    [
        # Exact in the earlier format too (":g", up to 6 digits): unchanged.
        ("every 600s @ UTC", 600, 3),
        # Rounded by it: read as changed, once, so it starts at its next slot.
        ("every 1e+06s @ UTC", 1_000_000, 0),
    ],
)
def test_an_expression_stored_in_the_earlier_format_changed_only_if_it_was_rounded(
    tmp_path: Path, stored: str, period: int, caught_up: int
) -> None:
    path = tmp_path / "jobs.db"
    clock = Clock(period * 3000)
    store = SqliteStore(path)
    with JobQueue(store=store, clock=clock) as earlier:  # as the earlier one wrote
        earlier.task(name="sync")(no_arguments)
        assert earlier.run_pending() == 0  # opens the store
        now = clock.now
        store.enqueue_slot(
            "sync", stored, now, slot_job(now, "sync"), now, skip_running=False
        )
        assert earlier.run_pending() == 1
    clock.advance(3 * period)
    with JobQueue(store=SqliteStore(path), clock=clock) as later:
        later.periodic(every=period, name="sync", catch_up="all")(no_arguments)
        assert later.run_pending() == caught_up
        clock.advance(period)
        assert later.run_pending() == 1
    clock.advance(2 * period)  # then stored in the exact format: caught up
    with JobQueue(store=SqliteStore(path), clock=clock) as last:
        last.periodic(every=period, name="sync", catch_up="all")(no_arguments)
        assert last.run_pending() == 2


def test_a_removed_schedule_stops_and_is_listed_as_orphaned(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    clock = Clock(600 * 3_000_000)
    with JobQueue(store=SqliteStore(path), clock=clock) as first:
        first.periodic(cron="*/10 * * * *", tz="Europe/Berlin", name="old")(Calls())
        assert walk(first, clock, clock.now + 600, step=600) == 1
    new = Calls()
    with JobQueue(store=SqliteStore(path), clock=clock) as second:
        second.periodic(every=600, name="new")(new)
        assert walk(second, clock, clock.now + 1200, step=600) == 2
        shown = second.schedules()

    assert len(new.slots) == 2
    slot = dt.datetime.fromtimestamp(600 * 3_000_001, BERLIN)
    after = [new.slots[-1] + dt.timedelta(minutes=10 * n) for n in range(1, 6)]
    assert shown == [
        Schedule("new", "every 600s", "UTC", after[0], new.slots[-1], 3,
                 next_slots=tuple(after)),
        Schedule("old", "*/10 * * * *", "Europe/Berlin", None, slot, 1,
                 orphaned=True),
    ]  # fmt: skip


def test_schedules_show_the_next_slot_before_the_first_one_runs() -> None:
    clock = Clock(at(2026, 3, 28, 12))
    with JobQueue(clock=clock) as queue:
        queue.periodic(cron="0 3 * * *", tz="Europe/Berlin", name="nightly")(Calls())

        nights = [dt.datetime(2026, 3, 29 + n, 3, tzinfo=BERLIN) for n in range(3)]
        nights += [dt.datetime(2026, 4, n, 3, tzinfo=BERLIN) for n in (1, 2)]
        assert queue.schedules() == [
            Schedule("nightly", "0 3 * * *", "Europe/Berlin", nights[0], None, None,
                     next_slots=tuple(nights))
        ]  # fmt: skip


# -- a schedule whose slots cannot be computed ----------------------------------------

#: An hour before the last instant a ``datetime`` can hold: a yearly cron's
#: next slot (year 10000) cannot be computed there, a minutely one's can.
END_OF_TIME = dt.datetime(9999, 12, 31, 23, 0, tzinfo=UTC).timestamp()


def test_a_schedule_whose_slots_cannot_be_computed_never_stops_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(END_OF_TIME)
    minutes = Calls()
    with JobQueue(clock=clock) as queue:
        queue.periodic(cron="0 0 1 1 *", name="yearly")(Calls())
        queue.periodic(every=60, name="minute")(minutes)

        with caplog.at_level(logging.ERROR, logger="jobq"):
            ran = walk(queue, clock, clock.now + 300, step=10)

    assert ran == len(minutes.slots) == 5
    (record,) = caplog.records  # once, not at every look
    assert record.getMessage().startswith(
        "periodic yearly (0 0 1 1 * @ UTC): computing its slots failed"
    )
    assert record.exc_info is not None


def test_a_failing_schedule_is_tried_again_each_second_and_logged_again_once_it_worked(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = True
    failed = 0
    after = EverySlots.after

    def fails_while_broken(slots: EverySlots, t: float) -> float:
        nonlocal failed
        if broken:
            failed += 1
            raise ArithmeticError("the arithmetic broke")
        return after(slots, t)

    monkeypatch.setattr(EverySlots, "after", fails_while_broken)
    clock = Clock(600 * 3_000_000)
    calls = Calls()
    with JobQueue(clock=clock) as queue, caplog.at_level(logging.ERROR, "jobq"):
        queue.periodic(every=60, name="m")(calls)
        walk(queue, clock, clock.now + 30, step=0.5)
        assert (failed, len(caplog.records)) == (30, 1)  # a look a second
        broken = False
        clock.advance(30)  # the slot falls due, and it works again
        queue.run_pending()
        assert len(calls.slots) == 1
        broken = True  # at the next slot's look
        walk(queue, clock, clock.now + 90, step=0.5)

    assert len(caplog.records) == 2
    assert len(calls.slots) == 2  # the next slot was enqueued before it failed


def test_schedules_show_a_next_slot_that_cannot_be_computed_as_none() -> None:
    clock = Clock(END_OF_TIME)
    with JobQueue(clock=clock) as queue:
        queue.periodic(cron="0 0 1 1 *", name="yearly")(Calls())
        queue.periodic(every=7200, name="two-hourly")(Calls())

        assert queue.schedules() == [
            Schedule("yearly", "0 0 1 1 *", "UTC", None, None, None),
            Schedule("two-hourly", "every 7200s", "UTC", None, None, None),
        ]


# -- declarations that are refused ----------------------------------------------------


def no_arguments() -> None:
    """A periodic function."""


def needs_an_argument(user_id: int) -> None:
    """Not a periodic function: it needs an argument."""


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({}, TypeError, "exactly one of every= or cron="),
        ({"every": 60, "cron": "* * * * *"}, TypeError, "exactly one"),
        ({"every": 0}, ValueError, r"at least 0.001 seconds \(1 ms\), not 0"),
        ({"every": 1e-300}, ValueError, "at least 0.001 seconds"),
        ({"every": dt.timedelta(microseconds=999)}, ValueError, "at least 0.001"),
        (
            {"every": dt.timedelta(days=36525, microseconds=1)},
            ValueError,
            r"at most 3155760000 seconds \(100 years\)",
        ),
        ({"every": dt.timedelta(days=999_999_999)}, ValueError, "use cron="),
        ({"every": 10**400}, ValueError, "finite number of seconds"),
        ({"every": -1}, ValueError, ">= 0"),
        ({"every": "60"}, TypeError, "seconds or a timedelta"),
        ({"every": 60, "tz": "Europe/Berlin"}, ValueError, "tz= applies to cron="),
        ({"cron": "0 3 * *"}, ValueError, "five fields"),
        ({"cron": "0 0 3 * * *"}, ValueError, "five fields"),
        (
            {"cron": "61 3 * * *"},
            ValueError,
            r"not valid: Bad minute \(the fields: "
            r"minute 0-59, hour 0-23",
        ),
        ({"cron": "0 0 30 2 *"}, ValueError, "not valid: Bad day-of-month"),
        ({"cron": "* * * * 8"}, ValueError, "not valid: Bad day-of-week"),
        ({"cron": "*/0 * * * *"}, ValueError, "not valid: Bad minute"),
        ({"cron": "9" * 30 + " * * * *"}, ValueError, "not valid: Bad minute"),
        ({"cron": "1" * 5000 + " * * * *"}, ValueError, "not valid: a number too long"),
        ({"cron": 3}, TypeError, "five-field cron string"),
        ({"cron": "0 3 * * *", "tz": "Mars/Olympus"}, ValueError, "IANA time zone"),
        ({"cron": "0 3 * * *", "tz": "Europe"}, ValueError, "'Europe' is not a known"),
        ({"cron": "0 3 * * *", "tz": "x" * 300}, ValueError, "not a known IANA"),
        ({"cron": "0 3 * * *", "tz": "../../etc/passwd"}, ValueError, "not a known"),
        ({"cron": "0 3 * * *", "tz": None}, TypeError, "an IANA time zone name"),
        ({"every": 60, "overlap": "queue"}, ValueError, "overlap must be one of"),
        ({"every": 60, "catch_up": "some"}, ValueError, "catch_up must be one of"),
        ({"every": 60, "max_catch_up": 0}, ValueError, "max_catch_up"),
    ],
)
def test_a_bad_declaration_is_refused_and_registers_nothing(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with JobQueue() as queue:
        with pytest.raises(error, match=message):
            queue.periodic(name="p", **options)(no_arguments)

        assert (dict(queue.tasks), queue.schedules()) == ({}, [])


def test_every_may_be_from_a_millisecond_to_a_hundred_years() -> None:
    clock = Clock(1_800_000_000.0005)
    with JobQueue(clock=clock) as queue:
        queue.periodic(every=0.001, name="fast")(no_arguments)
        queue.periodic(every=dt.timedelta(days=36525), name="slow")(no_arguments)
        queue.run_pending()
        for _ in range(3):
            clock.advance(0.001)
            assert queue.run_pending() == 1

        fast, slow = queue.schedules()
    assert fast.last_slot == dt.datetime(2027, 1, 15, 8, 0, 0, 3000, tzinfo=UTC)
    assert slow.next_slot == dt.datetime(2070, 1, 1, tzinfo=UTC)


def test_a_function_that_needs_arguments_is_refused() -> None:
    with JobQueue() as queue:
        with pytest.raises(TypeError, match="needs user_id"):
            queue.periodic(every=60)(needs_an_argument)
        assert dict(queue.tasks) == {}


def test_a_store_without_schedules_runs_jobs_but_refuses_periodic() -> None:
    with JobQueue(lambda job: job.payload, store=OlderStore()) as queue:
        with pytest.raises(TypeError, match="lacks enqueue_slot, schedule_states"):
            queue.periodic(every=60, name="p")
        queue.enqueue("x")

        assert (queue.run_pending(), queue.schedules()) == (1, [])


def test_import_jobq_needs_no_cron_library() -> None:
    code = (
        "import sys, jobq, jobq.contrib.flask; "
        "q = jobq.JobQueue(); q.periodic(every=60, name='p')(lambda: None); "
        "assert 'cronsim' not in sys.modules, 'cronsim was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_public_names() -> None:
    assert jobq.Schedule is Schedule
    assert "Schedule" in jobq.__all__


def test_each_slot_of_a_day_runs_once_with_a_busy_clock() -> None:
    clock = Clock(at(2026, 7, 1))
    calls = Calls()
    with JobQueue(clock=clock) as queue:
        queue.periodic(cron="*/5 * * * *", name="feeds.poll")(calls)
        walk(queue, clock, at(2026, 7, 2), step=37)

    assert len(calls.slots) == 288
    assert max(Counter(calls.slots).values()) == 1
