"""Load: many producer threads and workers at once; the counters add up and no
job is lost or run twice (reliability.md §3 (d)).

Eight producer threads enqueue at once into a queue with eight workers: plain
jobs, jobs with keys that collide on purpose (across producers, inside one
``enqueue_many`` batch, and against jobs that hold their key for the whole
run), jobs delayed by zero in each spelling (``delay=0``, a zero
``timedelta``, ``at=`` a past time), and priorities. The handler records
every run under a lock. After ``join``:

- every job that was created (``duplicate=False``) ran exactly once (twice
  when it was made to fail once), and nothing else ran;
- every duplicate names a job created with the same key (the holder's, for a
  key held all along; the batch's first, inside a batch);
- jobs with one key never ran at the same time: each was created only after
  the previous one with that key had finished;
- no job ran in two threads at once, and never more than ``workers`` ran;
- ``stats()``: ``completed`` equals the successful runs, ``retried`` the
  failures, nothing pending, running or dead.

With ``sys.setswitchinterval(1e-5)`` (memory store) threads switch far more
often, to shake out races the default interval hides.
"""

from __future__ import annotations

import datetime as dt
import itertools
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import jobq

WAIT = 60.0  # seconds; a cap so that a lost job fails the test, never hangs it
PRODUCERS = 8
WORKERS = 8
HOLDERS = 2
#: Jobs per producer: a few seconds per store on a small machine.
PER_PRODUCER = {"memory": 2500, "json": 2000, "sqlite": 800}

MakeQueue = Callable[..., jobq.JobQueue[Any]]


@dataclass(frozen=True)
class Added:
    """One job as a producer asked for it, and what ``enqueue`` answered."""

    key: str | None
    payload: dict[str, Any]
    enqueued: jobq.Enqueued


