"""Activity (``Capabilities.activity``): beats that keep the registry of
processes, the outcomes per minute and task, and the depth samples; and
what the queue reads of them (``processes``, ``activity``,
``task_activity``)."""

from __future__ import annotations

from typing import Any

import pytest

import jobq
from jobq.activity import (
    BUCKETS,
    GONE_KEPT,
    KEPT,
    Beat,
    DepthSample,
    MinuteOutcomes,
    ProcessInfo,
    RunningJob,
    TaskError,
    TaskOutcomes,
    bucket_of,
    minute_of,
)
from jobq.errors import Fatal
from jobq.stores.base import ActivityStore, Store, capabilities_of
from jobq.testing.clock import T0, Clock
from jobq.testing.contract.base import ContractBase, MakeQueue, OpenStore

MINUTE = minute_of(T0)


def process(name: str, seen: float, **fields: Any) -> ProcessInfo:
    """A registry row of a process called ``name``, last seen at ``seen``."""
    values: dict[str, Any] = {
        "id": f"host-{name}:1:{name}", "host": f"host-{name}", "pid": 1,
        "started": seen - 10, "seen": seen, "workers": 4, "busy": 0,
    }  # fmt: skip
    values.update(fields)
    return ProcessInfo(**values)


def outcomes(
    minute: float,
    task: str | None,
    *counts: int,
    ran: tuple[float, ...] = (),
    error: TaskError | None = None,
) -> TaskOutcomes:
    """A tally row: ``counts`` are succeeded, failed, dead, cancelled; ``ran``
    the durations of its attempts; ``error`` its newest failed attempt's."""
    durations = [0] * BUCKETS
    for seconds in ran:
        durations[bucket_of(seconds)] += 1
    succeeded, failed, dead, cancelled = (*counts, 0, 0, 0, 0)[:4]
    return TaskOutcomes(minute, task, succeeded, failed, dead, cancelled,
                        tuple(durations), error)  # fmt: skip


def failed(minute: float, task: str | None, error: TaskError) -> TaskOutcomes:
    """A tally row of one failed attempt whose error was ``error``."""
    return outcomes(minute, task, 0, 1, ran=(0.01,), error=error)


def beat(
    info: ProcessInfo | None = None,
    rows: tuple[TaskOutcomes, ...] = (),
    sample: DepthSample | None = None,
    gone_after: float = 15.0,
) -> Beat:
    return Beat(info, rows, sample, gone_after)


