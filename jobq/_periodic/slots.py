"""When a periodic job's slots fall: pure arithmetic on epoch seconds, no clock.

Every process computes the same slots from the same expression, which is
what lets the store decide which process enqueues each one. ``every=`` slots
are multiples of the period since the epoch (standard library only); cron
slots come from ``cronsim`` (the ``jobq[cron]`` extra), evaluated in an
IANA time zone as Debian's cron does across DST changes: a time skipped by
spring-forward runs once right after the gap, a time repeated at fall-back
runs once (its first occurrence).
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobq.extras import requires

if TYPE_CHECKING:
    from collections.abc import Iterator


class Slots(Protocol):
    """The instants of one schedule, as epoch seconds."""

    expression: str  # "every 600s" or the cron text
    tz: str

    def after(self, t: float) -> float:
        """The first slot strictly after ``t``."""

    def at_or_before(self, t: float) -> float:
        """The latest slot at or before ``t``."""

    def between(self, start: float, end: float, limit: int) -> list[float]:
        """The latest ``limit`` slots in (``start``, ``end``], oldest first."""


class EverySlots:
    """Every ``period`` seconds, at the multiples of it since the epoch."""

    tz = "UTC"

    def __init__(self, period: float) -> None:
        self.period = period
        self.expression = f"every {exact(period)}s"

    def after(self, t: float) -> float:
        return (math.floor(t / self.period) + 1) * self.period

    def at_or_before(self, t: float) -> float:
        return math.floor(t / self.period) * self.period

    def between(self, start: float, end: float, limit: int) -> list[float]:
        first = math.floor(start / self.period) + 1
        last = math.floor(end / self.period)
        return [k * self.period for k in range(max(first, last - limit + 1), last + 1)]


#: What each of a cron expression's five fields holds, for error messages.
CRON_FIELDS = (
    "minute 0-59, hour 0-23, day of month 1-31 or L, month 1-12 or JAN-DEC, "
    "weekday 0-7 or SUN-SAT"
)


def invalid_cron(expression: str, reason: str) -> str:
    """The message of a cron expression ``cronsim`` refuses: its own reason
    ("Bad minute") says which field, the fields' ranges say what fits."""
    return f"cron {expression!r} is not valid: {reason} (the fields: {CRON_FIELDS})"


class CronSlots:
    """A five-field cron expression in an IANA time zone (``cronsim``)."""

    def __init__(self, expression: str, tz: str) -> None:
        with requires("cron", "cron= schedules", "cronsim"):
            from cronsim import CronSim, CronSimError
        if len(expression.split()) != 5:
            raise ValueError(
                f"cron must have five fields ({CRON_FIELDS}), not {expression!r}"
            )
        self.zone = zone(tz)
        self.expression = " ".join(expression.split())
        self.tz = tz
        self._cron = CronSim
        try:
            CronSim(self.expression, dt.datetime.now(self.zone))
        except CronSimError as exc:
            raise ValueError(invalid_cron(expression, str(exc))) from None
        except ValueError:  # int() refuses a number of thousands of digits
            raise ValueError(invalid_cron(expression, "a number too long")) from None

    def _walk(self, t: float, *, reverse: bool) -> Iterator[dt.datetime]:
        start = dt.datetime.fromtimestamp(t, self.zone)
        return iter(self._cron(self.expression, start, reverse=reverse))

    def after(self, t: float) -> float:
        return next(self._walk(t, reverse=False)).timestamp()

    def at_or_before(self, t: float) -> float:
        # cronsim walks strictly before its start; slots fall on whole minutes.
        return next(self._walk(math.floor(t) + 1, reverse=True)).timestamp()

    def between(self, start: float, end: float, limit: int) -> list[float]:
        found: list[float] = []
        for moment in self._walk(math.floor(end) + 1, reverse=True):
            slot = moment.timestamp()
            if slot <= start or len(found) == limit:
                break
            found.append(slot)
        return found[::-1]


def exact(seconds: float) -> str:
    """Seconds as text that names exactly this float, so that the store sees
    any change of period as a change: a whole number without ".0" (600), else
    the shortest text that reads back as the same float (``repr``: 0.1,
    1000000.5). Never rounded, as ``:g`` was (1000000 and 1000001 were both
    "1e+06"); the same text as ``:g`` below 1000000 s with at most 6
    significant digits, so that such expressions stored before read as
    unchanged."""
    seconds = float(seconds)  # an int too: "600"
    return str(int(seconds)) if seconds.is_integer() else repr(seconds)


def zone(tz: str) -> ZoneInfo:
    """The IANA time zone ``tz``; ``ValueError`` naming it if it is unknown."""
    if not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA time zone name, not {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # "Europe": a directory
        raise ValueError(
            f"tz {tz!r} is not a known IANA time zone (e.g. 'Europe/Berlin')"
        ) from None
