"""The PostgreSQL store's schema: its tables, indexes and triggers, their
version, creating and migrating them (``prepare_schema``, ``migrate_schema``),
and the privileges a store needs (``missing_privileges``).

The tables live in a schema of the user's choice (``jobq`` by default);
several named queues share them (the ``queue`` column). A ``meta`` table
holds the schema version: a newer one is refused, an older or missing one is
migrated under ``pg_advisory_xact_lock``, so hosts starting at once do not
race. ``PostgresStore.migrate()`` does the same explicitly; a role that may
not run DDL then only reads the version when it opens the store. Counts per
queue and state live in a small ``counts`` table kept by statement-level
triggers (spread over 16 shards per state so that concurrent transactions
rarely touch the same row), so ``stats`` reads a few dozen rows, never the
jobs (but for a few ranges of indexes: the scheduled jobs already due, the
expired ones, the retrying ones).
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

from jobq.errors import StoreError
from jobq.stores.postgres.connections import first

if TYPE_CHECKING:
    import psycopg

    from jobq.stores.postgres.statements import Statements

logger = logging.getLogger("jobq.stores.postgres")

#: The schema this code writes; a database with a newer one is refused.
SCHEMA_VERSION = 11

# -- schema (version 1) -------------------------------------------------------------
# ``{x}`` are names (psycopg.sql.Identifier); the DDL runs without parameters.

SCHEMA_V1 = (
    """CREATE TABLE {meta} (
        name text PRIMARY KEY,
        value bigint NOT NULL
    )""",
    "CREATE SEQUENCE {burials}",
    """CREATE TABLE {jobs} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- only grows
        queue text NOT NULL,
        state text NOT NULL CHECK (state IN
            ('scheduled', 'ready', 'running', 'dead', 'completed')),
        payload json NOT NULL,              -- the caller's JSON text, verbatim
        key text,
        priority bigint NOT NULL,
        run_at double precision NOT NULL,   -- epoch seconds
        created_at double precision NOT NULL,
        max_attempts integer NOT NULL,
        task text,
        attempts integer NOT NULL DEFAULT 0,  -- failed attempts
        last_error text,
        errors jsonb NOT NULL DEFAULT '[]',   -- [[type, message, traceback, at]]
        result json,                          -- completed jobs only
        expires_at double precision,          -- completed jobs only
        buried bigint,                        -- dead jobs: burial order
        token bigint NOT NULL DEFAULT 0,      -- the current (or last) claim's
        lease_until double precision,         -- epoch, on the database's clock
        owner text                            -- host:pid of the last claimer
    ) WITH (autovacuum_vacuum_scale_factor = 0.02,
            autovacuum_analyze_scale_factor = 0.02)""",
    """CREATE INDEX {jobs_ready} ON {jobs} (queue, priority DESC, run_at, id)
        WHERE state = 'ready'""",
    "CREATE INDEX {jobs_scheduled} ON {jobs} (queue, run_at) WHERE state = 'scheduled'",
    """CREATE INDEX {jobs_running} ON {jobs} (queue, lease_until)
        WHERE state = 'running'""",
    "CREATE INDEX {jobs_dead} ON {jobs} (queue, buried) WHERE state = 'dead'",
    """CREATE INDEX {jobs_completed} ON {jobs} (queue, expires_at)
        WHERE state = 'completed'""",
    # A key is held while its job is pending or running: two hosts adding the
    # same key at once get one job.
    """CREATE UNIQUE INDEX {jobs_live_keys} ON {jobs} (queue, key)
        WHERE key IS NOT NULL AND state IN ('scheduled', 'ready', 'running')""",
    """CREATE TABLE {counts} (
        queue text NOT NULL,
        state text NOT NULL,
        shard integer NOT NULL,
        n bigint NOT NULL,
        PRIMARY KEY (queue, state, shard)
    ) WITH (fillfactor = 50)""",
    # The body names no schema: the function runs with its schema alone on the
    # search path (and pg_temp last, so no temporary table can stand in).
    """CREATE FUNCTION {count_jobs}() RETURNS trigger LANGUAGE plpgsql
    SET search_path = {schema}, pg_temp AS $body$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO counts AS c (queue, state, shard, n)
            SELECT queue, state, pg_backend_pid() % 16, count(*)
            FROM new_rows GROUP BY queue, state
            ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO counts AS c (queue, state, shard, n)
            SELECT queue, state, pg_backend_pid() % 16, -count(*)
            FROM old_rows GROUP BY queue, state
            ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
        ELSE
            INSERT INTO counts AS c (queue, state, shard, n)
            SELECT queue, state, pg_backend_pid() % 16, sum(d) FROM (
                SELECT queue, state, -1 AS d FROM old_rows
                UNION ALL SELECT queue, state, 1 FROM new_rows
            ) AS changes
            GROUP BY queue, state HAVING sum(d) <> 0
            ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
        END IF;
        RETURN NULL;
    END
    $body$""",
    """CREATE TRIGGER count_insert AFTER INSERT ON {jobs}
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION {count_jobs}()""",
    """CREATE TRIGGER count_update AFTER UPDATE ON {jobs}
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION {count_jobs}()""",
    """CREATE TRIGGER count_delete AFTER DELETE ON {jobs}
        REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION {count_jobs}()""",
)

# -- version 2: the last attempt's times, and what a job carries unchanged ---------
# Nullable columns without a default: adding them rewrites no row.

SCHEMA_V2 = (
    """ALTER TABLE {jobs}
        ADD COLUMN started_at double precision,  -- the last attempt's
        ADD COLUMN finished_at double precision,
        ADD COLUMN timeout double precision,     -- seconds
        ADD COLUMN meta text                     -- JSON object of str -> str""",
)

# -- version 3: periodic jobs' schedules, one row per queue and name -----------------

SCHEMA_V3 = (
    """CREATE TABLE {schedules} (
        queue text NOT NULL,
        name text NOT NULL,
        expression text NOT NULL,           -- what last_slot was computed by
        last_slot double precision NOT NULL,  -- epoch seconds
        last_job_id bigint,
        PRIMARY KEY (queue, name)
    )""",
)

# -- version 4: jobs finished per minute (``finished_per_minute``) -------------------
# Read from this index alone (an index-only scan where the visibility map allows).

SCHEMA_V4 = (
    """CREATE INDEX {jobs_finished} ON {jobs} (queue, finished_at)
        INCLUDE (state, expires_at) WHERE state IN ('completed', 'dead')""",
)

# -- version 5: cancelling (``cancel``, ``stops_requested``) --------------------------
# The request kept with the job (nullable columns: no row rewritten). A
# stopping job (running, ``cancel_at`` set) no longer holds its key; a
# cancelled one is kept until ``expires_at`` as a completed one, purged
# through an index of its own. The wider state check and the key index read
# the table once each, under the migration's lock.

SCHEMA_V5 = (
    """ALTER TABLE {jobs}
        ADD COLUMN cancel_at double precision,  -- when cancelling was asked
        ADD COLUMN cancel_by text,              -- by whom
        ADD COLUMN cancel_attempt integer,      -- the attempt it stopped
        DROP CONSTRAINT jobs_state_check,
        ADD CONSTRAINT jobs_state_check CHECK (state IN
            ('scheduled', 'ready', 'running', 'dead', 'completed', 'cancelled'))""",
    "DROP INDEX {schema}.{jobs_live_keys}",
    """CREATE UNIQUE INDEX {jobs_live_keys} ON {jobs} (queue, key)
        WHERE key IS NOT NULL AND state IN ('scheduled', 'ready', 'running')
          AND cancel_at IS NULL""",
    """CREATE INDEX {jobs_cancelled} ON {jobs} (queue, expires_at)
        WHERE state = 'cancelled'""",
)

# -- version 6: limits per key (``declare_limit``, ``limit_usage``) -------------------
# A job's limits (NULL: none) and the key holding it back (state 'held', an
# index per key in run order, apart from 'ready': no claim walks past it;
# and one over all keys, for the due page). ``limits``: the declarations;
# ``limit_keys``: per concrete key its GCRA ``tat`` and ``ready_at``, when
# its rate may release a held job (NULL: nothing to release by time);
# ``slots``: one row per running attempt per key (running = count, at most
# the concurrency). Claimers of a key lock its row; nothing else does. The
# statements that end a limited claim (``statements.FINISH_LIMITED``, ...)
# drop its slots and leave a ``wakes`` row per key: the next claim releases
# that key's held jobs if a slot is free. Finishing never locks a key. No
# row trigger does this: one on the jobs table costs every claim and finish
# of jobs under no limit too, even with a WHEN that is false for them
# (measured: some 8 % per claim and finish).

SCHEMA_V6 = (
    """ALTER TABLE {jobs}
        ADD COLUMN limits text[],  -- concrete limit names; NULL: none
        ADD COLUMN held_by text,   -- state 'held': the key holding it back
        DROP CONSTRAINT jobs_state_check,
        ADD CONSTRAINT jobs_state_check CHECK (state IN ('scheduled', 'ready',
            'held', 'running', 'dead', 'completed', 'cancelled'))""",
    "DROP INDEX {schema}.{jobs_live_keys}",
    """CREATE UNIQUE INDEX {jobs_live_keys} ON {jobs} (queue, key)
        WHERE key IS NOT NULL AND state IN ('scheduled', 'ready', 'held', 'running')
          AND cancel_at IS NULL""",
    """CREATE INDEX {jobs_held} ON {jobs} (queue, held_by, priority DESC, run_at, id)
        WHERE state = 'held'""",
    """CREATE INDEX {jobs_held_order} ON {jobs} (queue, priority DESC, run_at, id)
        WHERE state = 'held'""",
    """CREATE TABLE {limits} (
        queue text NOT NULL,
        name text NOT NULL,           -- exact, or a family's 'prefix:*'
        concurrency integer,
        rate integer,
        per double precision,
        burst integer NOT NULL,
        PRIMARY KEY (queue, name)
    )""",
    """CREATE TABLE {limit_keys} (
        queue text NOT NULL,
        name text NOT NULL,
        tat double precision NOT NULL DEFAULT '-infinity',
        ready_at double precision,
        PRIMARY KEY (queue, name)
    ) WITH (fillfactor = 50)""",
    """CREATE INDEX {limit_keys_ready} ON {limit_keys} (queue, ready_at)
        WHERE ready_at IS NOT NULL""",
    """CREATE TABLE {slots} (
        queue text NOT NULL,
        name text NOT NULL,
        job_id bigint NOT NULL,
        PRIMARY KEY (queue, name, job_id)
    )""",
    "CREATE INDEX {slots_jobs} ON {slots} (job_id)",
    "CREATE TABLE {wakes} (queue text NOT NULL, name text NOT NULL)",
    "CREATE INDEX {wakes_names} ON {wakes} (queue, name)",
)

# -- version 7: workflows (``NewJob.after``) -----------------------------------------
# A child keeps one ``deps`` row per parent (its place in ``after``, and the
# parent's outcome once known: ``outcome`` NULL while unset), deleted with
# it. On the jobs: ``after_failure`` (children only), ``waits`` (a child's
# unset slots: the parent's end that sets the last one releases it, under
# the child's row lock, without counting rows) and ``children`` (a parent's
# deps rows, ever: NULL for a job that never had one, which is what lets the
# statements that end a claim skip children at no cost; see
# ``statements.NO_CHILDREN``). A waiting job holds its key as a pending one.

SCHEMA_V7 = (
    """ALTER TABLE {jobs}
        ADD COLUMN after_failure text,  -- 'wait', 'cancel', 'run'; NULL: no parents
        ADD COLUMN waits integer,       -- a child's parents not finished yet
        ADD COLUMN children integer,    -- deps rows naming it as parent; NULL: none
        DROP CONSTRAINT jobs_state_check,
        ADD CONSTRAINT jobs_state_check CHECK (state IN ('scheduled', 'ready',
            'held', 'waiting', 'running', 'dead', 'completed', 'cancelled'))""",
    "DROP INDEX {schema}.{jobs_live_keys}",
    """CREATE UNIQUE INDEX {jobs_live_keys} ON {jobs} (queue, key)
        WHERE key IS NOT NULL
          AND state IN ('scheduled', 'ready', 'held', 'waiting', 'running')
          AND cancel_at IS NULL""",
    "CREATE INDEX {jobs_waiting} ON {jobs} (queue, id) WHERE state = 'waiting'",
    """CREATE TABLE {deps} (
        child bigint NOT NULL,
        position integer NOT NULL,     -- in the child's ``after``, from 0
        parent bigint NOT NULL,
        outcome text CHECK (outcome IN ('completed', 'dead', 'cancelled')),
        result text,                   -- a completed parent's result (JSON)
        PRIMARY KEY (child, position)
    )""",
    "CREATE INDEX {deps_parent} ON {deps} (parent, child)",
)

# -- version 8: activity (``beat``, ``processes``, ``outcomes``, ``samples``) ----------
# Figures on the beats' clock (the processes' own), whatever the store's
# ``clock``. Every key starts with (queue, minute) or (queue, id): each
# read and each drop is a range of a primary key, and none reads the jobs.
# Text a row is sorted by is ``COLLATE "C"``: code point order, as Python
# sorts (the in-memory store's order), whatever the database's collation.
# ``outcomes``: a plain job's row (task NULL) has ``named`` false and task
# '' (a primary key holds no NULL; ``NULLS NOT DISTINCT`` needs PostgreSQL
# 15, and no text is free to stand for NULL: a job's task may be '' or
# any text but NUL, which PostgreSQL's text cannot hold). Plain first in
# the key's order, as the reads return them. ``durations``: one bigint[]
# of ``activity.BUCKETS`` counts, rather than a column per bucket: one
# array parameter per beat, summed item by item in the upsert, and the
# bounds live in ``jobq.activity`` alone. Rows updated every beat leave
# room on their page (fillfactor) for HOT updates. ``running``: JSON text
# of [job id, task, started], written and read by Python only (a task is
# any text, NUL included, and ``json``/``jsonb`` would check or refuse
# escapes that JSON allows).

SCHEMA_V8 = (
    """CREATE TABLE {processes} (
        queue text NOT NULL,
        id text COLLATE "C" NOT NULL,         -- host:pid:nonce
        host text COLLATE "C" NOT NULL,
        pid bigint NOT NULL,
        started double precision NOT NULL,    -- epoch seconds, the process's clock
        seen double precision NOT NULL,
        gone_after double precision NOT NULL,  -- gone once seen + gone_after passed
        workers bigint NOT NULL,
        busy bigint NOT NULL,
        running text NOT NULL,                -- JSON [[id, task, started], ...]
        PRIMARY KEY (queue, id)
    ) WITH (fillfactor = 50)""",
    """CREATE TABLE {outcomes} (
        queue text NOT NULL,
        minute double precision NOT NULL,     -- epoch seconds, a multiple of 60
        named boolean NOT NULL,               -- false: plain jobs (task NULL)
        task text COLLATE "C" NOT NULL,       -- '' for plain jobs
        succeeded bigint NOT NULL,
        failed bigint NOT NULL,
        dead bigint NOT NULL,
        cancelled bigint NOT NULL,
        durations bigint[] NOT NULL,          -- attempts per duration bucket
        PRIMARY KEY (queue, minute, named, task)
    ) WITH (fillfactor = 50)""",
    """CREATE TABLE {samples} (
        queue text NOT NULL,
        minute double precision NOT NULL,
        pending bigint NOT NULL,
        running bigint NOT NULL,
        waiting bigint NOT NULL,
        latency double precision,             -- NULL: nothing was due
        PRIMARY KEY (queue, minute)
    )""",
)

# -- version 9: pausing a schedule (see ``ScheduleStore``) -------------------------

SCHEMA_V9 = (
    """ALTER TABLE {schedules}
        ADD COLUMN paused_at double precision,  -- NULL: it runs
        ADD COLUMN paused_by text,
        ADD COLUMN resumed_at double precision""",
)

# -- version 10: the Retrying list (``jobq.stores.pages``) ---------------------------
# Scheduled jobs after a failed attempt, by due time: its pages and its
# count (``stats``, an index-only range) read these alone, however many
# jobs are delayed beside them. Only a row entering that state (a failed
# attempt retried later) adds an entry: a claim or a finish writes a row
# the predicate excludes. Delayed jobs never attempted are read through
# ``jobs_scheduled``, past the retrying ones due before them.

SCHEMA_V10 = (
    """CREATE INDEX {jobs_retrying} ON {jobs} (queue, run_at)
        WHERE state = 'scheduled' AND attempts > 0""",
)

# -- version 11: each task's newest error per minute (``TaskOutcomes.error``) -------
# The tasks page reads the last error from the figures, not the dead jobs.
# NULL where no attempt failed; written by the beats' upsert alone.

SCHEMA_V11 = (
    """ALTER TABLE {outcomes}
        ADD COLUMN error_at double precision,  -- NULL: no attempt failed
        ADD COLUMN error_job bigint,
        ADD COLUMN error text""",
)

#: Statements that bring a schema from the version before the key to the key.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: SCHEMA_V1, 2: SCHEMA_V2, 3: SCHEMA_V3, 4: SCHEMA_V4, 5: SCHEMA_V5,
    6: SCHEMA_V6, 7: SCHEMA_V7, 8: SCHEMA_V8, 9: SCHEMA_V9, 10: SCHEMA_V10,
    11: SCHEMA_V11,
}  # fmt: skip

# -- looking at the schema, and changing it ----------------------------------------

SCHEMA_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s)"
META_EXISTS = "SELECT to_regclass(%(meta)s) IS NOT NULL"
GET_VERSION = "SELECT value FROM {meta} WHERE name = 'schema_version'"
SET_VERSION = """INSERT INTO {meta} (name, value) VALUES ('schema_version', %(version)s)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value"""
LOCK_SCHEMA = "SELECT pg_advisory_xact_lock(%(lock)s)"
CREATE_SCHEMA = "CREATE SCHEMA {schema}"

#: What the store needs, checked by ``missing_privileges``: (kind, name in
#: ``Statements.names``, privilege).
PRIVILEGES = (
    ("schema", "schema", "USAGE"),
    ("table", "jobs_name", "SELECT"),
    ("table", "jobs_name", "INSERT"),
    ("table", "jobs_name", "UPDATE"),
    ("table", "jobs_name", "DELETE"),
    ("table", "counts_name", "SELECT"),
    ("table", "counts_name", "INSERT"),
    ("table", "counts_name", "UPDATE"),
    ("table", "meta_name", "SELECT"),
    ("table", "schedules_name", "SELECT"),
    ("table", "schedules_name", "INSERT"),
    ("table", "schedules_name", "UPDATE"),
    ("table", "limits_name", "SELECT"),
    ("table", "limits_name", "INSERT"),
    ("table", "limits_name", "UPDATE"),
    ("table", "limit_keys_name", "INSERT"),
    ("table", "limit_keys_name", "UPDATE"),
    ("table", "slots_name", "INSERT"),
    ("table", "slots_name", "DELETE"),
    ("table", "wakes_name", "INSERT"),
    ("table", "wakes_name", "DELETE"),
    ("table", "deps_name", "SELECT"),
    ("table", "deps_name", "INSERT"),
    ("table", "deps_name", "UPDATE"),
    ("table", "deps_name", "DELETE"),
    *(
        ("table", f"{table}_name", privilege)
        for table in ("processes", "outcomes", "samples")
        # FOR UPDATE (the drops' SKIP LOCKED) needs UPDATE too.
        for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE")
    ),
    ("sequence", "burials_name", "USAGE"),
    ("sequence", "jobs_id_seq_name", "USAGE"),
)
HAS_PRIVILEGE = {
    "schema": "SELECT has_schema_privilege(%(name)s, %(privilege)s)",
    "table": "SELECT has_table_privilege(%(name)s, %(privilege)s)",
    "sequence": "SELECT has_sequence_privilege(%(name)s, %(privilege)s)",
}


def advisory_lock_key(schema: str) -> int:
    """The ``pg_advisory_xact_lock`` key that serializes migrations of ``schema``."""
    digest = hashlib.sha256(f"jobq.schema:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def prepare_schema(
    conn: psycopg.Connection[Any], sql: Statements, *, where: str, auto_migrate: bool
) -> None:
    """Check the schema version; create or migrate it when it is missing or
    older (unless ``auto_migrate=False``); refuse a newer one. ``where``
    names the database in messages."""
    import psycopg

    schema = sql.names["schema"]
    try:
        found = schema_version(conn, sql, where=where)
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StoreError(
            f"{where}: the role may not use schema {schema!r} "
            f"({str(exc).strip()}); grant it USAGE on the schema and access to "
            "its tables"
        ) from exc
    if found == SCHEMA_VERSION:
        return
    _refuse_newer(found, schema, where)
    if not auto_migrate:
        state = "does not exist" if found == 0 else f"is at version {found}"
        raise StoreError(
            f"{where}: the jobq schema {schema!r} {state} (this jobq "
            f"needs version {SCHEMA_VERSION}); run PostgresStore(...).migrate() "
            "as a role that may create it"
        )
    migrate_schema(conn, sql, where=where)


def schema_version(
    conn: psycopg.Connection[Any], sql: Statements, *, where: str
) -> int:
    """The schema's version; 0 if there is no jobq schema yet."""
    names = sql.names
    schema = names["schema"]
    if not first(conn.execute(SCHEMA_EXISTS, {"schema": schema}).fetchone()):
        return 0
    if not first(conn.execute(META_EXISTS, {"meta": names["meta_name"]}).fetchone()):
        return 0
    row = conn.execute(sql.render(GET_VERSION)).fetchone()
    found = first(row)
    if not isinstance(found, int) or found < 1:
        raise StoreError(
            f"{where}: schema {schema!r} has no valid jobq schema version ({found!r})"
        )
    return found


