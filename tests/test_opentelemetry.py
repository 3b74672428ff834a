"""``jobq.contrib.opentelemetry`` with the SDK's in-memory exporter: the
enqueue span is the parent of every attempt's span, through retries and
across processes (SQLite); a failed attempt's span has the exception."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry import context, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
)

import jobq
from jobq._rules import MAX_META_BYTES, MAX_META_ENTRIES
from jobq.contrib.opentelemetry import instrument, tracing_for
from jobq.testing import Clock

ROOT = Path(__file__).resolve().parents[1]

MakeQueue = Callable[..., jobq.JobQueue[Any]]

#: The caller's meta at each of its documented limits.
MOST_ENTRIES = {f"{n:02}": "" for n in range(MAX_META_ENTRIES)}
MOST_BYTES = {"a": "x" * (MAX_META_BYTES - len('{"a":""}'))}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def test_each_attempt_s_span_is_a_child_of_the_enqueue_span_through_a_retry(
    exporter: InMemorySpanExporter, provider: TracerProvider, clock: Clock
) -> None:
    attempts = {"left": 1}
    queue: jobq.JobQueue[Any] = jobq.JobQueue(clock=clock, jitter=False)

    @queue.task(name="flaky")
    def flaky() -> None:
        if attempts["left"]:
            attempts["left"] -= 1
            raise ValueError("not yet")

    instrument(queue, provider)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("request"):
        job = flaky.enqueue()
    queue.run_pending()
    clock.advance(60)
    queue.run_pending()

    spans = exporter.get_finished_spans()
    (request,) = named(spans, "request")
    (enqueue,) = named(spans, "jobq.enqueue flaky")
    runs = named(spans, "jobq.run flaky")
    assert enqueue.kind is SpanKind.PRODUCER
    assert enqueue.parent is not None
    assert enqueue.parent.span_id == request.context.span_id
    assert dict(enqueue.attributes or {}) == {
        "messaging.system": "jobq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "flaky",
        "messaging.message.id": str(job.id),
    }
    assert len(runs) == 2
    for attempt, run in enumerate(runs, start=1):
        assert run.kind is SpanKind.CONSUMER
        assert run.parent is not None
        assert run.parent.span_id == enqueue.context.span_id
        assert run.context.trace_id == request.context.trace_id
        assert dict(run.attributes or {}) == {
            "messaging.system": "jobq",
            "messaging.operation.type": "process",
            "messaging.operation.name": "run",
            "messaging.destination.name": "flaky",
            "messaging.message.id": str(job.id),
            "jobq.attempt": attempt,
        }
    failed, succeeded = runs
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "ValueError: not yet"
    (event,) = failed.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "ValueError"
    assert succeeded.status.status_code is StatusCode.UNSET
    record = queue.get(job)
    assert record is None  # finished; its meta held the context while it waited


def test_an_attempt_that_ends_its_job_cancelled_has_a_span_that_says_so(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    def stop_itself(job: jobq.Job[Any]) -> None:
        assert queue.cancel(job.id)  # asked while it runs: JobCancelled comes,
        raise RuntimeError("gave up")  # or this failure ends it cancelled

    queue: jobq.JobQueue[Any] = jobq.JobQueue(stop_itself)
    instrument(queue, provider)
    job = queue.enqueue("x")
    queue.start(workers=1)  # a worker thread: run_pending's can not be stopped
    assert queue.join(timeout=30)

    (run,) = named(exporter.get_finished_spans(), "jobq.run (handler)")
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "cancelled"
    assert (run.attributes or {})["jobq.cancelled"] is True
    assert [event.name for event in run.events] == ["exception"]
    record = queue.get(job)
    assert record is not None
    assert record.state is jobq.JobState.CANCELLED
    queue.close()


def test_the_job_s_meta_holds_the_w3c_trace_context(provider: TracerProvider) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
    instrument(queue, provider)

    job = queue.enqueue("x", meta={"mine": "kept"})

    record = queue.get(job)
    assert record is not None
    assert set(record.meta) == {"mine", "traceparent"}
    assert record.meta["traceparent"].startswith("00-")


def remote_parent(state: TraceState) -> trace.Span:
    """The span of a request that came with this ``tracestate``."""
    return NonRecordingSpan(
        SpanContext(
            0x4BF92F3577B34DA6A3CE929D0E0E4736,
            0x00F067AA0BA902B7,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
            trace_state=state,
        )
    )


@pytest.mark.parametrize("meta", [MOST_ENTRIES, MOST_BYTES], ids=["64", "8KiB"])
def test_tracing_never_makes_an_enqueue_with_meta_at_its_limits_fail(
    make_queue: MakeQueue, provider: TracerProvider, meta: dict[str, str]
) -> None:
    queue = make_queue(None)
    instrument(queue, provider)
    request = remote_parent(TraceState([("vendor", "opaque-value")]))

    with trace.use_span(request):
        job = queue.enqueue("x", meta=meta)
        [many] = queue.enqueue_many(["y"], meta=meta)

    for enqueued in (job, many):
        record = queue.get(enqueued)
        assert record is not None
        assert record.meta == {
            **meta,
            "traceparent": record.meta["traceparent"],
            "tracestate": "vendor=opaque-value",
        }


def test_a_huge_tracestate_is_cut_to_512_characters_as_w3c_says(
    provider: TracerProvider,
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
    instrument(queue, provider)
    hostile = '"\\\\' * 85  # 255 characters that JSON escapes to 510
    large = [("first", "1"), *[(f"k{n:02}", hostile) for n in range(30)], ("last", "z")]
    small = [(f"k{n:02}", "v" * 16) for n in range(32)]  # 671 characters

    kept = []
    for members in (large, small):
        request = remote_parent(TraceState(members))
        with trace.use_span(request):
            job = queue.enqueue("x", meta=MOST_BYTES)
        record = queue.get(job)
        assert record is not None
        kept.append(record.meta["tracestate"])

    # Entries over 128 characters go first (from the end), then the last ones.
    assert kept == [
        f"first=1,k00={hostile},last=z",
        ",".join(f"k{n:02}={'v' * 16}" for n in range(24)),
    ]
    assert all(len(state) <= 512 for state in kept)


def test_a_closed_tracing_adds_no_span_and_no_meta(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
    tracing = instrument(queue, provider)
    with pytest.raises(ValueError, match="already instrumented"):
        instrument(queue, provider)
    assert tracing_for(queue) is tracing
    tracing.close()

    job = queue.enqueue("x")
    queue.run_pending()

    assert exporter.get_finished_spans() == ()
    assert queue.get(job) is None  # it ran
    assert tracing_for(queue) is None
    assert queue.middleware == ()


def test_spans_made_inside_are_children_and_the_context_is_restored(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    tracer = provider.get_tracer("app")

    def handler(job: jobq.Job[Any]) -> None:
        with tracer.start_as_current_span("inside the handler"):
            pass

    queue: jobq.JobQueue[Any] = jobq.JobQueue(handler)
    instrument(queue, provider)
    queue.enqueue_many(["a", "b"])
    queue.run_pending()

    spans = exporter.get_finished_spans()
    (enqueue,) = named(spans, "jobq.enqueue (handler)")
    assert (enqueue.attributes or {})["messaging.batch.message_count"] == 2
    runs = named(spans, "jobq.run (handler)")
    inside = named(spans, "inside the handler")
    assert [i.parent.span_id for i in inside if i.parent] == [
        run.context.span_id for run in runs
    ]
    assert trace.get_current_span() is INVALID_SPAN  # each span detached


def test_a_failed_enqueue_s_span_has_the_exception(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None, max_pending=1)
    instrument(queue, provider)
    queue.enqueue("a")

    with pytest.raises(jobq.QueueFull):
        queue.enqueue("b")

    ok, failed = named(exporter.get_finished_spans(), "jobq.enqueue (handler)")
    assert ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.status.description or "").startswith("QueueFull: ")
    assert [event.name for event in failed.events] == ["exception"]
    assert "messaging.message.id" not in (failed.attributes or {})
    assert trace.get_current_span() is INVALID_SPAN


RUNNER = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import jobq
from jobq.contrib.opentelemetry import instrument

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
queue = jobq.JobQueue(store=sys.argv[1])

@queue.task(name="remote")
def remote():
    raise jobq.Fatal("over there")

instrument(queue, provider)
with queue:
    queue.run_pending()
print(json.dumps([
    {"name": s.name, "trace": s.context.trace_id, "parent": s.parent.span_id,
     "status": s.status.status_code.name, "events": [e.name for e in s.events]}
    for s in exporter.get_finished_spans()
]))
"""


