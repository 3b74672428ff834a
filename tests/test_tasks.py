"""Named tasks (``@queue.task``) and the immediate test mode, on every store.

Tasks are found by name, so the functions are defined at module level here and
registered with each test's own queue (``queue.task(function)`` is what
``@queue.task`` does). They record their calls in ``CALLS``; ``flaky`` raises
the outcomes a test puts in ``OUTCOMES`` first. Jobs run with ``run_pending``
in the test's thread (or in immediate mode at ``enqueue``), with an injected
clock where time matters; only the tests of worker threads wait, briefly.
Decoration and option checks touch no store and run once.
"""

from __future__ import annotations

import datetime as dt
import inspect
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import jobq
from jobq import Fatal, Job, JobState, Retry
from jobq.stores.base import NewJob
from jobq.testing import T0, Clock

MakeQueue = Callable[..., jobq.JobQueue[Any]]


CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
OUTCOMES: list[BaseException | None] = []


@pytest.fixture(autouse=True)
def fresh_records() -> Iterator[None]:
    CALLS.clear()
    OUTCOMES.clear()
    yield
    CALLS.clear()
    OUTCOMES.clear()


def add(a: int, b: int = 0) -> int:
    return a + b


def record(*args: Any, **kwargs: Any) -> None:
    CALLS.append(("record", args, kwargs))


def other(*args: Any, **kwargs: Any) -> None:
    CALLS.append(("other", args, kwargs))


def flaky(n: int) -> int:
    CALLS.append(("flaky", (n,), {}))
    if OUTCOMES:
        outcome = OUTCOMES.pop(0)
        if outcome is not None:
            raise outcome
    return n


def name_of(function: Callable[..., Any]) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def called() -> list[tuple[Any, ...]]:
    """The positional arguments of each recorded call, in order."""
    return [args for _, args, _ in CALLS]


# -- decorating ----------------------------------------------------------------


def test_task_is_named_by_module_and_qualname() -> None:
    queue = jobq.JobQueue()
    assert queue.task(add).name == name_of(add)


def test_decorator_with_options_names_the_task() -> None:
    queue = jobq.JobQueue()

    @queue.task(name="math.add", max_attempts=2, priority=7)
    def add_numbers(a: int, b: int) -> int:
        return a + b

    assert isinstance(add_numbers, jobq.Task)
    assert (add_numbers.name, add_numbers.max_attempts, add_numbers.priority) == (
        "math.add",
        2,
        7,
    )


def test_calling_a_task_runs_the_function_inline() -> None:
    queue = jobq.JobQueue()
    task = queue.task(add)
    assert task(2, b=3) == 5
    assert queue.stats().pending == 0


def test_task_keeps_the_functions_name_and_signature() -> None:
    queue = jobq.JobQueue()
    task = queue.task(add)
    assert (task.__name__, task.__wrapped__) == ("add", add)
    assert inspect.signature(task) == inspect.signature(add)


def test_function_in_main_needs_an_explicit_name() -> None:
    function = types.FunctionType(add.__code__, {}, "main_add")
    function.__module__, function.__qualname__ = "__main__", "main_add"
    queue = jobq.JobQueue()
    with pytest.raises(ValueError, match=r"__main__.*name="):
        queue.task(function)
    assert queue.task(function, name="scripts.main_add").name == "scripts.main_add"


def test_nested_function_needs_an_explicit_name() -> None:
    def nested() -> None:
        pass

    queue = jobq.JobQueue()
    with pytest.raises(ValueError, match="not a module-level function"):
        queue.task(nested)
    assert queue.task(nested, name="nested").name == "nested"


def test_lambda_needs_an_explicit_name() -> None:
    queue = jobq.JobQueue()
    with pytest.raises(ValueError, match="not a module-level function"):
        queue.task(lambda: None)
    assert queue.task(lambda: None, name="noop").name == "noop"


def test_duplicate_task_name_in_one_queue_raises() -> None:
    queue = jobq.JobQueue()
    queue.task(record, name="mail.send")
    with pytest.raises(ValueError, match=r"'mail\.send' is already registered"):
        queue.task(other, name="mail.send")


def test_same_name_in_two_queues_is_allowed() -> None:
    first, second = jobq.JobQueue(), jobq.JobQueue()
    assert first.task(record).name == second.task(record).name


def test_redefined_function_replaces_its_task() -> None:
    queue = jobq.JobQueue()
    queue.task(add)
    again = types.FunctionType(add.__code__, add.__globals__, "add")
    again.__qualname__ = add.__qualname__  # the same function, defined again
    assert queue.task(again).func is again