class Recorder:
    """The handler: records each run, and fails the first attempt of jobs
    whose payload says so. Holder jobs wait until the producers are done."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.lock = threading.Lock()
        self.runs: Counter[int] = Counter()
        self.failures: Counter[int] = Counter()
        self.intervals: defaultdict[int, list[tuple[float, float]]] = defaultdict(list)
        self.keys: dict[int, str | None] = {}
        self.running: set[int] = set()
        self.most_at_once = 0
        self.overlaps: list[int] = []
        self.producers_done = threading.Event()

    def __call__(self, job: jobq.Job[Any]) -> None:
        start = time.monotonic()
        with self.lock:
            if job.id in self.running:
                self.overlaps.append(job.id)
            self.running.add(job.id)
            self.most_at_once = max(self.most_at_once, len(self.running))
        try:
            if job.payload.get("hold"):
                self.producers_done.wait(WAIT)
            if job.payload.get("fail") and job.attempt == 1:
                with self.lock:
                    self.failures[job.id] += 1
                raise ValueError("failing once on purpose")
        finally:
            end = time.monotonic()
            with self.lock:
                self.running.discard(job.id)
                self.runs[job.id] += 1
                self.intervals[job.id].append((start, end))
                self.keys[job.id] = job.key


@pytest.fixture
def fast_switching(request: pytest.FixtureRequest) -> Iterator[None]:
    """``sys.setswitchinterval(1e-5)`` for tests parametrized ``preempt=True``."""
    if not getattr(request, "param", False):
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def produce(
    queue: jobq.JobQueue[Any],
    producer: int,
    count: int,
    fail_some: bool,
    out: list[Added],
) -> None:
    """Enqueue ``count`` jobs with a mix of options; record each answer."""
    added: list[Added] = []
    for n in range(count):
        payload: dict[str, Any] = {"producer": producer, "n": n}
        if fail_some and (n * 7 + producer) % 5 == 0:  # about 20 %
            payload["fail"] = True
        timings: list[dict[str, Any]] = [
            {"delay": 0},
            {"delay": dt.timedelta(0)},
            {"at": time.time() - 5},  # a past time means now
            {},
        ]
        timing = timings[n % 4]
        priority = n % 5 - 2
        if n % 25 == 24:  # one batch, one key: the first is created, the rest not
            batch_key = f"batch-{producer}-{n}"
            payloads = [payload, {**payload, "copy": 1}, {**payload, "copy": 2}]
            answers = queue.enqueue_many(
                payloads, key=batch_key, priority=priority, **timing
            )
            added += [
                Added(batch_key, p, a) for p, a in zip(payloads, answers, strict=True)
            ]
            continue
        key: str | None = None
        if n % 5 == 0:
            key = f"shared-{n % 7}"  # collides across producers
        elif n % 5 == 1:
            key = f"hold-{n % HOLDERS}"  # held by a holder job all along
        answer = queue.enqueue(payload, key=key, priority=priority, **timing)
        added.append(Added(key, payload, answer))
    out.extend(added)


def run_load(
    queue: jobq.JobQueue[Any], recorder: Recorder, per_producer: int, fail_some: bool
) -> tuple[list[Added], dict[str, int]]:
    """Holders first, then the producers all at once, then join."""
    holders = {
        f"hold-{h}": queue.enqueue({"hold": True, "h": h}, key=f"hold-{h}").id
        for h in range(HOLDERS)
    }
    queue.start(workers=recorder.workers)
    results: list[list[Added]] = [[] for _ in range(PRODUCERS)]
    start = threading.Barrier(PRODUCERS)

    def producer(i: int) -> None:
        start.wait(WAIT)
        produce(queue, i, per_producer, fail_some, results[i])

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads)
    batches = sum(1 for n in range(per_producer) if n % 25 == 24)
    assert [len(r) for r in results] == [per_producer + 2 * batches] * PRODUCERS
    recorder.producers_done.set()
    assert queue.join(timeout=WAIT), f"not drained: {queue.stats()}"
    return [added for result in results for added in result], holders


def check(
    added: list[Added], holders: dict[str, int], recorder: Recorder, stats: jobq.Stats
) -> None:
    created = [a for a in added if not a.enqueued.duplicate]
    duplicates = [a for a in added if a.enqueued.duplicate]
    created_ids = [a.enqueued.id for a in created]
    assert len(set(created_ids)) == len(created_ids)  # ids are never handed out twice
    key_of = {a.enqueued.id: a.key for a in created} | {
        job_id: key for key, job_id in holders.items()
    }

    # Every created job ran, exactly once (twice if it failed once), and
    # nothing else ran.
    expected = Counter(dict.fromkeys(key_of, 1))
    expected.update(
        a.enqueued.id for a in created if a.payload.get("fail")
    )  # one more run after the failure
    assert recorder.runs == expected
    assert set(recorder.failures) == {
        a.enqueued.id for a in created if a.payload.get("fail")
    }
    assert set(recorder.failures.values()) <= {1}
    assert {job_id: recorder.keys[job_id] for job_id in key_of} == key_of

    # Duplicates name a live job created with the same key.
    assert duplicates, "the test made no duplicates"
    for a in duplicates:
        assert a.enqueued.id in key_of, a
        assert key_of[a.enqueued.id] == a.key, a
        if a.key is not None and a.key.startswith("hold-"):
            assert a.enqueued.id == holders[a.key]
    held = [a for a in added if a.key is not None and a.key.startswith("hold-")]
    assert held
    assert all(a.enqueued.duplicate for a in held)
    batches: defaultdict[str, list[Added]] = defaultdict(list)
    for a in added:
        if a.key is not None and a.key.startswith("batch-"):
            batches[a.key].append(a)
    assert batches
    for batch in batches.values():
        first, *rest = [a.enqueued for a in batch]
        assert not first.duplicate
        assert rest == [jobq.Enqueued(first.id, True)] * 2

    # One key, one job at a time: a job with a key used before was created
    # only after the previous one ended (when a key was freed and used again
    # during the run: how often depends on how fast the workers keep up).
    by_key: defaultdict[str, list[int]] = defaultdict(list)
    for job_id, key in key_of.items():
        if key is not None:
            by_key[key].append(job_id)
    for ids in by_key.values():
        ids.sort()
        for earlier, later in itertools.pairwise(ids):
            assert max(e for _, e in recorder.intervals[earlier]) <= min(
                s for s, _ in recorder.intervals[later]
            )

    # Never twice at once, never more than the workers.
    assert recorder.overlaps == []
    assert recorder.most_at_once <= recorder.workers

    # The counters add up.
    failures = sum(recorder.failures.values())
    assert stats.completed == sum(recorder.runs.values()) - failures == len(key_of)
    assert stats.retried == failures
    assert (stats.pending, stats.running, stats.dead) == (0, 0, 0)


@pytest.mark.parametrize("fail_some", [False, True], ids=["ok", "fail-once"])
@pytest.mark.parametrize(
    ("store_kind", "fast_switching"),
    [("memory", False), ("memory", True), ("json", False), ("sqlite", False)],
    ids=["memory", "memory-preempt", "json", "sqlite"],
    indirect=["fast_switching"],
)
def test_producers_and_workers_at_once_lose_nothing_and_run_nothing_twice(
    store_kind: str,
    fast_switching: None,
    fail_some: bool,
    make_queue: MakeQueue,
) -> None:
    recorder = Recorder(WORKERS)
    queue = make_queue(recorder, base_delay=0, jitter=False)
    added, holders = run_load(queue, recorder, PER_PRODUCER[store_kind], fail_some)
    check(added, holders, recorder, queue.stats())
    if fail_some:
        assert sum(recorder.failures.values()) >= 0.15 * len(recorder.runs)
