"""The SQLite store's schema: its tables, indexes and triggers, its version,
and ``migrate_schema``, which makes a file ready (WAL mode, then the schema created,
or migrated from an older version, or its version checked).

Tables carry a ``jobq_`` prefix so that the queue can live in a database the
application also uses. States: scheduled and ready (both "pending"), running,
dead, completed (kept with its result until ``expires_at``), cancelled (kept
likewise), held (pending, due, held back by a limit: version 6), waiting (for a
parent, ``after=``: version 8); a running job with a ``cancel_at`` is
stopping (it holds no key).
Counts per state live in a small table kept by triggers, so ``stats`` reads
eight rows, never the jobs (plus the few scheduled jobs already due and
completed or cancelled ones already expired that no write moved yet, and
the retrying ones: ``jobq_retrying``).
"""

from __future__ import annotations

import logging
import sqlite3
import time

from jobq.errors import StoreError
from jobq.stores.sqlite.connections import Database, primary_code

logger = logging.getLogger("jobq.stores.sqlite")

#: The schema this code writes; a file with a newer one is refused.
SCHEMA_VERSION = 12

SCHEMA_V1 = (
    """CREATE TABLE jobq_meta (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    )""",
    """CREATE TABLE jobq_jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- ids only grow, never reused
        state TEXT NOT NULL CHECK (state IN
            ('scheduled', 'ready', 'running', 'dead', 'completed')),
        payload TEXT NOT NULL,                 -- JSON
        key TEXT,
        priority INTEGER NOT NULL,
        run_at REAL NOT NULL,                  -- epoch seconds
        created_at REAL NOT NULL,
        max_attempts INTEGER NOT NULL,
        task TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,   -- failed attempts
        last_error TEXT,
        errors TEXT NOT NULL DEFAULT '[]',     -- JSON [[type, message, tb, at]]
        result TEXT,                           -- JSON, completed jobs only
        expires_at REAL,                       -- completed jobs only
        buried INTEGER,                        -- dead jobs: burial order
        token INTEGER NOT NULL DEFAULT 0,      -- grows with every claim
        lease_until REAL,                      -- the current (or last) claim's
        owner_host TEXT,
        owner_pid INTEGER,
        owner_nonce TEXT
    )""",
    "CREATE INDEX jobq_scheduled ON jobq_jobs (run_at) WHERE state = 'scheduled'",
    """CREATE INDEX jobq_ready ON jobq_jobs (priority DESC, run_at, id)
        WHERE state = 'ready'""",
    "CREATE INDEX jobq_running ON jobq_jobs (lease_until) WHERE state = 'running'",
    "CREATE INDEX jobq_dead ON jobq_jobs (buried) WHERE state = 'dead'",
    "CREATE INDEX jobq_completed ON jobq_jobs (expires_at) WHERE state = 'completed'",
    # A key is held while its job is pending or running: two processes adding
    # the same key at once get one job.
    """CREATE UNIQUE INDEX jobq_live_keys ON jobq_jobs (key)
        WHERE key IS NOT NULL AND state IN ('scheduled', 'ready', 'running')""",
    """CREATE TABLE jobq_counts (
        state TEXT PRIMARY KEY,
        n INTEGER NOT NULL
    )""",
    """INSERT INTO jobq_counts (state, n) VALUES
        ('scheduled', 0), ('ready', 0), ('running', 0), ('dead', 0), ('completed', 0)
    """,
    """CREATE TRIGGER jobq_count_insert AFTER INSERT ON jobq_jobs BEGIN
        UPDATE jobq_counts SET n = n + 1 WHERE state = NEW.state;
    END""",
    """CREATE TRIGGER jobq_count_delete AFTER DELETE ON jobq_jobs BEGIN
        UPDATE jobq_counts SET n = n - 1 WHERE state = OLD.state;
    END""",
    """CREATE TRIGGER jobq_count_update AFTER UPDATE OF state ON jobq_jobs
        WHEN OLD.state IS NOT NEW.state BEGIN
        UPDATE jobq_counts SET n = n - 1 WHERE state = OLD.state;
        UPDATE jobq_counts SET n = n + 1 WHERE state = NEW.state;
    END""",
)

