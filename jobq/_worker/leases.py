"""The claims a queue's workers hold, and until when each lease is known to
hold on this process's monotonic clock.

A process frozen past its leases (a VM pause, a long GC, ``SIGSTOP``) may
have lost its claims to another process's recovery, which then ran the jobs.
The store refuses the late process's outcomes (their tokens are stale), but
a job claimed and not yet started when the freeze came would still be run a
second time once the process goes on: no store call stands between taking a
claim off the ready list and calling its handler. So a worker looks here
first, and a claim whose lease may have run out is given back instead of run
(the store skips it if it is no longer this process's).

"Known to hold" is counted from just before the call that took the claim or
last renewed it: the store started the lease no earlier, so the lease lasts
at least that long (a clock jump aside, which breaks leases anyway).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from jobq.stores.base import Claim


class HeldClaims:
    """Every claim this queue's workers hold, started or not, by
    ``(id, token)``: the leases the watchdog renews. Changed and copied
    only by single dict operations, which are atomic, so worker threads,
    the dispatcher and the watchdog share it without a lock. A store
    without leases keeps no times: nothing is added to its jobs' path."""

    def __init__(self, lease_seconds: float | None) -> None:
        self._lease = lease_seconds
        self._held: dict[tuple[int, int], Claim] = {}
        #: Until when (monotonic) each lease is known to hold.
        self._until: dict[tuple[int, int], float] = {}

    def hold(self, claims: Sequence[Claim], since: float | None = None) -> None:
        """Note claims taken from the store by a call sent at ``since``
        (monotonic; ``None``: a claim run at once, by ``run_pending``), until
        their outcome is recorded."""
        held = self._held
        for claim in claims:
            held[claim.id, claim.token] = claim
        if self._lease is not None and since is not None:
            until = since + self._lease
            for claim in claims:
                self._until[claim.id, claim.token] = until

    def forget(self, claims: Sequence[Claim]) -> None:
        """No longer held (its outcome recorded, or given back): in this
        order, which ``renewed`` relies on."""
        for claim in claims:
            key = claim.id, claim.token
            self._held.pop(key, None)
            self._until.pop(key, None)

    def claims(self) -> list[Claim]:
        return list(self._held.copy().values())

    def renewed(self, claims: Sequence[Claim], sent: float) -> None:
        """The store renewed ``claims`` by a call sent at ``sent``
        (monotonic), now returned. A lease known to hold until after it
        returned was still this process's when the renewal reached the
        store, so it holds a lease from ``sent``; any other may have run out
        first and been recovered by another process: it is left to lapse."""
        if self._lease is None:
            return
        back, until = time.monotonic(), sent + self._lease
        for claim in claims:
            key = claim.id, claim.token
            if self._until.get(key, -math.inf) > back:
                self._until[key] = until
                if key not in self._held:  # forgotten meanwhile: see forget
                    self._until.pop(key, None)

    def lapsed(self, claim: Claim) -> bool:
        """Whether ``claim``'s lease may have run out."""
        if self._lease is None:
            return False
        until = self._until.get((claim.id, claim.token), math.inf)
        return until <= time.monotonic()
