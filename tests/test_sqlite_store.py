"""The SQLite store: what only a shared database file has to get right.

URLs and options, the file (mode, a file that is not a database, a newer
schema), leases and fencing with explicit ``now`` values (and the host's
clock, which leases follow, set to them with freezegun), owners that died,
claims beside many future rows (query plans), and several processes on one
file. Other processes are real (``sys.executable``); nothing here waits with
``time.sleep``: tests wait on pipes, events and ``join``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from old_schemas import sqlite_at, sqlite_v1

import jobq
from jobq import Cancellation, Enqueued, JobState, Limit, LimitUsage
from jobq.stores import SqliteStore, store_from
from jobq.stores.base import Claim, Done, NewJob, Signal, StoreStats
from jobq.stores.pages import DATABASE_FIRST, JobQuery
from jobq.stores.sqlite import statements as sqlite_statements
from jobq.stores.sqlite.schema import GET_VERSION, SCHEMA_VERSION
from jobq.stores.sqlite.statements import FINISHED_PER_MINUTE
from jobq.types import AttemptError

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30  # seconds; a cap so that a broken test fails instead of hanging
T0 = 1_800_000_000.0
LEASE = 30.0

OpenStore = Callable[..., SqliteStore]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture
def open_store(path: Path) -> Iterator[OpenStore]:
    """Opened stores on ``path`` (each its own connections), closed after the test."""
    stores: list[SqliteStore] = []

    def make(
        at: Path = path, dead_letter_limit: int = 1000, **options: Any
    ) -> SqliteStore:
        options.setdefault("lease_seconds", LEASE)
        store = SqliteStore(at, **options)
        store.open(Signal(), dead_letter_limit=dead_letter_limit)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def new_job(
    payload: Any = None,
    *,
    run_at: float = T0,
    key: str | None = None,
    priority: int = 0,
    max_attempts: int = 5,
    limits: tuple[str, ...] = (),
) -> NewJob:
    return NewJob(
        json.dumps(payload), run_at, key, priority, max_attempts, limits=limits
    )


def add(store: SqliteStore, *jobs: NewJob, now: float = T0) -> list[int]:
    return [enqueued.id for enqueued in store.add(list(jobs), now)]


def claim(store: SqliteStore, now: float = T0) -> Claim:
    claimed = store.claim(now)
    assert claimed is not None
    return claimed


def state_of(store: SqliteStore, job_id: int, now: float = T0) -> JobState | None:
    record = store.get(job_id, now)
    return None if record is None else record.state


def failure(at: float = T0) -> AttemptError:
    return AttemptError("ValueError", "boom", "", at)


@contextlib.contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection to look at (or tamper with) the file from outside."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


# -- URLs and options -----------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///jobs.db", "jobs.db"),
        ("sqlite:///var/jobs.db", "var/jobs.db"),
        ("SQLite:///jobs.db", "jobs.db"),
        ("sqlite:////srv/queue/jobs.db", "/srv/queue/jobs.db"),
    ],
)
def test_sqlite_urls_follow_the_sqlalchemy_convention(url: str, expected: str) -> None:
    store = store_from(url)

    assert isinstance(store, SqliteStore)
    assert store.path == os.path.abspath(expected)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:/x.db",
        "sqlite:x.db",
        "sqlite:",
        "sqlite://",
        "sqlite:///",
        "sqlite:////",
        "sqlite://host/x.db",
        "sqlite://localhost/x.db",
        "sqlite:///x.db?synchronous=FULL",
        "sqlite:///x.db?mode=ro",
        "sqlite:///x.db#frag",
        "sqlite:///:memory:",
        "sqlite:////tmp/dir/",
    ],
)
def test_a_malformed_sqlite_url_raises_value_error_at_construction(url: str) -> None:
    with pytest.raises(ValueError, match="SQLite store URL"):
        jobq.JobQueue(lambda job: None, store=url)


def test_constructing_a_queue_or_store_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    jobq.JobQueue(lambda job: None, store="sqlite:///jobs.db")
    SqliteStore(tmp_path / "other.db")

    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "options",
    [
        {"synchronous": "OFF"},
        {"synchronous": "sometimes"},
        {"lease_seconds": 0},
        {"lease_seconds": -1},
        {"lease_seconds": float("inf")},
        {"lease_seconds": float("nan")},
        {"busy_timeout": 0},
        {"poll_interval": -0.1},
    ],
)
def test_bad_options_raise_value_error(path: Path, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(options))):
        SqliteStore(path, **options)


@pytest.mark.parametrize(("option", "level"), [("NORMAL", 1), ("full", 2)])
def test_every_connection_uses_the_synchronous_option(
    open_store: OpenStore, option: str, level: int
) -> None:
    store = open_store(synchronous=option)
    levels: list[int] = []

    def look() -> None:  # another thread: a connection of its own
        with store._connection() as conn:
            levels.append(conn.execute("PRAGMA synchronous").fetchone()[0])

    look()
    thread = threading.Thread(target=look)
    thread.start()
    thread.join()

    assert levels == [level, level]
    with store._connection() as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- the file ---------------------------------------------------------------------


def test_open_creates_the_database_and_its_wal_files_with_mode_0600(
    open_store: OpenStore, path: Path
) -> None:
    old = os.umask(0o022)
    try:
        store = open_store()
        add(store, new_job("x"))
    finally:
        os.umask(old)

    files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {
        f.name: 0o600 for f in files
    }


def test_a_file_that_is_not_a_database_is_refused_and_left_in_place(
    path: Path,
) -> None:
    content = b'{"format": "jobq", "jobs": []}\n' * 40
    path.write_bytes(content)
    before = path.stat()
    queue = jobq.JobQueue(lambda job: None, store=f"sqlite:///{path}")

    with pytest.raises(jobq.StoreError, match="not a SQLite database") as raised:
        queue.enqueue("x")

    assert str(path) in str(raised.value)
    assert path.read_bytes() == content
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_missing_directory_is_a_store_error_naming_the_path(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "missing" / "jobs.db")

    with pytest.raises(jobq.StoreError, match=r"missing/jobs\.db"):
        store.open(Signal(), dead_letter_limit=10)


def test_a_newer_schema_version_is_refused(open_store: OpenStore, path: Path) -> None:
    open_store().close()
    with raw(path) as conn:
        conn.execute("UPDATE jobq_meta SET value = 99 WHERE name = 'schema_version'")

    with pytest.raises(jobq.StoreError, match=r"newer jobq \(schema version 99"):
        open_store()


def test_the_schema_is_created_once_and_kept_across_opens(
    open_store: OpenStore, path: Path
) -> None:
    first = open_store()
    [job_id] = add(first, new_job("kept"))
    first.close()

    second = open_store()

    record = second.get(job_id, T0)
    assert record is not None
    assert record.payload == "kept"
    with raw(path) as conn:
        assert conn.execute("SELECT value FROM jobq_meta").fetchall() == [
            (SCHEMA_VERSION,)
        ]


def test_migrate_creates_the_file_and_schema_and_leaves_nothing_open(
    path: Path, open_store: OpenStore
) -> None:
    store = SqliteStore(path)
    old = os.umask(0o022)
    try:
        assert store.migrate() == SCHEMA_VERSION
    finally:
        os.umask(old)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not store._conns
    assert store._watcher is None
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT value FROM jobq_meta").fetchall() == [
            (SCHEMA_VERSION,)
        ]
    assert store.migrate() == SCHEMA_VERSION  # a second time only checks
    [job_id] = add(open_store(), new_job("after"))
    assert job_id == 1


def test_migrate_refuses_a_newer_schema_version(
    open_store: OpenStore, path: Path
) -> None:
    open_store().close()
    with raw(path) as conn:
        conn.execute("UPDATE jobq_meta SET value = 99 WHERE name = 'schema_version'")

    with pytest.raises(jobq.StoreError, match=r"newer jobq \(schema version 99"):
        SqliteStore(path).migrate()


def test_closing_stops_the_watcher_and_is_idempotent(open_store: OpenStore) -> None:
    store = open_store()
    watcher = store._watcher
    assert watcher is not None
    assert watcher.is_alive()

    store.close()
    store.close()

    assert not watcher.is_alive()
    with pytest.raises(jobq.StoreError, match="not open"):
        store.stats()


# -- ids, keys, counts --------------------------------------------------------------


def test_ids_only_grow_even_after_the_newest_job_is_gone(
    open_store: OpenStore,
) -> None:
    store = open_store()
    ids = add(store, new_job(1), new_job(2), new_job(3))
    newest = store.claim_many(T0, 3)[-1]
    assert newest.id == ids[-1]
    assert store.finish(newest, None, None, T0)  # deleted
    store.close()

    [next_id] = add(open_store(), new_job(4))

    assert next_id > ids[-1]


def test_a_batch_is_one_transaction(open_store: OpenStore) -> None:
    store = open_store()

    # The queue refuses such a priority; the store, given one, fails at the
    # third job and must keep none of the batch.
    with pytest.raises(OverflowError):
        store.add([new_job(1), new_job(2), new_job(3, priority=2**70)], T0)

    assert store.stats().pending == 0


def test_a_live_key_is_unique_in_the_file_itself(
    open_store: OpenStore, path: Path
) -> None:
    add(open_store(), new_job("a", key="invoice-7"))

    with raw(path) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO jobq_jobs (state, payload, key, priority, run_at, "
            "created_at, max_attempts) VALUES ('ready', '1', 'invoice-7', 0, 0, 0, 1)"
        )


def test_stats_counts_stay_equal_to_the_rows(open_store: OpenStore, path: Path) -> None:
    store = open_store(dead_letter_limit=2)
    ids = add(store, *(new_job(n, run_at=T0 + n % 3) for n in range(12)))
    assert store.cancel(ids[0], T0, by="t", keep_until=T0 + 60) == "cancelled"
    for _ in range(4):
        store.fail(claim(store, T0 + 5), failure(), None, T0 + 5)  # dead, trimmed
    store.fail(claim(store, T0 + 5), failure(), T0 + 60, T0 + 5)  # pending again
    store.finish(claim(store, T0 + 5), None, T0 + 100, T0 + 5)  # kept completed
    running = claim(store, T0 + 5)
    assert store.revive(store.list_jobs(JobState.DEAD)[0].id, T0 + 5)

    with raw(path) as conn:
        rows = dict(
            conn.execute("SELECT state, count(*) FROM jobq_jobs GROUP BY state")
        )
        counts = dict(conn.execute("SELECT state, n FROM jobq_counts"))
    assert counts == {state: rows.get(state, 0) for state in counts}
    stats = store.stats()
    assert (stats.pending, stats.running, stats.dead) == (
        rows.get("scheduled", 0) + rows.get("ready", 0),
        1,
        1,
    )
    assert state_of(store, running.id) is JobState.RUNNING


def test_a_released_stopping_claim_ends_cancelled_with_no_attempt_counted(
    open_store: OpenStore,
) -> None:
    """It never started: pending again would run a job asked to stop, whose
    key is already free."""
    store = open_store()
    [job_id] = add(store, new_job("x", key="k"))
    claimed = claim(store)
    assert store.cancel(job_id, T0, by="t", keep_until=T0 + 60) == "stopping"

    store.release([claimed], T0 + 1)

    record = store.get(job_id, T0 + 1)
    assert record is not None
    assert (record.state, record.attempts) == (JobState.CANCELLED, 0)
    assert record.cancellation == Cancellation(T0, "t", 1)
    assert store.claim(T0 + 1) is None


# -- leases and fencing, with explicit times ------------------------------------------


def test_leases_follow_the_hosts_clock_not_the_now_a_call_is_given(
    open_store: OpenStore, host_time: Callable[[float], float]
) -> None:
    """A process whose queue has a clock of its own (an hour ahead here)
    neither takes the others' live claims for expired nor gives its own
    claims a lease that others judge by another clock."""
    store = open_store(lease_seconds=10)
    add(store, new_job("theirs"), new_job("ours"))
    theirs = claim(store, T0)

    assert store.recover(T0 + 3600) == 0
    ours = claim(store, T0 + 3600)  # until T0 + 10 on the host's clock
    host_time(T0 + 5)
    store.renew([theirs], T0 + 3605)  # until T0 + 15 likewise

    assert store.recover(host_time(T0 + 9.999)) == 0
    assert store.recover(host_time(T0 + 10)) == 1
    assert state_of(store, ours.id) is JobState.PENDING
    assert state_of(store, theirs.id) is JobState.RUNNING
    assert store.recover(host_time(T0 + 15)) == 1


def test_recover_turns_an_expired_claim_into_a_failed_attempt(
    open_store: OpenStore, host_time: Callable[[float], float]
) -> None:
    store = open_store(lease_seconds=10)
    [job_id] = add(store, new_job("x"))
    claim(store, T0)

    assert store.recover(host_time(T0 + 9.999)) == 0
    assert store.recover(host_time(T0 + 10)) == 1

    record = store.get(job_id, T0 + 10)
    assert record is not None
    assert (record.state, record.attempts, record.run_at) == (
        JobState.PENDING,
        1,
        T0 + 10,
    )
    assert record.last_error is not None
    assert "process died" in record.last_error
    assert [e.type for e in record.errors] == ["jobq.errors.ProcessDied"]
    assert claim(store, T0 + 10).attempt == 2


def test_an_expired_claim_out_of_attempts_is_buried(
    open_store: OpenStore, host_time: Callable[[float], float]
) -> None:
    store = open_store(lease_seconds=10)
    [job_id] = add(store, new_job("x", max_attempts=1))
    claim(store, T0)

    assert store.recover(host_time(T0 + 11)) == 1

    assert [r.id for r in store.list_jobs(JobState.DEAD)] == [job_id]


def test_renew_extends_the_lease_of_current_claims_only(
    open_store: OpenStore, host_time: Callable[[float], float]
) -> None:
    store = open_store(lease_seconds=10)
    add(store, new_job("a"), new_job("b"))
    kept, left = claim(store, T0), claim(store, T0)
    stale = kept._replace(token=kept.token - 1)

    store.renew([kept, stale], host_time(T0 + 8))

    assert store.recover(host_time(T0 + 10)) == 1  # only ``left`` expired
    assert state_of(store, left.id) is JobState.PENDING
    assert state_of(store, kept.id) is JobState.RUNNING
    assert store.recover(host_time(T0 + 18)) == 1


def test_a_claim_that_outlived_its_lease_cannot_end_the_next_claim(
    open_store: OpenStore, host_time: Callable[[float], float]
) -> None:
    first, second = open_store(lease_seconds=5), open_store(lease_seconds=5)
    [job_id] = add(first, new_job("x"))
    old = claim(first, T0)
    assert second.recover(host_time(T0 + 6)) == 1
    new = claim(second, T0 + 6)
    assert (new.id, new.attempt) == (job_id, 2)

    assert first.finish(old, None, None, T0 + 7) is False
    assert first.fail(old, failure(), None, T0 + 7) is False
    first.renew([old], host_time(T0 + 7))  # must not extend the new claim's lease

    record = second.get(job_id, T0 + 7)
    assert record is not None
    assert (record.state, record.attempts) == (JobState.RUNNING, 1)
    assert second.list_jobs(JobState.DEAD) == []
    assert second.recover(host_time(T0 + 11)) == 1  # the new lease ran out unrenewed


def test_a_handler_that_outlived_its_lease_cannot_complete_or_bury_the_job(
    path: Path,
    open_store: OpenStore,
    host_time: Callable[[float], float],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Through the queue (on the host's clock): while its handler runs, the
    lease runs out and another worker claims the job; the late outcome is
    not recorded."""
    other = open_store(lease_seconds=5)
    taken: list[Claim] = []

    def slow_handler(job: jobq.Job[Any]) -> None:
        now = host_time(T0 + 6)  # the handler takes longer than the lease
        assert other.recover(now) == 1
        taken.append(claim(other, now))
        raise jobq.Fatal("too late to bury anything")

    queue = jobq.JobQueue(slow_handler, store=SqliteStore(path, lease_seconds=5))
    try:
        job = queue.enqueue("x")
        assert queue.run_pending() == 1
        record = queue.get(job)
        assert record is not None
        assert (record.state, record.attempts) == (JobState.RUNNING, 1)
        assert queue.dead_jobs() == []
        assert "no longer current" in caplog.text
        assert other.finish(taken[0], None, None, T0 + 6) is True
        assert queue.get(job) is None
    finally:
        queue.close()