# Version 2: the last attempt's times, and what a job carries unchanged.
SCHEMA_V2 = (
    "ALTER TABLE jobq_jobs ADD COLUMN started_at REAL",  # the last attempt's
    "ALTER TABLE jobq_jobs ADD COLUMN finished_at REAL",
    "ALTER TABLE jobq_jobs ADD COLUMN timeout REAL",  # seconds
    "ALTER TABLE jobq_jobs ADD COLUMN meta TEXT",  # JSON object of str -> str
)

# Version 3: periodic jobs' schedules, one row each (see ``ScheduleStore``).
SCHEMA_V3 = (
    """CREATE TABLE jobq_schedules (
        name TEXT PRIMARY KEY,
        expression TEXT NOT NULL,              -- what last_slot was computed by
        last_slot REAL NOT NULL,               -- epoch seconds
        last_job_id INTEGER
    )""",
)

# Version 4: jobs finished per minute (``finished_per_minute``, the
# dashboard's throughput), read from this index alone.
SCHEMA_V4 = (
    """CREATE INDEX jobq_finished ON jobq_jobs (finished_at, state, expires_at)
        WHERE state IN ('completed', 'dead')""",
)

# Version 5: cancelling (see "Cancelling" in ``jobq.stores.base``). The
# request is kept with the job (``cancel_at``, ``cancel_by``,
# ``cancel_attempt``; ``expires_at`` its keep_until meanwhile); the state
# "cancelled" needs a new CHECK, which SQLite changes only by rebuilding the
# table: a copy under the new definition, ids and the id sequence kept, then
# every index and trigger again (the key index no longer counts a stopping
# job, which holds no key).
_V4_COLUMNS = """id, state, payload, key, priority, run_at, created_at,
    max_attempts, task, attempts, last_error, errors, result, expires_at, buried,
    token, lease_until, owner_host, owner_pid, owner_nonce, started_at,
    finished_at, timeout, meta"""
SCHEMA_V5 = (
    """CREATE TABLE jobq_jobs_v5 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- ids only grow, never reused
        state TEXT NOT NULL CHECK (state IN
            ('scheduled', 'ready', 'running', 'dead', 'completed', 'cancelled')),
        payload TEXT NOT NULL,                 -- JSON
        key TEXT,
        priority INTEGER NOT NULL,
        run_at REAL NOT NULL,                  -- epoch seconds
        created_at REAL NOT NULL,
        max_attempts INTEGER NOT NULL,
        task TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,   -- failed attempts
        last_error TEXT,
        errors TEXT NOT NULL DEFAULT '[]',     -- JSON [[type, message, tb, at]]
        result TEXT,                           -- JSON, completed jobs only
        expires_at REAL,                       -- completed, cancelled, stopping
        buried INTEGER,                        -- dead jobs: burial order
        token INTEGER NOT NULL DEFAULT 0,      -- grows with every claim
        lease_until REAL,                      -- the current (or last) claim's
        owner_host TEXT,
        owner_pid INTEGER,
        owner_nonce TEXT,
        started_at REAL,                       -- the last attempt's
        finished_at REAL,
        timeout REAL,                          -- seconds
        meta TEXT,                             -- JSON object of str -> str
        cancel_at REAL,                        -- cancelled or stopping jobs
        cancel_by TEXT,
        cancel_attempt INTEGER                 -- NULL: cancelled while pending
    )""",
    f"INSERT INTO jobq_jobs_v5 ({_V4_COLUMNS}) SELECT {_V4_COLUMNS} FROM jobq_jobs",  # noqa: S608
    # The sequence goes with the ids: a deleted job's id is never given again.
    "DELETE FROM sqlite_sequence WHERE name = 'jobq_jobs_v5'",
    "UPDATE sqlite_sequence SET name = 'jobq_jobs_v5' WHERE name = 'jobq_jobs'",
    "DROP TABLE jobq_jobs",  # its indexes and triggers with it
    "ALTER TABLE jobq_jobs_v5 RENAME TO jobq_jobs",
    "CREATE INDEX jobq_scheduled ON jobq_jobs (run_at) WHERE state = 'scheduled'",
    """CREATE INDEX jobq_ready ON jobq_jobs (priority DESC, run_at, id)
        WHERE state = 'ready'""",
    "CREATE INDEX jobq_running ON jobq_jobs (lease_until) WHERE state = 'running'",
    "CREATE INDEX jobq_dead ON jobq_jobs (buried) WHERE state = 'dead'",
    "CREATE INDEX jobq_completed ON jobq_jobs (expires_at) WHERE state = 'completed'",
    "CREATE INDEX jobq_cancelled ON jobq_jobs (expires_at) WHERE state = 'cancelled'",
    *SCHEMA_V4,
    """CREATE UNIQUE INDEX jobq_live_keys ON jobq_jobs (key)
        WHERE key IS NOT NULL AND state IN ('scheduled', 'ready', 'running')
        AND cancel_at IS NULL""",
    "INSERT INTO jobq_counts (state, n) VALUES ('cancelled', 0)",
    *(sql for sql in SCHEMA_V1 if sql.startswith("CREATE TRIGGER")),
)

