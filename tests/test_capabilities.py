"""What a store says about itself, read one way: its members are derived
from the protocols, and what it can do beyond them is its class's
``capabilities``, which the queue and the commands ask (a store that
declares none works as it did before them)."""

from __future__ import annotations

import sys
import typing
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, cast

import pytest
from dict_store import DictStore, Shelf
from older_store import OlderStore
from postgres_url import POSTGRES_URL

import jobq
from jobq import admin
from jobq.stores import JsonFileStore, MemoryStore, PostgresStore, SqliteStore
from jobq.stores.base import (
    SCHEDULE_MEMBERS,
    STORE_MEMBERS,
    ActivityStore,
    Capabilities,
    FileStore,
    FinishedStore,
    LimitStore,
    MigratingStore,
    NamedQueueStore,
    OwnedStore,
    PageStore,
    PrefetchStore,
    ScheduleStore,
    SchemaStore,
    Store,
    capabilities_of,
    location_of,
    missing_members,
    protocol_members,
)
from jobq.stores.pages import JobPage, JobQuery


def test_the_member_lists_are_the_protocols_members_in_their_order() -> None:
    assert STORE_MEMBERS == (
        "lease_seconds", "claim_batch", "shared_between_processes", "keeps_results",
        "transactional_add", "open", "close", "save", "add", "claim_many",
        "finish_many", "fail_many", "release", "renew", "recover", "get",
        "list_jobs", "revive", "delete_dead", "cancel", "stops_requested", "stats",
        "next_due",
    )  # fmt: skip
    assert SCHEDULE_MEMBERS == (
        "enqueue_slot", "schedule_states", "pause_schedule", "resume_schedule",
        "enqueue_now",
    )  # fmt: skip


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


#: The protocol of each capability: the members it promises.
PROTOCOLS: dict[str, type] = {
    "pages": PageStore,
    "finished_counts": FinishedStore,
    "schedules": ScheduleStore,
    "schema": SchemaStore,
    "files": FileStore,
    "owner_writes": OwnedStore,
    "migrates_on_open": MigratingStore,
    "named_queues": NamedQueueStore,
    "limits": LimitStore,
    "activity": ActivityStore,
    "prefetch": PrefetchStore,
}


def test_each_built_in_store_declares_exactly_the_optional_parts_it_has(
    tmp_path: Path,
) -> None:
    # workflows and own_clock_leases promise no member: how add and the
    # ends of jobs behave, which clock leases follow.
    names = [field.name for field in fields(Capabilities)]
    assert sorted([*PROTOCOLS, "workflows", "own_clock_leases"]) == sorted(names)
    for store in built_in_stores(tmp_path):
        declared = type(store).__dict__["capabilities"]
        assert capabilities_of(store) is declared
        assert missing_members(store) == []  # every promise kept
        has = {
            name: all(hasattr(store, m) for m in protocol_members(protocol))
            for name, protocol in PROTOCOLS.items()
        }
        leases = store.lease_seconds is not None  # every lease on its own clock
        assert declared == Capabilities(**has, workflows=True, own_clock_leases=leases)
        assert capabilities_of(Undeclared(store)) == replace(  # written before
            declared,
            files=False,
            owner_writes=False,
            migrates_on_open=False,
            named_queues=False,
            limits=False,
            workflows=False,
            activity=False,
            own_clock_leases=False,
            prefetch=False,
        )


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


# -- what the tools that manage a queue from outside ask ----------------------------


def test_a_store_says_where_it_keeps_its_jobs(tmp_path: Path) -> None:
    memory, json_file, sqlite, postgres = built_in_stores(tmp_path)

    assert location_of(memory) == "memory"
    assert location_of(json_file) == f"the JSON file {tmp_path / 'jobs.json'}"
    assert location_of(sqlite) == f"the SQLite file {tmp_path / 'jobs.db'}"
    assert location_of(postgres).endswith(", schema 'jobq', queue 'default'")
    assert location_of(DictStore(Shelf())) == "DictStore"  # says nothing


class ShelfInFiles(DictStore):
    """A store of yours kept in files that only its owner writes, with a
    schema opening creates: what the tools ask of the built-in ones."""

    keeps_results = True
    capabilities = Capabilities(
        finished_counts=True, schedules=True, files=True, owner_writes=True,
        migrates_on_open=True,
    )  # fmt: skip
    location = "the shelf"

    def __init__(
        self, shelf: Shelf, *, there: bool = True, reads: bool = False
    ) -> None:
        super().__init__(shelf)
        self.there, self.reads = there, reads
        self.auto_migrate = True

    def missing(self) -> str | None:
        return None if self.there else "no shelf at /srv/shelf"

    def reader(self) -> ShelfInFiles:
        return self if self.reads else ShelfInFiles(self.shelf, reads=True)


def test_the_commands_use_a_store_of_yours_by_what_it_declares() -> None:
    shelf = Shelf()
    app = jobq.JobQueue[Any](store=ShelfInFiles(shelf))
    seen: list[tuple[bool, bool]] = []

    with admin.queue_for_command(app, read_only=True) as used:
        store = cast(ShelfInFiles, used.store)
        seen.append((store.reads, cast(ShelfInFiles, app.store).auto_migrate))
    with admin.queue_for_command(app, read_only=False) as used:
        assert used is app
    gone = jobq.JobQueue[Any](store=ShelfInFiles(shelf, there=False))
    with (
        pytest.raises(admin.CommandError) as refused,
        admin.queue_for_command(gone, read_only=True),
    ):
        pass

    assert seen == [(True, False)]  # its reader; opening would not migrate
    assert cast(ShelfInFiles, app.store).auto_migrate  # back for the app
    assert refused.value.message == (
        "no shelf at /srv/shelf (the app's store): a command never creates one; "
        "check the path, or start the app, which creates it"
    )
    assert admin.migrate(app.store) == admin.Migration("the shelf", None)
    app.close()