# -- owners that died ------------------------------------------------------------------

PEER = """
import json, sys, time
from jobq.stores import SqliteStore
from jobq.stores.base import NewJob, Signal

store = SqliteStore(sys.argv[1], lease_seconds=3600)
store.open(Signal(), dead_letter_limit=1000)
for line in sys.stdin:
    command = json.loads(line)
    if command["op"] == "add":
        now = time.time()
        jobs = [NewJob(json.dumps(p), now + command.get("delay", 0), key, 0, 5)
                for p, key in command["jobs"]]
        answer = [[e.id, e.duplicate] for e in store.add(jobs, now)]
    elif command["op"] == "claim":
        claimed = store.claim(time.time())
        answer = None if claimed is None else claimed.id
    print(json.dumps(answer), flush=True)
"""


class Peer:
    """Another process with a store on the same file, driven over a pipe."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PEER, str(path)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, **command: Any) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the peer died answering {command!r}"
        return json.loads(line)

    def kill(self) -> None:
        """SIGKILL, and reap: a zombie still counts as a live process."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=WAIT)

    def end(self) -> None:
        if self.proc.returncode is None:
            self.kill()


@pytest.fixture
def peer(path: Path, open_store: OpenStore) -> Iterator[Peer]:
    open_store().close()  # the schema exists before the peer starts
    other = Peer(path)
    yield other
    other.end()


