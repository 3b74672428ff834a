"""``jobq.contrib.prometheus``: the samples a scrape shows after a known
sequence of jobs, the store's gauges read from another process (SQLite), and
the config keys of Flask and Django. Multiprocess mode under gunicorn is in
``test_prometheus_gunicorn.py``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from limits_helpers import WhileHeld, hold_one, needs_limits
from workflow_helpers import build, step

pytest.importorskip("prometheus_client")
from prometheus_client import CollectorRegistry, generate_latest

import jobq
from jobq.contrib.prometheus import (
    COUNTED,
    PLAIN_TASK,
    SharedCounts,
    Tally,
    instrument,
    metrics_for,
)
from jobq.testing import Clock

ROOT = Path(__file__).resolve().parents[1]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(registry: CollectorRegistry, prefix: str = "jobq_") -> Samples:
    """Every sample named ``prefix...`` but the ``_created`` timestamps."""
    found: Samples = {}
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name.startswith(prefix) and not sample.name.endswith("_created"):
                found[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return found


def only(found: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in found.items() if n == name}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


def test_a_scrape_after_known_jobs_shows_each_sample(
    registry: CollectorRegistry, clock: Clock
) -> None:
    failures = {"flaky": 1}
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        lambda job: None, max_attempts=2, base_delay=10, jitter=False, clock=clock
    )

    @queue.task(name="ok")
    def ok() -> None:
        clock.advance(2)  # runs 2 s

    @queue.task(name="flaky")
    def flaky() -> None:
        if failures["flaky"]:
            failures["flaky"] -= 1
            raise ValueError("once")

    @queue.task(name="doomed")
    def doomed() -> None:
        raise jobq.Fatal("never")

    metrics = instrument(queue, registry)
    assert metrics_for(queue) is metrics
    ok.enqueue()
    flaky.enqueue()
    dead = doomed.enqueue()
    queue.enqueue("plain")
    queue.enqueue("later", delay=3600)
    clock.advance(0.3)  # every due job waits 0.3 s
    queue.run_pending()  # ok, flaky (fails), doomed (dead), plain
    clock.advance(10)
    queue.run_pending()  # flaky again, just as its retry falls due
    assert queue.retry_dead(dead)

    found = samples(registry)

    def by_task(values: dict[str, float]) -> dict[tuple[tuple[str, str], ...], float]:
        return {(("task", t),): v for t, v in values.items()}

    assert only(found, "jobq_jobs_enqueued_total") == by_task(
        {"doomed": 1, "flaky": 1, "ok": 1, PLAIN_TASK: 2}  # "plain" and "later"
    )
    assert only(found, "jobq_jobs_succeeded_total") == by_task(
        {"doomed": 0, "flaky": 1, "ok": 1, PLAIN_TASK: 1}
    )
    assert only(found, "jobq_jobs_retried_total") == by_task(
        {"doomed": 0, "flaky": 1, "ok": 0, PLAIN_TASK: 0}
    )
    assert only(found, "jobq_jobs_dead_total") == by_task(
        {"doomed": 1, "flaky": 0, "ok": 0, PLAIN_TASK: 0}
    )
    assert only(found, "jobq_jobs_revived_total") == by_task(
        {"doomed": 1, "flaky": 0, "ok": 0, PLAIN_TASK: 0}
    )
    assert only(found, "jobq_jobs_cancelled_total") == by_task(
        {"doomed": 0, "flaky": 0, "ok": 0, PLAIN_TASK: 0}
    )
    assert only(found, "jobq_job_duration_seconds_count") == by_task(
        {"doomed": 1, "flaky": 2, "ok": 1, PLAIN_TASK: 1}
    )
    assert only(found, "jobq_job_duration_seconds_sum") == by_task(
        {"doomed": 0, "flaky": 0, "ok": 2, PLAIN_TASK: 0}
    )
    ok_buckets = only(found, "jobq_job_duration_seconds_bucket")
    assert ok_buckets[("le", "1.0"), ("task", "ok")] == 0
    assert ok_buckets[("le", "2.5"), ("task", "ok")] == 1
    assert only(found, "jobq_job_wait_seconds_count") == by_task(
        {"doomed": 1, "flaky": 2, "ok": 1, PLAIN_TASK: 1}
    )
    waits = only(found, "jobq_job_wait_seconds_sum")
    assert waits == {
        (("task", "ok"),): pytest.approx(0.3),  # first
        (("task", "flaky"),): pytest.approx(2.3),  # after ok's 2 s; its retry: 0
        (("task", "doomed"),): pytest.approx(2.3),
        (("task", PLAIN_TASK),): pytest.approx(2.3),
    }
    assert only(found, "jobq_jobs") == {
        (("state", "pending"),): 1,  # the revived job
        (("state", "delayed"),): 1,
        (("state", "retrying"),): 0,
        (("state", "running"),): 0,
        (("state", "waiting"),): 0,
        (("state", "dead"),): 0,
        (("state", "cancelled"),): 0,
    }
    # The revived job is due again from when it was revived: now.
    assert only(found, "jobq_oldest_pending_age_seconds") == {(): 0.0}
    assert only(found, "jobq_workers") == {
        (("state", "busy"),): 0,
        (("state", "idle"),): 0,
        (("state", "lost"),): 0,
    }
    assert only(found, "jobq_abandoned_threads") == {(): 0}
    text = generate_latest(registry).decode()
    assert 'jobq_jobs_dead_total{task="doomed"} 1.0' in text
    for forbidden in (str(dead.id), "plain", "later"):  # no ids, no payloads
        assert f'"{forbidden}"' not in text
    metrics.close()
    assert samples(registry) == {}
    assert metrics_for(queue) is None


def exposition(registry: CollectorRegistry) -> tuple[list[str], list[str]]:
    """The text a scrape shows: its lines but the ``_created`` ones, and the
    series those name (their values are times)."""
    lines = generate_latest(registry).decode().splitlines()
    created = [line.rsplit(" ", 1)[0] for line in lines if "_created{" in line]
    return [line for line in lines if "_created" not in line], created


def test_the_exposition_is_that_of_prometheus_client_s_own_metrics(
    registry: CollectorRegistry, clock: Clock
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        lambda job: None, max_attempts=2, jitter=False, clock=clock
    )
    queue.task(name="slow")(lambda: clock.advance(7.5))
    queue.task(name="fails")(lambda: 1 / 0)
    # The reference: prometheus_client's Counter and Histogram objects (the
    # ones multiprocess mode uses), fed the same events, in a registry.
    reference = CollectorRegistry()
    shared = SharedCounts(queue, "jobq")
    for metric in (*shared._counters, *shared._histograms):
        reference.register(metric)
    for kind in COUNTED:
        queue.subscribe(getattr(shared, kind.value), kinds=kind)
    instrument(queue, registry)
    for name, wait in [("slow", 0.01), ("fails", 0.05), (None, 3600), ("slow", 4000)]:
        if name is None:
            queue.enqueue("plain")
        else:
            queue.tasks[name].enqueue()
        clock.advance(wait)  # a bound itself, and beyond the last one
        queue.run_pending()
    clock.advance(60)
    queue.run_pending()  # "fails" fails again: dead
    assert queue.retry_dead(queue.dead_jobs()[0].id)
    assert queue.cancel(queue.tasks["slow"].enqueue())

    ours, our_created = exposition(registry)
    theirs, their_created = exposition(reference)
    assert ours[: len(theirs)] == theirs
    assert len(theirs) > 100
    assert our_created == their_created


def test_cancelled_jobs_are_counted_and_a_stopped_attempt_is_timed(
    registry: CollectorRegistry, clock: Clock
) -> None:
    def stop_itself(job: jobq.Job[Any]) -> None:
        clock.advance(1.5)
        assert queue.cancel(job.id)  # asked while it runs ...
        raise RuntimeError("stopped")  # ... so its failure ends it cancelled

    queue: jobq.JobQueue[Any] = jobq.JobQueue(stop_itself, clock=clock)
    instrument(queue, registry)
    assert queue.cancel(queue.enqueue("later", delay=3600))  # pending: no attempt
    queue.enqueue("now")
    queue.run_pending()

    found = samples(registry)
    plain = (("task", PLAIN_TASK),)
    assert only(found, "jobq_jobs_cancelled_total") == {plain: 2}
    assert only(found, "jobq_jobs_retried_total") == {plain: 0}
    assert only(found, "jobq_jobs_dead_total") == {plain: 0}
    assert only(found, "jobq_job_duration_seconds_count") == {plain: 1}
    assert only(found, "jobq_job_duration_seconds_sum") == {plain: 1.5}
    assert only(found, "jobq_jobs")[(("state", "cancelled"),)] == 2
    text = generate_latest(registry).decode()
    assert f'jobq_jobs_cancelled_total{{task="{PLAIN_TASK}"}} 2.0' in text


def test_an_attempts_wait_is_observed_when_it_ends(
    registry: CollectorRegistry, clock: Clock
) -> None:
    during: list[Samples] = []
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        lambda job: during.append(samples(registry)), clock=clock
    )
    instrument(queue, registry)
    queue.enqueue("x")
    clock.advance(0.3)
    queue.run_pending()
    task = (("task", PLAIN_TASK),)
    assert only(during[0], "jobq_job_wait_seconds_count") == {task: 0.0}
    after = samples(registry)
    assert only(after, "jobq_job_wait_seconds_count") == {task: 1.0}
    assert only(after, "jobq_job_wait_seconds_sum") == {task: pytest.approx(0.3)}


def test_the_oldest_pending_age_grows_while_jobs_wait(
    registry: CollectorRegistry, clock: Clock
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, clock=clock)
    instrument(queue, registry, namespace="app_jobs")
    queue.enqueue("a")
    clock.advance(5)
    queue.enqueue("b")
    clock.advance(7)

    found = samples(registry, "app_jobs_")

    assert found["app_jobs_oldest_pending_age_seconds", ()] == 12
    assert found["app_jobs_jobs", (("state", "pending"),)] == 2
    assert found["app_jobs_jobs", (("state", "delayed"),)] == 0


def test_the_jobs_gauge_counts_retrying_jobs_apart_from_delayed_ones(
    registry: CollectorRegistry, clock: Clock
) -> None:
    def fails(job: jobq.Job[Any]) -> None:
        raise ValueError("busy")

    queue: jobq.JobQueue[Any] = jobq.JobQueue(fails, base_delay=60, clock=clock)
    instrument(queue, registry)
    queue.enqueue_many(["a", "b"])
    queue.run_pending()  # both fail: retrying within about a minute
    queue.enqueue("c", delay=3600)
    queue.enqueue("d")

    jobs = {
        labels[0][1]: value
        for labels, value in only(samples(registry), "jobq_jobs").items()
    }

    assert (jobs["pending"], jobs["delayed"], jobs["retrying"]) == (1, 1, 2)
    assert sum(jobs.values()) == 4  # each job in one state


def test_the_limit_gauges_show_each_declared_limit_a_family_as_one_series(
    registry: CollectorRegistry, make_queue: Any
) -> None:
    handler: WhileHeld[Samples] = WhileHeld()
    queue = make_queue(handler)
    instrument(queue, registry)
    assert only(samples(registry), "jobq_limit_running") == {}
    needs_limits(queue)
    queue.limit("account:*", concurrency=1)
    queue.limit("smtp", concurrency=5, rate="100/m")

    *_, found = hold_one(queue, handler, lambda held: samples(registry), "account:7")

    assert only(found, "jobq_limit_running") == {
        (("limit", "account:*"),): 1,
        (("limit", "smtp"),): 0,
    }
    assert only(found, "jobq_limit_waiting") == {
        (("limit", "account:*"),): 1,
        (("limit", "smtp"),): 0,
    }
    text = generate_latest(registry).decode()
    assert "account:7" not in text  # a key is never a series of its own
    assert "# TYPE jobq_limit_running gauge" in text


def test_the_limit_gauges_follow_queue_limits(
    registry: CollectorRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
    usages = [jobq.LimitUsage("api", None, "100/m", 1, 0, 12),
              jobq.LimitUsage("tenant:*", 2, None, 1, 6, 40)]  # fmt: skip
    monkeypatch.setattr(queue, "limits", lambda: usages)
    instrument(queue, registry)

    found = samples(registry)

    assert only(found, "jobq_limit_running") == {
        (("limit", "api"),): 0,
        (("limit", "tenant:*"),): 6,
    }
    assert only(found, "jobq_limit_waiting") == {
        (("limit", "api"),): 12,
        (("limit", "tenant:*"),): 40,
    }


def test_the_jobs_gauge_counts_the_jobs_waiting_for_a_parent(
    registry: CollectorRegistry,
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(step, keep_completed=600, max_attempts=1)
    flow = build(queue)  # a child and a grandchild wait; the orphan is due
    instrument(queue, registry)

    before = only(samples(registry), "jobq_jobs")
    queue.delete_dead(flow.dead)  # both end cancelled
    after = only(samples(registry), "jobq_jobs")

    assert (before[(("state", "waiting"),)], before[(("state", "pending"),)]) == (2, 1)
    assert (after[(("state", "waiting"),)], after[(("state", "cancelled"),)]) == (0, 2)
    assert 'jobq_jobs{state="waiting"} 0.0' in generate_latest(registry).decode()
    queue.close()


def test_a_queue_is_instrumented_once(registry: CollectorRegistry) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
    instrument(queue, registry)
    with pytest.raises(ValueError, match="already instrumented"):
        instrument(queue, CollectorRegistry())


def test_a_new_queue_replaces_an_old_one_in_the_same_registry(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    old: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
    new: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
    instrument(old, registry)
    old.enqueue("x")

    instrument(new, registry)
    old.enqueue("y")
    new.enqueue("z")

    assert metrics_for(old) is None
    assert samples(registry)["jobq_jobs_enqueued_total", (("task", PLAIN_TASK),)] == 1
    assert "replace those of" in caplog.text
    other = instrument(old, registry, namespace="old")  # beside it: both kept
    assert metrics_for(new) is not None
    other.close()


def test_instrumenting_opens_nothing_and_a_closed_queue_scrapes_empty(
    tmp_path: Path, registry: CollectorRegistry
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(store=str(tmp_path / "jobs.json"))
    instrument(queue, registry)
    assert list(tmp_path.iterdir()) == []  # registering read nothing
    queue.close()
    assert only(samples(registry), "jobq_jobs") == {}


ENQUEUER = """
import sys, jobq
queue = jobq.JobQueue(store=sys.argv[1], max_attempts=1)
with queue:
    queue.enqueue("a")
    queue.enqueue("b", delay=3600)
    queue.enqueue("c")
