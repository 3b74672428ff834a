"""What a failed attempt records: the exception's type, message and traceback,
cut to a size every store keeps and made storable whatever they hold.

The traceback is formatted as Python prints it, chained exceptions included,
without what made it most of a retry's cost (see ``_format_exception``).
"""

from __future__ import annotations

import dataclasses
import linecache
import traceback

from jobq._rules import storable
from jobq.errors import Fatal, Retry
from jobq.types import AttemptError

#: Stored error text (message, traceback) is cut to about this many characters.
MAX_ERROR_TEXT = 10_000


def _cut(text: str, keep: str, limit: int = MAX_ERROR_TEXT) -> str:
    """``text`` cut to ``limit``, keeping its ``keep`` ("head" or "tail")."""
    if len(text) <= limit:
        return text
    marker = "[... cut ...]"
    room = limit - len(marker)
    return text[:room] + marker if keep == "head" else marker + text[-room:]


def type_path(kind: type[BaseException]) -> str:
    """The name an ``AttemptError`` records for an exception class: its
    import path ``module.QualName``, bare for a builtin (as Python prints
    it: ``ValueError``, ``jobq.errors.Fatal``)."""
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


class Reported(Exception):
    """An exception that stands for one raised elsewhere (in the child
    process of an isolated task), recorded as it was described there:
    ``reported`` (its ``at`` is replaced by the time it is recorded)."""

    def __init__(self, reported: AttemptError) -> None:
        super().__init__(reported.message)
        self.reported = reported


def describe_failure(exc: BaseException, at: float) -> AttemptError:
    """An ``AttemptError`` for ``exc``, storable by every store whatever the
    exception holds (an undecodable file name in its message, say); the
    traceback keeps its innermost frames."""
    if isinstance(exc, Reported):
        return dataclasses.replace(exc.reported, at=at)
    message = exc.message if isinstance(exc, Retry | Fatal) else _text(exc)
    # Each part (a frame, or the "Type: message" line) is cut on its own first,
    # so that a huge message cannot push every frame out of the traceback.
    try:
        parts = _format_exception(exc)
    except BaseException as failure:  # noqa: BLE001 - recording must not fail
        parts = [f"<the traceback could not be formatted: {_text(failure)}>\n"]
    trace = "".join(_cut(part, "head", MAX_ERROR_TEXT // 5) for part in parts)
    return AttemptError(
        storable(type_path(type(exc))),
        storable(_cut(message, "head")),
        storable(_cut(trace, "tail")),
        at,
    )


def with_stack(error: AttemptError, stack: str) -> AttemptError:
    """``error`` whose traceback begins with ``stack``, that of a thread
    still running (a handler abandoned at its time limit): where it is
    stuck."""
    text = f"Stack of the abandoned thread (most recent call last):\n{stack}"
    return dataclasses.replace(
        error, traceback=storable(_cut(text + error.traceback, "tail"))
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
        for frame, line_number in traceback.walk_tb(exc.__traceback__):
            # None for an instruction of no line, such as a loop's jump back
            # (typeshed says int).
            lineno: int | None = line_number
            code = frame.f_code
            parts.append(
                f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n'
            )
            if lineno is None:
                continue
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
