"""What a store declares beyond its required members, read one way: the
member lists derive from the protocols."""

from __future__ import annotations

import sys
import typing

import pytest

from jobq.stores.base import (
    SCHEDULE_MEMBERS,
    STORE_MEMBERS,
    ScheduleStore,
    Store,
    protocol_members,
)


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
