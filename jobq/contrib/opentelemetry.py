"""OpenTelemetry tracing of a queue: ``instrument(queue)`` turns it on.

``enqueue`` (and ``enqueue_many``, ``Task.enqueue``) runs in a PRODUCER span
``jobq.enqueue <task>`` whose W3C trace context (``traceparent``,
``tracestate``, the latter cut to 512 characters as W3C says) is stored in
each job's ``meta``, within the enqueue hooks' allowance (never the
caller's meta limits); each attempt of the job, in whatever process runs it
and through every retry, runs in a CONSUMER span ``jobq.run <task>`` whose
parent is that enqueue span. Attributes follow
OpenTelemetry's messaging conventions (``messaging.system="jobq"``, the
operation, the message id) plus ``jobq.attempt``; a failed attempt's span has
status ERROR and the exception as an event. An attempt stopped by
``queue.cancel`` (it raised after the request: ``JobCancelled``, or anything
else, which ends the job cancelled) has status ERROR described
``cancelled``, and ``jobq.cancelled=true``; one that returns normally after
the request succeeded, as its job did.

Needs ``opentelemetry-api`` only (``jobq[opentelemetry]``): the SDK, its
exporters and sampling are the application's. A queue never instrumented
pays nothing. One instrumented while its tracer is the API's no-op one (no
SDK installed, or none set yet) starts no span: a no-op span is the current
span again, so the jobs only carry the current context (if it has one) to
their attempts, where it is made current.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from contextvars import Token
from types import TracebackType
from typing import Any, NamedTuple

import jobq
from jobq import Job, JobQueue, Sending
from jobq.extras import requires

with requires("opentelemetry", "jobq.contrib.opentelemetry", "opentelemetry-api"):
    from opentelemetry import context, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import (
        NoOpTracer,
        ProxyTracer,
        Span,
        SpanKind,
        Status,
        StatusCode,
        Tracer,
        TracerProvider,
    )
    from opentelemetry.trace.propagation.tracecontext import (
        TraceContextTextMapPropagator,
    )
    from opentelemetry.util.types import AttributeValue

__all__ = ["EnqueueSpan", "TaskSpans", "Tracing", "instrument", "tracing_for"]

#: W3C Trace Context, the headers the issue and every tracer speak.
PROPAGATOR = TraceContextTextMapPropagator()

#: The most ``tracestate`` a job's ``meta`` keeps, in characters: W3C Trace
#: Context asks every vendor to propagate at least 512 and says how to cut a
#: longer one. A request's ``tracestate`` (up to 32 entries of 512
#: characters) would otherwise not fit in the allowance enqueue hooks have.
MAX_TRACESTATE = 512

#: The attribute, and the status description, of an attempt that ended its
#: job cancelled.
CANCELLED_ATTRIBUTE = "jobq.cancelled"
CANCELLED = "cancelled"

#: Entries longer than this go first when a ``tracestate`` is cut (W3C).
LARGE_TRACESTATE_ENTRY = 128

_log = logging.getLogger("jobq")

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


def _messaging(kind: str, operation: str, task: str) -> dict[str, AttributeValue]:
    """The messaging conventions' attributes of a span about ``task``."""
    return {
        "messaging.system": "jobq",
        "messaging.operation.type": kind,
        "messaging.operation.name": operation,
        "messaging.destination.name": task,
    }


class TaskSpans(NamedTuple):
    """What the spans of one task share, built at its first enqueue or
    attempt here (tracers copy the attributes they are given)."""

    task: str
    enqueue_name: str
    enqueue_attributes: dict[str, AttributeValue]
    run_name: str


