"""What a store declares beyond its required members, read one way: the
member lists derive from the protocols."""

from __future__ import annotations

import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dict_store import DictStore, Shelf
from older_store import OlderStore
from postgres_url import POSTGRES_URL

import jobq
from jobq.stores import JsonFileStore, MemoryStore, PostgresStore, SqliteStore
from jobq.stores.base import (
    SCHEDULE_MEMBERS,
    STORE_MEMBERS,
    Capabilities,
    ScheduleStore,
    Store,
    capabilities_of,
    missing_members,
    protocol_members,
)
from jobq.stores.pages import JobPage, JobQuery


def test_the_member_lists_are_the_protocols_members_in_their_order() -> None:
    assert STORE_MEMBERS == (
        "lease_seconds", "claim_batch", "shared_between_processes", "keeps_results",
        "transactional_add", "open", "close", "save", "add", "claim_many",
        "finish_many", "fail_many", "release", "renew", "recover", "get",
        "list_jobs", "revive", "delete_dead", "cancel", "stats", "next_due",
    )  # fmt: skip
    assert SCHEDULE_MEMBERS == ("enqueue_slot", "schedule_states")


@pytest.mark.skipif(sys.version_info < (3, 13), reason="get_protocol_members: 3.13+")
def test_the_member_lists_are_what_typing_finds() -> None:
    get_members = typing.get_protocol_members  # type: ignore[attr-defined,unused-ignore]
    assert set(STORE_MEMBERS) == get_members(Store)
    assert set(SCHEDULE_MEMBERS) == get_members(ScheduleStore)


def test_protocol_members_reads_bases_properties_and_leaves_out_private_names() -> None:
    class Base(typing.Protocol):
        size: int

        def run(self) -> None: ...

    class Derived(Base, typing.Protocol):
        label: str

        @property
        def where(self) -> str: ...

        def _helper(self) -> None: ...

        def __call__(self) -> None: ...

    assert protocol_members(Derived) == ("size", "run", "label", "where")


# -- what each store can do, declared on its class --------------------------------


def built_in_stores(tmp_path: Path) -> list[Store]:
    return [
        MemoryStore(),
        JsonFileStore(tmp_path / "jobs.json"),
        SqliteStore(tmp_path / "jobs.db"),
        PostgresStore(POSTGRES_URL),  # constructing one opens nothing
    ]


def test_each_built_in_store_declares_exactly_the_optional_parts_it_has(
    tmp_path: Path,
) -> None:
    for store in built_in_stores(tmp_path):
        declared = type(store).__dict__["capabilities"]
        assert capabilities_of(store) is declared
        assert missing_members(store) == []  # every promise kept
        # ... and nothing beyond them: a store written before the declarations
        # would be found to do the same.
        assert capabilities_of(Undeclared(store)) == declared


@dataclass
class Undeclared:
    """A store as it was written before ``capabilities``: the members only."""

    store: Store

    def __getattr__(self, name: str) -> Any:
        if name == "capabilities":
            raise AttributeError(name)
        return getattr(self.store, name)


def test_a_store_that_declares_nothing_can_do_what_it_has_the_members_of() -> None:
    assert capabilities_of(DictStore(Shelf())) == Capabilities(
        finished_counts=True, schedules=True
    )
    assert capabilities_of(OlderStore()) == Capabilities()


class Declining(MemoryStore):
    """Has the members of pages and schedules, but declares neither."""

    capabilities = Capabilities()

    def page_jobs(self, query: JobQuery, now: float) -> JobPage:
        raise AssertionError("page_jobs was asked")


class CountsNothing(SqliteStore):
    capabilities = Capabilities(pages=True, schedules=True, schema=True)


def test_the_queue_uses_only_what_a_store_declares(tmp_path: Path) -> None:
    with jobq.JobQueue[Any](lambda job: None, store=Declining()) as queue:
        queue.enqueue("x")
        assert [r.payload for r in queue.browse("due").jobs] == ["x"]
        with pytest.raises(TypeError, match="lacks enqueue_slot, schedule_states"):
            queue.periodic(every=60, name="p")
        assert queue.schedules() == []
    with jobq.JobQueue[Any](store=CountsNothing(tmp_path / "jobs.db")) as queue:
        assert queue.finished_per_minute() is None
    with jobq.JobQueue[Any](store=SqliteStore(tmp_path / "jobs.db")) as queue:
        assert queue.finished_per_minute() is not None


class Overpromising(OlderStore):
    capabilities = Capabilities(pages=True, schema=True)


def test_a_store_that_declares_what_it_lacks_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="it lacks page_jobs, migrate "):
        jobq.JobQueue[Any](store=Overpromising())
