"""This process's beats (``jobq.activity``): its row in the store's registry
of processes, its tally of outcomes, and once a minute a sample of the
queue's depth, in one store write every ``BEAT`` seconds."""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from jobq._worker.tally import Tally
from jobq.activity import (
    BEAT,
    Beat,
    DepthSample,
    ProcessInfo,
    RunningJob,
    minute_of,
)
from jobq.stores.base import ActivityStore, Claim, Store, capabilities_of


class Heartbeat:
    """Beats of one queue's workers in this process; ``None`` for a store
    without ``Capabilities.activity`` (see ``for_store``)."""

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self._store = store
        self._activity = cast(ActivityStore, store)
        self._clock = clock
        self.host, self.pid = socket.gethostname(), os.getpid()
        #: The id in the registry: host, pid and a nonce (a pid is reused;
        #: a restarted process is another one).
        self.id = f"{self.host}:{self.pid}:{secrets.token_hex(4)}"
        self.started = clock()
        self._sampled: float | None = None  # the minute last sampled

    @staticmethod
    def for_store(store: Store, clock: Callable[[], float]) -> Heartbeat | None:
        return Heartbeat(store, clock) if capabilities_of(store).activity else None

    def beat(
        self, tally: Tally, workers: int, active: Mapping[Any, tuple[Claim, float]]
    ) -> None:
        """Write this process's row (``workers`` threads, running the claims
        of ``active``, each with its monotonic start), what ``tally`` counted
        since the last beat, and the minute's sample if none was taken this
        minute. Raises what the store raises, the counts given back."""
        now, monotonic = self._clock(), time.monotonic()  # the same instant
        minute = minute_of(now)
        outcomes = tally.take(minute)
        try:
            sample = None if self._sampled == minute else self._sample(now, minute)
            info = self._info(now, monotonic, workers, active)
            self._activity.beat(Beat(info, outcomes, sample, self.gone_after), now)
        except BaseException:
            tally.give_back(outcomes)
            raise
        if sample is not None:
            self._sampled = minute

    @property
    def gone_after(self) -> float:
        """Seconds unseen after which others count this process gone: three
        beats, or its lease where that is longer (its claims live as long)."""
        return max(3 * BEAT, self._store.lease_seconds or 0.0)

    def _info(
        self,
        now: float,
        monotonic: float,
        workers: int,
        active: Mapping[Any, tuple[Claim, float]],
    ) -> ProcessInfo:
        """The row of this process at ``now`` (read with ``monotonic``): a job
        that began after that instant shows as begun then, not later."""
        running = tuple(
            sorted(
                (
                    RunningJob(claim.id, claim.task, now - max(monotonic - began, 0.0))
                    for claim, began in list(active.values())
                ),
                key=lambda job: job.started,
            )
        )
        return ProcessInfo(
            self.id, self.host, self.pid, self.started, now, workers, len(running),
            running,
        )  # fmt: skip

    def _sample(self, now: float, minute: float) -> DepthSample:
        """The queue's depth now, and how long the job claimed next has
        waited (``next_due``: the first due job in claim order)."""
        stats = self._store.stats()
        due = self._store.next_due()
        latency = None if due is None or due > now else now - due
        return DepthSample(minute, stats.pending, stats.running, stats.waiting, latency)

    def leave(self) -> None:
        """This process stops serving: its row goes."""
        self._activity.leave(self.id)

    def hand_over(self, tally: Tally) -> None:
        """Write what ``tally`` counted, outside the beats: no process row (a
        queue that runs no workers, as in ``run_pending`` or a ``cancel``)."""
        now = self._clock()
        outcomes = tally.take(minute_of(now))
        if not outcomes:
            return
        try:
            self._activity.beat(Beat(None, outcomes, None, self.gone_after), now)
        except BaseException:
            tally.give_back(outcomes)
            raise