def test_async_function_is_refused() -> None:
    async def fetch() -> None:
        pass

    with pytest.raises(TypeError, match="async"):
        jobq.JobQueue().task(fetch, name="fetch")


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_attempts": 0}, ValueError),
        ({"max_attempts": "3"}, TypeError),
        ({"priority": "high"}, TypeError),
        ({"priority": True}, TypeError),
        ({"name": ""}, ValueError),
        ({"name": " padded "}, ValueError),
        ({"name": "line\nbreak"}, ValueError),
        ({"name": 5}, TypeError),
    ],
)
def test_decorator_options_are_checked(
    options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        jobq.JobQueue().task(**options)(record)


def test_task_is_immutable() -> None:
    task = jobq.JobQueue().task(record)
    with pytest.raises(AttributeError, match="immutable"):
        task.priority = 3


# -- enqueueing and running ----------------------------------------------------


def test_enqueued_task_runs_with_its_args_and_kwargs(make_queue: MakeQueue) -> None:
    queue = make_queue()
    task = queue.task(record)
    task.enqueue(1, "two", to={"address": ["ann@example.com"]})
    assert CALLS == []
    assert queue.run_pending() == 1
    assert CALLS == [("record", (1, "two"), {"to": {"address": ["ann@example.com"]}})]


def test_task_job_stores_its_name_and_arguments(make_queue: MakeQueue) -> None:
    queue = make_queue()
    added = queue.task(add).enqueue(1, b=2)
    stored = queue.get(added)
    assert stored is not None
    assert stored.task == name_of(add)
    assert stored.payload == {"args": [1], "kwargs": {"b": 2}}


def test_task_arguments_arrive_after_a_json_round_trip(make_queue: MakeQueue) -> None:
    queue = make_queue()
    queue.task(record).enqueue((1, 2), pair=(3, 4))
    queue.run_pending()
    assert CALLS == [("record", ([1, 2],), {"pair": [3, 4]})]


def test_task_result_is_kept_as_the_jobs_result(make_queue: MakeQueue) -> None:
    queue = make_queue(keep_completed=60)
    added = queue.task(add).enqueue(2, b=3)
    queue.run_pending()
    stored = queue.get(added)
    assert stored is not None
    assert (stored.state, stored.result) == (JobState.COMPLETED, 5)


def test_enqueue_refuses_non_json_arguments_and_adds_nothing(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue()
    task = queue.task(record)
    with pytest.raises(TypeError, match=r"arguments of task .* JSON"):
        task.enqueue(when=dt.datetime.now(dt.UTC))
    assert queue.stats().pending == 0


def test_enqueue_refuses_arguments_that_do_not_fit_the_signature(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue()
    task = queue.task(add)
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        task.enqueue(1, c=2)  # type: ignore[call-arg]
    assert queue.stats().pending == 0


def test_plain_job_has_no_task(make_queue: MakeQueue) -> None:
    queue = make_queue(lambda job: None)
    stored = queue.get(queue.enqueue({"to": "ann@example.com"}))
    assert stored is not None
    assert stored.task is None


def test_queue_with_handler_and_tasks_runs_each_job_where_it_belongs(
    make_queue: MakeQueue,
) -> None:
    jobs: list[Job[Any]] = []
    queue = make_queue(jobs.append)
    task = queue.task(record)
    queue.enqueue({"plain": True})
    task.enqueue("named")
    assert queue.run_pending() == 2
    assert [job.payload for job in jobs] == [{"plain": True}]
    assert called() == [("named",)]


def test_task_only_queue_runs_on_worker_threads(make_queue: MakeQueue) -> None:
    queue = make_queue()
    task = queue.task(record)
    queue.start(workers=2)
    for n in range(3):
        task.enqueue(n)
    assert queue.join(timeout=10)
    assert sorted(called()) == [(0,), (1,), (2,)]


def test_run_pending_needs_a_handler_or_a_task() -> None:
    queue = jobq.JobQueue()
    with pytest.raises(TypeError, match="no handler and no tasks"):
        queue.run_pending()
    queue.task(record)
    assert queue.run_pending() == 0


def test_plain_job_without_handler_goes_dead_with_a_clear_error(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue()
    queue.task(record)
    added = queue.enqueue({"to": "ann@example.com"})
    assert queue.run_pending() == 1
    stored = queue.get(added)
    assert stored is not None
    assert stored.state is JobState.DEAD
    assert stored.attempts == 1
    assert stored.last_error is not None
    assert stored.last_error.startswith(
        "jobq._worker.runner.NoHandler: this queue has no handler"
    )


# -- options per call: using() -------------------------------------------------


def test_using_delay_makes_the_job_wait(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(clock=clock)
    queue.task(record).using(delay=60).enqueue("later")
    assert queue.run_pending() == 0
    clock.advance(60)
    assert queue.run_pending() == 1
    assert called() == [("later",)]


def test_using_at_sets_the_due_time(make_queue: MakeQueue, clock: Clock) -> None:
    queue = make_queue(clock=clock)
    at = dt.datetime.fromtimestamp(T0 + 30, dt.UTC)
    added = queue.task(record).using(at=at).enqueue()
    stored = queue.get(added)
    assert stored is not None
    assert stored.run_at == T0 + 30


def test_using_key_deduplicates_pending_jobs(make_queue: MakeQueue) -> None:
    queue = make_queue()
    welcome = queue.task(record).using(key="welcome:42")
    first = welcome.enqueue("ann@example.com")
    second = welcome.enqueue("ann@example.com")
    assert (second.id, second.duplicate) == (first.id, True)
    assert queue.stats().pending == 1


def test_using_priority_runs_the_job_first(make_queue: MakeQueue) -> None:
    queue = make_queue()
    task = queue.task(record)
    task.enqueue("low")
    task.using(priority=10).enqueue("high")
    queue.run_pending()
    assert called() == [("high",), ("low",)]


def test_using_returns_a_new_task_and_leaves_the_original_unchanged(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue()
    task = queue.task(record)
    later = task.using(delay=3600, key="k")
    assert later is not task
    assert isinstance(later, jobq.Task)
    task.enqueue("now")
    task.enqueue("now again")  # no key: not a duplicate
    assert queue.run_pending() == 2


def test_using_options_accumulate_and_delay_replaces_at(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock)
    task = queue.task(record).using(at=T0 + 600, key="k").using(delay=5)
    stored = queue.get(task.enqueue())
    assert stored is not None
    assert (stored.run_at, stored.key) == (T0 + 5, "k")


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"delay": -1}, ValueError),
        ({"delay": "soon"}, TypeError),
        ({"at": dt.datetime(2030, 1, 1)}, ValueError),  # noqa: DTZ001 - naive on purpose
        ({"delay": 5, "at": T0}, ValueError),
        ({"key": 42}, TypeError),
        ({"priority": "high"}, TypeError),
        ({"priority": 1.5}, TypeError),
        ({"connection": object()}, TypeError),  # the memory store cannot take one
    ],
)
def test_using_checks_its_options_at_once(
    options: dict[str, Any], error: type[Exception]
) -> None:
    task = jobq.JobQueue().task(record)
    with pytest.raises(error):
        task.using(**options)


# -- per-task defaults ---------------------------------------------------------


def test_task_max_attempts_applies_to_its_jobs(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock, max_attempts=5, jitter=False)
    task = queue.task(flaky, max_attempts=2)
    OUTCOMES.extend([ValueError("one"), ValueError("two")])
    added = task.enqueue(1)
    queue.run_pending()
    clock.advance(1)
    queue.run_pending()
    stored = queue.get(added)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.max_attempts) == (
        JobState.DEAD,
        2,
        2,
    )


def test_task_max_attempts_defaults_to_the_queues(make_queue: MakeQueue) -> None:
    queue = make_queue(max_attempts=3)
    stored = queue.get(queue.task(record).enqueue())
    assert stored is not None
    assert stored.max_attempts == 3


def test_task_priority_applies_to_its_jobs(make_queue: MakeQueue) -> None:
    queue = make_queue()
    plain, urgent = queue.task(record), queue.task(other, priority=5)
    plain.enqueue("first")
    urgent.enqueue("second")
    queue.run_pending()
    assert [name for name, _, _ in CALLS] == ["other", "record"]


def test_using_priority_overrides_the_tasks(make_queue: MakeQueue) -> None:
    queue = make_queue()
    task = queue.task(record, priority=5)
    stored = queue.get(task.using(priority=-1).enqueue())
    assert stored is not None
    assert stored.priority == -1


# -- failures inside tasks ------------------------------------------------------


def test_exception_inside_a_task_is_a_failed_attempt(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock, jitter=False)
    OUTCOMES.append(ValueError("smtp down"))
    added = queue.task(flaky).enqueue(1)
    queue.run_pending()
    stored = queue.get(added)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.last_error) == (
        JobState.PENDING,
        1,
        "ValueError: smtp down",
    )
    clock.advance(1)
    assert queue.run_pending() == 1
    assert queue.get(added) is None


