"""What a failed attempt stores: the traceback as Python prints it (chained
exceptions included), without the ``^^^`` marks, and cut to a bounded size."""

from __future__ import annotations

import re
import traceback

import pytest

import jobq
from jobq._failures import MAX_ERROR_TEXT, describe_failure


def deep(n: int) -> None:
    if n == 0:
        raise KeyError("missing")
    deep(n - 1)


def with_cause() -> None:
    try:
        deep(2)
    except KeyError as exc:
        raise ValueError("bad input") from exc


def with_context() -> None:
    try:
        deep(1)
    except KeyError:
        raise RuntimeError("while handling")  # noqa: B904 - the context is the point


def with_suppressed_context() -> None:
    try:
        deep(1)
    except KeyError:
        raise TypeError("alone") from None


class CustomError(Exception):
    """Named with its module in a traceback."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def with_notes() -> None:
    exc = ValueError("noted")
    exc.add_note("a note for the reader")
    raise exc


def python_prints(exc: BaseException) -> str:
    """The standard traceback, less the lines of ``^`` and ``~`` marks."""
    text = "".join(traceback.format_exception(exc))
    return re.sub(r"(?m)^ +[\^~]+ *\n", "", text)


def raise_(exc: BaseException) -> None:
    raise exc


@pytest.mark.parametrize(
    "raiser",
    [
        with_cause,
        with_context,
        with_suppressed_context,
        with_notes,
        pytest.param(lambda: deep(3), id="deep"),
        pytest.param(lambda: raise_(CustomError("with its module")), id="module"),
        pytest.param(lambda: raise_(ValueError()), id="no-message"),
        pytest.param(lambda: raise_(Unprintable()), id="unprintable"),
    ],
)
def test_the_stored_traceback_reads_as_python_prints_it(raiser: object) -> None:
    assert callable(raiser)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - any of them
        raiser()

    error = describe_failure(caught.value, 0.0)

    assert error.traceback == python_prints(caught.value)
    kind = type(caught.value)
    assert error.type == (
        kind.__name__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def test_a_syntax_error_keeps_the_mark_under_its_position() -> None:
    with pytest.raises(SyntaxError) as caught:
        compile("1 +", "<job>", "exec")

    error = describe_failure(caught.value, 0.0)

    assert error.traceback.endswith(
        "".join(traceback.format_exception_only(caught.value))
    )
    assert "    ^\n" in error.traceback


def test_a_handler_raising_an_exception_whose_text_fails_kills_no_worker() -> None:
    def handler(job: jobq.Job[str]) -> None:
        raise Unprintable

    with jobq.JobQueue(handler, max_attempts=1) as queue:
        queue.enqueue("x")
        queue.start(workers=1)
        assert queue.join(timeout=30)
        [dead] = queue.dead_jobs()
        assert dead.last_error == f"{__name__}.Unprintable: <exception str() failed>"
        queue.enqueue("y")  # the worker still runs jobs
        assert queue.join(timeout=30)
        assert queue.stats().dead == 2


def test_an_exception_group_keeps_its_members() -> None:
    with pytest.raises(ExceptionGroup) as caught:
        raise ExceptionGroup("two", [ValueError("a"), KeyError("b")])

    error = describe_failure(caught.value, 0.0)

    assert "ValueError: a" in error.traceback
    assert "KeyError: 'b'" in error.traceback


def test_a_huge_traceback_keeps_its_innermost_frames_within_the_limit() -> None:
    with pytest.raises(RecursionError) as caught:
        deep(10**6)

    error = describe_failure(caught.value, 0.0)

    assert len(error.traceback) <= MAX_ERROR_TEXT
    assert error.traceback.rstrip().endswith("maximum recursion depth exceeded")
