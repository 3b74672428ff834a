"""Running one claimed job: call the handler, then record success or a failed attempt.

A job with a ``task`` name goes to the function ``@queue.task`` registered
under that name, with the arguments stored in its payload; any other job goes
to the queue's handler, as a ``Job``.

Worker threads and ``run_pending`` both come here, so a job behaves the same
whichever thread runs it. Anything the handler raises, ``BaseException``
subclasses included, is a failed attempt; nothing it does can kill the caller.
"""

from __future__ import annotations

import linecache
import logging
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from jobq._json import decode, encode
from jobq._rules import storable
from jobq._time import to_seconds
from jobq.errors import Fatal, Retry
from jobq.retry import RetryPolicy
from jobq.stores.base import Claim, Done, Failure, Store
from jobq.tasks import task_arguments, unknown_task
from jobq.types import AttemptError, Job

logger = logging.getLogger("jobq")

#: Stored error text (message, traceback) is cut to about this many characters.
MAX_ERROR_TEXT = 10_000

Handler = Callable[[Job[Any]], Any]


class NoHandler(Fatal):
    """Recorded for a plain job (no task) on a queue without a handler: the
    job is dead at once."""


def _cut(text: str, keep: str, limit: int = MAX_ERROR_TEXT) -> str:
    """``text`` cut to ``limit``, keeping its ``keep`` ("head" or "tail")."""
    if len(text) <= limit:
        return text
    marker = "[... cut ...]"
    room = limit - len(marker)
    return text[:room] + marker if keep == "head" else marker + text[-room:]


