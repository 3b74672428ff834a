"""Middleware: code that wraps every attempt of every job.

A middleware is a callable ``(job, call_next) -> object``. It receives the
``jobq.Job`` about to run and a function that runs the rest of the chain
(the next middleware, and at the end the handler or task); what it returns
or raises is what the attempt returned or raised::

    def timed(job: jobq.Job, call_next: Callable[[], object]) -> object:
        started = time.perf_counter()
        try:
            return call_next()
        finally:
            metrics.observe(job.task, time.perf_counter() - started)

    queue = jobq.JobQueue(handler, middleware=[timed, sentry_scope])

The first middleware of the list is the outermost. Each runs in the thread
that runs the job, for plain handlers and named tasks alike; an exception it
raises (before ``call_next`` or after) is a failed attempt like any other.
A job's ``payload`` is a fresh copy for each attempt, so a middleware cannot
change what a later attempt sees. Not calling ``call_next`` skips the handler:
whatever the middleware returns is then the attempt's result.

A time limit's ``JobTimeout`` lands only in the app's own code, never while
jobq's code or the standard library's is on the stack between the handler
call and the line it would land at. An integration whose own code calls the
task's function (outside a middleware: a wrapper that imports it, say) marks
that function ``@hands_over``, so that the frames it calls count as the
handler's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from jobq._worker.interrupt import hands_over
from jobq.types import Job

__all__ = ["Middleware", "check_middleware", "hands_over", "wrap"]

#: ``(job, call_next) -> result``: see the module's documentation.
Middleware = Callable[[Job[Any], Callable[[], object]], object]


def check_middleware(middleware: Iterable[Middleware] | None) -> tuple[Middleware, ...]:
    """The middleware given to a queue, as a tuple; ``TypeError`` for one that
    is not callable (at construction, not at the first job)."""
    if middleware is None:
        return ()
    if callable(middleware):
        raise TypeError(
            f"middleware must be a list of callables, not {middleware!r}; "
            "pass middleware=[...]"
        )
    chain = tuple(middleware)
    for item in chain:
        if not callable(item):
            raise TypeError(f"a middleware must be callable, not {item!r}")
    return chain


def wrap(
    middleware: Sequence[Middleware], job: Job[Any], call: Callable[[], object]
) -> Callable[[], object]:
    """``call`` wrapped in ``middleware``, the first one outermost."""
    for layer in reversed(middleware):
        call = functools.partial(layer, job, call)
    return call