def test_open_recovers_the_claim_of_a_killed_process_without_waiting(
    path: Path, peer: Peer, open_store: OpenStore
) -> None:
    [[job_id, _]] = peer.ask(op="add", jobs=[["mail", None]])
    assert peer.ask(op="claim") == job_id  # a lease of an hour
    peer.kill()

    store = open_store()

    record = store.get(job_id, time.time())
    assert record is not None
    assert (record.state, record.attempts) == (JobState.PENDING, 1)
    assert record.last_error is not None
    assert "process died" in record.last_error
    assert claim(store, time.time()).id == job_id


def test_the_claim_of_a_live_process_waits_for_its_lease(
    path: Path, peer: Peer, open_store: OpenStore
) -> None:
    [[job_id, _]] = peer.ask(op="add", jobs=[["mail", None]])
    assert peer.ask(op="claim") == job_id
    store = open_store()

    assert store.recover(time.time()) == 0
    assert store.stats().running == 1

    peer.kill()
    assert store.recover(time.time()) == 1
    assert store.stats().pending == 1


def test_a_claim_under_our_pid_with_another_nonce_is_an_earlier_process(
    open_store: OpenStore, path: Path
) -> None:
    store = open_store()
    add(store, new_job("reused pid"), new_job("ours"))
    gone, ours = claim(store), claim(store)
    with raw(path) as conn:  # as if a process before us had had our pid
        conn.execute(
            "UPDATE jobq_jobs SET owner_nonce = 'earlier' WHERE id = ?", (gone.id,)
        )

    assert store.recover(T0) == 1

    assert state_of(store, gone.id) is JobState.PENDING
    assert state_of(store, ours.id) is JobState.RUNNING