def test_the_attempt_in_another_process_is_a_child_of_the_enqueue_span(
    tmp_path: Path, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    with jobq.JobQueue[Any](store=store) as queue:

        @queue.task(name="remote")
        def remote() -> None: ...

        instrument(queue, provider)
        remote.enqueue()
    (enqueue,) = exporter.get_finished_spans()

    ran = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RUNNER), store],
        check=True, capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip

    assert json.loads(ran.stdout) == [
        {
            "name": "jobq.run remote",
            "trace": enqueue.context.trace_id,
            "parent": enqueue.context.span_id,
            "status": "ERROR",
            "events": ["exception"],
        }
    ]


#: A request's context as the API alone knows it: a remote span, no SDK.
REMOTE = SpanContext(
    0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True,
    TraceFlags(TraceFlags.SAMPLED), TraceState([("vendor", "value")]),
)  # fmt: skip


def test_with_the_api_alone_jobs_carry_the_current_context_to_their_attempts() -> None:
    seen: list[SpanContext] = []
    queue: jobq.JobQueue[Any] = jobq.JobQueue(
        lambda job: seen.append(trace.get_current_span().get_span_context())
    )
    instrument(queue, trace.NoOpTracerProvider())
    alone = queue.enqueue("no context")
    token = context.attach(trace.set_span_in_context(NonRecordingSpan(REMOTE)))
    try:
        carried = queue.enqueue("in a request")
    finally:
        context.detach(token)

    assert "traceparent" not in (queue.get(alone) or pytest.fail("ran")).meta
    meta = (queue.get(carried) or pytest.fail("ran")).meta
    assert meta["traceparent"] == (
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    )
    assert meta["tracestate"] == "vendor=value"
    queue.run_pending()
    assert seen == [INVALID_SPAN.get_span_context(), REMOTE]
    assert trace.get_current_span() is INVALID_SPAN


def test_a_tracer_provider_set_after_instrumenting_traces_the_later_jobs(
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)  # none set yet
    queue: jobq.JobQueue[Any] = jobq.JobQueue(lambda job: None)
    instrument(queue)  # the global provider's stand-in
    queue.enqueue("before")
    queue.run_pending()
    assert exporter.get_finished_spans() == ()

    # What trace.set_tracer_provider sets (once per process: not here).
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    queue.enqueue("after")
    queue.run_pending()

    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == [
        "jobq.enqueue (handler)",
        "jobq.run (handler)",
    ]
    assert spans[1].parent is not None
    assert spans[1].parent.span_id == spans[0].context.span_id