def test_retry_inside_a_task_waits_exactly_after(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock)
    OUTCOMES.append(Retry("rate limited", after=30))
    added = queue.task(flaky).enqueue(1)
    queue.run_pending()
    stored = queue.get(added)
    assert stored is not None
    assert (stored.state, stored.run_at, stored.last_error) == (
        JobState.PENDING,
        T0 + 30,
        "jobq.errors.Retry: rate limited",
    )


def test_fatal_inside_a_task_makes_the_job_dead_at_once(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue(max_attempts=5)
    OUTCOMES.append(Fatal("no such address"))
    added = queue.task(flaky).enqueue(1)
    queue.run_pending()
    stored = queue.get(added)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.last_error) == (
        JobState.DEAD,
        1,
        "jobq.errors.Fatal: no such address",
    )


# -- tasks this process does not know -------------------------------------------


def enqueue_unknown_task(
    make_queue: MakeQueue, make_store: Callable[..., Any], store_kind: str
) -> tuple[jobq.Enqueued, str]:
    """A job of ``record``'s task, enqueued by a queue that is then closed,
    as another process or an older release of the app would leave it."""
    if store_kind == "memory":
        pytest.skip("a memory store is seen by one queue object only")
    enqueuer = make_queue(store=make_store())
    added = enqueuer.task(record).enqueue("lost")
    enqueuer.close()
    return added, name_of(record)