"""


def test_gauges_read_a_sqlite_store_that_another_process_filled(
    tmp_path: Path, registry: CollectorRegistry
) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    subprocess.run(  # the other process: it enqueues and exits
        [sys.executable, "-c", textwrap.dedent(ENQUEUER), store],
        check=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    with jobq.JobQueue[Any](store=store) as queue:
        instrument(queue, registry)
        found = samples(registry)

    assert only(found, "jobq_jobs") == {
        (("state", "pending"),): 2,
        (("state", "delayed"),): 1,  # "b", due in an hour
        (("state", "retrying"),): 0,
        (("state", "running"),): 0,
        (("state", "waiting"),): 0,
        (("state", "dead"),): 0,
        (("state", "cancelled"),): 0,
    }
    assert 0 < found["jobq_oldest_pending_age_seconds", ()] < 60
    assert only(found, "jobq_jobs_enqueued_total") == {}  # counted over there


def wait_for(check: Any, timeout: float = 20.0) -> Any:
    """``check()`` once it is truthy (the store's figures follow each
    process's beat, which has no event to wait on), else fail."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "never came"
        threading.Event().wait(0.02)
    return found


def test_the_process_gauges_count_every_process_serving_the_store(
    tmp_path: Path, registry: CollectorRegistry
) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    serving = [jobq.JobQueue[Any](lambda job: None, store=store) for _ in range(2)]
    for queue, workers in zip(serving, (2, 3), strict=True):
        queue.start(workers=workers)
    with jobq.JobQueue[Any](store=store) as looking:  # runs no workers
        instrument(looking, registry)
        found = wait_for(
            lambda: (
                (f := samples(registry))
                and f.get(("jobq_processes", (("state", "serving"),))) == 2
                and f
            )
        )
        serving[0].close()  # leaves the registry
        after = wait_for(
            lambda: (
                (f := samples(registry))
                and f.get(("jobq_processes", (("state", "serving"),))) == 1
                and f
            )
        )
    serving[1].close()

    assert only(found, "jobq_processes") == {
        (("state", "serving"),): 2,
        (("state", "gone"),): 0,
    }
    assert only(found, "jobq_serving_workers") == {
        (("state", "busy"),): 0,
        (("state", "idle"),): 5,
    }
    assert only(after, "jobq_serving_workers")[(("state", "idle"),)] == 3


def test_flask_s_config_key_instruments_the_app_s_queue() -> None:
    from flask import Flask

    from jobq.contrib.flask import JobQ

    app = Flask("metrics")
    app.config.update(JOBQ_PROMETHEUS=True, JOBQ_AUTOSTART=False)
    JobQ(app)
    queue = app.extensions["jobq"].queue
    metrics = metrics_for(queue)
    try:
        assert metrics is not None
        queue.enqueue("x")
        assert ("jobq_jobs_enqueued_total", (("task", PLAIN_TASK),)) in samples(
            metrics.registry
        )
    finally:
        if metrics is not None:
            metrics.close()
        queue.close()


@pytest.fixture
def django_queue(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A queue built from ``JOBQ`` for this test (the process's own is kept)."""
    import jobq.contrib.django as integration

    settings.JOBQ = {"PROMETHEUS": True, "AUTOSTART": False}
    monkeypatch.setattr(integration, "_queue", None)
    queue = integration.get_queue()
    yield queue
    metrics = metrics_for(queue)
    if metrics is not None:
        metrics.close()
    queue.close()


def test_django_s_setting_instruments_the_queue(django_queue: Any) -> None:
    metrics = metrics_for(django_queue)
    assert metrics is not None
    assert ("jobq_jobs", (("state", "dead"),)) in samples(metrics.registry)


def test_counts_held_past_the_fold_by_many_threads_are_each_scraped_once(
    registry: CollectorRegistry, clock: Clock
) -> None:
    per_thread = 3 * Tally.FOLD_AT  # each thread's appends fold several times
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, clock=clock)
    instrument(queue, registry)

    def produce() -> None:
        queue.enqueue_many([None] * (per_thread // 2))
        for _ in range(per_thread - per_thread // 2):
            queue.enqueue(None)

    producers = [threading.Thread(target=produce) for _ in range(4)]
    for thread in producers:
        thread.start()
    for thread in producers:
        thread.join()
    queue.start(workers=4)
    assert queue.join(timeout=60)
    queue.stop()

    found = samples(registry)
    plain = (("task", PLAIN_TASK),)
    assert only(found, "jobq_jobs_enqueued_total") == {plain: 4 * per_thread}
    assert only(found, "jobq_jobs_succeeded_total") == {plain: 4 * per_thread}
    assert only(found, "jobq_job_wait_seconds_count") == {plain: 4 * per_thread}
    first = (("le", "0.005"), ("task", PLAIN_TASK))  # the clock stood still
    assert only(found, "jobq_job_duration_seconds_bucket")[first] == 4 * per_thread
    assert samples(registry) == found  # a second scrape counts nothing again