# Version 6: limits (see "Limits" in ``jobq.stores.base``). A job keeps its
# ``limits`` (JSON array text, NULL for none); a due job a limit holds back
# is ``held`` (pending to callers) with the key in ``held_by``: out of
# ``jobq_ready``, so no claim looks at it until its key releases it. Per
# concrete key, ``jobq_limit_keys`` keeps the rate's ``tat``, how many jobs
# it holds and ``ready_at``, when it may release one (NULL: once a slot
# frees); ``jobq_slots`` has a row per running attempt per key. The
# statements that hold, release or cancel a limited job, and those that end
# a limited claim (the store knows from ``Claim.limits`` which claims are
# limited: ``limiting.free_slots``), keep these counts, drop the slots and
# mark the keys ready, whichever way the attempt ends. No row trigger on
# ``jobq_jobs`` does it: one costs every claim and finish of jobs under no
# limit too, even with a WHEN that is false for them (measured: a claim and
# finish some 2-7 % slower). None of it is read or written for a job without
# limits. The state "held" needs a new CHECK: the table is rebuilt as for
# version 5.
_V5_COLUMNS = f"""{_V4_COLUMNS}, cancel_at, cancel_by, cancel_attempt"""
_JOBS_V6 = (
    SCHEMA_V5[0]
    .replace("jobq_jobs_v5", "jobq_jobs_v6")
    .replace("'completed', 'cancelled')", "'completed', 'cancelled', 'held')")
    .replace(
        "cancel_attempt INTEGER                 -- NULL: cancelled while pending",
        """cancel_attempt INTEGER,                -- NULL: cancelled while pending
        limits TEXT,                           -- JSON array of limit keys
        held_by TEXT                           -- held jobs: the key holding""",
    )
)
_LIVE = "('scheduled', 'ready', 'running', 'held')"
SCHEMA_V6 = (
    _JOBS_V6,
    f"INSERT INTO jobq_jobs_v6 ({_V5_COLUMNS}) SELECT {_V5_COLUMNS} FROM jobq_jobs",  # noqa: S608
    "DELETE FROM sqlite_sequence WHERE name = 'jobq_jobs_v6'",
    "UPDATE sqlite_sequence SET name = 'jobq_jobs_v6' WHERE name = 'jobq_jobs'",
    "DROP TABLE jobq_jobs",  # its indexes and triggers with it
    "ALTER TABLE jobq_jobs_v6 RENAME TO jobq_jobs",
    *(sql for sql in SCHEMA_V5 if sql.startswith("CREATE INDEX")),
    f"""CREATE UNIQUE INDEX jobq_live_keys ON jobq_jobs (key)
        WHERE key IS NOT NULL AND state IN {_LIVE} AND cancel_at IS NULL""",
    # A key's held jobs in run order (releases), and all of them (pages).
    """CREATE INDEX jobq_held ON jobq_jobs (held_by, priority DESC, run_at, id)
        WHERE state = 'held'""",
    """CREATE INDEX jobq_held_order ON jobq_jobs (priority DESC, run_at, id)
        WHERE state = 'held'""",
    "INSERT INTO jobq_counts (state, n) VALUES ('held', 0)",
    *(sql for sql in SCHEMA_V1 if sql.startswith("CREATE TRIGGER")),
    """CREATE TABLE jobq_limits (
        name TEXT PRIMARY KEY,                 -- exact, or a family's "prefix:*"
        concurrency INTEGER,
        rate INTEGER,
        per REAL,                              -- seconds
        burst INTEGER NOT NULL
    )""",
    """CREATE TABLE jobq_limit_keys (
        name TEXT PRIMARY KEY,                 -- a concrete key
        tat REAL,                              -- the rate's; NULL: never started
        ready_at REAL,                         -- may release then; NULL: no
        held INTEGER NOT NULL DEFAULT 0        -- jobs it holds
    )""",
    "CREATE INDEX jobq_limit_ready ON jobq_limit_keys (ready_at) WHERE held > 0",
    """CREATE TABLE jobq_slots (
        name TEXT NOT NULL,
        job_id INTEGER NOT NULL,
        PRIMARY KEY (name, job_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX jobq_slots_job ON jobq_slots (job_id)",
)

# Version 7: the held-job indexes keyed on ``held_by IS NOT NULL`` (set
# exactly while a job is held) rather than ``state = 'held'``: an UPDATE
# maintains a partial index only if it writes a column the index names or
# its WHERE reads, and claims and finishes write ``state`` on every job,
# held or not, while only holds, releases and cancels write ``held_by``.
# Measured: a claim of a job under no limit 1.3 % cheaper.
_HELD_INDEXES = (
    """CREATE INDEX jobq_held ON jobq_jobs (held_by, priority DESC, run_at, id)
        WHERE held_by IS NOT NULL""",
    """CREATE INDEX jobq_held_order ON jobq_jobs (priority DESC, run_at, id)
        WHERE held_by IS NOT NULL""",
)
SCHEMA_V7 = ("DROP INDEX jobq_held", "DROP INDEX jobq_held_order", *_HELD_INDEXES)

# Version 8: workflows (see "Workflows" in ``jobq.stores.base``). A child
# keeps a row per parent in ``jobq_deps`` (position in ``after``, and the
# parent's outcome and result once it ended: NULL while unset), deleted with
# the child (a trigger on the children only: ``after_failure`` is set on the
# jobs that have parents, and NULL on every other). A waiting child counts its
# unset slots in ``waiting_on`` (NULL once it no longer waits), so that a
# parent's end releases it without counting its rows; the waiting jobs are
# listed through ``jobq_deps`` (every child has a row at position 0), with
# no index of the jobs table: one costs every insert and delete. A parent
# counts the children added after it in ``children``: the statement that
# ends a claim returns it, and only a job with children
# looks for them, so a job without pays no statement more. The state
# "waiting" needs a new CHECK: the table is rebuilt as for version 5.
_V6_COLUMNS = f"""{_V5_COLUMNS}, limits, held_by"""
_JOBS_V8 = (
    _JOBS_V6.replace("jobq_jobs_v6", "jobq_jobs_v8")
    .replace("'cancelled', 'held')", "'cancelled', 'held', 'waiting')")
    .replace(
        "held_by TEXT                           -- held jobs: the key holding",
        """held_by TEXT,                          -- held jobs: the key holding
        after_failure TEXT,                    -- jobs with parents only
        children INTEGER NOT NULL DEFAULT 0,   -- jobs added after it
        waiting_on INTEGER                     -- waiting jobs: unset slots""",
    )
)
SCHEMA_V8 = (
    _JOBS_V8,
    f"INSERT INTO jobq_jobs_v8 ({_V6_COLUMNS}) SELECT {_V6_COLUMNS} FROM jobq_jobs",  # noqa: S608
    "DELETE FROM sqlite_sequence WHERE name = 'jobq_jobs_v8'",
    "UPDATE sqlite_sequence SET name = 'jobq_jobs_v8' WHERE name = 'jobq_jobs'",
    "DROP TABLE jobq_jobs",  # its indexes and triggers with it
    "ALTER TABLE jobq_jobs_v8 RENAME TO jobq_jobs",
    *(sql for sql in SCHEMA_V5 if sql.startswith("CREATE INDEX")),
    *_HELD_INDEXES,
    """CREATE UNIQUE INDEX jobq_live_keys ON jobq_jobs (key)
        WHERE key IS NOT NULL AND state IN
        ('scheduled', 'ready', 'running', 'held', 'waiting') AND cancel_at IS NULL""",
    "INSERT INTO jobq_counts (state, n) VALUES ('waiting', 0)",
    *(sql for sql in SCHEMA_V1 if sql.startswith("CREATE TRIGGER")),
    """CREATE TABLE jobq_deps (
        child INTEGER NOT NULL,
        position INTEGER NOT NULL,             -- in the child's after, from 0
        parent INTEGER NOT NULL,
        outcome TEXT,                          -- NULL: unset (ParentEnd)
        result TEXT,                           -- JSON, a completed parent's
        PRIMARY KEY (child, position)
    ) WITHOUT ROWID""",
    "CREATE INDEX jobq_deps_parent ON jobq_deps (parent, child)",
    """CREATE TRIGGER jobq_deps_delete AFTER DELETE ON jobq_jobs
        WHEN OLD.after_failure IS NOT NULL BEGIN
        DELETE FROM jobq_deps WHERE child = OLD.id;
    END""",
)

# Version 9: activity (see "Activity" in ``jobq.stores.base`` and
# ``jobq.stores.sqlite.activity``): the registry of processes, outcomes per
# minute and task, depth samples per minute. No job's statement touches them.
SCHEMA_V9 = (
    """CREATE TABLE jobq_processes (
        id TEXT PRIMARY KEY,                   -- host:pid:nonce
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started REAL NOT NULL,
        seen REAL NOT NULL,
        gone_after REAL NOT NULL,
        workers INTEGER NOT NULL,
        busy INTEGER NOT NULL,
        running TEXT NOT NULL                  -- JSON [[id, task, started]]
    ) WITHOUT ROWID""",
    """CREATE TABLE jobq_outcomes (
        minute REAL NOT NULL,
        task TEXT NOT NULL,                    -- '': plain jobs
        succeeded INTEGER NOT NULL,
        failed INTEGER NOT NULL,
        dead INTEGER NOT NULL,
        cancelled INTEGER NOT NULL,
        durations TEXT NOT NULL,               -- JSON: counts per bucket
        PRIMARY KEY (minute, task)
    ) WITHOUT ROWID""",
    """CREATE TABLE jobq_samples (
        minute REAL PRIMARY KEY,
        pending INTEGER NOT NULL,
        running INTEGER NOT NULL,
        waiting INTEGER NOT NULL,
        latency REAL
    ) WITHOUT ROWID""",
)

# Version 10: pausing a schedule (see ``ScheduleStore``): when and by whom
# it was paused (NULL: it runs), and when it was last resumed.
SCHEMA_V10 = (
    "ALTER TABLE jobq_schedules ADD COLUMN paused_at REAL",
    "ALTER TABLE jobq_schedules ADD COLUMN paused_by TEXT",
    "ALTER TABLE jobq_schedules ADD COLUMN resumed_at REAL",
)
# Version 11: the Retrying list (``jobq.stores.pages``): the jobs with a
# failed attempt by due time, so that its pages and its count (``stats``)
# read the range not due yet, the retrying jobs (and cancelled ones that
# were, till their time passes; the others' times have passed), however
# many jobs are delayed beside them. Keyed on ``attempts`` and ``run_at``,
# not ``state``, as the held jobs' indexes are on ``held_by`` (version 7):
# claims and finishes write neither, so they never maintain it (with
# ``state = 'scheduled'`` in its WHERE, a claim cost 0.9 % more; so, 0.2 %).
# Delayed jobs never attempted are read through ``jobq_scheduled``, past
# the retrying ones due before them.
SCHEMA_V11 = ("CREATE INDEX jobq_retrying ON jobq_jobs (run_at) WHERE attempts > 0",)
# Version 12: each task's newest error per minute (``TaskOutcomes.error``),
# so that the tasks page reads the last error from the figures, not from
# the dead jobs. NULL where no attempt failed; written by beats alone.
SCHEMA_V12 = (
    "ALTER TABLE jobq_outcomes ADD COLUMN error_at REAL",
    "ALTER TABLE jobq_outcomes ADD COLUMN error_job INTEGER",
    "ALTER TABLE jobq_outcomes ADD COLUMN error TEXT",
)

#: Statements that bring a schema from the version before the key to the key.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: SCHEMA_V1, 2: SCHEMA_V2, 3: SCHEMA_V3, 4: SCHEMA_V4, 5: SCHEMA_V5,
    6: SCHEMA_V6, 7: SCHEMA_V7, 8: SCHEMA_V8, 9: SCHEMA_V9, 10: SCHEMA_V10,
    11: SCHEMA_V11, 12: SCHEMA_V12,
}  # fmt: skip

HAS_META = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobq_meta'"
GET_VERSION = "SELECT value FROM jobq_meta WHERE name = 'schema_version'"
SET_VERSION = """INSERT INTO jobq_meta (name, value) VALUES ('schema_version', ?)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value"""
USE_WAL = "PRAGMA journal_mode = WAL"

#: Seconds between tries to switch a new file to WAL while another process does.
WAL_RETRY = 0.01


def migrate_schema(db: Database, conn: sqlite3.Connection) -> int:
    """Make the file ready for this jobq: switch it to WAL, then create the
    schema (a new file) or bring an older one to ``SCHEMA_VERSION``, in one
    transaction (IMMEDIATE: processes doing it at once take turns, and the
    later ones find it done). Returns the version; a newer one, or none that
    is valid, raises ``StoreError``."""
    try:
        _use_wal(db, conn)
    except sqlite3.Error as exc:
        raise db.error(exc) from exc
    with db.transaction(conn):
        found = _version(db, conn)
        if found < SCHEMA_VERSION:
            for step in range(found + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
            conn.execute(SET_VERSION, (SCHEMA_VERSION,))
    if 0 < found < SCHEMA_VERSION:
        logger.info(
            "migrated the jobq schema of %s from version %d to %d",
            db.path,
            found,
            SCHEMA_VERSION,
        )
    return SCHEMA_VERSION


def _use_wal(db: Database, conn: sqlite3.Connection) -> None:
    """Put the file in WAL mode (it stays so); a no-op once it is.

    Two processes switching a new file at once: the loser gets SQLITE_BUSY
    at once, without the busy handler, so wait for the winner here.
    """
    for _ in range(max(1, round(db.busy_timeout / WAL_RETRY))):
        try:
            mode = conn.execute(USE_WAL).fetchone()[0]
        except sqlite3.OperationalError as exc:
            if primary_code(exc) != sqlite3.SQLITE_BUSY:
                raise
            time.sleep(WAL_RETRY)
            continue
        if mode != "wal":
            raise StoreError(
                f"{db.path}: SQLite could not use WAL mode here (journal "
                f"mode {mode!r}); the file must be on a local filesystem"
            )
        return
    conn.execute(USE_WAL)  # still busy: raise that


def _version(db: Database, conn: sqlite3.Connection) -> int:
    """The file's schema version (0: no schema yet); ``StoreError`` for one
    that is not valid or is newer than this jobq knows."""
    if conn.execute(HAS_META).fetchone() is None:
        return 0
    row = conn.execute(GET_VERSION).fetchone()
    version = row[0] if row else None
    if not isinstance(version, int) or version < 1:
        raise StoreError(f"{db.path} has no valid jobq schema version ({version!r})")
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{db.path} was written by a newer jobq (schema version {version}; "
            f"this jobq knows up to {SCHEMA_VERSION}): upgrade jobq"
        )
    return version
