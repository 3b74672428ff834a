"""The rules of limits (see "Limits" in ``jobq.stores.base``), the same in
every store: which declaration governs a key, and the rate's arithmetic.

A rate is a GCRA (generic cell rate algorithm, a token bucket kept as one
number): each key keeps a *theoretical arrival time* ``tat``; with ``I`` =
``per / rate`` seconds between evenly spaced starts and ``burst`` ``B``, a
start at ``t`` is allowed when ``t >= tat - (B - 1) * I``, and moves ``tat``
to ``max(tat, t) + I``. So at most ``B`` start at once, then one every
``I``; any window of ``per`` seconds holds at most ``rate + B - 1`` starts
(``rate`` with the default ``B = 1``). One number per key, updated in the
write that claims: exact across processes, O(1).
"""

from __future__ import annotations

from collections.abc import Iterable

from jobq.types import Limit, LimitUsage

#: A key that never started anything: every rate allows it.
NEVER = float("-inf")


def governing(limits: Iterable[Limit], key: str) -> Limit | None:
    """The declaration that governs the concrete ``key``: its own, else the
    family with the longest pattern that matches it; ``None`` if none."""
    found: Limit | None = None
    for limit in limits:
        if limit.name == key:
            return limit
        if limit.matches(key) and (found is None or len(limit.name) > len(found.name)):
            found = limit
    return found


def rate_ready_at(limit: Limit, tat: float) -> float:
    """When the key's rate allows its next start (``-inf``: no rate, or at
    once)."""
    interval = limit.interval
    if interval is None or tat == NEVER:
        return NEVER
    return tat - (limit.burst - 1) * interval


def rate_allows(limit: Limit, tat: float, now: float) -> bool:
    """Whether a start at ``now`` is within the key's rate."""
    return now >= rate_ready_at(limit, tat)


def next_tat(limit: Limit, tat: float, now: float) -> float:
    """The key's ``tat`` after a start at ``now`` (unchanged without a rate)."""
    interval = limit.interval
    if interval is None:
        return tat
    return max(tat, now) + interval


def has_room(limit: Limit, running: int) -> bool:
    """Whether one more attempt of a key with ``running`` attempts fits."""
    return limit.concurrency is None or running < limit.concurrency


def usage_of(
    limits: Iterable[Limit],
    running: Iterable[tuple[str, int]],
    held: Iterable[tuple[str, int]],
) -> list[LimitUsage]:
    """``limit_usage`` from the declarations and the attempts running and
    jobs held per concrete key: each key counted under the declaration that
    governs it (a family's keys summed), by name."""
    declared = sorted(limits, key=lambda limit: limit.name)
    counts = {limit.name: [0, 0] for limit in declared}
    for column, per_key in enumerate((running, held)):
        for key, count in per_key:
            limit = governing(declared, key)
            if limit is not None:
                counts[limit.name][column] += count
    return [
        LimitUsage(
            limit.name,
            limit.concurrency,
            limit.rate_text,
            limit.burst,
            *counts[limit.name],
        )
        for limit in declared
    ]
