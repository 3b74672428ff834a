"""``after=``, ``after_failure=``, ``parent_results`` and ``queue.wait`` at
the call: bad input refused where it was given, nothing added anywhere."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from dict_store import DictStore, Shelf

import jobq
from jobq import Enqueued, JobState, StepJob
from jobq.stores import JsonFileStore
from jobq.stores.base import Done

MakeQueue = Callable[..., jobq.JobQueue[Any]]


@pytest.mark.parametrize(
    ("after", "error", "message"),
    [
        ("12", TypeError, "after must be a list"),
        (12, TypeError, "after must be a list"),
        ([True], TypeError, "job ids or Enqueued"),
        ([1.0], TypeError, "job ids or Enqueued"),
        (["1"], TypeError, "job ids or Enqueued"),
        ([0], ValueError, "at least 1"),
        ([-5], ValueError, "at least 1"),
        ([2**63], ValueError, "at most"),
        ([1, 1], ValueError, "names job 1 twice"),
        ([Enqueued(1, False), 1], ValueError, "names job 1 twice"),
        (list(range(1, 10_002)), ValueError, "at most 10000"),
    ],
    ids=[
        "text",
        "int",
        "bool",
        "float",
        "text-id",
        "zero",
        "negative",
        "huge",
        "twice",
        "twice-enqueued",
        "too-many",
    ],
)
def test_a_bad_after_is_refused_at_the_call_and_adds_nothing(
    make_queue: MakeQueue, after: Any, error: type[Exception], message: str
) -> None:
    queue = make_queue(lambda job: None)
    queue.enqueue("parent")

    with pytest.raises(error, match=message):
        queue.enqueue("child", after=after)
    with pytest.raises(error, match=message):
        queue.enqueue_many(["a", "b"], after=after)

    stats = queue.stats()
    assert (stats.pending, stats.waiting) == (1, 0)


@pytest.mark.parametrize("mode", ["", "WAIT", "retry", None, 1, "run\x00"])
def test_a_bad_after_failure_is_refused(make_queue: MakeQueue, mode: Any) -> None:
    queue = make_queue(lambda job: None)
    parent = queue.enqueue("parent")
    if mode is None:  # None means "not given": the default
        child = queue.enqueue("child", after=[parent], after_failure=mode)
        record = queue.get(child)
        assert record is not None
        assert record.after_failure == "wait"
        return
    with pytest.raises(ValueError, match="after_failure must be"):
        queue.enqueue("child", after=[parent], after_failure=mode)
    assert queue.stats().waiting == 0


def test_a_store_without_workflows_refuses_after_by_name() -> None:
    store = DictStore(Shelf())
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, store=store)
    parent = queue.enqueue("p")

    with pytest.raises(TypeError, match="cannot run a job after others"):
        queue.enqueue("c", after=[parent])
    assert queue.stats().pending == 1
    queue.close()


def test_parent_results_is_jobq_s_to_give(make_queue: MakeQueue) -> None:
    queue = make_queue()
    got: list[Sequence[Any]] = []

    @queue.task(name="collect")
    def collect(label: str, parent_results: Sequence[Any] = ()) -> None:
        got.append(parent_results)

    with pytest.raises(TypeError, match="parent_results is given by jobq"):
        collect.enqueue("x", parent_results=[1])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="task 'collect'"):
        collect.enqueue()  # type: ignore[call-arg]  # label is missing
    assert queue.stats().pending == 0

    collect.enqueue("alone")  # no parents: an empty list
    queue.run_pending()
    assert got == [[]]


def test_a_step_s_job_is_a_step_job_and_a_plain_one_has_no_parents(
    make_queue: MakeQueue,
) -> None:
    seen: list[jobq.Job[Any]] = []
    queue = make_queue(seen.append)
    parent = queue.enqueue("p")
    queue.enqueue("c", after=[parent])

    queue.run_pending()

    plain, step = seen
    assert not isinstance(plain, StepJob)
    assert (plain.parents, plain.parent_results, plain.failed_parents) == ((), (), ())
    assert isinstance(step, StepJob)
    assert (step.parents, step.parent_results) == ((parent.id,), (None,))


def test_wait_from_the_job_s_own_handler_is_refused(make_queue: MakeQueue) -> None:
    errors: list[BaseException] = []
    finished = threading.Event()

    def handler(job: jobq.Job[Any]) -> None:
        try:
            queue.wait(job.id, timeout=1)
        except RuntimeError as exc:
            errors.append(exc)
        finished.set()

    queue = make_queue(handler)
    queue.enqueue("x")
    queue.start(workers=1)  # a worker thread knows the job it runs

    assert finished.wait(30)
    assert len(errors) == 1
    assert "wait for itself" in str(errors[0])


def test_wait_is_woken_when_the_job_finishes(make_queue: MakeQueue) -> None:
    release = threading.Event()
    queue = make_queue(lambda job: release.wait(10), keep_completed=60)
    job = queue.enqueue("x")
    queue.start(workers=1)
    found: list[jobq.JobRecord[Any] | None] = []
    waiter = threading.Thread(target=lambda: found.append(queue.wait(job, 30)))
    waiter.start()

    release.set()
    waiter.join(30)

    assert not waiter.is_alive()
    assert found[0] is not None
    assert found[0].state is JobState.COMPLETED


def test_wait_takes_the_timeout_s_usual_forms(make_queue: MakeQueue) -> None:
    queue = make_queue(lambda job: None)
    job = queue.enqueue("x", delay=3600)

    with pytest.raises(ValueError, match="timeout"):
        queue.wait(job, timeout=-1)
    with pytest.raises(TypeError):
        queue.wait("7", timeout=1)  # type: ignore[arg-type]


def test_a_json_parent_s_end_and_its_child_s_release_are_one_journal_record(
    tmp_path: Path,
) -> None:
    """A kill that tears the journal's record of a parent's success drops
    that record whole: after the restart the parent is pending again (its
    claim recovered) and its child still waits; intact, the child is
    pending and the parent gone. (Copies of the files, as a kill leaves
    them; the live queue still holds the originals.)"""
    live = tmp_path / "live"
    live.mkdir()
    store = JsonFileStore(live / "jobs.json")
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, store=store)
    parent = queue.enqueue("p")
    child = queue.enqueue("c", after=[parent])
    claim = store.claim_many(queue.clock(), 1)[0]
    files = {p.name: p.read_bytes() for p in live.iterdir() if p.is_file()}
    segment = next(name for name in files if ".journal-" in name)
    before = len(files[segment])
    store.finish_many([Done(claim, '"done"')], None, queue.clock())
    whole = (live / segment).read_bytes()
    assert b'["all"]' in whole[before:]  # the finish wrote one record
    queue.close()

    def restart(name: str, journal: bytes) -> jobq.JobQueue[Any]:
        place = tmp_path / name
        place.mkdir()
        for file, data in files.items():
            (place / file).write_bytes(journal if file == segment else data)
        return jobq.JobQueue(store=JsonFileStore(place / "jobs.json"))

    torn = restart("torn", whole[: before + (len(whole) - before) // 2])
    states = [record.state for record in map(torn.get, (parent, child)) if record]
    assert states == [JobState.PENDING, JobState.WAITING]
    torn.close()

    intact = restart("intact", whole)
    assert intact.get(parent) is None
    record = intact.get(child)
    assert record is not None
    assert record.state is JobState.PENDING
    intact.close()