def _refuse_newer(found: int, schema: str, where: str) -> None:
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"{where}: schema {schema!r} was written by a newer jobq "
            f"(schema version {found}; this jobq knows up to "
            f"{SCHEMA_VERSION}): upgrade jobq"
        )


def migrate_schema(
    conn: psycopg.Connection[Any], sql: Statements, *, where: str
) -> int:
    """Create the schema, or bring it to ``SCHEMA_VERSION``, in one transaction
    under ``pg_advisory_xact_lock``, so hosts doing it at once do not race.
    Returns the version; a newer one raises ``StoreError``."""
    import psycopg

    schema = sql.names["schema"]
    try:
        with conn.transaction():
            conn.execute(LOCK_SCHEMA, {"lock": advisory_lock_key(schema)})
            # Another host may have done it meanwhile.
            found = schema_version(conn, sql, where=where)
            _refuse_newer(found, schema, where)
            if found == SCHEMA_VERSION:
                return found
            if not first(conn.execute(SCHEMA_EXISTS, {"schema": schema}).fetchone()):
                conn.execute(sql.render(CREATE_SCHEMA))
            for step in range(found + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[step]:
                    conn.execute(sql.render(statement))
            conn.execute(sql.render(SET_VERSION), {"version": SCHEMA_VERSION})
    except psycopg.errors.InsufficientPrivilege as exc:
        raise StoreError(
            f"{where}: the role may not create or change the jobq schema "
            f"{schema!r} ({str(exc).strip()}); run "
            "PostgresStore(...).migrate() once as a role that may (e.g. the "
            "database owner) and grant this role access to it"
        ) from exc
    if found:
        logger.info(
            "migrated jobq schema %r from version %d to %d",
            schema,
            found,
            SCHEMA_VERSION,
        )
    return SCHEMA_VERSION


def missing_privileges(conn: psycopg.Connection[Any], sql: Statements) -> list[str]:
    """The privileges of ``PRIVILEGES`` the role lacks, as "USAGE on schema
    x"; none past a missing USAGE on the schema, since nothing inside can be
    looked up without it."""
    missing = []
    for kind, name, privilege in PRIVILEGES:
        target = sql.names[name]
        query = HAS_PRIVILEGE[kind]
        row = conn.execute(query, {"name": target, "privilege": privilege})
        if not first(row.fetchone()):
            missing.append(f"{privilege} on {kind} {target}")
            if kind == "schema":
                break  # nothing inside can be looked up without it
    return missing
