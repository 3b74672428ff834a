"""Workflows (``after=``) on the PostgreSQL store: what only a database
shared by many processes has to get right.

The migration of a version-6 schema with jobs in it; two connections
finishing the two parents of one child at once (the child is released
exactly once, never lost); a child added while its parent finishes (never
left waiting); a parent with 10,000 children and a child with 1,000
parents; a job outside any workflow ending with the single statement it
always took. The rules every store follows are in the contract suite.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from old_schemas import postgres_at
from postgres_url import POSTGRES_URL
from psycopg import sql

from jobq import Enqueued, JobState
from jobq.stores import PostgresStore
from jobq.stores import postgres as postgres_module
from jobq.stores.base import Claim, Done, NewJob, Signal

URL = POSTGRES_URL
T0 = 1_800_000_000.0


def new_job(payload: Any = None, *, after: tuple[int, ...] = (),
            key: str | None = None, after_failure: Any = "wait") -> NewJob:  # fmt: skip
    return NewJob(json.dumps(payload), T0, key, 0, 5, after=after,
                  after_failure=after_failure)  # fmt: skip


class Env:
    """A schema of this test's, and stores on it, each with a signal that
    records the jobs it was told were released; all closed after the test."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.queue = f"w-{secrets.token_hex(4)}"
        self.stores: list[PostgresStore] = []
        self.released: list[int] = []
        self.lock = threading.Lock()

    def store(self, **options: Any) -> PostgresStore:
        store = PostgresStore(URL, schema=self.schema, queue=self.queue,
                              clock="queue", listen=False, **options)  # fmt: skip
        signal = Signal()
        signal.on_release = self._released
        store.open(signal, dead_letter_limit=1000)
        self.stores.append(store)
        return store

    def _released(self, jobs: Any) -> None:
        with self.lock:
            self.released += [job_id for job_id, _ in jobs]

    def close(self) -> None:
        for store in self.stores:
            store.close()


@pytest.fixture
def env(postgres_schema: str) -> Iterator[Env]:
    name = f"{postgres_schema}_{secrets.token_hex(3)}"
    environment = Env(name)
    yield environment
    environment.close()
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
        )


def at_once(barrier: threading.Barrier, keep: Any, call: Any, *args: Any) -> None:
    """``keep(call(*args))`` once the other party reached ``barrier`` too."""
    barrier.wait()
    keep(call(*args))


def claim_all(store: PostgresStore, n: int) -> list[Claim]:
    claims = store.claim_many(T0, n)
    assert len(claims) == n
    return claims


def test_a_version_6_schema_is_migrated_to_workflows_and_keeps_its_jobs(
    env: Env,
) -> None:
    """Version 7 widens the state check, adds the columns and the deps
    table, and rebuilds the key index: the jobs are as before, the pending
    one keeps its key, and a child of an old job waits for it."""
    postgres_at(URL, env.schema, env.queue, 6)
    store = env.store()

    assert store.migrate() == postgres_module.SCHEMA_VERSION == 11
    records = [store.get(job_id, T0) for job_id in (1, 2, 3)]
    assert [(r.state, r.key, r.parents, r.children, r.after_failure)
            for r in records if r] == [
        (JobState.PENDING, "k", (), (), None),
        (JobState.PENDING, None, (), (), None),
        (JobState.DEAD, None, (), (), None),
    ]  # fmt: skip
    assert store.add([new_job("again", key="k")], T0)[0].duplicate
    [child] = store.add([new_job("child", after=(1, 3), key="c")], T0)
    waiting = store.get(child.id, T0)
    assert waiting is not None
    assert (waiting.state, waiting.parents, waiting.waiting_on) == (
        JobState.WAITING, (1, 3), (1, 3))  # fmt: skip
    # A waiting job holds its key.
    assert store.add([new_job("c2", key="c")], T0)[0] == Enqueued(child.id, True)
    assert store.stats().waiting == 1
    [claim] = store.claim_many(T0, 5)
    assert claim.id == 1
    assert store.finish_many([Done(claim, "7")], T0 + 60, T0) == [True]
    assert store.revive(3, T0)
    [again] = store.claim_many(T0, 5)
    assert store.finish_many([Done(again, None)], None, T0) == [True]
    assert env.released == [child.id]
    [last] = store.claim_many(T0, 5)
    assert last.parents == ((1, "completed", "7"), (3, "completed", None))


