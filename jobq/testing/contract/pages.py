"""Pages of the job lists: ``JobQueue.browse`` reads them through
``Store.page_jobs`` where present, else from ``list_jobs`` whole."""

from __future__ import annotations

from typing import Any

import pytest

from jobq import Fatal, Job, JobState, Retry
from jobq.testing.clock import Clock
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    bury,
    claim_one,
    die,
    succeed,
)


def retry_after_payload(job: Job[Any]) -> None:
    """Fails each attempt, asking for the next one ``job.payload`` seconds
    later (an exact time: no jitter)."""
    raise Retry(f"busy {job.payload}", after=job.payload)


def ids(page: Any) -> list[int]:
    return [job.id for job in page.jobs]


class PageTests(ContractBase):
    """``JobQueue.browse``: keyset pages in each view's order, filters, cursors."""

    # -- pages of the job lists (JobQueue.browse; Store.page_jobs where present) -------

    def test_browse_pages_due_jobs_in_run_order(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        ids = [queue.enqueue(i, priority=i % 2).id for i in range(7)]
        queue.enqueue("later", delay=60)

        seen, after = [], None
        for _ in range(4):
            page = queue.browse("due", limit=2, after=after)
            seen += [job.id for job in page.jobs]
            after = page.after
            if after is None:
                break

        assert seen == [ids[1], ids[3], ids[5], ids[0], ids[2], ids[4], ids[6]]
        assert after is None

    def test_browse_lists_delayed_jobs_earliest_first(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(succeed, clock=clock)
        queue.enqueue("now")
        late = queue.enqueue("late", delay=120)
        early = queue.enqueue("early", delay=60)

        page = queue.browse("delayed")

        assert [job.id for job in page.jobs] == [early.id, late.id]
        assert page.after is None

        clock.advance(60)
        assert [job.payload for job in queue.browse("due").jobs] == ["now", "early"]

    # -- delayed (never attempted) and retrying (after a failed attempt) ---------------

    def test_browse_lists_retrying_jobs_earliest_due_first(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(retry_after_payload, clock=clock)
        late = queue.enqueue(120)
        early = queue.enqueue(60)
        queue.run_pending()

        page = queue.browse("retrying")

        assert ids(page) == [early.id, late.id]
        assert [(job.attempts, job.last_error) for job in page.jobs] == [
            (1, "jobq.errors.Retry: busy 60"), (1, "jobq.errors.Retry: busy 120"),
        ]  # fmt: skip
        assert page.after is None

    def test_delayed_lists_jobs_never_attempted_and_retrying_the_failed_ones(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(retry_after_payload, clock=clock)
        retrying = queue.enqueue(30)
        due_again = queue.enqueue(0)  # its retry is due at once
        assert queue.run_pending(limit=2) == 2  # one attempt each
        delayed = queue.enqueue(60, delay=60)

        assert ids(queue.browse("delayed")) == [delayed.id]
        assert ids(queue.browse("retrying")) == [retrying.id]
        assert ids(queue.browse("due")) == [due_again.id]
        stats = queue.stats()
        assert (stats.pending, stats.delayed, stats.retrying) == (3, 2, 1)

    def test_browse_pages_retrying_jobs_after_a_cursor(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(retry_after_payload, clock=clock)
        jobs = [queue.enqueue(seconds).id for seconds in (50, 10, 40, 20, 30)]
        queue.run_pending()

        seen, after = [], None
        for _ in range(4):
            page = queue.browse("retrying", limit=2, after=after)
            seen.append(ids(page))
            after = page.after
            if after is None:
                break

        assert seen == [[jobs[1], jobs[3]], [jobs[4], jobs[2]], [jobs[0]]]

    def test_browse_filters_retrying_jobs_by_task_key_and_error(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(retry_after_payload, clock=clock)

        @queue.task(name="mail.send")
        def send(seconds: int) -> None:
            raise Retry(f"mailbox {seconds} full", after=seconds)

        mailed = send.enqueue(20)
        keyed = queue.enqueue(30, key="k30")
        plain = queue.enqueue(40)
        queue.run_pending()

        assert ids(queue.browse("retrying")) == [mailed.id, keyed.id, plain.id]
        assert ids(queue.browse("retrying", task="mail.send")) == [mailed.id]
        assert ids(queue.browse("retrying", key="k30")) == [keyed.id]
        assert ids(queue.browse("retrying", error="busy 40")) == [plain.id]
        assert ids(queue.browse("retrying", error="mailbox")) == [mailed.id]
        assert queue.browse("retrying", key="k40").jobs == []

    def test_a_retrying_job_is_due_once_its_time_comes_then_running(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        seen: list[tuple[list[int], list[int]]] = []

        def handler(job: Job[Any]) -> None:
            seen.append((ids(queue.browse("running")), ids(queue.browse("retrying"))))
            if job.attempt == 1:
                raise ValueError("try again")

        queue = make_queue(handler, base_delay=60, jitter=False, clock=clock)
        job = queue.enqueue("x")
        queue.run_pending()
        assert (ids(queue.browse("retrying")), queue.stats().retrying) == ([job.id], 1)

        clock.advance(60)

        assert (ids(queue.browse("retrying")), queue.stats().retrying) == ([], 0)
        assert ids(queue.browse("due")) == [job.id]
        assert queue.run_pending() == 1
        assert seen == [([job.id], []), ([job.id], [])]

    def test_a_cancelled_retrying_job_leaves_the_retrying_list_and_count(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = make_queue(retry_after_payload, clock=clock)
        kept = queue.enqueue(120)
        cancelled = queue.enqueue(60)
        queue.run_pending()

        assert queue.cancel(cancelled)

        assert ids(queue.browse("retrying")) == [kept.id]
        assert queue.stats().retrying == 1
        assert ids(queue.browse("cancelled")) == [cancelled.id]

    def test_a_job_whose_process_died_is_due_again_not_retrying(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        """Recovery records the failed attempt and makes the job due at once:
        it waits for no backoff, so it is in the due list (attempts 1)."""
        self.skip_unless_persistent()
        queue = make_queue(succeed, clock=clock)
        job = queue.enqueue("x")
        assert claim_one(queue.store, clock()) is not None
        again = self.after_a_crash(queue, make_queue, clock)

        record = again.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.PENDING, 1)
        assert ids(again.browse("due")) == [job.id]
        assert again.browse("retrying").jobs == []
        assert again.stats().retrying == 0

    def test_browse_lists_dead_jobs_newest_death_first_with_filters(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def handler(job: Job[Any]) -> None:
            raise Fatal(f"bad {job.payload}")

        queue = make_queue(handler, clock=clock)
        first = bury(queue, "a", key="k1")
        clock.advance(1)
        second = bury(queue, "b")
        clock.advance(1)
        third = bury(queue, "c", key="k3")

        page = queue.browse("dead", limit=2)
        assert [job.id for job in page.jobs] == [third.id, second.id]
        rest = queue.browse("dead", limit=2, after=page.after)
        assert [job.id for job in rest.jobs] == [first.id]
        assert rest.after is None
        assert [j.id for j in queue.browse("dead", error="bad b").jobs] == [second.id]
        assert [j.id for j in queue.browse("dead", key="k1").jobs] == [first.id]
        assert queue.browse("dead", task="no.such.task").jobs == []

    def test_browse_filters_by_task_name(self, make_queue: MakeQueue) -> None:
        queue = make_queue()

        @queue.task(name="mail.send")
        def send(to: str) -> None: ...

        @queue.task(name="other")
        def other() -> None: ...

        job = send.enqueue("x")
        other.enqueue()

        page = queue.browse("due", task=send.name)

        assert [(j.id, j.task) for j in page.jobs] == [(job.id, send.name)]

    def test_browse_lists_running_and_kept_completed_jobs(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        seen: list[list[int]] = []

        def handler(job: Job[Any]) -> str:
            seen.append([j.id for j in queue.browse("running").jobs])
            return "ok"

        queue = make_queue(handler, clock=clock, keep_completed=60)
        first, second = queue.enqueue_many([1, 2])
        queue.run_pending(limit=1)
        clock.advance(1)
        queue.run_pending(limit=1)

        assert seen == [[first.id], [second.id]]
        completed = queue.browse("completed")
        assert [(j.id, j.result) for j in completed.jobs] == [
            (second.id, "ok"), (first.id, "ok"),
        ]  # fmt: skip
        clock.advance(59.5)  # the first one's 60 s are over, not the second's
        assert [j.id for j in queue.browse("completed").jobs] == [second.id]

    def test_browse_refuses_a_cursor_it_did_not_make(
        self, make_queue: MakeQueue
    ) -> None:
        queue = make_queue(succeed)

        with pytest.raises(ValueError, match="not a page cursor"):
            queue.browse("due", after="[1, 2]")
        with pytest.raises(ValueError, match="view must be one of"):
            queue.browse("everything")

    @pytest.mark.parametrize(
        ("view", "after"),
        [
            ("running", "[" + "9" * 400 + "]"),  # beyond any float
            ("running", f"[{2**63 + 1}]"),  # beyond 64 bits
            ("dead", f"[{-(2**63) - 1}, 1]"),
            ("due", "[1e999, 1, 1]"),  # infinite
            ("dead", "[" * 5000),  # deeper than the JSON reader goes
            ("due", "[" + "1," * 2000 + "1]"),
            ("due", '["a", 1, 1]'),
            ("retrying", "[1]"),  # a running page's cursor: too short
        ],
        ids=["400-digits", "above-int64", "below-int64", "infinite", "nested",
             "long", "text", "retrying-short"],
    )  # fmt: skip
    def test_browse_refuses_a_forged_cursor_with_a_value_error(
        self, make_queue: MakeQueue, view: str, after: str
    ) -> None:
        queue = make_queue(succeed)
        queue.enqueue("x")

        with pytest.raises(ValueError, match="not a page cursor") as refused:
            queue.browse(view, after=after)
        assert "the after of the page before" in str(refused.value)

    @pytest.mark.parametrize("name", ["task", "key", "error"])
    @pytest.mark.parametrize(
        ("value", "problem"),
        [("a\x00b", "NUL"), ("a\ud800b", "lone surrogate")],
        ids=["nul", "surrogate"],
    )
    def test_browse_refuses_a_filter_no_store_can_hold_with_a_value_error(
        self, make_queue: MakeQueue, name: str, value: str, problem: str
    ) -> None:
        queue = make_queue(die)
        queue.enqueue("x", key="k")
        queue.run_pending()

        filters: dict[str, Any] = {name: value}

        with pytest.raises(ValueError, match=f"{name} .*{problem}"):
            queue.browse("dead", **filters)
