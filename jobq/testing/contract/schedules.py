"""Schedules (``ScheduleStore``, optional): each slot of a periodic job is
enqueued once, a paused schedule's slots are passed over, and a run by hand
takes no slot. A store without ``enqueue_slot`` and ``schedule_states``
skips these tests, as ``periodic`` refuses it."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

import pytest

import jobq
from jobq import Enqueued
from jobq.stores.base import (
    NO_SLOT,
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
    """The store takes each slot once (``enqueue_slot``, ``schedule_states``),
    passes over a paused schedule's slots, a resume brings no burst, and a
    run by hand takes no slot (``pause_schedule``, ``resume_schedule``,
    ``enqueue_now``); skipped for a store without them."""

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

    # -- pausing and running by hand: stored, so every process obeys -------------------

    def test_a_paused_schedule_s_slot_is_refused_and_nothing_is_added(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        first = store.enqueue_slot("s", "e", now, slot_job(now), now,
                                   skip_running=False)  # fmt: skip
        assert first is not None

        assert store.pause_schedule("s", now + 1, by="ann")
        refused = store.enqueue_slot("s", "e", now + 60, slot_job(now + 60), now + 60,
                                     skip_running=False)  # fmt: skip

        assert refused is None
        assert cast(Store, store).stats().pending == 1
        assert store.schedule_states() == [
            SlotState("s", "e", now, first.id, now + 1, "ann", None)
        ]

    def test_a_schedule_the_store_has_no_row_for_can_be_paused(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()

        assert store.pause_schedule("new", now, by="ann")
        refused = store.enqueue_slot("new", "e", now + 60, slot_job(now + 60),
                                     now + 60, skip_running=False)  # fmt: skip

        assert refused is None
        assert store.schedule_states() == [
            SlotState("new", "", NO_SLOT, None, now, "ann", None)
        ]

    def test_pausing_a_paused_schedule_and_resuming_a_running_one_change_nothing(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        assert not store.resume_schedule("s", now)  # unknown: nothing to resume
        assert store.pause_schedule("s", now, by="ann")

        assert not store.pause_schedule("s", now + 1, by="bob")
        assert store.resume_schedule("s", now + 2)
        assert not store.resume_schedule("s", now + 3)
        assert store.schedule_states() == [
            SlotState("s", "", NO_SLOT, None, None, None, now + 2)
        ]

    def test_slots_that_fell_while_paused_are_passed_over_after_the_resume(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        assert store.enqueue_slot("s", "e", now, slot_job(now), now,
                                  skip_running=False) is not None  # fmt: skip
        assert store.pause_schedule("s", now + 10, by="ann")
        assert store.resume_schedule("s", now + 130)

        late = [
            store.enqueue_slot("s", "e", slot, slot_job(slot), now + 130,
                               skip_running=False)
            for slot in (now + 60, now + 120)
        ]  # fmt: skip
        after = store.enqueue_slot("s", "e", now + 180, slot_job(now + 180),
                                   now + 180, skip_running=False)  # fmt: skip

        assert late == [None, None]
        assert after is not None
        assert not after.duplicate
        assert store.schedule_states() == [SlotState("s", "e", now + 180, after.id)]
        assert cast(Store, store).stats().pending == 2

    def test_a_run_by_hand_takes_no_slot(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        first = store.enqueue_slot("s", "e", now, slot_job(now), now,
                                   skip_running=False)  # fmt: skip
        assert first is not None

        by_hand = store.enqueue_now("s", slot_job(now + 5), now + 5,
                                    skip_running=False)  # fmt: skip
        next_slot = store.enqueue_slot("s", "e", now + 60, slot_job(now + 60),
                                       now + 60, skip_running=False)  # fmt: skip

        assert not by_hand.duplicate
        assert by_hand.id not in (first.id, None)
        assert next_slot is not None
        assert not next_slot.duplicate
        assert cast(Store, store).stats().pending == 3

    def test_a_run_by_hand_becomes_the_schedule_s_last_job(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        assert store.enqueue_slot("s", "e", now, slot_job(now), now,
                                  skip_running=False) is not None  # fmt: skip

        by_hand = store.enqueue_now("s", slot_job(now + 5), now + 5,
                                    skip_running=False)  # fmt: skip
        skipped = store.enqueue_slot("s", "e", now + 60, slot_job(now + 60),
                                     now + 60, skip_running=True)  # fmt: skip

        assert skipped == Enqueued(by_hand.id, True)
        assert store.schedule_states() == [SlotState("s", "e", now + 60, by_hand.id)]

    def test_a_run_by_hand_is_refused_while_the_last_job_is_live_when_skipping(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        first = store.enqueue_slot("s", "e", now, slot_job(now), now,
                                   skip_running=True)  # fmt: skip
        assert first is not None

        refused = store.enqueue_now("s", slot_job(now + 5), now + 5,
                                    skip_running=True)  # fmt: skip

        assert refused == Enqueued(first.id, True)
        assert cast(Store, store).stats().pending == 1
        assert store.schedule_states() == [SlotState("s", "e", now, first.id)]

    def test_a_paused_schedule_can_be_run_by_hand_and_stays_paused(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        store, _ = self.slot_store(make_queue, clock)
        now = clock()
        assert store.pause_schedule("s", now, by="ann")

        by_hand = store.enqueue_now("s", slot_job(now + 5), now + 5,
                                    skip_running=True)  # fmt: skip

        assert not by_hand.duplicate
        assert store.schedule_states() == [
            SlotState("s", "", NO_SLOT, by_hand.id, now, "ann", None)
        ]
        assert claim_one(cast(Store, store), now + 5) is not None

    def test_a_pause_is_the_same_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        store, queue = self.slot_store(make_queue, clock)
        now = clock()
        assert store.pause_schedule("s", now, by="ann")
        assert store.pause_schedule("t", now, by="bob")
        assert store.resume_schedule("t", now + 1)
        before = store.schedule_states()
        queue.close()
        again, _ = self.slot_store(make_queue, clock)

        assert again.schedule_states() == before
        assert again.enqueue_slot("s", "e", now + 60, slot_job(now + 60), now + 60,
                                  skip_running=False) is None  # fmt: skip

    # -- through the queue ---------------------------------------------------------

    def periodic_queue(
        self, make_queue: MakeQueue, clock: Clock, **options: Any
    ) -> tuple[jobq.JobQueue[Any], list[dt.datetime]]:
        """A queue on ``clock`` (on a slot) with periodic job ``tick`` every
        10 minutes, looked at once; and the slots it ran."""
        queue = make_queue(clock=clock)
        skip_without_schedules(queue.store)
        clock.now = 600 * (clock.now // 600)
        ran: list[dt.datetime] = []

        def tick(scheduled_at: dt.datetime) -> None:
            ran.append(scheduled_at)

        queue.periodic(every=600, name="tick", **options)(tick)
        assert queue.run_pending() == 0  # its first look: it starts with the next slot
        return queue, ran

    def test_a_pause_holds_for_a_queue_that_looked_before_it(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue, ran = self.periodic_queue(make_queue, clock)

        assert queue.pause_schedule("tick", by="ann")
        clock.advance(600)
        assert queue.run_pending() == 0
        (schedule,) = queue.schedules()
        assert schedule.paused
        assert schedule.paused_by == "ann"
        assert queue.resume_schedule("tick")
        clock.advance(600)
        assert queue.run_pending() == 1

        assert ran == [dt.datetime.fromtimestamp(clock(), dt.UTC)]
        assert not queue.schedules()[0].paused

    def test_a_pause_holds_for_another_queue_on_the_same_store(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        worker, ran = self.periodic_queue(make_queue, clock)
        if not worker.store.shared_between_processes:
            pytest.skip("one process holds the store: no other queue shares it")
        other = make_queue(clock=clock)  # another process, say
        other.periodic(every=600, name="tick")(lambda: None)

        assert other.pause_schedule("tick", by="ann")
        clock.advance(600)
        assert worker.run_pending() == 0
        assert worker.schedules()[0].paused
        assert other.resume_schedule("tick")
        clock.advance(600)
        assert worker.run_pending() == 1
        assert len(ran) == 1

    def test_a_resume_enqueues_none_of_the_slots_passed_over(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue, ran = self.periodic_queue(make_queue, clock, catch_up="all")
        assert queue.pause_schedule("tick")
        clock.advance(3 * 600)  # three slots, nobody looks
        assert queue.resume_schedule("tick")

        assert queue.run_pending() == 0
        clock.advance(600)
        assert queue.run_pending() == 1
        assert ran == [dt.datetime.fromtimestamp(clock(), dt.UTC)]

    def test_run_schedule_enqueues_a_job_now_and_the_next_slot_still_runs(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue, ran = self.periodic_queue(make_queue, clock, overlap="allow")
        clock.advance(60)
        asked = clock()

        by_hand = queue.run_schedule("tick", by="ann")
        assert queue.run_pending() == 1
        clock.advance(540)
        assert queue.run_pending() == 1

        record = queue.get(by_hand)
        assert not by_hand.duplicate
        assert ran == [
            dt.datetime.fromtimestamp(asked, dt.UTC),
            dt.datetime.fromtimestamp(clock(), dt.UTC),
        ]
        assert record is None or dict(record.meta) == {"jobq.run_by": "ann"}
