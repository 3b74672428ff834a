"""The job rules, checked once in the queue for every store.

What a key, a task name, a priority, a job id and a limit may be is decided
here, before any store sees a job, so that every store accepts exactly the
same jobs and a refused call changes nothing anywhere. The bounds are those
the strictest store can hold (PostgreSQL: ``bigint`` ids and priorities,
``integer`` attempts; no NUL in text), so a queue moved from one store to
another keeps working.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from jobq._time import to_seconds
from jobq.types import AFTER_FAILURE_MODES, AfterFailure, Enqueued

#: Priorities and job ids are 64-bit signed integers in every store.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: The most attempts a job may be given (a 32-bit integer in PostgreSQL).
MAX_ATTEMPTS_LIMIT = 2**31 - 1

#: A job's ``meta`` holds at most this many headers, in at most this many
#: bytes of JSON: headers (a trace context, a queue name), not a second payload.
MAX_META_ENTRIES = 64
MAX_META_BYTES = 8192

#: What enqueue hooks (``jobq.Sending``) add to a job's ``meta`` counts
#: against an allowance of its own, beside the caller's limits above: a
#: hook's few headers (a trace context) never make a valid call fail, and
#: the meta stored stays bounded (at most 72 entries in 10 KiB of JSON).
MAX_ADDED_META_ENTRIES = 8
MAX_ADDED_META_BYTES = 2048


def check_int(value: object, name: str, minimum: int, maximum: int = INT64_MAX) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) within [minimum, maximum];
    ``TypeError`` or ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {_short(value)}")
    if value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, not {_short(value)}")
    return value


def check_priority(value: object) -> int:
    """A job's priority: an int that fits in 64 bits."""
    if type(value) is int and INT64_MIN <= value <= INT64_MAX:
        return value  # the common case, without a call: enqueue checks it
    return check_int(value, "priority", INT64_MIN)


def check_max_attempts(value: object) -> int:
    """How many attempts a job gets: 1 to ``MAX_ATTEMPTS_LIMIT``."""
    return check_int(value, "max_attempts", 1, MAX_ATTEMPTS_LIMIT)


def check_timeout(value: object, name: str = "timeout") -> float | None:
    """A time limit in seconds: ``None`` (no limit), or a number or
    ``timedelta`` that is finite and above 0; ``TypeError`` or ``ValueError``
    naming ``name`` otherwise."""
    if value is None:
        return None
    seconds = to_seconds(value, name)
    if seconds <= 0:
        raise ValueError(
            f"{name} must be a number of seconds above 0 (or None for no limit), "
            f"not {value!r}"
        )
    return seconds


#: The most limits one job may run under, and the longest limit name.
MAX_JOB_LIMITS = 8
MAX_LIMIT_NAME = 200


def check_limit_name(value: object, name: str = "limit name") -> str:
    """A limit's name: text every store holds, 1 to ``MAX_LIMIT_NAME``
    characters."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {value!r}")
    if not 0 < len(value) <= MAX_LIMIT_NAME:
        raise ValueError(
            f"{name} must be 1 to {MAX_LIMIT_NAME} characters, not {len(value)}"
        )
    return check_text(value, name)


def check_job_limits(value: object) -> tuple[str, ...]:
    """A job's ``limits``: a list or tuple of concrete limit names (no
    ``*``), at most ``MAX_JOB_LIMITS``, duplicates dropped in order."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise TypeError(f"limits must be a list of limit names, not {value!r}")
    names = tuple(
        dict.fromkeys(check_limit_name(v, "a limit in limits") for v in value)
    )
    if len(names) > MAX_JOB_LIMITS:
        raise ValueError(
            f"a job may run under at most {MAX_JOB_LIMITS} limits, not {len(names)}"
        )
    for limit in names:
        if "*" in limit:
            raise ValueError(
                f"limits name concrete limits, not patterns: {limit!r} (for a "
                "family declared as 'account:*', give 'account:42')"
            )
    return names


#: A job may be added after at most this many parents (``after=``).
MAX_PARENTS = 10_000


def check_after(value: object) -> tuple[int, ...]:
    """A job's ``after``: a list or tuple of job ids or ``Enqueued``s,
    distinct, at most ``MAX_PARENTS``; the ids in that order."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise TypeError(
            f"after must be a list of job ids or Enqueued, not {_short_repr(value)}"
        )
    ids: list[int] = []
    for item in value:
        job_id = item.id if isinstance(item, Enqueued) else item
        if isinstance(item, Enqueued) and job_id == 0:
            raise ValueError(
                "after names a job not written yet (id 0: its write waits for a "
                "transaction's commit, as Django's enqueue inside an atomic block "
                "does); enqueue this job once that one is written "
                "(transaction.on_commit), or write both at once (connection=)"
            )
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise TypeError(
                f"after must hold job ids or Enqueued, not {_short_repr(item)}"
            )
        ids.append(check_int(job_id, "a job id in after", 1))
    if len(ids) > MAX_PARENTS:
        raise ValueError(f"after names {len(ids)} jobs; at most {MAX_PARENTS}")
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"after names job {twice} twice")
    return tuple(ids)


def check_after_failure(value: object) -> AfterFailure:
    """A job's ``after_failure``: "wait", "cancel" or "run"."""
    for mode in AFTER_FAILURE_MODES:
        if value == mode and isinstance(value, str):
            return mode
    raise ValueError(
        f'after_failure must be "wait", "cancel" or "run", not {_short_repr(value)}'
    )


