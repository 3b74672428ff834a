"""Enqueue and keys: a job is stored as it was enqueued, due when asked,
once per key while it lives; ``cancel`` (through the queue: see ``cancels``
for the store's rules), ``enqueue_many``, ``max_pending``
and the fields carried unchanged (``timeout``, ``meta``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import jobq
from jobq import Cancellation, Enqueued, Fatal, Job, JobRecord, JobState, Stats
from jobq.stores.base import (
    NewJob,
)
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    Recorder,
    bury,
    claim_one,
    die,
    fail_with_value_error,
    finish_one,
    succeed,
)


class EnqueueTests(ContractBase):
    """What ``add`` stores and when it is due; keys, ``cancel``, ``max_pending``."""

    # -- a job as it was enqueued ------------------------------------------------------

    def test_a_successful_job_runs_once_and_is_removed(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        job = queue.enqueue({"to": "ann@example.com"})

        assert queue.run_pending() == 1
        assert queue.run_pending() == 0

        assert handler.payloads == [{"to": "ann@example.com"}]
        assert queue.get(job) is None

    def test_a_handler_receives_the_job_id_payload_key_and_first_attempt(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        job = queue.enqueue({"n": [1, 2.5, "x", None, True]}, key="k-1")

        queue.run_pending()

        assert handler.calls == [
            Job(job.id, {"n": [1, 2.5, "x", None, True]}, 1, "k-1")
        ]

    def test_get_shows_a_pending_job_as_it_was_enqueued(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        job = queue.enqueue({"to": "zoë", "n": [1, 2]}, delay=5, key="k", priority=2)

        assert queue.get(job) == jobq.JobRecord(
            id=job.id,
            payload={"to": "zoë", "n": [1, 2]},
            attempts=0,
            state=JobState.PENDING,
            run_at=T0 + 5,
            created_at=T0,
            last_error=None,
            key="k",
            priority=2,
            result=None,
            task=None,
            errors=(),
            max_attempts=5,
        )

    def test_changing_a_payload_after_enqueue_does_not_change_the_job(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)
        payload: dict[str, Any] = {"to": ["ann"]}
        queue.enqueue(payload)

        payload["to"].append("bob")
        queue.run_pending()

        assert handler.payloads == [{"to": ["ann"]}]

    def test_a_failed_attempt_does_not_see_what_an_earlier_one_did_to_the_payload(
        self, make_queue: MakeQueue
    ) -> None:
        seen: list[Any] = []

        def handler(job: Job[Any]) -> None:
            seen.append(list(job.payload["items"]))
            job.payload["items"].append("changed")
            if job.attempt == 1:
                raise ValueError("again")

        queue = make_queue(handler, base_delay=0)
        queue.enqueue({"items": ["a"]})
        queue.run_pending()

        assert seen == [["a"], ["a"]]

    # -- when it is due: delay and at --------------------------------------------------

    def test_delay_postpones_a_job(self, make_queue: MakeQueue, clock: Clock) -> None:
        handler = Recorder()
        queue = make_queue(handler, clock=clock)
        job = queue.enqueue("x", delay=30)

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 30
        assert queue.run_pending() == 0
        clock.advance(30)
        assert queue.run_pending() == 1
        assert handler.payloads == ["x"]

    def test_delay_accepts_a_timedelta(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        job = queue.enqueue("x", delay=dt.timedelta(minutes=5))

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 300

    def test_at_accepts_an_aware_datetime(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        when = dt.datetime.fromtimestamp(
            T0 + 3600, tz=dt.timezone(dt.timedelta(hours=5))
        )

        job = queue.enqueue("x", at=when)

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 3600

    def test_at_accepts_epoch_seconds(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        job = queue.enqueue("x", at=T0 + 90)

        record = queue.get(job)
        assert record is not None
        assert record.run_at == T0 + 90
        assert queue.run_pending() == 0

    @pytest.mark.parametrize(
        "at",
        [T0 - 3600, dt.datetime.fromtimestamp(T0 - 60, tz=dt.UTC)],
        ids=["epoch", "datetime"],
    )
    def test_at_in_the_past_means_now(
        self, make_queue: MakeQueue, clock: Clock, at: float | dt.datetime
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        job = queue.enqueue("x", at=at)

        record = queue.get(job)
        assert record is not None
        past = at if isinstance(at, float) else at.timestamp()
        assert record.run_at == past  # kept: it orders the due jobs
        assert queue.run_pending() == 1

    # -- keys --------------------------------------------------------------------------

    def test_a_key_returns_the_pending_job_as_a_duplicate(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)
        first = queue.enqueue({"to": "ann"}, key="welcome-ann")

        second = queue.enqueue({"to": "ann", "again": True}, key="welcome-ann")

        assert first == Enqueued(first.id, False)
        assert second == Enqueued(first.id, True)
        assert queue.stats().pending == 1
        record = queue.get(first)
        assert record is not None
        assert record.payload == {"to": "ann"}

    def test_a_key_returns_the_running_job_as_a_duplicate(
        self, make_queue: MakeQueue
    ) -> None:
        seen: list[Enqueued] = []

        def handler(job: Job[Any]) -> None:
            seen.append(queue.enqueue("again", key="k"))

        queue = make_queue(handler)
        job = queue.enqueue("first", key="k")

        assert queue.run_pending() == 1

        assert seen == [Enqueued(job.id, True)]

    def test_different_keys_do_not_collide(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)

        first = queue.enqueue("x", key="a")
        second = queue.enqueue("x", key="b")
        unkeyed = queue.enqueue("x")

        assert len({first.id, second.id, unkeyed.id}) == 3
        assert [first.duplicate, second.duplicate, unkeyed.duplicate] == [False] * 3

    @pytest.mark.parametrize("keep_completed", [0, 60])
    def test_a_finished_job_frees_its_key(
        self, make_queue: MakeQueue, keep_completed: int
    ) -> None:
        queue = make_queue(succeed, keep_completed=keep_completed)
        first = queue.enqueue("x", key="k")
        queue.run_pending()

        second = queue.enqueue("x", key="k")

        assert second.duplicate is False
        assert second.id != first.id

    def test_a_key_repeated_within_enqueue_many_is_a_duplicate_of_the_first(
        self, make_queue: MakeQueue
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler)

        jobs = queue.enqueue_many(["first", "second", "third"], key="k")

        assert jobs == [Enqueued(jobs[0].id, False)] + [Enqueued(jobs[0].id, True)] * 2
        queue.run_pending()
        assert handler.payloads == ["first"]

    def test_a_dead_job_frees_its_key(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        first = bury(queue, "x", key="k")

        second = queue.enqueue("x", key="k")

        assert second.duplicate is False
        assert second.id != first.id

    def test_a_cancelled_job_frees_its_key(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)
        first = queue.enqueue("x", key="k")
        queue.cancel(first)

        second = queue.enqueue("x", key="k")

        assert second.duplicate is False
        assert second.id != first.id

    def test_a_job_waiting_for_a_retry_keeps_its_key(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(fail_with_value_error, base_delay=60, clock=clock)
        first = queue.enqueue("x", key="k")
        queue.run_pending()

        assert queue.enqueue("x", key="k") == Enqueued(first.id, True)

    # -- cancel ------------------------------------------------------------------------

    @pytest.mark.parametrize("delay", [0, 60])
    def test_cancel_ends_a_pending_job_cancelled_and_keeps_it(
        self, make_queue: MakeQueue, clock: Clock, delay: int
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler, clock=clock)
        job = queue.enqueue("x", delay=delay)
        clock.advance(5)

        assert queue.cancel(job, by="tester") is True

        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.CANCELLED, 0)
        assert record.cancellation == Cancellation(T0 + 5, "tester", None)
        assert record.stopping is False
        stats = queue.stats()
        assert (stats.pending, stats.delayed, stats.cancelled) == (0, 0, 1)
        clock.advance(delay + 60)
        assert queue.run_pending() == 0
        assert handler.calls == []

    def test_cancel_asks_a_running_job_to_stop(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        seen: list[tuple[bool, JobRecord[Any] | None]] = []

        def handler(job: Job[Any]) -> str:
            clock.advance(5)
            seen.append((queue.cancel(job.id, by="tester"), queue.get(job.id)))
            return "done"  # after the request: its work is done all the same

        queue = make_queue(handler, clock=clock)
        job = queue.enqueue("x")

        assert queue.run_pending() == 1

        [(answer, record)] = seen
        assert answer is True
        assert record is not None
        assert (record.state, record.stopping) == (JobState.RUNNING, True)
        assert record.cancellation == Cancellation(T0 + 5, "tester", 1)
        assert queue.stats().completed == 1
        assert queue.get(job) is None  # completed, not kept (keep_completed=0)
        assert queue.cancel(job) is False

    def test_cancel_refuses_an_unknown_job(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)
        job = queue.enqueue("x")

        assert queue.cancel(job.id + 1000) is False
        assert queue.stats().pending == 1

    def test_cancel_refuses_a_dead_job(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        job = bury(queue)

        assert queue.cancel(job) is False
        assert [dead.id for dead in queue.dead_jobs()] == [job.id]

    def test_cancel_twice_returns_false_the_second_time(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)
        job = queue.enqueue("x")

        assert queue.cancel(job) is True
        assert queue.cancel(job) is False

    # -- enqueue_many and job references -----------------------------------------------

    def test_enqueue_many_returns_ids_in_order(self, make_queue: MakeQueue) -> None:
        handler = Recorder()
        queue = make_queue(handler)

        jobs = queue.enqueue_many([{"n": n} for n in range(5)])

        assert [job.duplicate for job in jobs] == [False] * 5
        ids = [job.id for job in jobs]
        assert ids == sorted(set(ids))
        for n, job in enumerate(jobs):
            record = queue.get(job)
            assert record is not None
            assert record.payload == {"n": n}
        queue.run_pending()
        assert handler.payloads == [{"n": n} for n in range(5)]

    def test_enqueue_many_applies_its_options_to_every_job(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)

        jobs = queue.enqueue_many(["a", "b"], delay=30, priority=3)

        for job in jobs:
            record = queue.get(job)
            assert record is not None
            assert (record.run_at, record.priority) == (T0 + 30, 3)

    def test_enqueue_many_of_nothing_adds_nothing(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)

        assert queue.enqueue_many([]) == []
        assert queue.stats().pending == 0

    def test_job_ids_only_grow(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)
        first = queue.enqueue("x")
        queue.run_pending()
        cancelled = queue.enqueue("x")
        queue.cancel(cancelled)

        last = queue.enqueue("x")

        assert 0 < first.id < cancelled.id < last.id

    def test_get_cancel_retry_dead_and_delete_dead_accept_an_enqueued(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(die, clock=clock)
        pending = queue.enqueue("pending", delay=60)
        revived = bury(queue, "revived")
        deleted = bury(queue, "deleted")

        record = queue.get(pending)
        assert record is not None
        assert record.payload == "pending"
        assert queue.retry_dead(revived) is True
        assert queue.delete_dead(deleted) is True
        assert queue.cancel(pending) is True
        assert queue.stats().pending == 1  # the revived one

    def test_get_of_an_unknown_id_returns_none(self, make_queue: MakeQueue) -> None:
        queue = make_queue(succeed)

        assert queue.get(12345) is None

    # -- max_pending -------------------------------------------------------------------

    def test_enqueue_beyond_max_pending_raises_queue_full_and_adds_nothing(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(lambda job: None, max_pending=3)
        queue.enqueue_many(["a", "b", "c"])

        with pytest.raises(jobq.QueueFull, match="max_pending is 3"):
            queue.enqueue("d")
        with pytest.raises(jobq.QueueFull):
            queue.enqueue_many(["e", "f"])

        assert queue.stats().pending == 3

    def test_a_batch_that_would_pass_max_pending_is_refused_whole(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(lambda job: None, max_pending=3)
        queue.enqueue("a")

        with pytest.raises(jobq.QueueFull):
            queue.enqueue_many(["b", "c", "d"])

        assert queue.stats().pending == 1

    def test_room_made_by_running_jobs_can_be_used_again(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(lambda job: None, max_pending=2)
        queue.enqueue_many(["a", "b"])
        queue.run_pending()

        queue.enqueue_many(["c", "d"])

        assert queue.stats().pending == 2

    # -- fields carried unchanged: timeout and meta ------------------------------------

    def test_a_job_that_never_ran_has_no_attempt_times_no_timeout_and_no_meta(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)
        job = queue.enqueue("x")

        record = queue.get(job)

        assert record is not None
        assert (record.started_at, record.finished_at) == (None, None)
        assert (record.timeout, dict(record.meta)) == (None, {})

    def test_meta_and_timeout_stay_with_a_job_through_retries_burial_and_revive(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        meta = {"traceparent": "00-4bf92f35-00f067aa-01", "queue": "zoë's"}
        handler = Recorder(ValueError("once"), Fatal("then give up"))
        queue = make_queue(handler, base_delay=0, keep_completed=60, clock=clock)
        [new] = queue.prepare(["x"], meta=meta)
        timed = NewJob(new.payload, new.run_at, new.key, new.priority,
                       new.max_attempts, timeout=2.5, meta=new.meta)  # fmt: skip
        [job] = queue.add([timed])  # no public timeout= yet

        assert queue.run_pending() == 2

        assert [(c.meta, c.timeout) for c in handler.calls] == [(meta, 2.5)] * 2
        [dead] = queue.dead_jobs()
        assert (dead.meta, dead.timeout) == (meta, 2.5)
        assert queue.retry_dead(job) is True
        revived = queue.get(job)
        assert revived is not None
        assert (revived.meta, revived.timeout) == (meta, 2.5)
        claim = claim_one(queue.store, clock())
        assert claim is not None
        assert (claim.meta, claim.timeout) == (new.meta, 2.5)
        assert finish_one(queue.store, claim, None, clock() + 60, clock()) is True
        completed = queue.get(job)
        assert completed is not None
        assert completed.state is JobState.COMPLETED
        assert (completed.meta, completed.timeout) == (meta, 2.5)

    def test_no_meta_and_an_empty_meta_are_stored_alike_and_shown_empty(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        handler = Recorder()
        queue = make_queue(handler, keep_completed=60, clock=clock)
        jobs = [queue.enqueue(1), queue.enqueue(2, meta={})]
        store = queue.store

        claims = store.claim_many(clock(), 2)
        assert [c.meta for c in claims] == [None, None]
        store.release(claims, clock())
        queue.run_pending()

        assert [dict(call.meta) for call in handler.calls] == [{}, {}]
        records = [queue.get(job) for job in jobs]
        assert [dict(r.meta) for r in records if r is not None] == [{}, {}]

    # -- a restart: a second store over the same place (persistent stores) -------------

    def test_a_pending_job_is_the_same_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue(
            {"to": "zoë"}, delay=5, key="k", priority=2, meta={"trace": "zoë"}
        )
        before = queue.get(job)
        assert before is not None
        assert before.meta == {"trace": "zoë"}
        queue.close()

        again = make_queue(succeed, clock=clock)

        assert again.get(job) == before
        assert again.stats() == Stats(
            pending=1, running=0, dead=0, completed=0, retried=0, delayed=1
        )
        assert again.enqueue("x", key="k") == Enqueued(job.id, True)
        clock.advance(5)
        assert again.run_pending() == 1
        assert again.get(job) is None

    def test_job_ids_keep_growing_after_a_restart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        queue = make_queue(succeed, clock=clock)
        finished = queue.enqueue("x")
        queue.run_pending()
        cancelled = queue.enqueue("x")
        queue.cancel(cancelled)
        queue.close()

        again = make_queue(succeed, clock=clock)
        last = again.enqueue("x")

        assert 0 < finished.id < cancelled.id < last.id
