"""Prometheus metrics of a queue: ``instrument(queue)`` turns them on.

Counters and histograms move with the queue's events (``queue.subscribe``),
in the process where each change happens; the gauges (jobs by state, the
oldest wait, worker threads) are read from the queue when Prometheus
scrapes, so they cost nothing between scrapes. Labels are task names only
(``PLAIN_TASK`` for plain handler jobs): never job ids, keys or payloads,
so the number of series stays that of the code's tasks.

Under a server with several processes (gunicorn), prometheus_client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before it is imported)
sums the counters and histograms of all processes; the store's gauges are
read once per scrape by the process that answers it (they describe the
queue, not the process), and each process's worker gauges are summed over
the live processes. See the README, "Monitoring".
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY

from jobq import Event, EventKind, JobqError, JobQueue

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


class _TaskSeries(NamedTuple):
    """One task's series, looked up once (``labels()`` takes a lock)."""

    enqueued: Counter
    succeeded: Counter
    retried: Counter
    dead: Counter
    revived: Counter
    duration: Histogram
    wait: Histogram


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
        # In multiprocess mode the values live in files: the metric objects
        # belong to no registry, and the one to scrape reads the files.
        own = None
        if not self.multiprocess:
            own = REGISTRY if registry is None else registry
        #: The registry to scrape: ``make_wsgi_app(metrics.registry)``.
        self.registry: CollectorRegistry = (
            own if own is not None else registry or CollectorRegistry()
        )
        self._series: dict[str, _TaskSeries] = {}
        self._registered: list[Any] = []
        counter = self._metric_factory(namespace, register=own is not None)
        self._enqueued = counter(Counter, "jobs_enqueued", "Jobs added.")
        self._succeeded = counter(Counter, "jobs_succeeded", "Attempts that returned.")
        self._retried = counter(
            Counter, "jobs_retried", "Failed attempts whose job waits for a retry."
        )
        self._dead = counter(
            Counter, "jobs_dead", "Failed attempts that made their job dead."
        )
        self._revived = counter(
            Counter, "jobs_revived", "Dead jobs made pending again."
        )
        self._duration = counter(
            Histogram,
            "job_duration_seconds",
            "How long each attempt ran.",
            buckets=DURATION_BUCKETS,
        )
        self._wait = counter(
            Histogram,
            "job_wait_seconds",
            "How long each attempt waited from due to start.",
            buckets=WAIT_BUCKETS,
        )
        self._process: ProcessWorkers | None = None
        if self.multiprocess:
            self._process = ProcessWorkers(queue, namespace)
            self._add(MultiProcessCollector(self.registry))  # type: ignore[no-untyped-call]
        self._add(StoreGauges(queue, namespace, workers=not self.multiprocess))
        self._unsubscribe = queue.subscribe(self._on_event)

    def _metric_factory(self, namespace: str, *, register: bool) -> Callable[..., Any]:
        """Makes the metrics labelled by task (``register``: in ``registry``)."""

        def make(kind: type[Any], name: str, doc: str, **options: Any) -> Any:
            metric = kind(name, doc, ["task"], namespace=namespace, registry=None,
                          **options)  # fmt: skip
            if register:
                self._add(metric)
            return metric

        return make

    def _add(self, collector: Any) -> None:
        self.registry.register(collector)
        self._registered.append(collector)

    def close(self) -> None:
        """Stop counting and take the metrics out of the registry."""
        self._unsubscribe()
        for collector in self._registered:
            self.registry.unregister(collector)
        self._registered.clear()
        with _instrumenting:
            if _instrumented.get(self.queue) is self:
                del _instrumented[self.queue]

    # -- events ------------------------------------------------------------------

    def _for(self, task: str | None) -> _TaskSeries:
        name = PLAIN_TASK if task is None else task
        series = self._series.get(name)
        if series is None:  # the first event of this task here
            series = _TaskSeries(
                self._enqueued.labels(name), self._succeeded.labels(name),
                self._retried.labels(name), self._dead.labels(name),
                self._revived.labels(name), self._duration.labels(name),
                self._wait.labels(name),
            )  # fmt: skip
            self._series[name] = series
        return series

    def _on_event(self, event: Event) -> None:
        count = COUNTS.get(event.kind)
        if count is None:  # deleted, cancelled: not counted
            return
        count(self._for(event.task), event)
        if self._process is not None and event.attempt:
            self._process.update(failed=event.error is not None)


def _started(series: _TaskSeries, event: Event) -> None:
    series.wait.observe(event.wait or 0.0)


def _succeeded(series: _TaskSeries, event: Event) -> None:
    series.succeeded.inc()
    series.duration.observe(event.duration or 0.0)


def _retrying(series: _TaskSeries, event: Event) -> None:
    series.retried.inc()
    series.duration.observe(event.duration or 0.0)


def _dead(series: _TaskSeries, event: Event) -> None:
    series.dead.inc()
    series.duration.observe(event.duration or 0.0)


#: What each kind of event counts (one dict lookup per event, no if-chain).
COUNTS: dict[EventKind, Callable[[_TaskSeries, Event], None]] = {
    EventKind.ENQUEUED: lambda series, event: series.enqueued.inc(),
    EventKind.STARTED: _started,
    EventKind.SUCCEEDED: _succeeded,
    EventKind.RETRYING: _retrying,
    EventKind.DEAD: _dead,
    EventKind.REVIVED: lambda series, event: series.revived.inc(),
}


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
            "Worker threads given up at a time limit, in live processes.",
            namespace=namespace, registry=None, multiprocess_mode="livesum",
        )  # fmt: skip

    def update(self, *, failed: bool) -> None:
        """After an attempt started or ended; threads are abandoned only at
        a failed attempt (a timeout), so only then is that count read."""
        with self.lock:  # read and set together: the last to set read last
            counts = self.queue.worker_stats()
            self.workers.labels("busy").set(counts.busy)
            self.workers.labels("idle").set(counts.idle)
        if failed:
            self.abandoned.set(self.queue.stats().abandoned)


class StoreGauges:
    """The gauges read from the queue at each scrape: jobs by state, the
    oldest wait, and (unless multiprocess) this process's worker threads."""

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
        except JobqError as exc:  # a closed queue, an unreachable store
            logger.warning("jobq metrics: cannot read the queue: %s", exc)
            return
        jobs, oldest, workers, abandoned = self._families(every=True)
        states = {
            "pending": stats.pending,
            # Once Stats has `delayed` (pending, not yet due), the split is:
            # "pending": stats.pending - stats.delayed, "delayed": stats.delayed,
            "running": stats.running,
            "dead": stats.dead,
        }
        for state, count in states.items():
            jobs.add_metric([state], count)
        now = self.queue.clock()
        oldest.add_metric([], 0.0 if due is None else max(now - due, 0.0))
        yield from (jobs, oldest)
        if self.workers:
            counts = self.queue.worker_stats()
            workers.add_metric(["busy"], counts.busy)
            workers.add_metric(["idle"], counts.idle)
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
            GaugeMetricFamily(f"{prefix}workers", "Worker threads of this process.",
                              labels=["state"]),
            GaugeMetricFamily(f"{prefix}abandoned_threads",
                              "Worker threads given up at a time limit."),
        )  # fmt: skip
        return families if self.workers or every else families[:2]
