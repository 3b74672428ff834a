"""A store written against the first ``Store`` protocol, before its optional
parts: for the tests that the queue still runs one."""

from __future__ import annotations

from typing import Any

from jobq.stores import MemoryStore
from jobq.stores.base import STORE_MEMBERS, StoreStats


class OlderStore:
    """The ``Store`` members only (no ``ScheduleStore``, ``page_jobs`` or
    ``finished_per_minute``), with stats of the first four counts (no
    ``kept`` or ``cancelled``). The required members include ``cancel`` and
    ``stops_requested`` now: the memory store's, as ``STORE_MEMBERS`` names them."""

    def __init__(self) -> None:
        self._store = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name not in STORE_MEMBERS:
            raise AttributeError(name)
        return getattr(self._store, name)

    def stats(self) -> StoreStats:
        stats = self._store.stats()
        return StoreStats(stats.pending, stats.running, stats.dead, stats.delayed)