class Tracing:
    """One queue's tracing: an enqueue hook and a middleware. Each span is
    started, made current and ended directly (no context manager layers:
    the per-job cost is the tracer's, not jobq's); none while the tracer is
    the API's no-op one (``recording``)."""

    def __init__(
        self, queue: JobQueue[Any], tracer_provider: TracerProvider | None
    ) -> None:
        self.queue = queue
        self.tracer = trace.get_tracer(
            "jobq", jobq.__version__, tracer_provider=tracer_provider
        )
        #: Whether ``tracer`` may be the API's no-op one: it is, or it is
        #: the global provider's stand-in (see ``recording``).
        self._maybe_noop = isinstance(self.tracer, NoOpTracer | ProxyTracer)
        self._tasks: dict[str | None, TaskSpans] = {}
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

    def _spans(self, task: str | None) -> TaskSpans:
        spans = self._tasks.get(task)
        if spans is None:  # a race builds it twice, equal: no lock needed
            name = "(handler)" if task is None else task
            spans = TaskSpans(
                name, f"jobq.enqueue {name}", _messaging("send", "enqueue", name),
                f"jobq.run {name}",
            )  # fmt: skip
            self._tasks[task] = spans
        return spans

    def recording(self) -> bool:
        """Whether spans may record: ``False`` while the tracer is the API's
        no-op one, whose span is the current span (a remote parent or
        none), so that starting it, making it current and ending it change
        nothing. A stand-in tracer is replaced by the real one once the
        global provider has one (it stays a no-op until then)."""
        tracer = self.tracer
        if isinstance(tracer, ProxyTracer):
            # ProxyTracer's own (private) look-up; without it, every span
            # is started as the API says, which is right, only slower.
            tracer = getattr(tracer, "_tracer", tracer)
            if not isinstance(tracer, NoOpTracer | ProxyTracer):
                self.tracer, self._maybe_noop = tracer, False
        return not isinstance(tracer, NoOpTracer)

    def enqueue_span(self, sending: Sending) -> contextlib.AbstractContextManager[None]:
        """The enqueue hook: a PRODUCER span whose context the jobs carry."""
        if self._maybe_noop and not self.recording():
            _inject(sending.meta, None)  # the current span's context, if any
            return NOTHING_TO_TRACE
        return EnqueueSpan(self.tracer, self._spans(sending.task), sending)

    def run_span(self, job: Job[Any], call_next: Callable[[], object]) -> object:
        """The middleware: a CONSUMER span for the attempt, its parent the
        enqueue span of the job's ``meta`` (if it has one), current while
        the handler runs (its own spans are its children)."""
        if self._maybe_noop and "traceparent" not in job.meta and not self.recording():
            return call_next()  # the no-op span would be the current one
        spans = self._tasks.get(job.task) or self._spans(job.task)
        parent = PROPAGATOR.extract(job.meta) if "traceparent" in job.meta else None
        span = self.tracer.start_span(
            spans.run_name,
            parent,
            SpanKind.CONSUMER,
            {
                "messaging.system": "jobq",
                "messaging.operation.type": "process",
                "messaging.operation.name": "run",
                "messaging.destination.name": spans.task,
                "messaging.message.id": str(job.id),
                "jobq.attempt": job.attempt,
            },
            record_exception=False,  # below: BaseException too (SystemExit,
            set_status_on_exception=False,  # KeyboardInterrupt) fails an attempt
        )
        token = context.attach(trace.set_span_in_context(span))
        try:
            return call_next()
        except BaseException as exc:
            span.record_exception(exc)
            _set_failed(span, exc)
            raise
        finally:
            context.detach(token)
            span.end()


def _set_failed(span: Span, exc: BaseException) -> None:
    """ERROR, described by the exception; ``cancelled`` when the job was
    asked to stop, as a failure then ends it (never retried)."""
    if isinstance(exc, jobq.JobCancelled) or jobq.cancel_requested():
        span.set_attribute(CANCELLED_ATTRIBUTE, True)
        span.set_status(Status(StatusCode.ERROR, CANCELLED))
    else:
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


class EnqueueSpan:
    """The enqueue hook's context manager: the PRODUCER span, current while
    the jobs are written (a database's spans are its children); as the
    tracer's own ``start_as_current_span``, an exception (not a
    ``BaseException`` such as ``KeyboardInterrupt``) is recorded on it."""

    __slots__ = ("sending", "span", "spans", "token", "tracer")
    span: Span
    token: Token[Context]

    def __init__(self, tracer: Tracer, spans: TaskSpans, sending: Sending) -> None:
        self.tracer = tracer
        self.spans = spans
        self.sending = sending

    def __enter__(self) -> None:
        self.span = self.tracer.start_span(
            self.spans.enqueue_name,
            kind=SpanKind.PRODUCER,
            attributes=self.spans.enqueue_attributes,
        )
        current = trace.set_span_in_context(self.span)
        _inject(self.sending.meta, current)
        self.token = context.attach(current)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        span = self.span
        context.detach(self.token)
        if exc is None:
            ids = [e.id for e in self.sending.added if e.id]  # 0: written at a commit
            if len(ids) == 1:
                span.set_attribute("messaging.message.id", str(ids[0]))
            elif ids:
                span.set_attribute("messaging.batch.message_count", len(ids))
        elif isinstance(exc, Exception) and span.is_recording():
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()


#: The enqueue hook while no span records: the block as it is.
NOTHING_TO_TRACE = contextlib.nullcontext()


def _inject(meta: dict[str, str], current: Context | None) -> None:
    """Write the context of ``current``'s span (default: the current one)
    in a job's ``meta``, its ``tracestate`` cut as ``_cut_tracestate`` says
    (a caller's own longer one is left as it was)."""
    given = meta.get("tracestate")
    PROPAGATOR.inject(meta, current)
    state = meta.get("tracestate")
    if state is not None and state != given and len(state) > MAX_TRACESTATE:
        _cut_tracestate(meta, state)


def _cut_tracestate(meta: dict[str, str], state: str) -> None:
    """Cut ``meta``'s ``tracestate`` to ``MAX_TRACESTATE`` characters as W3C
    Trace Context says (entries longer than 128 characters first, then
    entries from the end), so that a request's huge or hostile
    ``tracestate`` never makes an enqueue fail nor bloats every job."""
    entries = state.split(",")
    for entry in reversed([e for e in entries if len(e) > LARGE_TRACESTATE_ENTRY]):
        if len(",".join(entries)) <= MAX_TRACESTATE:
            break
        entries.remove(entry)
    while len(",".join(entries)) > MAX_TRACESTATE:
        entries.pop()
    if entries:
        meta["tracestate"] = ",".join(entries)
    else:
        del meta["tracestate"]
    _log.debug(
        "jobq.contrib.opentelemetry: a tracestate of %d characters cut to %d for "
        "the job's meta (at most %d are kept)",
        len(state), len(meta.get("tracestate", "")), MAX_TRACESTATE,
    )  # fmt: skip
