"""Schedules (``ScheduleStore``, optional): each slot of a periodic job is
enqueued once. A store without ``enqueue_slot`` and ``schedule_states``
skips these tests, as ``periodic`` refuses it."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

import pytest

import jobq
from jobq import Enqueued
from jobq.stores.base import (
    ScheduleStore,
    SlotState,
    Store,
    missing_schedule_members,
)
from jobq.testing.clock import Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    OpenStore,
    claim_one,
    finish_one,
    slot_job,
    succeed,
)


def skip_without_schedules(store: object) -> None:
    """Skip the test for a store without the ``ScheduleStore`` members: they
    are optional (``periodic`` refuses such a store by name)."""
    missing = missing_schedule_members(store)
    if missing:
        pytest.skip(f"the store has no {', '.join(missing)} (ScheduleStore, optional)")


class ScheduleTests(ContractBase):
    """The store takes each slot once (``enqueue_slot``, ``schedule_states``);
    skipped for a store without them."""

    # -- periodic jobs: the store takes each slot once (ScheduleStore) -----------------

    def slot_store(
        self, make_queue: MakeQueue, clock: Clock
    ) -> tuple[ScheduleStore, jobq.JobQueue[Any]]:
        """An open store that keeps schedules, and its queue on ``clock``;
        skips the test for a store without them."""
        queue = make_queue(succeed, clock=clock)
        skip_without_schedules(queue.store)
        queue.stats()  # opens it
        return cast(ScheduleStore, queue.store), queue

    def test_a_slot_is_enqueued_once_and_never_before_a_later_one(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()

        first = store.enqueue_slot("s", "every 60s @ UTC", now, slot_job(now), now,
                                   skip_running=False)  # fmt: skip
        again = store.enqueue_slot("s", "every 60s @ UTC", now, slot_job(now), now,
                                   skip_running=False)  # fmt: skip
        earlier = store.enqueue_slot("s", "every 60s @ UTC", now - 60,
                                     slot_job(now - 60), now,
                                     skip_running=False)  # fmt: skip

        assert first is not None
        assert not first.duplicate
        assert (again, earlier) == (None, None)
        assert store.schedule_states() == [
            SlotState("s", "every 60s @ UTC", now, first.id)
        ]
        claim = claim_one(cast(Store, store), now)
        assert claim is not None
        assert (claim.id, claim.key, claim.run_at) == (first.id, f"slot:{now}", now)

    def test_a_slot_is_skipped_while_the_last_slots_job_is_pending_or_running(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        jobs = cast(Store, store)
        now = clock()
        first = store.enqueue_slot("s", "e", now, slot_job(now), now, skip_running=True)
        assert first is not None
        skipped = store.enqueue_slot("s", "e", now + 60, slot_job(now + 60), now + 60,
                                     skip_running=True)  # fmt: skip
        claim = claim_one(jobs, now + 60)
        assert claim is not None
        while_running = store.enqueue_slot(
            "s", "e", now + 120, slot_job(now + 120), now + 120, skip_running=True
        )
        assert finish_one(jobs, claim, None, None, now + 120)
        after = store.enqueue_slot("s", "e", now + 180, slot_job(now + 180), now + 180,
                                   skip_running=True)  # fmt: skip

        assert skipped == while_running == Enqueued(first.id, True)
        assert after is not None
        assert not after.duplicate
        assert store.schedule_states() == [SlotState("s", "e", now + 180, after.id)]
        assert jobs.stats().pending == 1

    def test_overlapping_slots_are_enqueued_when_allowed(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        added = [
            store.enqueue_slot("s", "e", slot, slot_job(slot), now, skip_running=False)
            for slot in (now, now + 1, now + 2)
        ]

        assert [a is not None and not a.duplicate for a in added] == [True] * 3
        assert cast(Store, store).stats().pending == 3

    def test_schedule_states_are_listed_by_name(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        for name in ("b", "a", "zoë"):
            store.enqueue_slot(name, f"{name} @ UTC", now, slot_job(now, name), now,
                               skip_running=False)  # fmt: skip

        states = store.schedule_states()
        assert [(s.name, s.expression, s.last_slot) for s in states] == [
            ("a", "a @ UTC", now), ("b", "b @ UTC", now), ("zoë", "zoë @ UTC", now),
        ]  # fmt: skip

    def test_schedule_states_are_the_same_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        store, queue = self.slot_store(make_queue, clock)
        now = clock()
        added = store.enqueue_slot("s", "e", now, slot_job(now), now, skip_running=True)
        assert added is not None
        before = store.schedule_states()
        queue.close()
        again, _ = self.slot_store(make_queue, clock)

        assert again.schedule_states() == before
        assert again.enqueue_slot("s", "e", now, slot_job(now), now,
                                  skip_running=False) is None  # fmt: skip

    def test_periodic_slots_run_once_each_as_the_clock_moves(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(clock=clock)
        skip_without_schedules(queue.store)
        clock.now = 600 * (clock.now // 600)  # on a slot
        ran: list[dt.datetime] = []

        def tick(scheduled_at: dt.datetime) -> None:
            ran.append(scheduled_at)

        queue.periodic(every=dt.timedelta(minutes=10), name="tick")(tick)
        assert queue.run_pending() == 0  # a new schedule starts with its next slot
        clock.advance(600)
        assert queue.run_pending() == 1
        assert queue.run_pending() == 0
        clock.advance(599)
        assert queue.run_pending() == 0
        clock.advance(1)
        assert queue.run_pending() == 1

        start = dt.datetime.fromtimestamp(clock() - 600, dt.UTC)
        assert ran == [start, start + dt.timedelta(minutes=10)]
        (schedule,) = queue.schedules()
        assert (schedule.name, schedule.expression, schedule.last_slot) == (
            "tick", "every 600s", ran[-1],
        )  # fmt: skip
        assert schedule.next_slot == ran[-1] + dt.timedelta(minutes=10)

    def test_a_slot_s_new_job_wakes_an_idle_worker(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        store, signal = open_store()
        skip_without_schedules(store)
        slots = cast(ScheduleStore, store)
        before = signal.generation

        added = slots.enqueue_slot("s", "e", clock(), slot_job(clock()), clock(),
                                   skip_running=True)  # fmt: skip

        assert added is not None
        assert not added.duplicate
        assert signal.generation > before, (
            "enqueue_slot() added a due job without calling Signal.jobs_added"
        )
