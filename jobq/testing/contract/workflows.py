"""Workflows: jobs added ``after=`` others (see "Workflows" in
``jobq.stores.base``); skipped for a store that does not declare
``Capabilities.workflows``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import jobq
from jobq import Enqueued, Fatal, Job, JobState
from jobq.events import Event, EventKind
from jobq.stores.base import Done, capabilities_of
from jobq.testing.clock import Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    Recorder,
    claim_one,
    succeed,
)
from jobq.types import AfterFailure


def echo(job: Job[Any]) -> Any:
    """Returns its payload, and what its parents returned, if it has any."""
    return [job.payload, list(job.parent_results)] if job.parents else job.payload


class Steps:
    """A handler whose jobs fail (``Fatal``) when their payload says so, and
    that records every job it ran, in order."""

    def __init__(self) -> None:
        self.ran: list[Job[Any]] = []

    def __call__(self, job: Job[Any]) -> Any:
        self.ran.append(job)
        if job.payload == "fail":
            raise Fatal("this step fails")
        return job.payload

    @property
    def payloads(self) -> list[Any]:
        return [job.payload for job in self.ran]


class WorkflowTests(ContractBase):
    """``after=``, ``after_failure``, ``parent_results`` and ``queue.wait``."""

    def workflow_queue(
        self, make_queue: MakeQueue, handler: Any = None, **options: Any
    ) -> jobq.JobQueue[Any]:
        queue = make_queue(handler, **options)
        if not capabilities_of(queue.store).workflows:
            pytest.skip("the store does not declare Capabilities.workflows")
        return queue

    def state(self, queue: jobq.JobQueue[Any], job: Enqueued) -> JobState | None:
        record = queue.get(job)
        return None if record is None else record.state

    # -- the happy paths ------------------------------------------------------

    def test_a_chain_of_three_passes_each_result_on(
        self, make_queue: MakeQueue
    ) -> None:
        queue = self.workflow_queue(make_queue)  # keep_completed=0: nothing kept
        stored: list[str] = []

        @queue.task(name="fetch")
        def fetch(url: str) -> str:
            return f"<{url}>"

        @queue.task(name="parse")
        def parse(parent_results: Sequence[Any] = ()) -> int:
            return len(parent_results[0])

        @queue.task(name="store")
        def store(label: str, parent_results: Sequence[Any] = ()) -> None:
            stored.append(f"{label}={parent_results[0]}")

        a = fetch.enqueue("x.org")
        b = parse.using(after=[a]).enqueue()
        c = store.using(after=[b]).enqueue("size")

        assert [self.state(queue, j) for j in (b, c)] == [JobState.WAITING] * 2
        assert queue.run_pending() == 3
        assert stored == ["size=7"]
        assert [self.state(queue, j) for j in (a, b, c)] == [None] * 3

    def test_fan_out_of_100_then_fan_in_of_one(self, make_queue: MakeQueue) -> None:
        steps = Steps()
        queue = self.workflow_queue(make_queue, steps, keep_completed=60)
        root = queue.enqueue("root")
        leaves = [queue.enqueue(i, after=[root]) for i in range(100)]
        report = queue.enqueue("report", after=leaves)

        assert queue.stats().waiting == 101
        assert queue.run_pending() == 102

        assert steps.payloads[0] == "root"
        assert sorted(steps.payloads[1:101]) == list(range(100))
        assert steps.ran[-1].payload == "report"
        assert steps.ran[-1].parent_results == tuple(range(100))
        assert steps.ran[-1].parents == tuple(leaf.id for leaf in leaves)
        assert queue.stats().waiting == 0
        record = queue.get(root)
        assert record is not None
        assert record.children == tuple(leaf.id for leaf in leaves)
        report_record = queue.get(report)
        assert report_record is not None
        assert report_record.state is JobState.COMPLETED

    def test_a_child_runs_only_after_every_parent_completed(
        self, make_queue: MakeQueue
    ) -> None:
        steps = Steps()
        queue = self.workflow_queue(make_queue, steps)
        a, b = queue.enqueue("a"), queue.enqueue("b")
        c = queue.enqueue("c", after=[a, b])

        claim = claim_one(queue.store, queue.clock())
        assert claim is not None
        assert claim.id == a.id
        # Only b is claimable while a runs: the child waits for both.
        assert queue.run_pending() == 1
        assert steps.payloads == ["b"]
        record = queue.get(c)
        assert record is not None
        assert (record.state, record.waiting_on) == (JobState.WAITING, (a.id,))

        queue.store.finish_many([Done(claim, '"A"')], None, queue.clock())

        assert self.state(queue, c) is JobState.PENDING
        assert queue.run_pending() == 1
        assert steps.ran[-1].parent_results == ("A", "b")

    def test_a_waiting_job_is_shown_and_counted_apart(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        # The queue's clock: the claims below look an hour ahead of it.
        queue = self.workflow_queue(make_queue, succeed, clock=clock)
        parent = queue.enqueue("p", delay=60)
        child = queue.enqueue("c", after=[parent], after_failure="run")

        stats = queue.stats()
        assert (stats.pending, stats.waiting) == (1, 1)
        record = queue.get(child)
        assert record is not None
        assert record.state is JobState.WAITING
        assert record.parents == record.waiting_on == (parent.id,)
        assert record.after_failure == "run"
        assert [r.id for r in queue.store.list_jobs(JobState.WAITING)] == [child.id]
        assert [r.id for r in queue.browse("waiting").jobs] == [child.id]
        parent_record = queue.get(parent)
        assert parent_record is not None
        assert (parent_record.children, parent_record.after_failure) == (
            (child.id,),
            None,
        )
        assert queue.store.claim_many(queue.clock() + 3600, 10)[0].id == parent.id
        assert queue.store.claim_many(queue.clock() + 3600, 10) == []

    def test_a_released_child_is_due_at_its_own_time_if_later(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        steps = Steps()
        queue = self.workflow_queue(make_queue, steps, clock=clock)
        parent = queue.enqueue("p")
        child = queue.enqueue("c", after=[parent], delay=30)

        assert queue.run_pending() == 1
        record = queue.get(child)
        assert record is not None
        assert (record.state, record.run_at) == (JobState.PENDING, clock() + 30)
        assert queue.run_pending() == 0
        clock.advance(30)
        assert queue.run_pending() == 1

    def test_a_released_child_is_told_as_an_event(self, make_queue: MakeQueue) -> None:
        queue = self.workflow_queue(make_queue, succeed)
        events: list[Event] = []
        queue.subscribe(events.append, kinds=EventKind.RELEASED)
        parent = queue.enqueue("p")
        child = queue.send(["c"], task=None, after=[parent])[0]

        queue.run_pending(limit=1)

        assert [(e.kind, e.job_id) for e in events] == [(EventKind.RELEASED, child.id)]

    def test_a_plain_handler_sees_its_parents(self, make_queue: MakeQueue) -> None:
        queue = self.workflow_queue(make_queue, echo, keep_completed=60)
        a, b = queue.enqueue({"n": 1}), queue.enqueue([2])
        c = queue.enqueue("c", after=[b, a])

        queue.run_pending()

        record = queue.get(c)
        assert record is not None
        assert record.result == ["c", [[2], {"n": 1}]]

    # -- adding after jobs that finished ----------------------------------------

    def test_a_parent_that_completed_already_counts_with_its_result(
        self, make_queue: MakeQueue
    ) -> None:
        steps = Steps()
        queue = self.workflow_queue(make_queue, steps, keep_completed=60)
        kept = queue.enqueue("kept")
        queue.run_pending()

        child = queue.enqueue("c", after=[kept])

        assert self.state(queue, child) is JobState.PENDING
        queue.run_pending()
        assert steps.ran[-1].parent_results == ("kept",)

    def test_a_parent_finished_and_not_kept_counts_as_completed(
        self, make_queue: MakeQueue
    ) -> None:
        steps = Steps()
        queue = self.workflow_queue(make_queue, steps)
        gone = queue.enqueue("gone")
        queue.run_pending()

        child = queue.enqueue("c", after=[gone])

        assert self.state(queue, child) is JobState.PENDING
        queue.run_pending()
        assert steps.ran[-1].parent_results == (None,)

    def test_a_parent_never_added_is_refused_and_nothing_is_added(
        self, make_queue: MakeQueue
    ) -> None:
        queue = self.workflow_queue(make_queue, succeed)
        real = queue.enqueue("p")

        never = 2**62  # beyond any id a store gave
        with pytest.raises(ValueError, match=f"no job {never} "):
            queue.enqueue_many(["a", "b"], after=[real, never])
        with pytest.raises(ValueError, match=f"no job {never} "):  # after a plain one
            queue.add(queue.prepare(["plain"]) + queue.prepare(["c"], after=[never]))

        stats = queue.stats()
        assert (stats.pending, stats.waiting) == (1, 0)
        assert queue.get(real.id + 1) is None
        assert queue.run_pending() == 1

    @pytest.mark.parametrize(
        ("after_failure", "state"),
        [
            ("wait", JobState.WAITING),
            ("cancel", JobState.CANCELLED),
            ("run", JobState.PENDING),
        ],
    )
    def test_a_parent_dead_already_counts_as_a_failed_one(
        self, make_queue: MakeQueue, after_failure: AfterFailure, state: JobState
    ) -> None:
        queue = self.workflow_queue(make_queue, Steps())
        dead = queue.enqueue("fail")
        queue.run_pending()

        child = queue.enqueue("c", after=[dead], after_failure=after_failure)

        record = queue.get(child)
        assert record is not None
        assert record.state is state
        if state is JobState.CANCELLED:
            assert record.cancellation is not None
            assert record.cancellation.by == f"parent job {dead.id} died"

    # -- failures -----------------------------------------------------------------

    def test_a_dead_parent_keeps_its_children_waiting_until_revived(
        self, make_queue: MakeQueue
    ) -> None:
        steps = Steps()
        queue = self.workflow_queue(make_queue, steps, keep_completed=60)
        parent = queue.enqueue("fail")
        child = queue.enqueue("child", after=[parent])
        grandchild = queue.enqueue("grandchild", after=[child])

        assert queue.run_pending() == 1
        assert self.state(queue, parent) is JobState.DEAD
        assert self.state(queue, child) is JobState.WAITING
        assert queue.join(timeout=5)  # nothing runnable: join returns

        # The step is fixed: its payload changes nothing, the handler does.
        steps_fixed = Steps()
        fixed = self.workflow_queue(
            make_queue, lambda job: steps_fixed(job) if job.payload != "fail" else "ok",
            store=queue.store, keep_completed=60,
        )  # fmt: skip
        assert fixed.retry_dead(parent)
        assert fixed.run_pending() == 3
        assert steps_fixed.payloads == ["child", "grandchild"]
        assert steps_fixed.ran[0].parent_results == ("ok",)
        assert self.state(fixed, grandchild) is JobState.COMPLETED

    def test_deleting_a_dead_parent_cancels_its_children_transitively(
        self, make_queue: MakeQueue
    ) -> None:
        queue = self.workflow_queue(make_queue, Steps())
        parent = queue.enqueue("fail")
        child = queue.enqueue("child", after=[parent], key="child-key")
        runs = queue.enqueue("runs", after=[child], after_failure="run")
        grandchild = queue.enqueue("grandchild", after=[child])
        queue.run_pending()

        assert queue.delete_dead(parent)

        record = queue.get(child)
        assert record is not None
        assert record.cancellation is not None
        assert record.state is JobState.CANCELLED
        assert record.cancellation.by == f"parent job {parent.id} was deleted"
        deeper = queue.get(grandchild)
        assert deeper is not None
        assert deeper.cancellation is not None
        assert deeper.cancellation.by == f"parent job {child.id} was cancelled"
        assert self.state(queue, runs) is JobState.PENDING
        assert queue.stats().waiting == 0
        # The cancelled child's key is free again.
        assert not queue.enqueue("again", key="child-key").duplicate

    def test_a_dead_parent_dropped_from_the_dead_letters_cancels_its_children(
        self, make_queue: MakeQueue
    ) -> None:
        queue = self.workflow_queue(make_queue, Steps(), dead_letter_limit=1)
        parent = queue.enqueue("fail")
        child = queue.enqueue("child", after=[parent])
        queue.run_pending()
        queue.enqueue("fail")
        queue.run_pending()  # the second death drops the first

        record = queue.get(child)
        assert record is not None
        assert record.cancellation is not None
        assert record.state is JobState.CANCELLED
        assert record.cancellation.by == (
            f"parent job {parent.id} was dropped from the dead-letter list"
        )

    def test_after_failure_cancel_ends_the_children_at_once(
        self, make_queue: MakeQueue
    ) -> None:
        queue = self.workflow_queue(make_queue, Steps())
        parent = queue.enqueue("fail")
        child = queue.enqueue("child", after=[parent], after_failure="cancel")
        grandchild = queue.enqueue("grand", after=[child], after_failure="run")

        queue.run_pending()

        record = queue.get(child)
        assert record is not None
        assert record.cancellation is not None
        assert record.state is JobState.CANCELLED
        assert record.cancellation.by == f"parent job {parent.id} died"
        assert record.cancellation.attempt is None
        # A cancelled parent counts as failed: "run" runs anyway.
        assert self.state(queue, grandchild) is None  # ran and is gone

    def test_after_failure_run_runs_and_says_which_parents_failed(
        self, make_queue: MakeQueue
    ) -> None:
        steps = Steps()
        queue = self.workflow_queue(make_queue, steps)
        good, bad = queue.enqueue("good"), queue.enqueue("fail")
        cleanup = queue.enqueue("cleanup", after=[good, bad], after_failure="run")

        queue.run_pending()

        job = steps.ran[-1]
        assert (job.id, job.payload) == (cleanup.id, "cleanup")
        assert job.parent_results == ("good", None)
        assert job.failed_parents == (bad.id,)

    def test_a_cancelled_parent_counts_as_failed(self, make_queue: MakeQueue) -> None:
        steps = Steps()
        queue = self.workflow_queue(make_queue, steps)
        parent = queue.enqueue("p")
        waits = queue.enqueue("waits", after=[parent])
        runs = queue.enqueue("runs", after=[parent], after_failure="run")

        assert queue.cancel(parent)

        record = queue.get(waits)
        assert record is not None
        assert record.cancellation is not None
        assert record.cancellation.by == f"parent job {parent.id} was cancelled"
        queue.run_pending()
        assert steps.payloads == ["runs"]
        assert steps.ran[0].failed_parents == (parent.id,)
        assert self.state(queue, runs) is None

    def test_a_waiting_job_can_be_cancelled(self, make_queue: MakeQueue) -> None:
        queue = self.workflow_queue(make_queue, succeed)
        parent = queue.enqueue("p")
        child = queue.enqueue("c", after=[parent], key="k")
        grandchild = queue.enqueue("g", after=[child])

        assert queue.cancel(child)

        assert self.state(queue, child) is JobState.CANCELLED
        assert self.state(queue, grandchild) is JobState.CANCELLED
        assert queue.stats().waiting == 0
        assert not queue.enqueue("again", key="k").duplicate
        assert queue.run_pending() == 2  # the parent, and "again"

    def test_a_stopping_parent_that_ends_cancelled_cancels_its_children(
        self, make_queue: MakeQueue
    ) -> None:
        queue = self.workflow_queue(make_queue, succeed)
        parent = queue.enqueue("p")
        child = queue.enqueue("c", after=[parent])
        claim = claim_one(queue.store, queue.clock())
        assert claim is not None
        assert queue.cancel(parent)  # stopping

        queue.store.release([claim], queue.clock())

        assert self.state(queue, parent) is JobState.CANCELLED
        assert self.state(queue, child) is JobState.CANCELLED

    def test_a_waiting_job_holds_its_key(self, make_queue: MakeQueue) -> None:
        queue = self.workflow_queue(make_queue, succeed)
        parent = queue.enqueue("p")
        child = queue.enqueue("c", after=[parent], key="once")

        again = queue.enqueue("c", after=[parent], key="once")

        assert again == Enqueued(child.id, True)

    # -- across restarts ------------------------------------------------------------

    def test_a_waiting_child_survives_a_restart_and_is_released_after_it(
        self, make_queue: MakeQueue
    ) -> None:
        self.skip_unless_persistent()
        first = self.workflow_queue(make_queue, succeed)
        parent = first.enqueue("p")
        child = first.enqueue("c", after=[parent])
        first.close()

        recorder = Recorder()
        again = make_queue(recorder)
        assert self.state(again, child) is JobState.WAITING
        assert again.run_pending() == 2
        assert recorder.payloads == ["p", "c"]
        assert recorder.calls[1].parent_results == ("p",)

    def test_a_parent_whose_process_died_on_its_last_attempt_ends_its_children(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        self.skip_unless_persistent()
        first = self.workflow_queue(make_queue, succeed, clock=clock, max_attempts=1)
        parent = first.enqueue("p")
        cancelled = first.enqueue("c", after=[parent], after_failure="cancel")
        waits = first.enqueue("w", after=[parent])
        assert claim_one(first.store, clock()) is not None
        again = self.after_a_crash(first, make_queue, clock, max_attempts=1)

        assert self.state(again, parent) is JobState.DEAD
        assert self.state(again, cancelled) is JobState.CANCELLED
        assert self.state(again, waits) is JobState.WAITING

    # -- queue.wait -----------------------------------------------------------------

    def test_wait_returns_the_finished_job(self, make_queue: MakeQueue) -> None:
        queue = self.workflow_queue(make_queue, Steps(), keep_completed=60)
        done, dead = queue.enqueue("done"), queue.enqueue("fail")
        queue.run_pending()

        record = queue.wait(done, timeout=5)
        assert record is not None
        assert (record.state, record.result) == (JobState.COMPLETED, "done")
        dead_record = queue.wait(dead.id, timeout=5)
        assert dead_record is not None
        assert dead_record.state is JobState.DEAD

    def test_wait_gives_none_when_the_time_is_up(self, make_queue: MakeQueue) -> None:
        queue = self.workflow_queue(make_queue, succeed, keep_completed=60)
        parent = queue.enqueue("p", delay=3600)
        child = queue.enqueue("c", after=[parent])

        assert queue.wait(child, timeout=0.05) is None

    def test_wait_for_a_job_not_kept_says_so(self, make_queue: MakeQueue) -> None:
        queue = self.workflow_queue(make_queue, succeed)
        job = queue.enqueue("x")
        queue.run_pending()

        with pytest.raises(LookupError, match="keep_completed"):
            queue.wait(job, timeout=1)