def test_a_live_pid_with_another_nonce_may_be_a_reused_pid_and_waits(
    open_store: OpenStore, path: Path, host_time: Callable[[float], float]
) -> None:
    store = open_store(lease_seconds=10)
    [job_id] = add(store, new_job("x"))
    claim(store, T0)
    with raw(path) as conn:  # a live process that is not the claim's owner
        conn.execute(
            "UPDATE jobq_jobs SET owner_pid = ?, owner_nonce = 'other' WHERE id = ?",
            (os.getppid(), job_id),
        )

    assert store.recover(host_time(T0 + 1)) == 0
    assert store.recover(host_time(T0 + 10)) == 1


def test_keys_are_held_across_processes(peer: Peer, open_store: OpenStore) -> None:
    [[theirs, duplicate]] = peer.ask(op="add", jobs=[["a", "invoice-7"]], delay=3600)
    assert duplicate is False
    store = open_store()

    [ours] = store.add([new_job("b", key="invoice-7")], time.time())

    assert (ours.id, ours.duplicate) == (theirs, True)


# -- claims stay O(log n) beside many future rows --------------------------------------


def plan(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    return "\n".join(row[-1] for row in rows)


def full_scans(text: str) -> list[str]:
    """Plan lines that read the jobs table itself from end to end."""
    return [
        line
        for line in text.splitlines()
        if line.startswith("SCAN jobq_jobs") and "USING" not in line
    ]


def test_claim_statements_use_the_partial_indexes(
    open_store: OpenStore, path: Path
) -> None:
    store = open_store()
    add(store, *(new_job(n, run_at=T0 + 3600, priority=9) for n in range(500)))
    with raw(path) as conn:
        plans = {
            name: plan(conn, getattr(sqlite_statements, name), params)
            for name, params in [
                ("ANY_DUE_OR_READY", (T0, T0)),
                ("PROMOTE", (T0,)),
                ("CLAIM", (T0, T0 + 30, "h", 1, "n", 32)),
                ("NEXT_DUE", ()),
                ("HELD_KEY", ("k",)),
                ("EXPIRED", (T0,)),
                ("ANY_EXPIRED", (T0,)),
                ("EXPIRE_COMPLETED", (T0,)),
                ("OLDEST_DEAD", (1,)),
                ("BURY", (1, "ValueError", "[]", T0, 1)),
                ("OWNERS", ("h",)),
                ("DEAD_KEY", (1,)),
                ("EXPIRE_CANCELLED", (T0,)),
                ("EXPIRED_CANCELLED", (T0,)),
                ("CANCEL_STATE", (1,)),
                ("CANCEL_PENDING", (T0, "by", T0 + 60, 1)),
                ("STOP_RUNNING", (T0, "by", T0 + 60, 1)),
                ("END_CANCELLED", (1, "ValueError", "[]", T0, 1)),
            ]
        }
        plans["stops"] = plan(conn, sqlite_statements.stops(2), (1, 1, 2, 1))

    assert "USING INDEX jobq_scheduled (run_at<?)" in plans["PROMOTE"]
    assert "USING INDEX jobq_ready" in plans["CLAIM"]
    assert "USING INDEX jobq_ready" in plans["NEXT_DUE"]
    assert "USING INDEX jobq_scheduled" in plans["NEXT_DUE"]
    assert "USING INDEX jobq_live_keys (key=?)" in plans["HELD_KEY"]
    assert "USING INDEX jobq_running (lease_until<?)" in plans["EXPIRED"]
    assert "USING INDEX jobq_cancelled (expires_at<?)" in plans["EXPIRE_CANCELLED"]
    assert "USING INTEGER PRIMARY KEY (rowid=?)" in plans["stops"]
    assert {name: full_scans(text) for name, text in plans.items()} == {
        name: [] for name in plans
    }


def test_the_retrying_pages_and_count_read_jobq_retrying_past_the_delayed_jobs(
    open_store: OpenStore, path: Path
) -> None:
    """500 delayed jobs due first: the retrying list's page and count read
    ``jobq_retrying`` alone; the delayed page reads ``jobq_scheduled``."""
    store = open_store()
    add(store, *(new_job(n, run_at=T0 + 60) for n in range(500)))
    first = {"now": T0, "limit": 51, "task": None, "key": None, "error": None}
    cursor = dict(zip(("c0", "c1"), DATABASE_FIRST["retrying"], strict=True))
    with raw(path) as conn:
        plans = {
            view: plan(conn, sqlite_statements.PAGES[view], {**first, **cursor})
            for view in ("delayed", "retrying")
        }
        plans["count"] = plan(conn, sqlite_statements.RETRYING, (T0,))

    assert "USING INDEX jobq_retrying (run_at>?)" in plans["retrying"]
    assert "USING INDEX jobq_retrying (run_at>?)" in plans["count"]
    assert "USING INDEX jobq_scheduled (run_at>?)" in plans["delayed"]
    assert {name: full_scans(text) for name, text in plans.items()} == {
        name: [] for name in plans
    }


def test_claims_and_finishes_leave_the_retrying_index_alone(
    open_store: OpenStore, path: Path
) -> None:
    """``jobq_retrying`` keys on ``attempts`` and ``run_at``, which a claim,
    its promotion and a finish never write: only a failed attempt (and a
    revive) maintains it."""
    open_store()
    with raw(path) as conn:
        writes = {
            name: index_writes(conn, getattr(sqlite_statements, name))
            for name in ("CLAIM", "PROMOTE", "COMPLETE", "RELEASE", "RETRY",
                         "REVIVE")
        }  # fmt: skip

    assert [name for name, opened in writes.items() if "jobq_retrying" in opened] == [
        "RETRY", "REVIVE",
    ]  # fmt: skip


def test_limit_statements_use_their_indexes(open_store: OpenStore, path: Path) -> None:
    """A claim finds the keys that may release through ``jobq_limit_ready``,
    a key's held jobs through ``jobq_held``, and its slots by primary key:
    never a scan however many jobs are held or run."""
    store = open_store()
    add(store, *(new_job(n, run_at=T0 + 3600, priority=9) for n in range(500)))
    statements = [
        ("ANY_DUE_OR_READY", (T0, T0)),
        ("READY_KEYS", (T0,)),
        ("READY_KEY_EXISTS", (T0,)),
        ("KEY_STATE", ("smtp",)),
        ("RELEASE_HELD", ("smtp", 2)),
        ("NEXT_DUE", ()),
        ("HOLD", ("smtp", 1)),
        ("TAKE_SLOT", ("smtp", 1)),
        ("SET_KEY", (T0, T0, "smtp")),
    ]
    with raw(path) as conn:
        plans = {
            name: plan(conn, getattr(sqlite_statements, name), params)
            for name, params in statements
        }
        # The triggers' statements, as a claim's end runs them.
        freed = plan(conn, "DELETE FROM jobq_slots WHERE job_id = ?", (1,))
        marked = plan(
            conn,
            "UPDATE jobq_limit_keys SET ready_at = 0 WHERE held > 0"
            " AND name IN (SELECT name FROM jobq_slots WHERE job_id = ?)",
            (1,),
        )

    assert "USING INDEX jobq_limit_ready (ready_at<?)" in plans["READY_KEYS"]
    assert "USING INDEX jobq_limit_ready (ready_at<?)" in plans["ANY_DUE_OR_READY"]
    assert "USING INDEX jobq_limit_ready" in plans["NEXT_DUE"]
    assert "USING INDEX jobq_held (held_by=?)" in plans["RELEASE_HELD"]
    assert "SEARCH jobq_slots USING PRIMARY KEY (name=?)" in plans["KEY_STATE"]
    assert "USING COVERING INDEX jobq_slots_job (job_id=?)" in freed
    assert "USING COVERING INDEX jobq_slots_job (job_id=?)" in marked
    assert "SCAN jobq_limit_keys" not in marked
    assert "SCAN jobq_limit_keys" not in "\n".join(plans.values())
    assert {name: full_scans(text) for name, text in plans.items()} == {
        name: [] for name in plans
    }


def test_a_version_5_file_is_migrated_and_keeps_its_jobs(
    path: Path, open_store: OpenStore
) -> None:
    """Version 6 rebuilds the jobs table (the state 'held'): every job, the
    id sequence and the keys come through, with no limits."""
    sqlite_at(path, 5)
    with raw(path) as conn:  # job 4 was taken, then deleted: its id stays used
        conn.execute("INSERT INTO jobq_jobs (id, state, payload, priority, run_at,"
                     " created_at, max_attempts) VALUES (4, 'ready', '0', 0, ?, ?, 1)",
                     (T0, T0))  # fmt: skip
        conn.execute("DELETE FROM jobq_jobs WHERE id = 4")

    store = open_store()

    records = [store.get(job_id, T0) for job_id in (1, 2, 3)]
    shown = [(r.state, r.payload, r.key, r.attempts, r.limits, r.held_by)
             for r in records if r is not None]  # fmt: skip
    assert shown == [
        (JobState.PENDING, "due", "k", 0, (), None),
        (JobState.PENDING, {"n": 1}, None, 1, (), None),
        (JobState.DEAD, "dead", None, 1, (), None),
    ]
    assert store.stats() == StoreStats(2, 0, 1, delayed=1, retrying=1)
    with raw(path) as conn:
        assert conn.execute(GET_VERSION).fetchone() == (SCHEMA_VERSION,) == (12,)
    assert store.add([new_job("again", key="k")], T0) == [Enqueued(1, True)]
    assert add(store, new_job("new")) == [5]
    store.declare_limit(Limit("smtp", concurrency=1))
    add(store, new_job("a", limits=("smtp",)), new_job("b", limits=("smtp",)))
    assert [c.id for c in store.claim_many(T0, 10)] == [1, 5, 6]
    assert store.limit_usage(T0) == [LimitUsage("smtp", 1, None, 1, 1, 1)]


def test_a_version_10_file_is_migrated_and_its_retrying_job_listed_and_counted(
    path: Path, open_store: OpenStore
) -> None:
    """Version 11 adds ``jobq_retrying`` over the jobs already there: the old
    file's job that failed once and is due in a minute is retrying."""
    sqlite_at(path, 10)

    store = open_store()

    retrying = store.page_jobs(JobQuery("retrying"), T0)
    assert [(job.id, job.attempts) for job in retrying.jobs] == [(2, 1)]
    assert store.page_jobs(JobQuery("delayed"), T0).jobs == []
    assert (store.stats().delayed, store.stats().retrying) == (1, 1)
    with raw(path) as conn:
        assert conn.execute(GET_VERSION).fetchone() == (SCHEMA_VERSION,)
        assert conn.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'jobq_retrying'"
        ).fetchone() == (1,)


