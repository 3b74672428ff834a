"""Turning the delays and times users pass into epoch seconds, with clear errors."""

from __future__ import annotations

import datetime as dt
import math


def to_seconds(value: object, name: str) -> float:
    """Seconds from a number or ``timedelta``; ``ValueError`` if < 0 or infinite."""
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int no float holds: refused below
            seconds = math.inf
    else:
        raise TypeError(f"{name} must be seconds or a timedelta, not {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(
            f"{name} must be a finite number of seconds >= 0, not {value!r}"
        )
    return seconds


def to_epoch(at: object, name: str = "at") -> float:
    """Epoch seconds from an aware ``datetime`` or a number of epoch seconds."""
    if isinstance(at, dt.datetime):
        if at.tzinfo is None or at.utcoffset() is None:
            raise ValueError(
                f"{name} must be an aware datetime (with tzinfo), not {at!r}"
            )
        return at.timestamp()
    if isinstance(at, int | float) and not isinstance(at, bool):
        if not math.isfinite(at):
            raise ValueError(f"{name} must be finite, not {at!r}")
        return float(at)
    raise TypeError(f"{name} must be an aware datetime or epoch seconds, not {at!r}")