def test_unknown_task_goes_dead_with_a_clear_error(
    make_queue: MakeQueue, make_store: Callable[..., Any], store_kind: str
) -> None:
    added, name = enqueue_unknown_task(make_queue, make_store, store_kind)
    worker = make_queue(store=make_store())
    worker.task(other)  # a different task: "record" is not registered here
    assert worker.run_pending() == 1
    stored = worker.get(added)
    assert stored is not None
    assert (stored.state, stored.attempts, stored.task) == (JobState.DEAD, 1, name)
    assert stored.last_error == (
        f"jobq.tasks.UnknownTask: no task named {name!r} is registered with this queue"
    )
    assert CALLS == []


def test_worker_thread_survives_an_unknown_task(
    make_queue: MakeQueue, make_store: Callable[..., Any], store_kind: str
) -> None:
    enqueue_unknown_task(make_queue, make_store, store_kind)
    worker = make_queue(store=make_store())
    task = worker.task(other)
    worker.start(workers=1)
    assert worker.join(timeout=10)
    task.enqueue("after")
    assert worker.join(timeout=10)
    assert worker.stats().dead == 1
    assert CALLS == [("other", ("after",), {})]


def test_malformed_task_payload_goes_dead_with_a_clear_error(
    make_queue: MakeQueue,
) -> None:
    queue = make_queue()
    task = queue.task(record)
    queue.stats()  # opens the store
    now = time.time()
    [added] = queue.store.add(
        [NewJob('["not", "an", "object"]', now, None, 0, 5, task.name)], now
    )
    queue.run_pending()
    stored = queue.get(added)
    assert stored is not None
    assert stored.state is JobState.DEAD
    assert stored.last_error is not None
    assert stored.last_error.startswith("jobq.tasks.InvalidTaskPayload: ")


# -- immediate mode ----------------------------------------------------------------


def test_immediate_mode_runs_the_job_at_enqueue(make_queue: MakeQueue) -> None:
    queue = make_queue(immediate=True)
    queue.task(record).enqueue("now")
    assert called() == [("now",)]
    assert (queue.stats().pending, queue.stats().completed) == (0, 1)


def test_immediate_mode_runs_plain_jobs_through_the_handler(
    make_queue: MakeQueue,
) -> None:
    jobs: list[Job[Any]] = []
    queue = make_queue(jobs.append, immediate=True)
    queue.enqueue({"to": "ann@example.com"})
    assert [job.payload for job in jobs] == [{"to": "ann@example.com"}]


def test_immediate_mode_keeps_a_failed_attempt_for_run_pending(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock, jitter=False, immediate=True)
    OUTCOMES.append(ValueError("smtp down"))
    added = queue.task(flaky).enqueue(1)
    stored = queue.get(added)
    assert stored is not None
    assert (stored.state, stored.attempts) == (JobState.PENDING, 1)
    assert queue.run_pending() == 0  # the retry is not due yet
    clock.advance(1)
    assert queue.run_pending() == 1
    assert queue.get(added) is None


def test_immediate_mode_leaves_delayed_jobs_for_run_pending(
    make_queue: MakeQueue, clock: Clock
) -> None:
    queue = make_queue(clock=clock, immediate=True)
    queue.task(record).using(delay=60).enqueue("later")
    assert CALLS == []
    clock.advance(60)
    assert queue.run_pending() == 1
    assert called() == [("later",)]


def test_immediate_mode_runs_tasks_enqueued_by_a_task(make_queue: MakeQueue) -> None:
    queue = make_queue(immediate=True)

    @queue.task(name="child")
    def child(n: int) -> None:
        CALLS.append(("child", (n,), {}))

    @queue.task(name="parent")
    def parent(n: int) -> None:
        CALLS.append(("parent", (n,), {}))
        child.enqueue(n + 1)

    parent.enqueue(1)
    assert CALLS == [("parent", (1,), {}), ("child", (2,), {})]


def test_immediate_mode_without_handler_or_tasks_adds_nothing() -> None:
    queue = jobq.JobQueue(immediate=True)
    with pytest.raises(TypeError, match="no handler and no tasks"):
        queue.enqueue({"to": "ann@example.com"})
    assert queue.stats().pending == 0