class ActivityTests(ContractBase):
    """``ActivityStore`` (skipped for a store that does not declare it)."""

    def activity_store(self, open_store: OpenStore) -> tuple[Store, ActivityStore]:
        store, _ = open_store()
        if not capabilities_of(store).activity:
            pytest.skip("the store does not declare Capabilities.activity")
        return store, store  # type: ignore[return-value]

    def activity_queue(self, make_queue: MakeQueue, handler: Any, clock: Clock) -> Any:
        queue = make_queue(handler, clock=clock, base_delay=0, max_attempts=2)
        if not capabilities_of(queue.store).activity:
            pytest.skip("the store does not declare Capabilities.activity")
        return queue

    # -- the registry of processes ----------------------------------------------

    def test_a_beat_puts_the_process_in_the_registry_and_a_later_one_replaces_it(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        running = (RunningJob(7, "mail.send", T0 - 3), RunningJob(9, None, T0 - 1))
        store.beat(beat(process("a", T0, busy=2, running=running)), T0)
        store.beat(beat(process("b", T0)), T0)

        found = {info.id: info for info in store.processes(T0)}
        assert set(found) == {"host-a:1:a", "host-b:1:b"}
        assert found["host-a:1:a"] == process("a", T0, busy=2, running=running)

        store.beat(beat(process("a", T0 + 5, busy=0)), T0 + 5)
        again = {info.id: info for info in store.processes(T0 + 5)}
        assert again["host-a:1:a"] == process("a", T0 + 5, busy=0)
        assert again["host-a:1:a"].idle == 4

    def test_a_process_unseen_past_its_gone_after_is_gone_then_dropped(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        store.beat(beat(process("a", T0), gone_after=60), T0)

        assert [info.gone for info in store.processes(T0 + 60)] == [False]
        assert [info.gone for info in store.processes(T0 + 61)] == [True]
        late = T0 + 61 + GONE_KEPT
        store.beat(beat(process("b", late)), late)  # any beat drops it
        assert [info.id for info in store.processes(late)] == ["host-b:1:b"]

    def test_a_process_that_leaves_is_gone_from_the_registry(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        store.beat(beat(process("a", T0)), T0)
        store.beat(beat(process("b", T0)), T0)

        store.leave("host-a:1:a")
        store.leave("never-there")
        assert [info.id for info in store.processes(T0)] == ["host-b:1:b"]

    # -- outcomes per minute and task ---------------------------------------------

    def test_beats_add_their_tallies_to_the_minute_and_task(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        store.beat(beat(process("a", T0), (
            outcomes(MINUTE, "mail.send", 3, 1, 0, 0, ran=(0.0005, 0.003)),
            outcomes(MINUTE, None, 1),
        )), T0)  # fmt: skip
        store.beat(beat(process("b", T0), (
            outcomes(MINUTE, "mail.send", 2, 2, 1, 1, ran=(0.003, 9.0)),
        )), T0 + 1)  # fmt: skip

        assert store.outcomes(MINUTE, T0 + 1) == [
            outcomes(MINUTE, None, 1),
            outcomes(MINUTE, "mail.send", 5, 3, 1, 1, ran=(0.0005, 0.003, 0.003, 9.0)),
        ]

    def test_outcomes_are_read_for_the_minutes_asked_oldest_first(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        rows = tuple(outcomes(MINUTE + 60 * k, "t", k + 1) for k in range(4))
        store.beat(beat(None, rows[::-1]), T0 + 180)

        assert store.outcomes(MINUTE + 60, T0 + 130) == list(rows[1:3])
        assert store.outcomes(MINUTE - 600, MINUTE - 1) == []

    def test_minute_outcomes_sum_the_tasks_of_each_minute_asked(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        store.beat(beat(None, (
            outcomes(MINUTE, "a", 3, 1, 1, 0), outcomes(MINUTE, None, 2, 0, 0, 1),
            outcomes(MINUTE + 60, "b", 0, 4, 0, 0),
            outcomes(MINUTE + 120, "a", 9),
        )), T0 + 120)  # fmt: skip

        assert store.minute_outcomes(MINUTE, T0 + 60) == [
            MinuteOutcomes(MINUTE, 5, 1, 1, 1),
            MinuteOutcomes(MINUTE + 60, 0, 4, 0, 0),
        ]
        assert store.minute_outcomes(MINUTE - 600, MINUTE - 1) == []

    def test_a_beat_without_a_process_hands_over_its_tally_only(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        store.beat(beat(None, (outcomes(MINUTE, "t", 0, 0, 0, 1),)), T0)

        assert store.processes(T0) == []
        assert store.outcomes(MINUTE, T0) == [outcomes(MINUTE, "t", 0, 0, 0, 1)]

    def test_any_task_name_round_trips(self, open_store: OpenStore) -> None:
        _, store = self.activity_store(open_store)
        names = ["émoji ✓ täsk", "a" * 300, "x'; DROP TABLE jobs; --", "tab\there"]
        store.beat(beat(None, tuple(outcomes(MINUTE, n, 1) for n in names)), T0)

        assert {row.task for row in store.outcomes(MINUTE, T0)} == set(names)

    # -- the newest error per minute and task -----------------------------------

    def test_the_later_error_of_a_minute_and_task_is_kept_across_processes(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        early, late = (
            TaskError(T0 - 9, 7, "ValueError: early"),
            TaskError(T0 - 2, 8, "late"),
        )
        store.beat(beat(process("a", T0), (
            failed(MINUTE, "t", late), failed(MINUTE, "u", early),
        )), T0)  # fmt: skip
        store.beat(beat(process("b", T0), (
            failed(MINUTE, "t", early), failed(MINUTE, "u", late),
            outcomes(MINUTE, None, 1),
        )), T0 + 1)  # fmt: skip

        found = {row.task: row.error for row in store.outcomes(MINUTE, T0 + 1)}
        assert found == {"t": late, "u": late, None: None}

    def test_an_error_of_a_tie_is_the_one_written_first(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        first, second = TaskError(T0, 1, "first"), TaskError(T0, 2, "second")
        store.beat(beat(None, (failed(MINUTE, "t", first),)), T0)
        store.beat(beat(None, (failed(MINUTE, "t", second),)), T0)

        (row,) = store.outcomes(MINUTE, T0)
        assert row.error == first

    def test_a_row_without_an_error_keeps_the_error_written_before(
        self, open_store: OpenStore
    ) -> None:
        _, store = self.activity_store(open_store)
        error = TaskError(T0, 3, "OSError: disk full ✗ '; --")
        store.beat(beat(None, (failed(MINUTE, "t", error),)), T0)
        store.beat(beat(None, (outcomes(MINUTE, "t", 5),)), T0 + 1)

        (row,) = store.outcomes(MINUTE, T0 + 1)
        assert (row.succeeded, row.failed, row.error) == (5, 1, error)

    # -- depth samples -----------------------------------------------------------

    def test_the_first_sample_of_a_minute_is_kept(self, open_store: OpenStore) -> None:
        _, store = self.activity_store(open_store)
        first = DepthSample(MINUTE, 10, 2, 1, 0.5)
        store.beat(beat(process("a", T0), sample=first), T0)
        store.beat(
            beat(process("b", T0), sample=DepthSample(MINUTE, 99, 9, 9, None)), T0
        )
        later = DepthSample(MINUTE + 60, 4, 0, 0, None)
        store.beat(beat(process("a", T0 + 60), sample=later), T0 + 60)

        assert store.samples(MINUTE, T0 + 60) == [first, later]
        assert store.samples(MINUTE + 60, T0 + 60) == [later]

    def test_figures_older_than_a_day_are_dropped(self, open_store: OpenStore) -> None:
        _, store = self.activity_store(open_store)
        sample = DepthSample(MINUTE, 1, 0, 0, None)
        store.beat(beat(None, (outcomes(MINUTE, "t", 1),), sample), T0)
        later = T0 + KEPT + 120
        store.beat(beat(process("a", later)), later)

        assert store.outcomes(MINUTE, later) == []
        assert store.samples(MINUTE, later) == []

    def test_another_store_over_the_place_sees_the_figures(
        self, open_store: OpenStore
    ) -> None:
        store, activity = self.activity_store(open_store)
        if not store.shared_between_processes:
            pytest.skip("one process holds the store: its figures live in it")
        activity.beat(beat(process("a", T0), (outcomes(MINUTE, "t", 2),)), T0)
        _, other = self.activity_store(open_store)

        assert [info.id for info in other.processes(T0)] == ["host-a:1:a"]
        assert other.outcomes(MINUTE, T0) == [outcomes(MINUTE, "t", 2)]

    # -- through the queue ---------------------------------------------------------

    def test_the_queue_counts_its_attempts_outcomes_and_durations(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def handler(job: jobq.Job[Any]) -> None:
            if job.payload == "fatal":
                raise Fatal("no")
            if job.payload == "flaky" and job.attempt == 1:
                raise ValueError("once")

        queue = self.activity_queue(make_queue, handler, clock)
        queue.enqueue_many(["ok", "flaky", "fatal"])
        queue.run_pending()
        queue.run_pending()  # the flaky one's second attempt
        cancelled = queue.enqueue("later", delay=60)
        assert queue.cancel(cancelled)

        (minute,) = queue.activity(1)
        assert (minute.start, minute.succeeded, minute.failed, minute.dead,
                minute.cancelled) == (MINUTE, 2, 2, 1, 1)  # fmt: skip
        (task,) = queue.task_activity(1)
        assert (task.task, task.succeeded, task.failed, task.dead) == (None, 2, 2, 1)
        assert task.p50 is not None
        assert task.p50 <= 1.0
        assert task.failure_rate == 0.5

    def test_the_queue_reports_the_newest_failed_attempts_error_of_each_task(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        def handler(job: jobq.Job[Any]) -> None:
            if job.payload != "ok":
                raise ValueError(f"no {job.payload}")

        queue = self.activity_queue(make_queue, handler, clock)
        queue.enqueue("ok")
        queue.run_pending()
        (task,) = queue.task_activity(1)
        assert task.last_error is None  # only successes

        queue.enqueue("first")
        queue.run_pending()  # both its attempts fail: dead
        clock.advance(1)
        second = queue.enqueue("second").id
        queue.run_pending()

        (task,) = queue.task_activity(1)
        assert task.last_error == TaskError(clock(), second, "ValueError: no second")
        job = queue.get(second)
        assert job is not None
        assert job.last_error == task.last_error.text

    def test_the_queue_reads_every_minute_asked_for_and_refuses_bad_counts(
        self, make_queue: MakeQueue, clock: Clock
    ) -> None:
        queue = self.activity_queue(make_queue, None, clock)

        minutes = queue.activity(60)
        assert [m.start for m in minutes] == [
            MINUTE - 60 * k for k in range(59, -1, -1)
        ]
        assert all(m.succeeded == m.failed == 0 and m.pending is None for m in minutes)
        for bad in (0, 1441, 1.5, "60", True):
            with pytest.raises(ValueError, match="minutes must be an int"):
                queue.activity(bad)
            with pytest.raises(ValueError, match="minutes must be an int"):
                queue.task_activity(bad)
        assert queue.processes() == []