def describe_failure(exc: BaseException, at: float) -> AttemptError:
    """An ``AttemptError`` for ``exc``, storable by every store whatever the
    exception holds (an undecodable file name in its message, say); the
    traceback keeps its innermost frames."""
    message = exc.message if isinstance(exc, Retry | Fatal) else _text(exc)
    # Each part (a frame, or the "Type: message" line) is cut on its own first,
    # so that a huge message cannot push every frame out of the traceback.
    parts = _format_exception(exc)
    trace = "".join(_cut(part, "head", MAX_ERROR_TEXT // 5) for part in parts)
    return AttemptError(
        storable(type(exc).__name__),
        storable(_cut(message, "head")),
        storable(_cut(trace, "tail")),
        at,
    )


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _format_exception(exc: BaseException, seen: set[int] | None = None) -> list[str]:
    """``traceback.format_exception(exc)``, chained exceptions included, less
    what made it most of a failed attempt's cost: the column positions of each
    frame (for ``^^^`` marks; 3.13 also parses the source for them) and a stat
    of every source file. Exception groups keep the standard format."""
    if isinstance(exc, BaseExceptionGroup):
        return traceback.format_exception(exc)
    seen = set() if seen is None else seen
    seen.add(id(exc))
    parts: list[str] = []
    context = None if exc.__suppress_context__ else exc.__context__
    if exc.__cause__ is not None and id(exc.__cause__) not in seen:
        parts += [*_format_exception(exc.__cause__, seen), _CAUSE]
    elif context is not None and id(context) not in seen:
        parts += [*_format_exception(context, seen), _CONTEXT]
    if exc.__traceback__ is not None:
        parts.append("Traceback (most recent call last):\n")
        for frame, lineno in traceback.walk_tb(exc.__traceback__):
            code = frame.f_code
            parts.append(
                f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n'
            )
            line = linecache.getline(code.co_filename, lineno, frame.f_globals)
            if line.strip():
                parts.append(f"    {line.strip()}\n")
    return [*parts, *_exception_line(exc)]


def _exception_line(exc: BaseException) -> list[str]:
    """``traceback.format_exception_only(exc)``, built directly in the common
    case (a fifth of a failed attempt's cost otherwise)."""
    if isinstance(exc, SyntaxError) or getattr(exc, "__notes__", None) is not None:
        return traceback.format_exception_only(exc)
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ not in ("__main__", "builtins"):
        name = f"{kind.__module__}.{name}"
    text = _text(exc)
    return [f"{name}: {text}\n" if text else f"{name}\n"]


def _text(exc: BaseException) -> str:
    """``str(exc)``, or what ``traceback`` prints when that fails too."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a failure's own text must not fail
        return "<exception str() failed>"


class Failed(NamedTuple):
    """A failed attempt: what the store records, and the exception (for the
    log, and for ``run_pending`` to re-raise an interrupt)."""

    failure: Failure
    exc: BaseException

    @property
    def claim(self) -> Claim:
        return self.failure.claim


CounterName = Literal["completed", "retried"]


class Counters:
    """``completed`` and ``retried`` as counted by one queue object, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.completed = 0
        self.retried = 0

    def count(self, counter: CounterName, n: int) -> None:
        """Add ``n`` to ``completed`` or ``retried``."""
        with self._lock:
            setattr(self, counter, getattr(self, counter) + n)


class Runner:
    """Runs claimed jobs for one queue and reports their outcome to its store."""

    def __init__(
        self,
        store: Store,
        handler: Handler | None,
        policy: RetryPolicy,
        clock: Callable[[], float],
        keep_completed: float,
        tasks: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.store = store
        self.handler = handler
        #: Named tasks by name: the queue's registry itself, so tasks
        #: registered later are found too.
        self.tasks: Mapping[str, Callable[..., Any]] = {} if tasks is None else tasks
        self.policy = policy
        self.clock = clock
        self.keep_completed = keep_completed
        self.counters = Counters()
        #: The claims whose handlers run now, by job id, with the monotonic time
        #: each started: for warnings about slow handlers.
        #: Changed and copied only by single dict operations, which are atomic.
        self.active: dict[int, tuple[Claim, float]] = {}
        #: Every claim this queue's workers hold, started or not, by
        #: (id, token): the leases the watchdog renews.
        self.held: dict[tuple[int, int], Claim] = {}

    def run(self, claim: Claim) -> BaseException | None:
        """Run the handler for ``claim`` and record what happened.

        Returns the ``KeyboardInterrupt`` or ``SystemExit`` the handler raised,
        if any: recorded as a failed attempt like anything else, it is also
        meant for the calling thread (``run_pending`` re-raises it, so Ctrl-C
        stops a cron script; worker threads carry on).
        """
        self.hold([claim])
        outcome = self.run_one(claim)
        self.record([outcome])
        if isinstance(outcome, Failed) and isinstance(
            outcome.exc, KeyboardInterrupt | SystemExit
        ):
            return outcome.exc
        return None

    def hold(self, claims: Sequence[Claim]) -> None:
        """Note claims taken from the store, until their outcome is recorded."""
        for claim in claims:
            self.held[claim.id, claim.token] = claim

    def held_claims(self) -> list[Claim]:
        return list(self.held.copy().values())

    def run_one(self, claim: Claim) -> Done | Failed:
        """Call the handler; the outcome is recorded with ``record`` (alone or
        with others)."""
        self.active[claim.id] = (claim, time.monotonic())
        try:
            result = self._call(claim)
        except BaseException as exc:  # noqa: BLE001 - every failure is an attempt
            return self._failed(claim, exc)
        finally:
            del self.active[claim.id]
        return Done(claim, self._stored_result(claim, result))

    def record(self, outcomes: Sequence[Done | Failed]) -> None:
        """Record outcomes: the successes in one store write, the failed
        attempts in another, then log each failure recorded."""
        if not outcomes:
            return
        done: list[Done] = []
        failed: list[Failed] = []
        for outcome in outcomes:
            if isinstance(outcome, Done):
                done.append(outcome)
            else:
                failed.append(outcome)
        now = self.clock()
        if done:
            keep_until = now + self.keep_completed if self.keep_completed > 0 else None
            self._record(
                [d.claim for d in done],
                "success",
                lambda: self.store.finish_many(done, keep_until, now),
                "completed",
                [1] * len(done),
            )
        if failed:
            failures = [f.failure for f in failed]
            recorded = self._record(
                [f.claim for f in failures],
                "failure",
                lambda: self.store.fail_many(failures, now),
                "retried",
                [int(f.retry_at is not None) for f in failures],
            )
            for outcome, ok in zip(failed, recorded, strict=True):
                if ok:
                    _log_failure(outcome)

    def release(self, claims: Sequence[Claim]) -> None:
        """Give claims whose jobs did not start back to the store."""
        if not claims:
            return
        try:
            self.store.release(claims, self.clock())
        except Exception:
            logger.exception(
                "%d claimed job(s) could not be given back; they run once their "
                "claims are recovered",
                len(claims),
            )
        self._forget(claims)

    def _forget(self, claims: Sequence[Claim]) -> None:
        for claim in claims:
            self.held.pop((claim.id, claim.token), None)

    def _call(self, claim: Claim) -> Any:
        """Call the job's task with its arguments, or the handler with a ``Job``.

        An unknown task, a task job's malformed payload, or a plain job on a
        queue without a handler raise a ``Fatal``: the job is dead at once.
        """
        if claim.task is not None:
            function = self.tasks.get(claim.task)
            if function is None:
                raise unknown_task(claim.task)
            args, kwargs = task_arguments(claim.payload)
            return function(*args, **kwargs)
        if self.handler is None:
            raise NoHandler(
                "this queue has no handler for plain jobs (those added with "
                "enqueue); pass one to JobQueue(handler)"
            )
        return self.handler(
            Job(claim.id, decode(claim.payload), claim.attempt, claim.key)
        )

    def _stored_result(self, claim: Claim, result: Any) -> str | None:
        """The result as JSON text, if completed jobs are kept; else ``None``."""
        if self.keep_completed <= 0:
            return None
        try:
            return encode(result, "result")
        except TypeError:
            logger.warning(
                "job %d succeeded but its result is not JSON; keeping None", claim.id
            )
            return None

    def _failed(self, claim: Claim, exc: BaseException) -> Failed:
        """The failed attempt ``exc`` ended: its error, and when the job runs
        again (never after a ``Fatal`` or its last attempt)."""
        now = self.clock()
        retry_at = None
        if not isinstance(exc, Fatal) and claim.attempt < claim.max_attempts:
            retry_at = now + self._retry_delay(claim, exc)
        return Failed(Failure(claim, describe_failure(exc, now), retry_at), exc)

    def _record(
        self,
        claims: Sequence[Claim],
        outcome: str,
        write: Callable[[], list[bool]],
        counter: CounterName,
        counts: Sequence[int],
    ) -> list[bool]:
        """Record one outcome for each of ``claims`` with ``write`` (the store
        call); whether each was recorded. ``counts`` are what each claim adds
        to the counter named ``counter``.

        The counters move first, so that whoever the store's settling wakes
        (``join``) already sees them, and move back for the outcomes the store
        did not record (stale claims, or a store error: the worker goes on
        either way).
        """
        self.counters.count(counter, sum(counts))
        try:
            recorded = write()
        except Exception as store_error:  # noqa: BLE001 - workers outlive store errors
            recorded = [False] * len(claims)
            for claim in claims:
                _log_unrecorded(claim, outcome, store_error)
        else:
            for claim, ok in zip(claims, recorded, strict=True):
                if not ok:
                    _log_stale(claim, outcome)
        finally:
            self._forget(claims)
        if not all(recorded):
            missed = zip(counts, recorded, strict=True)
            self.counters.count(counter, -sum(n for n, ok in missed if not ok))
        return recorded

    def _retry_delay(self, claim: Claim, exc: BaseException) -> float:
        if isinstance(exc, Retry) and exc.after is not None:
            try:
                return to_seconds(exc.after, "Retry(after=...)")
            except (TypeError, ValueError):
                logger.warning(
                    "job %d raised Retry with a bad after=%r; using the backoff",
                    claim.id,
                    exc.after,
                )
        return self.policy.delay(claim.attempt)


def _log_failure(failed: Failed) -> None:
    claim, error, retry_at = failed.failure
    if retry_at is None:
        logger.error(
            "job %d is dead after %d attempt(s): %s: %s",
            claim.id,
            claim.attempt,
            error.type,
            error.message,
            exc_info=failed.exc,
        )
    else:
        logger.warning(
            "job %d attempt %d failed (%s: %s); retry in %.3g s",
            claim.id,
            claim.attempt,
            error.type,
            error.message,
            retry_at - error.at,
        )


def _log_unrecorded(claim: Claim, outcome: str, exc: Exception) -> None:
    """The store failed to record an outcome (closed, unreachable): the worker
    goes on, and the job runs again once the store recovers its claim."""
    logger.error(
        "job %d: its %s could not be recorded; it runs again once its claim is "
        "recovered",
        claim.id,
        outcome,
        exc_info=exc,
    )


def _log_stale(claim: Claim, outcome: str) -> None:
    logger.warning(
        "job %d: its %s was not recorded because the claim is no longer current "
        "(the job was recovered or claimed again)",
        claim.id,
        outcome,
    )
