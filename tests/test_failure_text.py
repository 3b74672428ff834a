"""What a failed attempt stores: the traceback as Python prints it (chained
exceptions included), without the ``^^^`` marks, and cut to a bounded size."""

from __future__ import annotations

import re
import traceback

import pytest

from jobq._runner import MAX_ERROR_TEXT, describe_failure


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


def python_prints(exc: BaseException) -> str:
    """The standard traceback, less the lines of ``^`` and ``~`` marks."""
    text = "".join(traceback.format_exception(exc))
    return re.sub(r"(?m)^ +[\^~]+ *\n", "", text)


@pytest.mark.parametrize(
    "raiser", [with_cause, with_context, with_suppressed_context, lambda: deep(3)]
)
def test_the_stored_traceback_reads_as_python_prints_it(raiser: object) -> None:
    assert callable(raiser)
    with pytest.raises(Exception) as caught:  # noqa: PT011 - any of them
        raiser()

    error = describe_failure(caught.value, 0.0)

    assert error.traceback == python_prints(caught.value)
    assert error.type == type(caught.value).__name__


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
