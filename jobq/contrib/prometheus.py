"""Prometheus metrics of a queue: ``instrument(queue)`` turns them on.

Counters and histograms move with the queue's events (``queue.subscribe``),
in the process where each change happens: counted in plain lists
(``Tally``) turned into metric families at each scrape, or in multiprocess
mode in prometheus_client's file-backed metric objects. The gauges (jobs
by state, the oldest wait, worker threads) are read from the queue when
Prometheus scrapes, so they cost nothing between scrapes. Labels are task names
(``PLAIN_TASK`` for plain handler jobs) and declared limits (a family's
pattern, ``account:*``, summed over its keys): never job ids, keys, limit
keys or payloads, so the number of series stays that of the code's tasks and
limits.

Under a server with several processes (gunicorn), prometheus_client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before it is imported)
sums the counters and histograms of all processes; the store's gauges are
read once per scrape by the process that answers it (they describe the
queue, not the process), and each process's worker gauges are summed over
the live processes. See the README, "Monitoring".
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import math
import operator
import os
import threading
import time
import weakref
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple, TypeVar

from jobq import Event, EventKind, JobqError, JobQueue
from jobq.extras import requires

with requires("prometheus", "jobq.contrib.prometheus", "prometheus_client"):
    import prometheus_client.metrics
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.multiprocess import MultiProcessCollector
    from prometheus_client.registry import REGISTRY
    from prometheus_client.utils import floatToGoString

__all__ = [
    "DURATION_BUCKETS",
    "PLAIN_TASK",
    "WAIT_BUCKETS",
    "Metrics",
    "instrument",
    "metrics_for",
    "multiprocess_mode",
]

logger = logging.getLogger("jobq.contrib.prometheus")

#: The ``task`` label of plain handler jobs (those without a task name).
PLAIN_TASK = "(handler)"

#: Seconds: background work runs from milliseconds (a webhook) to an hour
#: (an import); the buckets cover both ends.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)  # fmt: skip
#: Seconds from due to start: small when workers keep up, minutes when not.
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                120.0, 300.0, 600.0, 1800.0, 3600.0)  # fmt: skip

T = TypeVar("T")

_instrumented: weakref.WeakKeyDictionary[JobQueue[Any], Metrics] = (
    weakref.WeakKeyDictionary()
)
#: Single-process mode: the metrics in each (registry, namespace).
_places: weakref.WeakValueDictionary[tuple[int, str], Metrics] = (
    weakref.WeakValueDictionary()
)
_instrumenting = threading.RLock()  # close() takes it again, inside instrument


def multiprocess_mode() -> bool:
    """Whether prometheus_client keeps its values in files shared by the
    processes of a server (its environment variable is set)."""
    return "PROMETHEUS_MULTIPROC_DIR" in os.environ or (
        "prometheus_multiproc_dir" in os.environ
    )


def instrument(
    queue: JobQueue[Any],
    registry: CollectorRegistry | None = None,
    namespace: str = "jobq",
) -> Metrics:
    """Export ``queue``'s metrics, named ``<namespace>_...``; the ``Metrics``
    returned tells which registry to scrape (``metrics.registry``) and
    ``close()`` turns them off. ``registry``: where they go (default:
    prometheus_client's ``REGISTRY``; in multiprocess mode, a new registry
    that also collects the other processes' files). Once per queue
    (``ValueError`` for a second time); opens nothing.

    Another queue's metrics in the same registry and namespace are closed
    first, with a WARNING: the newest queue wins, as when an app factory
    builds an app again (tests do), instead of a clash of names."""
    place = None
    if not multiprocess_mode():
        place = (id(REGISTRY if registry is None else registry), namespace)
    with _instrumenting:
        if queue in _instrumented:
            raise ValueError(f"{queue!r} is already instrumented for Prometheus")
        previous = None if place is None else _places.get(place)
        if previous is not None:
            logger.warning(
                "jobq metrics of %r replace those of %r (same registry and "
                "namespace %r); pass another registry or namespace to keep both",
                queue, previous.queue, namespace,
            )  # fmt: skip
            previous.close()
        metrics = Metrics(queue, registry, namespace)
        _instrumented[queue] = metrics
        if place is not None:
            _places[place] = metrics
    return metrics


def metrics_for(queue: JobQueue[Any]) -> Metrics | None:
    """The ``Metrics`` of an instrumented queue (Flask's ``JOBQ_PROMETHEUS``,
    Django's ``JOBQ["PROMETHEUS"]``), ``None`` if it is not."""
    return _instrumented.get(queue)


#: The events the counters and histograms count (not deleted): an attempt's
#: wait comes with its end, so ``started`` is not among them (one event
#: fewer per job); multiprocess mode adds it for its worker gauges.
COUNTED = (EventKind.ENQUEUED, EventKind.SUCCEEDED, EventKind.RETRYING,
           EventKind.DEAD, EventKind.REVIVED, EventKind.CANCELLED)  # fmt: skip


class Metrics:
    """One queue's metrics: built by ``instrument``."""

    def __init__(
        self,
        queue: JobQueue[Any],
        registry: CollectorRegistry | None,
        namespace: str,
    ) -> None:
        self.queue = queue
        self.multiprocess = multiprocess_mode()
        self._registered: list[Any] = []
        counts: Tally | SharedCounts
        kinds: tuple[EventKind, ...] = COUNTED
        if self.multiprocess:
            # The values live in files: the metric objects belong to no
            # registry, and the one to scrape reads the files.
            #: The registry to scrape: ``make_wsgi_app(metrics.registry)``.
            self.registry: CollectorRegistry = registry or CollectorRegistry()
            counts = SharedCounts(queue, namespace)
            kinds = (*COUNTED, EventKind.STARTED)
            self._add(MultiProcessCollector(self.registry))  # type: ignore[no-untyped-call]
        else:
            self.registry = REGISTRY if registry is None else registry
            counts = Tally(namespace)
            self._add(counts)
        self._add(StoreGauges(queue, namespace, workers=not self.multiprocess))
        # One subscription per kind: each event goes straight to its method.
        self._unsubscribe = [
            queue.subscribe(getattr(counts, kind.value), kinds=kind) for kind in kinds
        ]

    def _add(self, collector: Any) -> None:
        self.registry.register(collector)
        self._registered.append(collector)

    def close(self) -> None:
        """Stop counting and take the metrics out of the registry."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        for collector in self._registered:
            self.registry.unregister(collector)
        self._registered.clear()
        with _instrumenting:
            if _instrumented.get(self.queue) is self:
                del _instrumented[self.queue]


#: (name, help) of the counters, in the order a scrape shows them.
COUNTERS = (
    ("jobs_enqueued", "Jobs added."),
    ("jobs_succeeded", "Attempts that returned."),
    ("jobs_retried", "Failed attempts whose job waits for a retry."),
    ("jobs_dead", "Failed attempts that made their job dead."),
    ("jobs_revived", "Dead jobs made pending again."),
    ("jobs_cancelled", "Jobs cancelled: pending ones when asked, running ones "
     "when their attempt stopped."),
)  # fmt: skip
#: (name, help, buckets) of the histograms, after the counters.
HISTOGRAMS = (
    ("job_duration_seconds", "How long each attempt ran.", DURATION_BUCKETS),
    ("job_wait_seconds", "How long each attempt waited from due to start.",
     WAIT_BUCKETS),
)  # fmt: skip
_DURATION_BOUNDS = (*DURATION_BUCKETS, math.inf)
_WAIT_BOUNDS = (*WAIT_BUCKETS, math.inf)


class TaskCounts:
    """One task's counts in single-process mode: the counters, and each
    histogram's observations per bucket (not cumulative) and their sum; and
    the events not yet folded into them."""

    __slots__ = ("counted", "counters", "created", "duration", "duration_sum",
                 "ended", "wait", "wait_sum")  # fmt: skip

    def __init__(self) -> None:
        self.created = time.time()  # what prometheus_client's _created shows
        self.counters = [0] * len(COUNTERS)
        self.duration = [0] * len(_DURATION_BOUNDS)
        self.duration_sum = 0.0
        self.wait = [0] * len(_WAIT_BOUNDS)
        self.wait_sum = 0.0
        #: The counter of each event that is not an attempt's end.
        self.counted: deque[int] = deque()
        #: Each attempt's end: (counter, duration, wait).
        self.ended: deque[tuple[int, float, float]] = deque()

    def fold(self) -> None:
        """Count the events appended so far (under ``Tally.lock``)."""
        counters = self.counters
        for counter, n in collections.Counter(_drained(self.counted)).items():
            counters[counter] += n
        ends = _drained(self.ended)
        if not ends:
            return
        for counter, n in collections.Counter(map(_FIRST, ends)).items():
            counters[counter] += n
        durations = list(map(_SECOND, ends))
        waits = list(map(_THIRD, ends))
        # Summed one by one, in order, as prometheus_client's own would.
        self.duration_sum = functools.reduce(operator.add, durations, self.duration_sum)
        self.wait_sum = functools.reduce(operator.add, waits, self.wait_sum)
        _add_to_buckets(self.duration, _DURATION_BOUNDS, durations)
        _add_to_buckets(self.wait, _WAIT_BOUNDS, waits)


_FIRST, _SECOND, _THIRD = (operator.itemgetter(n) for n in range(3))


def _add_to_buckets(
    buckets: list[int], bounds: tuple[float, ...], values: list[float]
) -> None:
    """Add ``values`` to the per-bucket counts of ``bounds``: a value goes
    in the first bucket whose bound is at least the value (``le``); sorted
    once, in C, instead of a search per value."""
    values.sort()
    below = 0
    for n, bound in enumerate(bounds):
        upto = bisect_right(values, bound)
        buckets[n] += upto - below
        below = upto


class Tally:
    """Single-process mode: the counters and histograms in plain lists,
    exported at each scrape, in the families (names, help, labels, buckets)
    prometheus_client's own ``Counter`` and ``Histogram`` would show.

    An event is only appended to a deque of its task's (atomic: no lock,
    which would cost more than the rest of the event's count); the deques
    are folded into the counts at each scrape, and by the thread whose
    append makes one longer than ``FOLD_AT`` (so a process nobody scrapes
    holds no more)."""

    #: Events a task's deque holds before they are folded into its counts.
    FOLD_AT = 1024

    def __init__(self, namespace: str) -> None:
        self.prefix = f"{namespace}_"
        self.lock = threading.Lock()  # a new task, a fold, a scrape's copy
        self.tasks: dict[str | None, TaskCounts] = {}

    def _counts(self, task: str | None) -> TaskCounts:
        with self.lock:  # the first event of this task here
            return self.tasks.setdefault(task, TaskCounts())

    def _count(self, task: str | None, counter: int) -> None:
        counted = (self.tasks.get(task) or self._counts(task)).counted
        counted.append(counter)
        if len(counted) > self.FOLD_AT:
            self.fold()

    def enqueued(self, event: Event) -> None:
        counted = (self.tasks.get(event.task) or self._counts(event.task)).counted
        counted.append(0)  # _count, inline: this is every job's
        if len(counted) > self.FOLD_AT:
            self.fold()

    def revived(self, event: Event) -> None:
        self._count(event.task, 4)

    def succeeded(self, event: Event, counter: int = 1) -> None:
        """An attempt's end: its counter, its duration and its wait."""
        ended = (self.tasks.get(event.task) or self._counts(event.task)).ended
        ended.append((counter, event.duration or 0.0, event.wait or 0.0))
        if len(ended) > self.FOLD_AT:
            self.fold()

    def retrying(self, event: Event) -> None:
        self.succeeded(event, 2)

    def dead(self, event: Event) -> None:
        self.succeeded(event, 3)

    def cancelled(self, event: Event) -> None:
        """A pending job cancelled (attempt 0: no attempt to time), or a
        running one whose attempt stopped (timed as any attempt's end)."""
        if event.attempt:
            self.succeeded(event, 5)
        else:
            self._count(event.task, 5)

    def fold(self) -> None:
        """Count every task's events appended so far."""
        with self.lock:
            for counts in self.tasks.values():
                counts.fold()

    def describe(self) -> Iterable[Metric]:
        return self._families({})

    def collect(self) -> Iterator[Metric]:
        with self.lock:  # a copy: a scrape sees each task's counts whole
            for counts in self.tasks.values():
                counts.fold()
            tasks = {
                PLAIN_TASK if task is None else task: (
                    counts.created, list(counts.counters),
                    ((list(counts.duration), counts.duration_sum),
                     (list(counts.wait), counts.wait_sum)),
                )
                for task, counts in self.tasks.items()
            }  # fmt: skip
        return iter(self._families(tasks))

    def _families(self, tasks: dict[str, Any]) -> list[Metric]:
        """The families of ``tasks`` (label: created, counters, histograms)."""
        # prometheus_client's switch for the _created series (its environment
        # variable, disable_created_metrics()), followed as its metrics do.
        created = getattr(prometheus_client.metrics, "_use_created", True)
        families: list[Metric] = []
        for n, (name, doc) in enumerate(COUNTERS):
            counter = CounterMetricFamily(f"{self.prefix}{name}", doc, labels=["task"])
            for task, (at, counters, _) in tasks.items():
                value = float(counters[n])
                counter.add_metric([task], value, created=at if created else None)
            families.append(counter)
        for n, (name, doc, buckets) in enumerate(HISTOGRAMS):
            family = HistogramMetricFamily(f"{self.prefix}{name}", doc, labels=["task"])
            bounds = (*buckets, math.inf)
            les = [floatToGoString(b) for b in bounds]  # type: ignore[no-untyped-call]
            for task, (at, _, histograms) in tasks.items():
                counts, total = histograms[n]
                cumulative = itertools.accumulate(counts, initial=0.0)
                next(cumulative)  # the 0.0 before the first bucket
                family.add_metric(
                    [task], list(zip(les, cumulative, strict=True)), total
                )
                if created:
                    family.add_sample(f"{family.name}_created", {"task": task}, at)
            families.append(family)
        return families


class _TaskSeries(NamedTuple):
    """One task's series, looked up once (``labels()`` takes a lock)."""

    enqueued: Counter
    succeeded: Counter
    retried: Counter
    dead: Counter
    revived: Counter
    cancelled: Counter
    duration: Histogram
    wait: Histogram


class SharedCounts:
    """Multiprocess mode: prometheus_client's metric objects, whose values
    live in the files every process writes and the scraped one reads; and
    this process's share of the worker gauges, set as attempts start and
    end."""

    def __init__(self, queue: JobQueue[Any], namespace: str) -> None:
        def make(kind: type[Any], name: str, doc: str, *options: Any) -> Any:
            extra = {"buckets": options[0]} if options else {}
            return kind(name, doc, ["task"], namespace=namespace, registry=None,
                        **extra)  # fmt: skip

        self._counters = [make(Counter, *counter) for counter in COUNTERS]
        self._histograms = [make(Histogram, *histogram) for histogram in HISTOGRAMS]
        self._series: dict[str, _TaskSeries] = {}
        self._process = ProcessWorkers(queue, namespace)

    def _for(self, task: str | None) -> _TaskSeries:
        name = PLAIN_TASK if task is None else task
        series = self._series.get(name)
        if series is None:  # the first event of this task here
            metrics = (*self._counters, *self._histograms)
            series = _TaskSeries(*(metric.labels(name) for metric in metrics))
            self._series[name] = series
        return series

    def enqueued(self, event: Event) -> None:
        self._for(event.task).enqueued.inc()

    def revived(self, event: Event) -> None:
        self._for(event.task).revived.inc()

    def started(self, event: Event) -> None:
        self._process.update(failed=False)

    def succeeded(self, event: Event, counter: str = "succeeded") -> None:
        series = self._for(event.task)
        getattr(series, counter).inc()
        series.duration.observe(event.duration or 0.0)
        series.wait.observe(event.wait or 0.0)
        self._process.update(failed=event.error is not None)

    def retrying(self, event: Event) -> None:
        self.succeeded(event, "retried")

    def dead(self, event: Event) -> None:
        self.succeeded(event, "dead")

    def cancelled(self, event: Event) -> None:
        """As ``Tally.cancelled``: an attempt only for a running job."""
        if event.attempt:
            self.succeeded(event, "cancelled")
        else:
            self._for(event.task).cancelled.inc()


class ProcessWorkers:
    """Multiprocess mode: each process's worker gauges, summed over the live
    processes, set as its jobs start and end (a scrape reaches one process,
    which cannot count the others' threads)."""

    def __init__(self, queue: JobQueue[Any], namespace: str) -> None:
        self.queue = queue
        self.lock = threading.Lock()
        self.workers = Gauge(
            "workers", "Worker threads of the live processes.", ["state"],
            namespace=namespace, registry=None, multiprocess_mode="livesum",
        )  # fmt: skip
        self.abandoned = Gauge(
            "abandoned_threads",
            "Worker threads given up at a time limit and still alive, in live "
            "processes.",
            namespace=namespace, registry=None, multiprocess_mode="livesum",
        )  # fmt: skip

    def update(self, *, failed: bool) -> None:
        """After an attempt started or ended; threads are abandoned only at
        a failed attempt (a timeout), so only then is that count read."""
        with self.lock:  # read and set together: the last to set read last
            counts = self.queue.worker_stats()
            self.workers.labels("busy").set(counts.busy)
            self.workers.labels("idle").set(counts.idle)
            self.workers.labels("lost").set(counts.lost)
        if failed:
            self.abandoned.set(self.queue.stats().abandoned)


class StoreGauges:
    """The gauges read from the queue at each scrape: jobs by state, the
    oldest wait, the attempts running and the jobs waiting under each limit
    (labelled with the limit's declared name: a family's pattern, such as
    ``account:*``, never one series per key), and (unless multiprocess)
    this process's worker threads."""

    def __init__(self, queue: JobQueue[Any], namespace: str, *, workers: bool) -> None:
        self.queue = queue
        self.prefix = f"{namespace}_"
        self.workers = workers

    def describe(self) -> Iterable[Metric]:
        """The metrics' names without their values: registering reads nothing."""
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.queue.stats()
            due = self.queue.next_due()
            limits = self.queue.limits()
            serving = self.queue.processes()
        except JobqError as exc:  # a closed queue, an unreachable store
            logger.warning("jobq metrics: cannot read the queue: %s", exc)
            return
        (jobs, oldest, running, waiting, processes, threads, workers,
         abandoned) = self._families(every=True)  # fmt: skip
        states = {  # each job in one state: their sum is the jobs stored
            "pending": stats.pending - stats.delayed,  # due now
            "delayed": stats.delayed - stats.retrying,  # never attempted
            "retrying": stats.retrying,  # after a failed attempt
            "running": stats.running,
            "waiting": stats.waiting,  # for a parent (after=)
            "dead": stats.dead,
            "cancelled": stats.cancelled,  # kept ones
        }
        for state, count in states.items():
            jobs.add_metric([state], count)
        now = self.queue.clock()
        oldest.add_metric([], 0.0 if due is None else max(now - due, 0.0))
        for usage in limits:  # one series per declared name or family pattern
            running.add_metric([usage.name], usage.running)
            waiting.add_metric([usage.name], usage.waiting)
        yield from (jobs, oldest, running, waiting)
        if serving is not None:  # every process serving the queue, by its beats
            alive = [info for info in serving if not info.gone]
            processes.add_metric(["serving"], len(alive))
            processes.add_metric(["gone"], len(serving) - len(alive))
            threads.add_metric(["busy"], sum(info.busy for info in alive))
            threads.add_metric(["idle"], sum(info.idle for info in alive))
            yield from (processes, threads)
        if self.workers:
            counts = self.queue.worker_stats()
            workers.add_metric(["busy"], counts.busy)
            workers.add_metric(["idle"], counts.idle)
            workers.add_metric(["lost"], counts.lost)
            abandoned.add_metric([], stats.abandoned)
            yield from (workers, abandoned)

    def _families(self, *, every: bool = False) -> tuple[GaugeMetricFamily, ...]:
        """The families this collector exports (``every``: the worker
        gauges too, even where multiprocess mode exports them instead)."""
        prefix = self.prefix
        families = (
            GaugeMetricFamily(f"{prefix}jobs", "Jobs in the store by state.",
                              labels=["state"]),
            GaugeMetricFamily(f"{prefix}oldest_pending_age_seconds",
                              "How long the job that runs next has been due."),
            GaugeMetricFamily(f"{prefix}limit_running",
                              "Attempts running under each limit (a family: "
                              "summed over its keys).", labels=["limit"]),
            GaugeMetricFamily(f"{prefix}limit_waiting",
                              "Due jobs each limit holds back (a family: summed "
                              "over its keys).", labels=["limit"]),
            GaugeMetricFamily(f"{prefix}processes",
                              "Processes serving the queue, from every host "
                              "(gone: unseen past their lease).", labels=["state"]),
            GaugeMetricFamily(f"{prefix}serving_workers",
                              "Worker threads of every process serving the queue.",
                              labels=["state"]),
            GaugeMetricFamily(f"{prefix}workers", "Worker threads of this process.",
                              labels=["state"]),
            GaugeMetricFamily(f"{prefix}abandoned_threads",
                              "Worker threads given up at a time limit and "
                              "still alive."),
        )  # fmt: skip
        return families if self.workers or every else families[:6]


def _drained(items: deque[T]) -> list[T]:
    """The items of ``items``, taken from the left (appends from other
    threads meanwhile stay for the next fold), ``popleft`` called by C."""
    return list(itertools.islice(iter(items.popleft, None), len(items)))
