"""The limits a queue declares (``queue.limit``): checked where they are
given, kept by name, written to the store when it opens (and at once when
it is open), and what every ``limits=`` of a job must name.

The store keeps one declaration per name and every process enforces what it
holds: the newest declaration wins, and one that changes what the store
held is logged at WARNING (two processes that disagree say so).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Protocol

from jobq._rules import check_limit_name
from jobq.stores.limits import governing
from jobq.types import RATE_PERIODS, Limit

logger = logging.getLogger("jobq")

_RATE = re.compile(r"([1-9][0-9]{0,8})/([smh])")


class LimitDeclarer(Protocol):
    """What a store with limits does with a declaration (``LimitStore``)."""

    def declare_limit(self, limit: Limit) -> Limit | None: ...


def new_limit(name: object, concurrency: object, rate: object, burst: object) -> Limit:
    """A ``Limit`` from ``queue.limit``'s arguments, each checked:
    ``TypeError`` or ``ValueError`` naming it."""
    text = check_limit_name(name, "name")
    if "*" in text[:-1] or (text.endswith("*") and not text.endswith(":*")):
        raise ValueError(
            f"a limit's name is exact, or a family's pattern ending in ':*' "
            f"(such as 'account:*'), not {text!r}"
        )
    if text == ":*":
        raise ValueError("a family's pattern needs a prefix before ':*'")
    if concurrency is not None and (
        type(concurrency) is not int or not 1 <= concurrency <= 2**31 - 1
    ):
        raise ValueError(
            f"concurrency must be an int from 1, or None, not {concurrency!r}"
        )
    per_second: tuple[int, float] | None = None
    if rate is not None:
        if not isinstance(rate, str):
            raise TypeError(f'rate must be a str such as "10/s", not {rate!r}')
        found = _RATE.fullmatch(rate)
        if found is None:
            raise ValueError(
                f'rate must read "N/s", "N/m" or "N/h" (N from 1), not {rate!r}'
            )
        per_second = (int(found.group(1)), RATE_PERIODS[found.group(2)])
    if concurrency is None and per_second is None:
        raise ValueError(f"limit {text!r} needs a concurrency, a rate, or both")
    if type(burst) is not int or not 1 <= burst <= 2**31 - 1:
        raise ValueError(f"burst must be an int from 1, not {burst!r}")
    if burst != 1 and per_second is None:
        raise ValueError("burst goes with a rate: it is how many may start at once")
    count, per = per_second if per_second is not None else (None, None)
    return Limit(text, concurrency, count, per, burst)


class DeclaredLimits:
    """One queue's declarations, by name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._limits: dict[str, Limit] = {}

    def __bool__(self) -> bool:
        return bool(self._limits)

    def add(self, limit: Limit) -> None:
        with self._lock:
            self._limits[limit.name] = limit

    def all(self) -> list[Limit]:
        with self._lock:
            return list(self._limits.values())

    def check(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """``names`` if each falls under a limit declared here; else
        ``ValueError`` naming the first that does not."""
        declared = self.all()
        for name in names:
            if governing(declared, name) is None:
                known = ", ".join(sorted(limit.name for limit in declared)) or "none"
                raise ValueError(
                    f"limit {name!r} is not declared in this process (declared: "
                    f"{known}); declare it with queue.limit({name!r}, ...) or a "
                    "family such as queue.limit('prefix:*', ...)"
                )
        return names

    def write(self, store: LimitDeclarer, limits: list[Limit] | None = None) -> None:
        """Store ``limits`` (default: all), warning of each that changes
        what the store held."""
        for limit in self.all() if limits is None else limits:
            replaced = store.declare_limit(limit)
            if replaced is not None:
                logger.warning(
                    "limit %r is declared here as %s; the store held %s: the store "
                    "now holds this one, which every process enforces",
                    limit.name,
                    describe(limit),
                    describe(replaced),
                )


def describe(limit: Limit) -> str:
    """A limit's settings, for people: "concurrency=2, rate=10/s"."""
    parts = []
    if limit.concurrency is not None:
        parts.append(f"concurrency={limit.concurrency}")
    if limit.rate_text is not None:
        parts.append(f"rate={limit.rate_text}")
        if limit.burst != 1:
            parts.append(f"burst={limit.burst}")
    return ", ".join(parts)