@pytest.mark.parametrize("kept", [True, False])
def test_two_connections_finishing_both_parents_of_a_child_release_it_once(
    env: Env, kept: bool
) -> None:
    """Each round: two parents, one child, and two stores (pools) finishing
    one parent each at the same moment. The child's lock makes the second
    wait for the first and see its slot: released once, never lost."""
    stores = [env.store(), env.store()]
    rounds = 25
    children = []
    for _ in range(rounds):
        a, b = (e.id for e in stores[0].add([new_job("p"), new_job("p")], T0))
        children.append(stores[0].add([new_job("c", after=(a, b))], T0)[0].id)
    keep_until = T0 + 60 if kept else None
    for _ in range(rounds):
        claims = sorted(claim_all(stores[0], 2), key=lambda c: c.id)
        barrier = threading.Barrier(2)
        ended: list[bool] = []
        threads = [
            threading.Thread(
                target=at_once,
                args=(barrier, ended.extend, store.finish_many,
                      [Done(claim, str(claim.id))], keep_until, T0),
            )
            for store, claim in zip(stores, claims, strict=True)
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert ended == [True, True]
        [child] = claim_all(stores[0], 1)
        assert child.parents == tuple((c.id, "completed", str(c.id)) for c in claims)
        stores[0].finish_many([Done(child, None)], None, T0)
    assert sorted(env.released) == children  # each exactly once
    assert stores[0].stats().waiting == 0


def test_a_child_added_while_its_parent_finishes_is_never_left_waiting(
    env: Env,
) -> None:
    """The add locks the parent: a finish that waited for it ends the
    parent in a transaction that sees the child, and an add that waited
    for the finish sees the parent ended."""
    adder, finisher = env.store(), env.store()
    for _ in range(25):
        [parent] = adder.add([new_job("p")], T0)
        [claim] = claim_all(finisher, 1)
        barrier = threading.Barrier(2)
        added: list[list[Enqueued]] = []
        child_job = new_job("c", after=(parent.id,))
        thread = threading.Thread(
            target=at_once, args=(barrier, added.append, adder.add, [child_job], T0)
        )
        thread.start()
        barrier.wait()
        assert finisher.finish_many([Done(claim, "1")], None, T0) == [True]
        thread.join(30)
        record = adder.get(added[0][0].id, T0)
        assert record is not None
        assert record.state is JobState.PENDING
        [child] = claim_all(adder, 1)
        assert child.parents == ((parent.id, "completed", None),) or (
            child.parents == ((parent.id, "completed", "1"),)
        )
        adder.finish_many([Done(child, None)], None, T0)


def test_a_parent_with_10000_children_releases_them_all_in_its_finish(
    env: Env,
) -> None:
    store = env.store()
    [parent] = store.add([new_job("p")], T0)
    children = [e.id for e in store.add(
        [new_job(n, after=(parent.id,)) for n in range(10_000)], T0)]  # fmt: skip
    assert store.stats().waiting == 10_000
    record = store.get(parent.id, T0)
    assert record is not None
    assert record.children == tuple(children)
    [claim] = claim_all(store, 1)
    assert store.finish_many([Done(claim, '"r"')], T0 + 60, T0) == [True]
    assert sorted(env.released) == children
    stats = store.stats()
    assert (stats.waiting, stats.pending) == (0, 10_000)
    claims = store.claim_many(T0, 1000)
    assert {c.parents for c in claims} == {((parent.id, "completed", '"r"'),)}


def test_a_child_with_1000_parents_is_released_by_the_last_one(env: Env) -> None:
    store = env.store(claim_batch=1000)
    parents = [e.id for e in store.add([new_job(n) for n in range(1000)], T0)]
    [child] = store.add([new_job("c", after=tuple(reversed(parents)))], T0)
    claims = sorted(claim_all(store, 1000), key=lambda c: c.id)
    for start in range(0, 1000, 100):
        batch = claims[start : start + 100]
        assert (
            store.finish_many([Done(c, str(c.id)) for c in batch], None, T0)
            == [True] * 100
        )
        record = store.get(child.id, T0)
        assert record is not None
        assert len(record.waiting_on) == 1000 - start - 100
    assert env.released == [child.id]
    [claim] = claim_all(store, 1)
    assert claim.parents == tuple(
        (pid, "completed", str(pid)) for pid in reversed(parents)
    )
    assert store.finish_many([Done(claim, None)], None, T0) == [True]
    with psycopg.connect(URL) as conn:  # its deps rows went with it
        left = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(
                sql.Identifier(env.schema, "deps")
            )
        ).fetchone()
    assert left == (0,)


def test_a_job_outside_workflows_ends_in_the_one_statement_it_took(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No transaction and no statement more for a job without parents or
    children: what the finish runs is counted."""
    store = env.store()
    store.add([new_job("x")], T0)
    [claim] = claim_all(store, 1)
    ran: list[bytes] = []
    caller = threading.get_ident()
    original = psycopg.Connection.execute

    def execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == caller:  # not the notifier's thread
            ran.append(query)
        return original(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    assert store.finish_many([Done(claim, None)], None, T0) == [True]
    assert ran == [store._sql.finish]


def test_a_child_added_in_the_callers_transaction_exists_once_it_commits(
    env: Env,
) -> None:
    """``add(connection=...)`` with ``after=``: the parent's lock and count,
    the child and its deps rows all in the caller's transaction; rolled
    back, nothing of it stays; an unknown parent adds nothing."""
    store = env.store()
    [parent] = store.add([new_job("p")], T0)
    with psycopg.connect(URL) as conn:
        store.add([new_job("c", after=(parent.id,))], T0, connection=conn)
        conn.rollback()
        with pytest.raises(ValueError, match="no job 999999"):
            store.add([new_job("c", after=(parent.id, 999_999))], T0, connection=conn)
        conn.rollback()
        [child] = store.add([new_job("c", after=(parent.id,))], T0, connection=conn)
        conn.commit()
    record = store.get(parent.id, T0)
    assert record is not None
    assert record.children == (child.id,)  # the rolled back ones left nothing
    assert store.stats().waiting == 1
    [claim] = claim_all(store, 1)
    assert store.finish_many([Done(claim, "1")], None, T0) == [True]
    assert env.released == [child.id]
