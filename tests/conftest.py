"""Fixtures shared by the test suite: one behavioural suite runs on every store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq.stores import JsonFileStore, MemoryStore, SqliteStore, Store

StoreFactory = Callable[[], Store]

STORES = ["memory", "json", "sqlite"]


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(store_kind: str, tmp_path: Path) -> StoreFactory:
    """Builds stores of the current kind; every call with one test shares the
    same place, so a second store sees what the first saved (a restart)."""

    def make() -> Store:
        if store_kind == "memory":
            return MemoryStore()
        if store_kind == "sqlite":
            return SqliteStore(tmp_path / "jobs.db")
        return JsonFileStore(tmp_path / "jobs.json")

    return make


@pytest.fixture
def make_queue(make_store: StoreFactory) -> Iterator[Callable[..., jobq.JobQueue[Any]]]:
    """Builds queues over the current store kind and closes them after the test."""
    queues: list[jobq.JobQueue[Any]] = []

    def make(handler: Any = None, **options: Any) -> jobq.JobQueue[Any]:
        options.setdefault("store", make_store())
        queue: jobq.JobQueue[Any] = jobq.JobQueue(handler, **options)
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.close(timeout=5)