def test_a_version_6_file_keeps_its_held_jobs_and_they_are_released(
    path: Path, open_store: OpenStore
) -> None:
    """Version 7 rebuilds the held-job indexes on ``held_by``: a job held
    under version 6 is still held, and its key releases it to a claim."""
    sqlite_at(path, 6)
    with raw(path) as conn:  # job 9 held by smtp, whose key may release it now
        conn.execute("INSERT INTO jobq_jobs (id, state, payload, priority, run_at,"
                     " created_at, max_attempts, limits, held_by) VALUES"
                     " (9, 'held', '\"h\"', 0, ?, ?, 1, '[\"smtp\"]', 'smtp')",
                     (T0, T0))  # fmt: skip
        conn.execute("INSERT INTO jobq_limits VALUES ('smtp', 1, NULL, NULL, 1)")
        conn.execute("INSERT INTO jobq_limit_keys VALUES ('smtp', NULL, 0, 1)")

    store = open_store()

    held = store.get(9, T0)
    assert held is not None
    assert (held.state, held.held_by) == (JobState.PENDING, "smtp")
    with raw(path) as conn:
        indexes = dict(conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE name LIKE 'jobq_held%'"
        ).fetchall())  # fmt: skip
    assert sorted(indexes) == ["jobq_held", "jobq_held_order"]
    assert all("WHERE held_by IS NOT NULL" in sql for sql in indexes.values())
    assert 9 in [c.id for c in store.claim_many(T0, 10)]
    assert store.limit_usage(T0) == [LimitUsage("smtp", 1, None, 1, 1, 0)]


