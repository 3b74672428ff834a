"""Every store passes ``jobq.testing.StoreContractTests``: the four built-in
ones, and ``DictStore``, a store written against the documented contract
alone (``tests/support/dict_store.py``), as a store of yours would be; and a
store without the optional ``ScheduleStore`` members skips the schedule
tests."""

from __future__ import annotations

import secrets
import subprocess
import sys
from typing import Any, cast

import pytest
from dict_store import DictStore, Shelf
from postgres_url import POSTGRES_URL
from sqlite_leases import expire_sqlite_claims

from jobq.stores import JsonFileStore, MemoryStore, PostgresStore, SqliteStore, Store
from jobq.stores.base import SCHEDULE_MEMBERS, missing_schedule_members
from jobq.testing import StoreContractTests
from jobq.testing.contract import ScheduleTests

#: The server of conftest.py's ``postgres_schema`` fixture.


class TestMemoryStore(StoreContractTests):
    def make_store(self, *, queue_clock: bool = False) -> Store:
        return MemoryStore()


class TestJsonFileStore(StoreContractTests):
    persistent = True
    limits_persist = False

    def make_store(self, *, queue_clock: bool = False) -> Store:
        return JsonFileStore(self.tmp_path / "jobs.json")


class TestSqliteStore(StoreContractTests):
    persistent = True

    def make_store(self, *, queue_clock: bool = False) -> Store:
        return SqliteStore(self.tmp_path / "jobs.db")

    def expire_claims(self) -> None:
        """Leases follow the host's clock, which the tests do not move."""
        expire_sqlite_claims(self.tmp_path / "jobs.db")


class TestPostgresStore(StoreContractTests):
    """A queue of its own (a fresh name) per test, in the session's schema;
    skipped without a server unless JOBQ_REQUIRE_POSTGRES=1."""

    persistent = True

    @pytest.fixture(autouse=True)
    def _queue_name(self, postgres_schema: str) -> None:
        self.schema = postgres_schema
        self.queue_name = f"test-{secrets.token_hex(6)}"

    def make_store(self, *, queue_clock: bool = False) -> Store:
        return PostgresStore(
            POSTGRES_URL,
            schema=self.schema,
            queue=self.queue_name,
            clock="queue" if queue_clock else "database",
        )

    def expire_claims(self) -> None:
        """Leases follow the database's clock, which the tests cannot move."""
        import psycopg
        from psycopg import sql

        expire = sql.SQL(
            "UPDATE {} SET lease_until = 0 WHERE queue = %s AND state = 'running'"
        ).format(sql.Identifier(self.schema, "jobs"))
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(expire, (self.queue_name,))


class TestDictStore(StoreContractTests):
    """A third party's store: its jobs live on a ``Shelf`` that outlives the
    store object, so a second store over it is a restart."""

    persistent = True

    @pytest.fixture(autouse=True)
    def _shelf(self) -> None:
        self.shelf = Shelf()

    def make_store(self, *, queue_clock: bool = False) -> Store:
        return DictStore(self.shelf)


class WithoutSchedules:
    """A store with every ``Store`` member and none of ``ScheduleStore``'s,
    which are optional."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __getattr__(self, name: str) -> Any:
        if name in SCHEDULE_MEMBERS:
            raise AttributeError(name)
        return getattr(self.store, name)


class TestStoreWithoutSchedules(ScheduleTests):
    """The schedule tests of ``StoreContractTests`` skip a store without
    schedules (they would fail it if they ran)."""

    persistent = True  # past the restart test's own skip

    @pytest.fixture(autouse=True)
    def _shelf(self) -> None:
        self.shelf = Shelf()

    def make_store(self, *, queue_clock: bool = False) -> Store:
        return cast(Store, WithoutSchedules(DictStore(self.shelf)))


@pytest.mark.parametrize(
    "store_class", [MemoryStore, JsonFileStore, SqliteStore, PostgresStore, DictStore]
)
def test_every_store_above_keeps_schedules_so_none_skips_their_tests(
    store_class: type,
) -> None:
    assert missing_schedule_members(store_class) == []


def test_importing_jobq_does_not_import_jobq_testing_or_pytest() -> None:
    code = (
        "import sys, jobq, jobq.stores;"
        "print(sorted(m for m in ('jobq.testing', 'pytest') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
