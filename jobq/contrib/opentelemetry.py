"""OpenTelemetry tracing of a queue: ``instrument(queue)`` turns it on.

``enqueue`` (and ``enqueue_many``, ``Task.enqueue``) runs in a PRODUCER span
``jobq.enqueue <task>`` whose W3C trace context (``traceparent``,
``tracestate``) is stored in each job's ``meta``; each attempt of the job,
in whatever process runs it and through every retry, runs in a CONSUMER span
``jobq.run <task>`` whose parent is that enqueue span. Attributes follow
OpenTelemetry's messaging conventions (``messaging.system="jobq"``, the
operation, the message id) plus ``jobq.attempt``; a failed attempt's span has
status ERROR and the exception as an event.

Needs ``opentelemetry-api`` only (``jobq[opentelemetry]``): the SDK, its
exporters and sampling are the application's. A queue never instrumented
pays nothing; one instrumented with no SDK installed pays for the API's
no-op spans.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

import jobq
from jobq import Job, JobQueue, Sending

__all__ = ["Tracing", "instrument", "tracing_for"]

#: W3C Trace Context, the headers the issue and every tracer speak.
PROPAGATOR = TraceContextTextMapPropagator()

_instrumented: weakref.WeakKeyDictionary[JobQueue[Any], Tracing] = (
    weakref.WeakKeyDictionary()
)
_instrumenting = threading.Lock()


def instrument(
    queue: JobQueue[Any], tracer_provider: TracerProvider | None = None
) -> Tracing:
    """Trace ``queue``'s enqueues and attempts with ``tracer_provider``'s
    tracer (default: the global one); ``close()`` on what it returns turns
    it off. Once per queue (``ValueError`` for a second time)."""
    with _instrumenting:
        if queue in _instrumented:
            raise ValueError(f"{queue!r} is already instrumented for OpenTelemetry")
        tracing = Tracing(queue, tracer_provider)
        _instrumented[queue] = tracing
    return tracing


def tracing_for(queue: JobQueue[Any]) -> Tracing | None:
    """The ``Tracing`` of an instrumented queue, ``None`` if it is not."""
    return _instrumented.get(queue)


def _name(task: str | None) -> str:
    return "(handler)" if task is None else task


def _messaging(kind: str, operation: str, task: str) -> dict[str, AttributeValue]:
    """The messaging conventions' attributes of a span about ``task``."""
    return {
        "messaging.system": "jobq",
        "messaging.operation.type": kind,
        "messaging.operation.name": operation,
        "messaging.destination.name": task,
    }


class Tracing:
    """One queue's tracing: an enqueue hook and a middleware."""

    def __init__(
        self, queue: JobQueue[Any], tracer_provider: TracerProvider | None
    ) -> None:
        self.queue = queue
        self.tracer = trace.get_tracer(
            "jobq", jobq.__version__, tracer_provider=tracer_provider
        )
        self._undo: list[Callable[[], None]] = [
            queue.around_enqueue(self.enqueue_span),
            queue.add_middleware(self.run_span),
        ]

    def close(self) -> None:
        """Stop tracing this queue's later enqueues and attempts."""
        for undo in self._undo:
            undo()
        self._undo.clear()
        with _instrumenting:
            if _instrumented.get(self.queue) is self:
                del _instrumented[self.queue]

    @contextlib.contextmanager
    def enqueue_span(self, sending: Sending) -> Iterator[None]:
        """The enqueue hook: a PRODUCER span whose context the jobs carry."""
        task = _name(sending.task)
        with self.tracer.start_as_current_span(
            f"jobq.enqueue {task}",
            kind=SpanKind.PRODUCER,
            attributes=_messaging("send", "enqueue", task),
        ) as span:
            PROPAGATOR.inject(sending.meta)
            yield
            ids = [e.id for e in sending.added if e.id]  # 0: written at a commit
            if len(ids) == 1:
                span.set_attribute("messaging.message.id", str(ids[0]))
            elif ids:
                span.set_attribute("messaging.batch.message_count", len(ids))

    def run_span(self, job: Job[Any], call_next: Callable[[], object]) -> object:
        """The middleware: a CONSUMER span for the attempt, its parent the
        enqueue span of the job's ``meta`` (if it has one)."""
        task = _name(job.task)
        parent = PROPAGATOR.extract(job.meta) if "traceparent" in job.meta else None
        with self.tracer.start_as_current_span(
            f"jobq.run {task}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                **_messaging("process", "run", task),
                "messaging.message.id": str(job.id),
                "jobq.attempt": job.attempt,
            },
            record_exception=False,  # below: BaseException too (SystemExit,
            set_status_on_exception=False,  # KeyboardInterrupt) fails an attempt
        ) as span:
            try:
                return call_next()
            except BaseException as exc:
                span.record_exception(exc)
                failed = f"{type(exc).__name__}: {exc}"
                span.set_status(Status(StatusCode.ERROR, failed))
                raise