def test_a_process_that_never_declared_a_limit_releases_held_jobs_within_a_second(
    open_store: OpenStore,
) -> None:
    """Until a store sees a limit (its own declaration, a limited job it
    claims, or a look at the file once a second), its claims skip the probe
    for keys that may release held jobs. So when the process that held them
    is gone, another that never declared the limit still releases them,
    a second later at most."""
    other = open_store()
    assert other.claim_many(T0, 1) == []  # it looked: no limit in the file yet
    holder = open_store()
    holder.declare_limit(Limit("smtp", concurrency=1))
    first, second = add(holder, new_job("a", limits=("smtp",)),
                        new_job("b", limits=("smtp",)))  # fmt: skip
    [running] = holder.claim_many(T0, 2)  # "b" held
    assert holder.finish_many([Done(running, None)], None, T0) == [True]
    holder.close()  # its process is gone before it released "b"

    assert other.claim_many(T0 + 0.5, 1) == []  # not looked again yet
    [released] = other.claim_many(T0 + 1.0, 1)
    assert (running.id, released.id) == (first, second)
    assert released.limits == ("smtp",)


def index_writes(conn: sqlite3.Connection, statement: str) -> set[str]:
    """The indexes ``statement`` opens for writing: those it maintains."""
    roots = dict(conn.execute(
        "SELECT rootpage, name FROM sqlite_master WHERE type = 'index'"
    ).fetchall())  # fmt: skip
    params = [None] * statement.count("?")
    program = conn.execute(f"EXPLAIN {statement}", params).fetchall()
    opened = {row[3] for row in program if row[1] == "OpenWrite"}
    return {roots[page] for page in opened if page in roots}


def test_claims_and_finishes_leave_the_held_job_indexes_alone(
    open_store: OpenStore, path: Path
) -> None:
    """Claims and finishes write ``state`` on every job; the held-job indexes
    key on ``held_by``, which only holds, releases and cancels write, so a
    claim or a finish of a job under no limit never maintains them."""
    open_store()
    with raw(path) as conn:
        writes = {
            name: index_writes(conn, getattr(sqlite_statements, name))
            for name in ("CLAIM", "COMPLETE", "RETRY", "HOLD", "RELEASE_HELD")
        }
    held = {"jobq_held", "jobq_held_order"}
    assert not writes["CLAIM"] & held
    assert not writes["COMPLETE"] & held
    assert held <= writes["HOLD"]  # the test can tell
    assert held <= writes["RELEASE_HELD"]