def check_text(value: str, name: str) -> str:
    """``value`` if every store can hold it: no NUL character (PostgreSQL
    refuses it) and no lone surrogate (not UTF-8, so SQLite, PostgreSQL and
    the JSON file's journal cannot encode it); ``ValueError`` otherwise."""
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters: {value!r}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{name} must be valid Unicode text (it holds a lone surrogate, "
                f"such as an undecodable file name gives): {value!r}"
            ) from None
    return value


def check_key(key: object) -> str | None:
    """A job's key: ``None`` or text every store can hold."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise TypeError(f"key must be a str or None, not {key!r}")
    return check_text(key, "key")


def check_meta(meta: object) -> str | None:
    """A job's ``meta`` as the text every store keeps: a JSON object with
    sorted keys, ASCII only; ``None`` for no headers (``None`` or empty).

    It must be a mapping of non-empty ``str`` keys to ``str`` values that
    every store can hold (``check_text``), at most ``MAX_META_ENTRIES`` of
    them in at most ``MAX_META_BYTES`` of JSON; ``TypeError`` or
    ``ValueError`` otherwise.
    """
    if meta is None:
        return None
    if not isinstance(meta, Mapping):
        raise TypeError(f"meta must be a mapping of str to str or None, not {meta!r}")
    if not meta:
        return None
    if len(meta) > MAX_META_ENTRIES:
        raise ValueError(
            f"meta holds {len(meta)} entries; at most {MAX_META_ENTRIES} are allowed"
        )
    _check_entries(meta)
    text = _meta_text(meta)
    if len(text) > MAX_META_BYTES:  # ASCII (json escapes the rest): chars = bytes
        raise ValueError(
            f"meta is {len(text)} bytes of JSON; at most {MAX_META_BYTES} bytes are "
            "allowed"
        )
    return text


def check_sent_meta(
    given: Mapping[str, str] | None, sent: Mapping[str, Any]
) -> str | None:
    """The ``meta`` text of jobs sent through enqueue hooks: ``sent`` is
    ``given`` (the caller's, already passed by ``check_meta``) with what the
    hooks added or changed.

    The hooks' entries have an allowance of their own, beside the caller's
    limits, so that a hook (the trace context of OpenTelemetry's integration)
    never makes a call fail that is valid without it: at most
    ``MAX_ADDED_META_ENTRIES`` entries in at most ``MAX_ADDED_META_BYTES`` of
    JSON. Every entry must still be text every store can hold.
    """
    if not sent:
        return None
    _check_entries(sent)
    if not given:
        added: Mapping[str, str] = sent
    else:
        added = {k: v for k, v in sent.items() if given.get(k) != v}
    if len(added) > MAX_ADDED_META_ENTRIES:
        raise ValueError(
            f"enqueue hooks added {len(added)} meta entries ({_names(added)}); at "
            f"most {MAX_ADDED_META_ENTRIES} are allowed besides the caller's meta: "
            "make the hooks add fewer headers"
        )
    added_text = _meta_text(added) if added else "{}"
    if len(added_text) > MAX_ADDED_META_BYTES:
        raise ValueError(
            f"enqueue hooks added meta entries ({_names(added)}) of "
            f"{len(added_text)} bytes of JSON; at most {MAX_ADDED_META_BYTES} bytes "
            "are allowed besides the caller's meta: make the hooks add less"
        )
    return added_text if added is sent else _meta_text(sent)


def _check_entries(meta: Mapping[Any, Any]) -> None:
    """``TypeError`` or ``ValueError`` for an entry of ``meta`` that is not
    a non-empty ``str`` key to a ``str`` value every store can hold."""
    for name, value in meta.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(
                f"meta must map str to str, not {name!r} to {_short_repr(value)}"
            )
        if not name:
            raise ValueError("meta keys must not be empty")
        check_text(name, "a meta key")
        check_text(value, f"meta[{name!r}]")


def _meta_text(meta: Mapping[str, str]) -> str:
    """The JSON text stores keep: compact, keys sorted, ASCII only."""
    return json.dumps(dict(meta), sort_keys=True, separators=(",", ":"))


def _names(meta: Mapping[str, str]) -> str:
    """The keys of ``meta`` for a message, cut after a few."""
    names = sorted(meta)
    shown = ", ".join(_short_repr(name) for name in names[:5])
    return shown if len(names) <= 5 else f"{shown}, ..."


def storable(text: str) -> str:
    """``text`` made storable by every store, for text jobq must record
    whatever it holds (an error's message and traceback): NUL becomes the
    four characters ``\\x00`` and a lone surrogate its ``\\udcff`` escape,
    as ``repr`` would show them."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def stored_id(value: object) -> int | None:
    """The job id ``value`` names, or ``None`` if no store can hold a job by
    that id (zero, negative, or beyond 64 bits): such a job does not exist.
    ``TypeError`` for what is not an id at all."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected a job id or an Enqueued, not {value!r}")
    return value if 1 <= value <= INT64_MAX else None


def checked_clock(clock: Callable[[], Any]) -> Callable[[], float]:
    """``clock`` that raises ``ValueError`` at the call that read a value that
    is not finite epoch seconds (NaN, infinity, not a number), instead of
    letting that value into a job's due time."""

    def now() -> float:
        value = clock()
        if isinstance(value, float | int) and not isinstance(value, bool):
            seconds = float(value)
            if math.isfinite(seconds):
                return seconds
        raise ValueError(
            f"the queue's clock returned {value!r}; it must return finite epoch "
            "seconds (a float, as time.time() does)"
        )

    return now


def _short_repr(value: object) -> str:
    """``repr(value)`` cut for a message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _short(value: int) -> str:
    """An int for a message: huge ones (which ``str`` refuses beyond 4,300
    digits) by their size."""
    if value.bit_length() > 256:
        return f"an int of {value.bit_length()} bits"
    return str(value)
