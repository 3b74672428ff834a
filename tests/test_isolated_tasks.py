"""Isolated tasks: ``@queue.task(isolate=True)`` runs each attempt in a
child process, which gets ``JobTimeout`` at the limit, is killed after the
grace, and whose death is a failed attempt like any other.

The tasks are the functions of ``tests/support/isolated_tasks.py``, which
each child imports by module and name. Time limits are short real ones;
the tests wait on ``join``, ``wait`` and events, never on sleeps.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import isolated_tasks as tasks
import pytest

import jobq
from jobq import JobState

MakeQueue = Callable[..., jobq.JobQueue[Any]]
WAIT = 30.0  # a cap, so that a broken run fails, never hangs
LIMIT = 0.2
GRACE = 0.2


def queue_of(**options: Any) -> jobq.JobQueue[Any]:
    """A memory queue whose retries are due at once."""
    options = {"base_delay": 0, "jitter": False, "timeout_grace": GRACE, **options}
    return jobq.JobQueue(**options)


def finished(queue: jobq.JobQueue[Any], job: jobq.Enqueued) -> jobq.JobRecord[Any]:
    record = queue.wait(job, WAIT)
    assert record is not None, "the job did not finish"
    return record


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- running ----------------------------------------------------------------------


def test_an_isolated_task_runs_in_a_child_process_on_every_store(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(keep_completed=60)
    identify = queue.task(tasks.identify, isolate=True)
    queue.start(workers=2)

    job = identify.enqueue(1, (2, "x"), key={"a": None})

    record = finished(queue, job)
    assert record.state is JobState.COMPLETED
    assert record.result["pid"] != os.getpid()
    assert record.result["args"] == [1, [2, "x"]]  # after a JSON round trip
    assert record.result["kwargs"] == {"key": {"a": None}}


def test_a_child_process_is_reused_by_the_next_attempts() -> None:
    with queue_of(keep_completed=60) as queue:
        identify = queue.task(tasks.identify, isolate=True)
        queue.start(workers=1)
        first = finished(queue, identify.enqueue())
        second = finished(queue, identify.enqueue())

    assert first.result["pid"] == second.result["pid"]


def test_events_and_middleware_apply_to_an_isolated_attempt() -> None:
    calls: list[str] = []

    def around(job: jobq.Job[Any], call_next: Callable[[], object]) -> object:
        calls.append(f"before {job.task}")
        return call_next()

    kinds: list[str] = []
    with queue_of(middleware=[around], keep_completed=60) as queue:
        noop = queue.task(tasks.noop, isolate=True)
        queue.subscribe(lambda event: kinds.append(event.kind))
        queue.start(workers=1)
        finished(queue, noop.enqueue())

    assert calls == ["before isolated_tasks.noop"]  # in this process
    assert kinds == ["enqueued", "started", "succeeded"]


def test_an_isolated_task_gets_its_parents_results() -> None:
    with queue_of(keep_completed=60) as queue:
        three = queue.task(tasks.three)
        add = queue.task(tasks.add, isolate=True)
        queue.start(workers=2)
        a, b = three.enqueue(), three.enqueue()

        record = finished(queue, add.using(after=[a, b]).enqueue())

    assert record.result == 6


def test_a_result_that_is_not_json_is_kept_as_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with queue_of(keep_completed=60) as queue:
        odd = queue.task(tasks.not_json, isolate=True)
        queue.start(workers=1)
        record = finished(queue, odd.enqueue())

    assert (record.state, record.result) == (JobState.COMPLETED, None)
    assert "result is not JSON" in caplog.text


# -- failures as in a thread --------------------------------------------------------


def test_an_exception_in_the_child_is_recorded_as_raised_there() -> None:
    with queue_of(max_attempts=2) as queue:
        fail = queue.task(tasks.fail, isolate=True)
        queue.start(workers=1)
        record = finished(queue, fail.enqueue())

    assert record.state is JobState.DEAD
    assert [(e.type, e.message) for e in record.errors] == [
        ("ValueError", "no good")
    ] * 2
    assert 'isolated_tasks.py", line' in record.errors[0].traceback
    assert "in fail" in record.errors[0].traceback


def test_retry_and_fatal_raised_in_the_child_steer_the_job() -> None:
    with queue_of(max_attempts=5) as queue:
        retry = queue.task(tasks.retry_later, isolate=True)
        bury = queue.task(tasks.bury, isolate=True)
        queue.start(workers=1)
        before = time.time()
        later = retry.enqueue()
        dead = finished(queue, bury.enqueue())
        queue.stop(timeout=WAIT)
        retried = queue.get(later)

    assert dead.state is JobState.DEAD
    assert dead.attempts == 1  # Fatal: no retry
    assert dead.errors[0].type == "jobq.errors.Fatal"
    assert retried is not None
    assert retried.state is JobState.PENDING
    assert retried.run_at >= before + 30  # Retry(after=30), exactly
    assert retried.errors[0].message == "rate limited"


def test_a_child_that_segfaults_is_a_failed_attempt_and_the_queue_goes_on() -> None:
    with queue_of(max_attempts=2, keep_completed=60) as queue:
        crash = queue.task(tasks.segfault, isolate=True)
        identify = queue.task(tasks.identify, isolate=True)
        queue.start(workers=1)
        record = finished(queue, crash.enqueue())
        after = finished(queue, identify.enqueue())

    assert record.state is JobState.DEAD
    assert [e.type for e in record.errors] == ["jobq.errors.ChildDied"] * 2
    assert "died while running it (killed by signal SIGSEGV)" in record.last_error
    assert after.state is JobState.COMPLETED


def test_a_child_that_exits_is_a_failed_attempt() -> None:
    with queue_of(max_attempts=1) as queue:
        leave = queue.task(tasks.exit_3, isolate=True)
        queue.start(workers=1)
        record = finished(queue, leave.enqueue())

    assert record.state is JobState.DEAD
    assert "died while running it (exited with status 3)" in record.last_error


def test_a_function_the_child_cannot_import_fails_its_attempt_clearly() -> None:
    lost = types.FunctionType(tasks.noop.__code__, {}, "lost")
    lost.__module__, lost.__qualname__ = "no_such_module", "lost"
    with queue_of(max_attempts=1) as queue:
        task = queue.task(lost, isolate=True, name="lost")
        queue.start(workers=1)
        record = finished(queue, task.enqueue())

    assert record.state is JobState.DEAD
    assert record.errors[0].type == "ImportError"
    assert record.errors[0].message.startswith(
        "the child process could not import the task's function no_such_module.lost"
    )


# -- the child setup ----------------------------------------------------------------


def test_the_child_setup_runs_first_and_each_attempt_runs_in_what_it_returns() -> None:
    with queue_of(keep_completed=60) as queue:
        queue.child_setup("isolated_tasks.marking_setup", "app", {"debug": False})
        seen = queue.task(tasks.setup_seen, isolate=True)
        queue.start(workers=1)
        record = finished(queue, seen.enqueue())

    assert record.result == {"setup": ["app", {"debug": False}], "inside": True}


def test_a_child_setup_that_fails_fails_each_attempt_with_its_error() -> None:
    with queue_of(max_attempts=2) as queue:
        queue.child_setup("isolated_tasks.broken_setup")
        noop = queue.task(tasks.noop, isolate=True)
        queue.start(workers=1)
        record = finished(queue, noop.enqueue())

    assert record.state is JobState.DEAD
    errors = [(e.type, e.message) for e in record.errors]
    assert errors == [("RuntimeError", "no app here")] * 2  # a new child each


@pytest.mark.parametrize(
    ("path", "args"), [("setup", ()), (None, ()), ("a.b", (float("nan"),))]
)
def test_a_bad_child_setup_is_refused_at_the_call(path: Any, args: Any) -> None:
    with pytest.raises(TypeError):
        queue_of().child_setup(path, *args)


# -- the limit, and cancellation ------------------------------------------------------


@pytest.mark.parametrize("blocked", [tasks.sleep_for_ever, tasks.read_for_ever])
def test_a_child_blocked_in_c_code_gets_job_timeout_at_its_limit_and_is_retried(
    blocked: Callable[[], None],
) -> None:
    with queue_of(max_attempts=2) as queue:
        task = queue.task(blocked, isolate=True, timeout=LIMIT)
        queue.start(workers=1)
        record = finished(queue, task.enqueue())

    assert record.state is JobState.DEAD
    assert [e.type for e in record.errors] == ["jobq.errors.JobTimeout"] * 2
    assert record.errors[0].message == (
        f"job {record.id} ran past its time limit of {LIMIT:g} s"
    )
    assert f"in {blocked.__name__}" in record.errors[0].traceback  # the child's


def test_a_child_that_ignores_job_timeout_is_killed_after_the_grace_and_retried() -> (
    None
):
    with queue_of(max_attempts=2, keep_completed=60) as queue:
        stubborn = queue.task(tasks.ignore_the_limit, isolate=True, timeout=LIMIT)
        identify = queue.task(tasks.identify, isolate=True)
        queue.start(workers=1)
        started = time.monotonic()
        record = finished(queue, stubborn.enqueue())
        took = time.monotonic() - started
        after = finished(queue, identify.enqueue())

    assert record.state is JobState.DEAD
    assert [e.type for e in record.errors] == ["jobq.errors.JobTimeout"] * 2
    assert record.errors[0].message.endswith(
        f"did not return within the {GRACE:g} s grace: its child process "
        f"{record.errors[0].message.split()[-3]} was killed"
    )
    assert took >= 2 * (LIMIT + GRACE)  # each attempt: its limit, then the grace
    assert after.state is JobState.COMPLETED  # a new child took its place


def test_cancelling_an_isolated_attempt_stops_its_child(tmp_path: Path) -> None:
    note = tmp_path / "pids"
    with queue_of(keep_cancelled=60) as queue:
        sleepy = queue.task(tasks.sleep_for_ever, isolate=True)
        entered = threading.Event()
        queue.subscribe(lambda event: entered.set(), kinds=["started"])
        queue.start(workers=1)
        job = sleepy.enqueue(str(note))
        assert entered.wait(WAIT)
        _wait_for_file(note)

        assert queue.cancel(job, wait=WAIT)

        record = queue.get(job)
        abandoned = queue.stats().abandoned
    assert record is not None
    assert record.state is JobState.CANCELLED
    assert record.errors[-1].type == "jobq.errors.JobCancelled"
    assert "in sleep_for_ever" in record.errors[-1].traceback  # raised in the child
    assert abandoned == 0  # the worker thread was never given up


# -- children cleaned up --------------------------------------------------------------


def test_close_leaves_no_child_process_behind(tmp_path: Path) -> None:
    note = tmp_path / "pids"
    queue = queue_of(keep_completed=60)
    identify = queue.task(tasks.identify, isolate=True)
    sleepy = queue.task(tasks.sleep_for_ever, isolate=True)
    queue.start(workers=2)
    sleepy.enqueue(str(note))
    busy = int(_wait_for_file(note))
    idle = finished(queue, identify.enqueue()).result["pid"]  # another child
    assert idle != busy

    queue.close(timeout=0.1)  # the sleeping attempt outlives the wait: killed

    assert gone(idle)
    assert gone(busy)


def _wait_for_file(path: Path) -> str:
    """The first line a child wrote to ``path`` (it writes, then blocks)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text().split()[0]
        time.sleep(0.01)
    raise AssertionError(f"nothing was written to {path}")


# -- what can be isolated -----------------------------------------------------------


class _Callable:
    def __call__(self) -> None: ...


def _nested() -> Callable[[], None]:
    def inner() -> None: ...

    return inner


def _in_main() -> None: ...


_in_main.__module__ = "__main__"


@pytest.mark.parametrize(
    "function",
    [lambda: None, _nested(), _Callable(), functools.partial(tasks.noop), _in_main],
    ids=["lambda", "nested", "callable object", "partial", "__main__"],
)
def test_only_a_function_a_child_can_import_can_be_isolated(function: Any) -> None:
    queue = queue_of()

    with pytest.raises(TypeError, match="isolate=True runs each attempt in a child"):
        queue.task(function, isolate=True, name="t")

    assert "t" not in queue.tasks


def test_isolate_is_a_task_s_option_only() -> None:
    queue = queue_of()
    with pytest.raises(TypeError, match="isolate must be a bool"):
        queue.task(tasks.noop, isolate="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="isolate"):
        queue.enqueue("x", isolate=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="periodic task cannot be isolated"):
        queue.periodic(every=60, isolate=True)