def vm_steps(store: SqliteStore, action: Callable[[], object]) -> int:
    """SQLite virtual-machine instructions ``action`` runs on this thread's
    connection: the work a query does, independent of the machine's speed."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    with store._connection() as conn:  # this thread's: the action runs on it
        pass
    conn.set_progress_handler(count, 1)
    try:
        action()
    finally:
        conn.set_progress_handler(None, 1)
    return steps


@pytest.mark.parametrize("priority", [9, -9])
def test_a_claim_does_no_more_work_with_many_future_jobs(
    open_store: OpenStore, tmp_path: Path, priority: int
) -> None:
    """Delayed jobs of any priority: the claim takes the due one, and its cost
    does not grow with the number of delayed jobs beside it."""
    steps = []
    for count in (10, 3000):
        store = open_store(at=tmp_path / f"{count}.db")
        add(store, *(new_job(n, run_at=T0 + 60 + n, priority=priority)
                     for n in range(count)))  # fmt: skip
        [due] = add(store, new_job("due", run_at=T0))
        steps.append(vm_steps(store, lambda s=store: claim(s, T0)))
        assert state_of(store, due) is JobState.RUNNING
        later = claim(store, T0 + 60.5)  # the first delayed job is due now
        assert json.loads(later.payload) == 0
        assert store.claim(T0 + 60.5) is None

    few, many = steps
    assert many < few * 1.5


# -- several processes on one file -----------------------------------------------------

WORKER = """
import json, sys, threading, jobq

ran, lock = [], threading.Lock()

def handler(job):
    with lock:
        ran.append(job.id)

queue = jobq.JobQueue(handler, store=sys.argv[1])
queue.start(workers=2)
print("ready", flush=True)
sys.stdin.readline()
ids = [queue.enqueue({"n": n}).id for n in range(int(sys.argv[2]))]
assert queue.join(timeout=60), "the queue did not drain"
queue.close()
print(json.dumps({"enqueued": ids, "ran": ran}), flush=True)
"""


def test_two_processes_on_one_file_run_every_job_exactly_once(path: Path) -> None:
    per_process = 150
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, f"sqlite:///{path}", str(per_process)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:  # both are open and idle before either enqueues
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=WAIT)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                proc.communicate()
    assert [proc.returncode for proc in procs] == [0, 0]

    results = [json.loads(output) for output in outputs]
    enqueued = [job_id for r in results for job_id in r["enqueued"]]
    ran = [job_id for r in results for job_id in r["ran"]]
    assert len(set(enqueued)) == 2 * per_process
    assert sorted(ran) == sorted(enqueued)


OPENER = """
import sys, jobq
sys.stdin.readline()
queue = jobq.JobQueue(store=sys.argv[1])
print(queue.enqueue("x").id, flush=True)
queue.close()
"""


def test_processes_opening_a_new_file_at_once_all_succeed(path: Path) -> None:
    """The first opens race to create the schema and switch to WAL."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, f"sqlite:///{path}"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for proc in procs:  # release them together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = [proc.communicate(timeout=WAIT) for proc in procs]

    assert [err for _, err in results] == [""] * 4
    assert sorted(int(out) for out, _ in results) == [1, 2, 3, 4]


ENQUEUER = """
import sys, jobq
queue = jobq.JobQueue(store=sys.argv[1])
queue.enqueue("from another process")
queue.close()
"""


def test_an_idle_worker_wakes_for_a_job_another_process_enqueued(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle workers otherwise look every second anyway: only the watcher can
    # wake this one within the test's patience.
    monkeypatch.setattr("jobq._worker.pool.MAX_IDLE_WAIT", 3600.0)
    ran = threading.Event()
    store = SqliteStore(path, poll_interval=0.02)
    queue = jobq.JobQueue(lambda job: ran.set(), store=store).start(workers=1)
    try:
        subprocess.run(
            [sys.executable, "-c", ENQUEUER, f"sqlite:///{path}"],
            cwd=ROOT,
            check=True,
            timeout=WAIT,
        )
        assert ran.wait(WAIT)
    finally:
        queue.close()


DURABLE = """
import sys, jobq
queue = jobq.JobQueue(store=sys.argv[1])
for n in range(100_000):
    print(queue.enqueue(n).id, flush=True)
"""


def test_every_enqueue_that_returned_survives_a_kill(path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", DURABLE, f"sqlite:///{path}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    acknowledged = [int(proc.stdout.readline()) for _ in range(200)]
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=WAIT)

    store = SqliteStore(path)
    store.open(Signal(), dead_letter_limit=10)
    try:
        assert all(store.get(job_id, time.time()) for job_id in acknowledged)
    finally:
        store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_uses_connections_of_its_own(path: Path) -> None:
    queue = jobq.JobQueue(lambda job: None, store=f"sqlite:///{path}")
    try:
        queue.enqueue("parent")
        store = queue.store
        assert isinstance(store, SqliteStore)
        parents = set(map(id, store._conns.values()))
        with warnings.catch_warnings():  # 3.12+: forking with threads running
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: report through the exit status, never return
            ok = False
            try:
                ok = not store._conns and queue.enqueue("child").id > 0
                ok = ok and not parents & set(map(id, store._conns.values()))
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert queue.stats().pending == 2
        assert queue.enqueue("parent again").id == 3
    finally:
        queue.close()


def test_a_change_waits_for_another_connections_write_lock(tmp_path: Path) -> None:
    """Another process's writer holds the lock: enqueue waits for it, and
    gives up with a clear error after busy_timeout."""
    path = tmp_path / "jobs.db"
    with jobq.JobQueue(store=SqliteStore(path, busy_timeout=5)) as queue:
        queue.stats()
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        added = threading.Event()

        def enqueue() -> None:
            queue.enqueue("x")
            added.set()

        thread = threading.Thread(target=enqueue)
        thread.start()
        assert not added.wait(0.2)  # still waiting for the lock
        other.execute("COMMIT")
        thread.join(10)
        assert added.is_set()
        assert queue.stats().pending == 1

    with jobq.JobQueue(store=SqliteStore(path, busy_timeout=0.2)) as queue:
        queue.stats()
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(jobq.StoreError, match=r"busy_timeout=0\.2 s"):
                queue.enqueue("y")
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert queue.stats().pending == 1


# -- migrating a schema of an earlier jobq ---------------------------------------------


def test_a_version_1_file_is_migrated_when_opened_and_keeps_its_jobs(
    path: Path, open_store: OpenStore
) -> None:
    sqlite_v1(path)

    store = open_store()

    records = [store.get(job_id, T0) for job_id in (1, 2, 3)]
    shown = [(r.state, r.payload, r.key, r.priority, r.task, r.attempts,
              r.last_error, [e.type for e in r.errors])
             for r in records if r is not None]  # fmt: skip
    assert shown == [
        (JobState.PENDING, "due", "k", 3, None, 0, None, []),
        (JobState.PENDING, {"n": 1}, None, 0, "mail.send", 1, "ValueError: x",
         ["ValueError"]),
        (JobState.DEAD, "dead", None, 0, None, 1, "Fatal: no", ["Fatal"]),
    ]  # fmt: skip
    new_fields = [(r.started_at, r.finished_at, r.timeout, dict(r.meta))
                  for r in records if r is not None]  # fmt: skip
    assert new_fields == [(None, None, None, {})] * 3
    with raw(path) as conn:
        assert conn.execute(GET_VERSION).fetchone() == (SCHEMA_VERSION,)
    first = claim(store, T0 + 5)
    assert (first.id, first.meta, first.timeout) == (1, None, None)
    running = store.get(1, T0 + 5)
    assert running is not None
    assert (running.started_at, running.finished_at) == (T0 + 5, None)


def test_migrate_brings_a_version_1_file_to_this_version(path: Path) -> None:
    sqlite_v1(path)

    assert SqliteStore(path).migrate() == SCHEMA_VERSION == 12
    assert SqliteStore(path).migrate() == SCHEMA_VERSION  # then only checks

    with raw(path) as conn:
        assert conn.execute("SELECT count(*) FROM jobq_jobs").fetchone() == (3,)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(jobq_jobs)")}
        schedules = {
            row[1] for row in conn.execute("PRAGMA table_info(jobq_schedules)")
        }
        finished = conn.execute(
            "EXPLAIN QUERY PLAN " + FINISHED_PER_MINUTE, {"since": T0, "now": T0}
        ).fetchall()
    assert {"started_at", "finished_at", "timeout", "meta"} <= columns
    assert schedules == {"name", "expression", "last_slot", "last_job_id",
                         "paused_at", "paused_by", "resumed_at"}  # fmt: skip
    # version 4: the minutes of finished jobs are read from an index alone
    assert "USING COVERING INDEX jobq_finished" in str(finished)


def test_a_version_4_file_is_migrated_and_keeps_its_jobs_ids_and_keys(
    path: Path, open_store: OpenStore
) -> None:
    """Version 5 rebuilds the jobs table (a new state): every job, the id
    sequence and the keys come through; the key index leaves stopping jobs
    out."""
    sqlite_at(path, 4)
    with raw(path) as conn:  # job 4 was taken, then deleted: its id stays used
        conn.execute(
            "INSERT INTO jobq_jobs (state, payload, priority, run_at, created_at,"
            " max_attempts, result, expires_at) VALUES"
            " ('completed', '1', 0, ?, ?, 1, '\"r\"', ?)",
            (T0, T0, T0 + 60),
        )
        conn.execute("INSERT INTO jobq_jobs (id, state, payload, priority, run_at,"
                     " created_at, max_attempts) VALUES (5, 'ready', '0', 0, ?, ?, 1)",
                     (T0, T0))  # fmt: skip
        conn.execute("DELETE FROM jobq_jobs WHERE id = 5")

    store = open_store()

    records = [store.get(job_id, T0) for job_id in (1, 2, 3, 4)]
    shown = [(r.state, r.payload, r.key, r.attempts, r.result, r.cancellation)
             for r in records if r is not None]  # fmt: skip
    assert shown == [
        (JobState.PENDING, "due", "k", 0, None, None),
        (JobState.PENDING, {"n": 1}, None, 1, None, None),
        (JobState.DEAD, "dead", None, 1, None, None),
        (JobState.COMPLETED, 1, None, 0, "r", None),
    ]
    assert store.stats() == StoreStats(
        2, 0, 1, delayed=1, kept=1, cancelled=0, retrying=1
    )
    with raw(path) as conn:
        assert conn.execute(GET_VERSION).fetchone() == (SCHEMA_VERSION,) == (12,)
    assert store.add([new_job("again", key="k")], T0) == [Enqueued(1, True)]
    assert add(store, new_job("new")) == [6]
    assert claim(store).id == 1
    assert store.cancel(1, T0, by="t", keep_until=T0 + 60) == "stopping"
    record = store.get(1, T0)
    assert record is not None
    assert record.cancellation == Cancellation(T0, "t", 1)
    [freed] = store.add([new_job("after", key="k")], T0)
    assert (freed.id, freed.duplicate) == (7, False)


_OPEN_AND_CLOSE = """
import sys, jobq
from jobq.stores import SqliteStore
queue = jobq.JobQueue(store=SqliteStore(sys.argv[1]))
queue.stats()
queue.close()
"""


def test_another_store_on_the_file_leaves_this_process_its_locks(
    tmp_path: Path,
) -> None:
    """A second store object opened and closed here must not drop the first
    one's SQLite locks: another process closing its last connection would
    then take itself for the last one and delete the -wal and -shm files
    under the first store's connections ("disk I/O error" later)."""
    path = str(tmp_path / "jobs.db")
    first = jobq.JobQueue(store=SqliteStore(path))
    try:
        job = first.enqueue("kept")
        jobq.JobQueue(store=SqliteStore(path)).close()  # opens, then closes
        second = jobq.JobQueue(store=SqliteStore(path))
        second.stats()
        second.close()
        subprocess.run([sys.executable, "-c", _OPEN_AND_CLOSE, path], check=True)

        assert (tmp_path / "jobs.db-wal").exists()
        assert (tmp_path / "jobs.db-shm").exists()
        record = first.get(job)
        assert record is not None
        assert record.payload == "kept"
    finally:
        first.close()
