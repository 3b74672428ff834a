"""The PostgreSQL store: one queue that processes on many hosts share.

Every change is one short transaction, most of them a single statement in
autocommit mode, on a connection borrowed from a pool and returned at once: no
lock, transaction or connection is held while a handler runs.

Schema. The tables live in a schema of the user's choice (``jobq`` by
default); several named queues share them (the ``queue`` column). A ``meta``
table holds the schema version: a newer one is refused, an older or missing
one is migrated under ``pg_advisory_xact_lock``, so hosts starting at once do
not race. ``migrate()`` does the same explicitly; a role that may not run DDL
then only reads the version when it opens the store.

Claims. A pending job is ``scheduled`` (due later) or ``ready`` (due), each
state with a partial index. One statement moves the scheduled jobs that fell
due to ``ready`` (an index range on ``run_at``) and takes the first due job in
(priority DESC, run_at, id) order, both with ``FOR UPDATE SKIP LOCKED``, so
claims stay O(log n) however many delayed or low-priority jobs wait, and
concurrent claimers never wait for each other. Counts per queue and state live
in a small ``counts`` table kept by statement-level triggers (spread over 16
shards per state so that concurrent transactions rarely touch the same row), so
``stats`` reads a few dozen rows, never the jobs.

Leases. A claim sets a random 63-bit ``token``, its ``owner`` and
``lease_until`` = the database's clock + ``lease_seconds``. Only the current
token may end or renew a claim; ``recover`` turns claims whose lease expired
on the database's clock into failed attempts.

Clock. Leases always use the database's clock (``statement_timestamp()``), so
hosts whose clocks differ never judge each other's leases. Due times follow
``clock``: with ``"database"`` (the default) the store ignores the queue's
clock except for differences (a delay of 30 s is 30 s on the database's clock;
an absolute ``at`` is turned into a delay with the enqueuing host's clock) and
orders and compares every due time on the database's clock, so one host's
clock being off moves nothing. With ``"queue"`` it stores and compares the
queue's own times, as the memory store does: that is for tests that inject a
clock or use freezegun; across hosts it assumes synchronized clocks.

Wake-ups. After each enqueue (and each retry, revival or recovery) commits,
a thread of the store sends ``pg_notify`` in a small transaction of its own
(requests made while one is on its way coalesce into the next), so writers
never serialize on NOTIFY's commit-time lock; an enqueue inside the caller's
transaction notifies in that transaction, delivered when it commits. One
listener thread per opened store holds a dedicated autocommit connection that
``LISTEN``\\ s and wakes this process's idle workers within milliseconds; it
reconnects (and listens again) by itself. Idle workers also look on their own
at least every second, which covers a lost connection, ``listen=False`` and
PgBouncer.

PgBouncer in transaction pooling mode: ``LISTEN`` does not work through it (a
session-level feature: notifications go to whichever server connection
listened). Pass ``listen=False`` (idle workers then poll, every
``poll_interval`` and at least every second) or point ``listen`` at a direct
connection string to PostgreSQL. Everything else works through it: claims,
advisory locks (transaction-scoped only) and all writes are single
transactions. Pass ``prepare=False`` unless PgBouncer >= 1.21 runs with
``max_prepared_statements`` set.

Every SQL statement here takes values only as parameters, and names (schema,
tables, channel) only through ``psycopg.sql.Identifier``; nothing is built
from payloads, keys or queue names. psycopg is imported only when a store is
built, so ``import jobq`` needs nothing beyond the standard library.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import secrets
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from jobq._fork import reset_after_fork
from jobq._rules import check_text
from jobq.errors import StoreError
from jobq.stores.base import (
    ERRORS_KEPT,
    Claim,
    Done,
    Failure,
    NewJob,
    OneJobCalls,
    Signal,
    StoreStats,
    batch_size,
    check_room,
    describe_error,
    log_dropped_dead,
    log_recovered,
    positive_seconds,
    process_died,
    record_from_row,
)
from jobq.types import AttemptError, Enqueued, JobRecord, JobState

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

logger = logging.getLogger("jobq.stores.postgres")

#: The schema this code writes; a database with a newer one is refused.
SCHEMA_VERSION = 1

#: How the package that brings the driver is installed.
INSTALL_HINT = "pip install 'jobq[postgres]'"

#: Scheduled jobs moved to ``ready`` by one claim, at most (the rest by the
#: next claims): bounds the work of one claim when many jobs fall due at once.
PROMOTE_BATCH = 1000

#: Completed jobs past ``keep_completed`` deleted by one ``finish``, at most.
EXPIRE_BATCH = 100

#: The listener's reconnect delays (seconds): doubling from the first to the last.
RECONNECT_DELAYS = (0.1, 5.0)

#: Seconds between pings of an idle LISTEN connection, to notice a dead one.
LISTEN_PING = 30.0

#: Tries to add a keyed job whose holder finishes between our insert and look-up.
KEY_RETRIES = 10


# -- schema (version 1) -------------------------------------------------------------
# ``{x}`` are names (psycopg.sql.Identifier); the DDL runs without parameters.

_SCHEMA_V1 = (
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

#: Statements that bring a schema from the version before the key to the key.
MIGRATIONS: dict[int, tuple[str, ...]] = {1: _SCHEMA_V1}

# -- statements -----------------------------------------------------------------------
# ``{now}`` is the store's "now": the queue's clock when it passes one
# (``%(now)s`` is then not NULL), else the database's. ``{db_now}`` is always
# the database's clock (leases). Times from the caller arrive as offsets from
# the caller's now (``run_in``, ``keep_for``, ``error_in``).

_DB_NOW = "extract(epoch FROM statement_timestamp())::float8"
_NOW = f"coalesce(%(now)s::float8, {_DB_NOW})"

SCHEMA_EXISTS = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s)"
META_EXISTS = "SELECT to_regclass(%(meta)s) IS NOT NULL"
GET_VERSION = "SELECT value FROM {meta} WHERE name = 'schema_version'"
SET_VERSION = """INSERT INTO {meta} (name, value) VALUES ('schema_version', %(version)s)
    ON CONFLICT (name) DO UPDATE SET value = excluded.value"""
LOCK_SCHEMA = "SELECT pg_advisory_xact_lock(%(lock)s)"
CREATE_SCHEMA = "CREATE SCHEMA {schema}"

ADD = """WITH added AS (
        INSERT INTO {jobs} AS j (queue, state, payload, key, priority, run_at,
                                  created_at, max_attempts, task)
        VALUES (%(q)s,
                CASE WHEN %(run_in)s::float8 > 0 THEN 'scheduled' ELSE 'ready' END,
                %(payload)s::json, %(key)s::text, %(priority)s::bigint,
                {now} + %(run_in)s::float8, {now}, %(max_attempts)s::integer,
                %(task)s::text)
        ON CONFLICT (queue, key)
            WHERE key IS NOT NULL AND state IN ('scheduled', 'ready', 'running')
            DO NOTHING
        RETURNING id
    )
    SELECT id FROM added"""
# In the caller's transaction: the notification goes out when they commit.
ADD_NOTIFY = ADD.replace(
    "SELECT id FROM added", "SELECT id, pg_notify(%(channel)s, %(message)s) FROM added"
)
# Wake-ups go out after the change committed, in a transaction of their own
# that need not wait for the WAL flush; see PostgresStore._notify_others.
NOTIFY = """SELECT set_config('synchronous_commit', 'off', true),
    pg_notify(%(channel)s, %(message)s)"""
HELD_KEY = """SELECT id FROM {jobs} WHERE queue = %(q)s AND key = %(key)s
    AND state IN ('scheduled', 'ready', 'running')"""

# ``{lazy_commit}``: claims and successes commit without waiting for the WAL
# flush (``lazy``, a one-row CTE the statement joins, so that it is
# evaluated). A crash of the server may forget the last of them, and those
# jobs run again, as after a crash of the worker. Everything that is promised
# (enqueues, failed attempts, dead letters) waits for the flush as usual.
LAZY_COMMIT = "lazy AS (SELECT set_config('synchronous_commit', 'off', true))"

CLAIM = """WITH due AS MATERIALIZED (
        SELECT id, priority, run_at FROM {jobs}
        WHERE queue = %(q)s AND state = 'scheduled' AND run_at <= {now}
        ORDER BY run_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
    ), ready AS MATERIALIZED (
        SELECT id, priority, run_at FROM {jobs}
        WHERE queue = %(q)s AND state = 'ready'
        ORDER BY priority DESC, run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    ), pick AS MATERIALIZED (
        SELECT id FROM (SELECT * FROM due UNION ALL SELECT * FROM ready) AS c
        ORDER BY priority DESC, run_at, id LIMIT %(limit)s
    ), promoted AS (
        UPDATE {jobs} SET state = 'ready'
        WHERE id IN (SELECT id FROM due) AND id NOT IN (SELECT id FROM pick)
    ), {lazy_commit}
    UPDATE {jobs} AS j SET state = 'running', token = %(token)s,
        lease_until = {db_now} + %(lease)s, owner = %(owner)s
    FROM pick, lazy WHERE j.id = pick.id
    RETURNING j.id, j.payload::text, j.attempts, j.max_attempts, j.key, j.task,
        -j.priority, j.run_at"""

# Ending claims: ``ids`` and ``tokens`` (and ``results``) are arrays, one
# item per claim; the ids whose claim was current come back.
FINISH = """WITH expired AS (
        DELETE FROM {jobs} WHERE id IN (
            SELECT id FROM {jobs}
            WHERE queue = %(q)s AND state = 'completed' AND expires_at <= {now}
            LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    ), {lazy_commit}
    DELETE FROM {jobs} AS j
    USING unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token), lazy
    WHERE j.id = c.id AND j.token = c.token AND j.queue = %(q)s
      AND j.state = 'running'
    RETURNING j.id"""
COMPLETE = """WITH expired AS (
        DELETE FROM {jobs} WHERE id IN (
            SELECT id FROM {jobs}
            WHERE queue = %(q)s AND state = 'completed' AND expires_at <= {now}
            LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
    ), {lazy_commit}
    UPDATE {jobs} AS j SET state = 'completed', result = c.result::json,
        expires_at = {now} + %(keep_for)s::float8
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[])
        AS c(id, token, result), lazy
    WHERE j.id = c.id AND j.token = c.token AND j.queue = %(q)s
      AND j.state = 'running'
    RETURNING j.id"""
RELEASE = """UPDATE {jobs} AS j SET state = 'ready'
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
    WHERE j.id = c.id AND j.token = c.token AND j.queue = %(q)s
      AND j.state = 'running'"""

# A failed attempt: pending again in ``retry_in`` seconds, or dead (``retry_in``
# NULL), with the error appended to the newest ``kept``.
FAIL = """WITH failed AS (
        UPDATE {jobs} SET
            state = CASE WHEN %(retry_in)s::float8 IS NULL THEN 'dead'
                         WHEN %(retry_in)s::float8 > 0 THEN 'scheduled'
                         ELSE 'ready' END,
            run_at = CASE WHEN %(retry_in)s::float8 IS NULL THEN run_at
                          ELSE {now} + %(retry_in)s::float8 END,
            buried = CASE WHEN %(retry_in)s::float8 IS NULL
                          THEN nextval(%(burials)s::regclass) END,
            attempts = attempts + 1,
            last_error = %(last_error)s::text,
            errors = CASE WHEN jsonb_array_length(errors) >= %(kept)s::integer
                          THEN errors - 0 ELSE errors END
                || jsonb_build_array(jsonb_build_array(%(etype)s::text,
                       %(emessage)s::text, %(etraceback)s::text,
                       {now} + %(error_in)s::float8))
        WHERE id = %(id)s AND queue = %(q)s AND state = 'running' AND token = %(token)s
        RETURNING state
    )
    SELECT state FROM failed"""
TRIM_DEAD = """DELETE FROM {jobs} WHERE id IN (
        SELECT id FROM {jobs} WHERE queue = %(q)s AND state = 'dead'
        ORDER BY buried
        LIMIT greatest((SELECT coalesce(sum(n), 0) FROM {counts}
                        WHERE queue = %(q)s AND state = 'dead') - %(limit)s, 0)::bigint
        FOR UPDATE SKIP LOCKED)
    RETURNING id, buried, last_error"""

RENEW = """UPDATE {jobs} AS j SET lease_until = {db_now} + %(lease)s
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
    WHERE j.id = c.id AND j.token = c.token AND j.queue = %(q)s
      AND j.state = 'running'"""
ANY_EXPIRED = """SELECT EXISTS (SELECT 1 FROM {jobs}
    WHERE queue = %(q)s AND state = 'running' AND lease_until <= {db_now})"""
EXPIRED = """SELECT id, token, attempts, max_attempts FROM {jobs}
    WHERE queue = %(q)s AND state = 'running' AND lease_until <= {db_now}
    ORDER BY id FOR UPDATE SKIP LOCKED"""

_RECORD = """SELECT id, state, payload::text, attempts, run_at, created_at, last_error,
    key, priority, result::text, task, errors, max_attempts,
    expires_at IS NOT NULL AND expires_at <= {now} FROM {jobs}"""
GET = _RECORD + " WHERE id = %(id)s AND queue = %(q)s"
LIST_DEAD = (
    _RECORD + " WHERE queue = %(q)s AND state = 'dead' ORDER BY buried LIMIT %(limit)s"
)
LIST_PENDING = (
    _RECORD + " WHERE queue = %(q)s AND state IN ('scheduled', 'ready')"
    " ORDER BY run_at, priority DESC, id LIMIT %(limit)s"
)
LIST_RUNNING = (
    _RECORD + " WHERE queue = %(q)s AND state = 'running'"
    " ORDER BY run_at, priority DESC, id LIMIT %(limit)s"
)
LIST_COMPLETED = (
    _RECORD + " WHERE queue = %(q)s AND state = 'completed'"
    " ORDER BY run_at, priority DESC, id LIMIT %(limit)s"
)

REVIVE = """WITH revived AS (
        UPDATE {jobs} AS j SET state = 'ready', attempts = 0, run_at = {now},
            buried = NULL
        WHERE id = %(id)s AND queue = %(q)s AND state = 'dead'
          AND (key IS NULL OR NOT EXISTS (
              SELECT 1 FROM {jobs} AS o WHERE o.queue = j.queue AND o.key = j.key
                AND o.state IN ('scheduled', 'ready', 'running')))
        RETURNING id
    )
    SELECT id FROM revived"""
DELETE_DEAD = """DELETE FROM {jobs} WHERE id = %(id)s AND queue = %(q)s
    AND state = 'dead' RETURNING id"""
CANCEL = """DELETE FROM {jobs} WHERE id = %(id)s AND queue = %(q)s
    AND state IN ('scheduled', 'ready') RETURNING id"""
COUNTS = "SELECT state, sum(n) FROM {counts} WHERE queue = %(q)s GROUP BY state"
PENDING = """SELECT coalesce(sum(n), 0) FROM {counts}
    WHERE queue = %(q)s AND state IN ('scheduled', 'ready')"""
LIVE = """SELECT coalesce(sum(n), 0) FROM {counts}
    WHERE queue = %(q)s AND state IN ('scheduled', 'ready', 'running')"""
NEXT_DUE = """SELECT
    (SELECT run_at FROM {jobs} WHERE queue = %(q)s AND state = 'ready'
     ORDER BY priority DESC, run_at, id LIMIT 1),
    (SELECT run_at FROM {jobs} WHERE queue = %(q)s AND state = 'scheduled'
     ORDER BY run_at LIMIT 1),
    {now}"""

#: What the store needs, checked by ``check()``: (kind, name in ``names``, privilege).
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
    ("sequence", "burials_name", "USAGE"),
)
_HAS_PRIVILEGE = {
    "schema": "SELECT has_schema_privilege(%(name)s, %(privilege)s)",
    "table": "SELECT has_table_privilege(%(name)s, %(privilege)s)",
    "sequence": "SELECT has_sequence_privilege(%(name)s, %(privilege)s)",
}


#: Pools, listener connections and pipes inherited from a parent process through
#: ``fork``: never used, and never closed either (closing would end the
#: parent's sessions), only kept from the garbage collector.
_inherited: list[object] = []


def advisory_lock_key(schema: str) -> int:
    """The ``pg_advisory_xact_lock`` key that serializes migrations of ``schema``."""
    digest = hashlib.sha256(f"jobq.schema:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def channel_name(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema (at most 63 bytes, PostgreSQL's
    limit for names)."""
    name = f"jobq.{schema}"
    if len(name.encode()) > 63:
        name = "jobq." + hashlib.sha256(schema.encode()).hexdigest()[:40]
    return name


def _driver() -> None:
    """Import psycopg and psycopg_pool, or say how to install them."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "the PostgreSQL store needs psycopg 3 and psycopg_pool, which are not "
            f"installed: {INSTALL_HINT}"
        ) from exc


def _redacted(conninfo: str) -> str:
    """A connection string as it may be shown: the password replaced."""
    import psycopg.conninfo

    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "<malformed connection string>"
    if "password" in params:
        params["password"] = "***"  # noqa: S105 - a mask, not a password
    return psycopg.conninfo.make_conninfo("", **params)


def parse_conninfo(conninfo: str) -> dict[str, Any]:
    """The parameters of a ``postgresql://`` URL or ``key=value`` string.

    Raises ``ValueError`` for a malformed one (an unknown parameter, a port
    that is not a number between 1 and 65535, a URL without ``//``).
    """
    import psycopg
    import psycopg.conninfo

    if not isinstance(conninfo, str):
        raise TypeError(f"conninfo must be a str, not {conninfo!r}")
    lowered = conninfo.lower()
    if lowered.startswith(("postgresql:", "postgres:")) and not lowered.startswith(
        ("postgresql://", "postgres://")
    ):
        raise ValueError(
            f"malformed PostgreSQL store URL {_safe_url(conninfo)!r}: use "
            "postgresql://user@host:port/database"
        )
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise ValueError(
            f"malformed PostgreSQL connection string {_safe_url(conninfo)!r}: "
            f"{str(exc).strip()}"
        ) from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(
                f"malformed PostgreSQL connection string {_safe_url(conninfo)!r}: "
                f"port {port!r} is not a number between 1 and 65535"
            )
    return params


def _lower_scheme(conninfo: str) -> str:
    """``POSTGRESQL://...`` as libpq understands it (it wants a lowercase scheme)."""
    if not isinstance(conninfo, str):
        raise TypeError(f"conninfo must be a str, not {conninfo!r}")
    scheme, sep, rest = conninfo.partition("://")
    if sep and scheme.lower() in ("postgresql", "postgres"):
        return f"{scheme.lower()}{sep}{rest}"
    return conninfo


def _safe_url(text: str) -> str:
    """``text`` with a URL's password masked (for messages about bad URLs)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    authority, slash, tail = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return f"{scheme}{sep}{userinfo}{at}{host}{slash}{tail}"


class _Owner(NamedTuple):
    """Who holds a claim, for people reading the table."""

    text: str
    pid: int


_process_owner: _Owner | None = None


def _this_process() -> _Owner:
    global _process_owner
    if _process_owner is None or _process_owner.pid != os.getpid():
        _process_owner = _Owner(f"{socket.gethostname()}:{os.getpid()}", os.getpid())
    return _process_owner


class PostgresStore(OneJobCalls):
    """Jobs in PostgreSQL, shared by processes on any number of hosts.

    ``conninfo``: a ``postgresql://`` URL or a libpq ``key=value`` string.
    ``queue``: the queue's name; queues with different names share the tables
    and never see each other's jobs. ``schema``: where the tables live (created
    on first use unless ``auto_migrate=False``). ``lease_seconds``: how long a
    claim lasts without renewal (the queue renews every third of it); a job
    whose process died runs again after at most that long. ``poll_interval``:
    how often idle workers look for new jobs when no notification can reach
    them (``listen=False``, or the LISTEN connection is down); they also look
    at least every second. ``pool_size``: connections at most in this
    process's pool (each call borrows one for one transaction).
    ``connect_timeout``: seconds to wait for a connection (a new one, or a free
    one from the pool) before ``StoreError``. ``clock``: ``"database"`` or
    ``"queue"`` (see the module's documentation). ``listen``: ``True``,
    ``False``, or a connection string for the LISTEN connection (e.g. direct to
    PostgreSQL when ``conninfo`` goes through PgBouncer). ``prepare``: let
    psycopg use server-side prepared statements. ``claim_batch``: how many due
    jobs a worker may claim at once (see ``Store.claim_batch``).

    Constructing one checks the arguments and opens nothing.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        queue: str = "default",
        schema: str = "jobq",
        lease_seconds: float = 30.0,
        poll_interval: float = 1.0,
        pool_size: int = 10,
        connect_timeout: float = 10.0,
        clock: Literal["database", "queue"] = "database",
        listen: bool | str = True,
        prepare: bool = True,
        auto_migrate: bool = True,
        claim_batch: int = 1,
    ) -> None:
        _driver()
        conninfo = _lower_scheme(conninfo)
        self._params = parse_conninfo(conninfo)
        self.conninfo = conninfo
        if isinstance(listen, str):
            listen = _lower_scheme(listen)
            parse_conninfo(listen)
        elif not isinstance(listen, bool):
            raise TypeError(f"listen must be a bool or a connection string: {listen!r}")
        given: tuple[tuple[object, str], ...] = ((queue, "queue"), (schema, "schema"))
        for value, name in given:
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty str, not {value!r}")
            check_text(value, name)
        if len(schema.encode()) > 63:
            raise ValueError(
                f"schema must be at most 63 bytes (PostgreSQL's limit), not {schema!r}"
            )
        if clock not in ("database", "queue"):
            raise ValueError(f"clock must be 'database' or 'queue', not {clock!r}")
        if isinstance(pool_size, bool) or not isinstance(pool_size, int):
            raise TypeError(f"pool_size must be an int, not {pool_size!r}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, not {pool_size}")
        self.queue = queue
        self.schema = schema
        self.lease_seconds: float | None = positive_seconds(
            lease_seconds, "lease_seconds"
        )
        self._lease = float(lease_seconds)
        self.claim_batch = batch_size(claim_batch)
        self.poll_interval = positive_seconds(poll_interval, "poll_interval")
        self.pool_size = pool_size
        self.connect_timeout = positive_seconds(connect_timeout, "connect_timeout")
        self.clock = clock
        #: Whether due times follow the database's clock rather than the queue's
        #: (tests that inject a clock build the store with ``clock="queue"``).
        self.uses_own_clock = clock == "database"
        self.listen = listen
        self.prepare = bool(prepare)
        self.auto_migrate = bool(auto_migrate)
        self.channel = channel_name(schema)
        self.lock_key = advisory_lock_key(schema)
        self._sql = _Statements(schema)
        self._signal = Signal()
        self._dead_letter_limit = 1000
        self._offset = 0.0  # the queue's clock minus time.time(), at the last claim
        self._reset_process_state()
        reset_after_fork(self)

    def __repr__(self) -> str:
        return (
            f"PostgresStore({_redacted(self.conninfo)!r}, queue={self.queue!r}, "
            f"schema={self.schema!r})"
        )

    @property
    def where(self) -> str:
        """The server and database, as messages name them (no password)."""
        p = self._params
        host = (
            p.get("host")
            or p.get("hostaddr")
            or os.environ.get("PGHOST")
            or ("localhost (socket)")
        )
        port = p.get("port") or os.environ.get("PGPORT") or "5432"
        user = p.get("user") or os.environ.get("PGUSER") or ""
        dbname = p.get("dbname") or os.environ.get("PGDATABASE") or user or "?"
        return f"PostgreSQL at {host}:{port}, database {dbname!r}" + (
            f" as {user!r}" if user else ""
        )

    # -- per-process state ---------------------------------------------------------

    def _reset_process_state(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._owner = _this_process()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] | None = None
        self._listener: threading.Thread | None = None
        self._stop: threading.Event = threading.Event()
        self._wake_pipe: tuple[int, int] | None = None
        self._listen_conn: psycopg.Connection[Any] | None = None
        self.listening = False
        self._notifier: threading.Thread | None = None
        self._notify_wanted = threading.Event()
        self._notify_requests = 0
        #: Sent with our notifications, so that our own listener skips them.
        self._token = secrets.token_hex(8)

    def _after_fork_in_child(self) -> None:
        """Set the parent's pool and listener aside unused; ``open`` again to go on."""
        _inherited.extend(x for x in (self._pool, self._listen_conn) if x is not None)
        if self._wake_pipe is not None:
            for fd in self._wake_pipe:
                with contextlib.suppress(OSError):
                    os.close(fd)  # our copies only: the parent's stay open
        self._reset_process_state()

    def _check_process(self) -> None:
        if self._pid != os.getpid():
            self._after_fork_in_child()

    def _connect_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(2, math.ceil(self.connect_timeout)),
        }
        if not self.prepare:
            kwargs["prepare_threshold"] = None
        if "application_name" not in self._params and "PGAPPNAME" not in os.environ:
            kwargs["application_name"] = f"jobq:{self.queue}"[:63]
        return kwargs

    # -- lifecycle -------------------------------------------------------------------

    def open(self, signal: Signal, *, dead_letter_limit: int) -> None:
        """Check (or create, or migrate) the schema, then start the pool and
        the listener. Raises ``StoreError`` naming the problem when the server
        cannot be reached or the role lacks a permission."""
        self._check_process()
        with self._lock:
            self._signal = signal
            self._dead_letter_limit = dead_letter_limit
            if self._pool is not None:
                return
            with self._direct() as conn:
                self._prepare(conn)
            self._pool = self._new_pool()
            self._stop = threading.Event()
            if self.listen is not False or self.poll_interval < 1.0:
                self._start_listener()

    def close(self) -> None:
        """Stop the listener and close this process's connections; idempotent."""
        self._check_process()
        with self._lock:
            threads = [self._listener, self._notifier]
            self._listener = self._notifier = None
            self._stop.set()
            self._notify_wanted.set()
            if self._wake_pipe is not None:
                with contextlib.suppress(OSError):
                    os.write(self._wake_pipe[1], b"x")
        for thread in threads:  # the notifier sends what is still due first
            if thread is not None and thread is not threading.current_thread():
                thread.join()
        with self._lock:
            pool, self._pool = self._pool, None
            pipe, self._wake_pipe = self._wake_pipe, None
        for fd in pipe or ():
            with contextlib.suppress(OSError):
                os.close(fd)
        if pool is not None:
            pool.close()

    def save(self) -> None:
        """Nothing to do: every change returned after its transaction committed."""

    def migrate(self) -> int:
        """Create the schema, or bring it to this jobq's version, now.

        Runs under ``pg_advisory_xact_lock``, in one transaction, so hosts
        doing it at once do not race. Needs a role that may create the schema
        (or owns it); roles that may not run DDL then use the store with
        ``open`` only checking the version. Returns the version.
        """
        self._check_process()
        with self._direct() as conn:
            return self._migrate(conn)

    def check(self) -> None:
        """Connect, check the schema (as ``open`` does: creating it unless
        ``auto_migrate=False``) and the privileges the store needs; raise
        ``StoreError`` naming what is wrong."""
        self._check_process()
        with self._direct() as conn:
            self._prepare(conn)
            missing = []
            for kind, name, privilege in PRIVILEGES:
                target = self._sql.names[name]
                query = _HAS_PRIVILEGE[kind]
                row = conn.execute(query, {"name": target, "privilege": privilege})
                if not _first(row.fetchone()):
                    missing.append(f"{privilege} on {kind} {target}")
                    if kind == "schema":
                        break  # nothing inside can be looked up without it
            if missing:
                raise StoreError(
                    f"{self.where}: the role lacks {', '.join(missing)}; grant them "
                    f"(GRANT USAGE ON SCHEMA ...; GRANT SELECT, INSERT, UPDATE, "
                    "DELETE ON ALL TABLES IN SCHEMA ...; GRANT USAGE ON ALL "
                    "SEQUENCES IN SCHEMA ...)"
                )

    # -- the job's path: add, claim, finish or fail -----------------------------------

    def add(
        self,
        jobs: Sequence[NewJob],
        now: float,
        *,
        max_pending: int | None = None,
        connection: Any = None,
    ) -> list[Enqueued]:
        """Add jobs in one transaction. With ``connection`` (a psycopg 3
        connection), write them in that connection's current transaction: they
        exist if, and only if, the caller commits it."""
        params: list[dict[str, Any]] = []
        first_of_key: dict[str, int] = {}
        plan: list[int] = []  # per job: its row in params, or -1 - the first job
        for index, job in enumerate(jobs):
            if job.key is not None:
                if job.key in first_of_key:
                    plan.append(-1 - first_of_key[job.key])
                    continue
                first_of_key[job.key] = index
            plan.append(len(params))
            params.append(self._add_params(job, now))
        if connection is not None:
            ids = self._add_in(connection, params, max_pending)
        else:
            with self._connection() as conn:
                if len(params) == 1 and max_pending is None:
                    ids = self._insert(conn, params, self._sql.add)
                else:
                    with conn.transaction():
                        ids = self._insert_checked(
                            conn, params, self._sql.add, max_pending
                        )
        results: list[Enqueued] = []
        due = 0
        for row in plan:
            if row < 0:
                results.append(Enqueued(results[-1 - row].id, True))
            else:
                job_id, duplicate = ids[row]
                results.append(Enqueued(job_id, duplicate))
                due += not duplicate
        if due:
            self._signal.jobs_added(due)
            if connection is None:
                self._notify_others()
        return results

    def _add_params(self, job: NewJob, now: float) -> dict[str, Any]:
        return {
            "q": self.queue,
            "now": self._now(now),
            "run_in": max(job.run_at - now, 0.0),
            "payload": job.payload,
            "key": job.key,
            "priority": job.priority,
            "max_attempts": job.max_attempts,
            "task": job.task,
        }

    def _insert_checked(
        self,
        conn: psycopg.Connection[Any],
        params: list[dict[str, Any]],
        statement: bytes,
        max_pending: int | None,
    ) -> list[tuple[int, bool]]:
        """``_insert``; with ``max_pending``, in a savepoint that ``QueueFull``
        rolls back, so an open transaction (the caller's) stays as it was.
        The count is read first, which begins the caller's transaction on a
        connection that has none open yet."""
        if max_pending is None:
            return self._insert(conn, params, statement)
        pending = _first(conn.execute(self._sql.pending, {"q": self.queue}).fetchone())
        with conn.transaction():
            ids = self._insert(conn, params, statement)
            check_room(pending, sum(not held for _, held in ids), max_pending)
        return ids

    def _add_in(
        self,
        connection: Any,
        params: list[dict[str, Any]],
        max_pending: int | None,
    ) -> list[Any]:
        """Add in the caller's transaction (or, on an autocommit connection
        outside a transaction, in one of our own)."""
        import psycopg

        if not isinstance(connection, psycopg.Connection):
            raise TypeError(
                "connection must be a psycopg 3 connection (psycopg.Connection), "
                f"not {type(connection).__name__}"
            )
        status = connection.info.transaction_status
        if status == psycopg.pq.TransactionStatus.INERROR:
            raise StoreError(
                "the caller's transaction failed earlier and must be rolled back; "
                "nothing was added"
            )
        message = {"channel": self.channel, "message": f"-:{self.queue}"}
        params = [{**values, **message} for values in params]
        statement = self._sql.add_notify
        try:
            if connection.autocommit and status == psycopg.pq.TransactionStatus.IDLE:
                with connection.transaction():
                    return self._insert_checked(
                        connection, params, statement, max_pending
                    )
            return self._insert_checked(connection, params, statement, max_pending)
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    def _insert(
        self,
        conn: psycopg.Connection[Any],
        params: list[dict[str, Any]],
        statement: bytes,
    ) -> list[tuple[int, bool]]:
        """Insert the rows; a row whose key a live job holds yields that job."""
        from psycopg.rows import tuple_row

        with conn.cursor(row_factory=tuple_row) as cur:
            if len(params) == 1:
                cur.execute(statement, params[0])
                inserted = [cur.fetchone()]
            else:
                cur.executemany(statement, params, returning=True)
                inserted = []
                while True:
                    inserted.append(cur.fetchone())
                    if not cur.nextset():
                        break
            results: list[tuple[int, bool]] = []
            for row, values in zip(inserted, params, strict=True):
                if row is not None:
                    results.append((row[0], False))
                    continue
                results.append(self._held(cur, values, statement))
        return results

    def _held(
        self, cur: psycopg.Cursor[Any], values: dict[str, Any], statement: bytes
    ) -> tuple[int, bool]:
        """The live job holding ``values``'s key, or a new job if it just ended."""
        for _ in range(KEY_RETRIES):
            cur.execute(self._sql.held_key, values)
            held = cur.fetchone()
            if held is not None:
                return held[0], True
            cur.execute(statement, values)  # the holder ended in between: again
            row = cur.fetchone()
            if row is not None:
                return row[0], False
        raise StoreError(
            f"key {values['key']!r} kept changing hands; nothing was added for it"
        )

    def claim_many(self, now: float, limit: int) -> list[Claim]:
        self._offset = now - time.time()  # for next_due: see there
        token = secrets.randbits(63) or 1  # one per batch: (id, token) fences
        with self._connection() as conn:
            rows = conn.execute(
                self._sql.claim,
                {
                    "q": self.queue,
                    "now": self._now(now),
                    "batch": PROMOTE_BATCH,
                    "limit": limit,
                    "token": token,
                    "lease": self._lease,
                    "owner": self._owner.text,
                },
            ).fetchall()
        rows.sort(key=lambda row: row[6:])  # RETURNING keeps no order: run order
        return [
            Claim(job_id, token, payload, attempts + 1, max_attempts, key, task)
            for job_id, payload, attempts, max_attempts, key, task, *_ in rows
        ]

    def finish_many(
        self, done: Sequence[Done], keep_until: float | None, now: float
    ) -> list[bool]:
        values: dict[str, Any] = {
            "q": self.queue,
            "now": self._now(now),
            "batch": EXPIRE_BATCH,
            **self._claim_arrays([d.claim for d in done]),
        }
        if keep_until is None:
            query = self._sql.finish
        else:
            query = self._sql.complete
            values["results"] = [d.result for d in done]
            values["keep_for"] = max(keep_until - now, 0.0)
        with self._connection() as conn:
            ended = {row[0] for row in conn.execute(query, values).fetchall()}
            if ended:
                self._settle(conn)
        return [d.claim.id in ended for d in done]

    def release(self, claims: Sequence[Claim], now: float) -> None:
        values = {"q": self.queue, **self._claim_arrays(claims)}
        with self._connection() as conn:
            conn.execute(self._sql.release, values)
        self._signal.jobs_added(len(claims))
        self._notify_others()

    @staticmethod
    def _claim_arrays(claims: Sequence[Claim]) -> dict[str, list[int]]:
        """Claims as the ``ids`` and ``tokens`` arrays of a statement."""
        return {"ids": [c.id for c in claims], "tokens": [c.token for c in claims]}

    def fail_many(self, failures: Sequence[Failure], now: float) -> list[bool]:
        """One transaction for the batch, which trims the dead-letter list if a
        job died; a lone retry commits by itself (no BEGIN/COMMIT round trips)."""
        alone = len(failures) == 1 and failures[0].retry_at is not None
        dropped: list[tuple[int, str | None]] = []
        with self._connection() as conn:
            with contextlib.nullcontext() if alone else conn.transaction():
                recorded = [self._fail_one(conn, failure, now) for failure in failures]
                ended = [f for f, ok in zip(failures, recorded, strict=True) if ok]
                buried = any(f.retry_at is None for f in ended)
                if buried:
                    dropped = self._trim_dead(conn)
            if buried:
                self._settle(conn)
        self._log_dropped(dropped)
        retried = sum(f.retry_at is not None for f in ended)
        if retried:
            self._signal.jobs_added(retried)
            self._notify_others()
        return recorded

    def _fail_one(
        self, conn: psycopg.Connection[Any], failure: Failure, now: float
    ) -> bool:
        claim, error, retry_at = failure
        retry_in = None if retry_at is None else max(retry_at - now, 0.0)
        values = self._fail_params(claim.id, claim.token, error, retry_in, now)
        return conn.execute(self._sql.fail, values).fetchone() is not None

    def _fail_params(
        self,
        job_id: int,
        token: int,
        error: AttemptError,
        retry_in: float | None,
        now: float,
    ) -> dict[str, Any]:
        return {
            "q": self.queue,
            "now": self._now(now),
            "id": job_id,
            "token": token,
            "retry_in": retry_in,
            "burials": self._sql.names["burials_name"],
            "last_error": describe_error(error),
            "kept": ERRORS_KEPT,
            "etype": error.type,
            "emessage": error.message,
            "etraceback": error.traceback,
            "error_in": error.at - now,
        }

    def renew(self, claims: Sequence[Claim], now: float) -> None:
        if not claims:
            return
        values = {"q": self.queue, "lease": self._lease, **self._claim_arrays(claims)}
        with self._connection() as conn:
            conn.execute(self._sql.renew, values)

    def recover(self, now: float) -> int:
        """Claims whose lease expired (on the database's clock) become failed
        attempts: pending again now, or dead when out of attempts."""
        sql = self._sql
        with self._connection() as conn:
            if not _first(conn.execute(sql.any_expired, {"q": self.queue}).fetchone()):
                return 0
            error = process_died(now)
            dropped: list[tuple[int, str | None]] = []
            recovered: list[int] = []
            with conn.transaction():
                rows = conn.execute(sql.expired, {"q": self.queue}).fetchall()
                buried = False
                for job_id, token, attempts, max_attempts in rows:
                    retry_in = 0.0 if attempts + 1 < max_attempts else None
                    values = self._fail_params(job_id, token, error, retry_in, now)
                    if conn.execute(sql.fail, values).fetchone() is not None:
                        recovered.append(job_id)
                        buried = buried or retry_in is None
                if buried:
                    dropped = self._trim_dead(conn)
            if recovered:
                self._settle(conn)
        self._log_dropped(dropped)
        log_recovered(recovered)
        if recovered:
            self._signal.jobs_added(len(recovered))
            self._notify_others()
        return len(recovered)

    # -- looking and managing --------------------------------------------------------

    def get(self, job_id: int, now: float) -> JobRecord[Any] | None:
        with self._connection() as conn:
            row = conn.execute(
                self._sql.get, {"id": job_id, "q": self.queue, "now": self._now(now)}
            ).fetchone()
        if row is None or row[-1]:  # gone, or completed and expired
            return None
        return record_from_row(row, row[11])

    def list_jobs(
        self, state: JobState, limit: int | None = None
    ) -> list[JobRecord[Any]]:
        query = self._sql.lists[state]
        with self._connection() as conn:
            rows = conn.execute(
                query, {"q": self.queue, "limit": limit, "now": None}
            ).fetchall()
        return [record_from_row(row, row[11]) for row in rows]

    def revive(self, job_id: int, now: float) -> bool:
        import psycopg

        values = {"id": job_id, "q": self.queue, "now": self._now(now)}
        with self._connection() as conn:
            try:
                row = conn.execute(self._sql.revive, values).fetchone()
            except psycopg.errors.UniqueViolation:
                return False  # another job took the key at the same moment
        if row is None:
            return False
        self._signal.jobs_added()
        self._notify_others()
        return True

    def delete_dead(self, job_id: int) -> bool:
        with self._connection() as conn:
            row = conn.execute(
                self._sql.delete_dead, {"id": job_id, "q": self.queue}
            ).fetchone()
        return row is not None

    def cancel(self, job_id: int) -> bool:
        with self._connection() as conn:
            row = conn.execute(
                self._sql.cancel, {"id": job_id, "q": self.queue}
            ).fetchone()
            if row is not None:
                self._settle(conn)
        return row is not None

    def stats(self) -> StoreStats:
        with self._connection() as conn:
            counts = dict(conn.execute(self._sql.counts, {"q": self.queue}).fetchall())
        return StoreStats(
            int(counts.get("scheduled", 0) + counts.get("ready", 0)),
            int(counts.get("running", 0)),
            int(counts.get("dead", 0)),
        )

    def next_due(self) -> float | None:
        """When the earliest pending job falls due, on the queue's clock.

        With the database's clock, that is the database's "how long from now"
        added to the queue's clock as the last ``claim`` saw it (workers ask
        right after a claim found nothing), so a queue whose clock is off
        neither spins nor oversleeps."""
        with self._connection() as conn:
            row = conn.execute(
                self._sql.next_due, {"q": self.queue, "now": None}
            ).fetchone()
        assert row is not None  # noqa: S101 - a SELECT without FROM has one row
        ready, scheduled, db_now = row
        due = ready if ready is not None else scheduled
        if due is None:
            return None
        if self.clock == "queue":
            return float(due)
        return time.time() + self._offset + max(float(due) - float(db_now), 0.0)

    # -- inside transactions: settling, burial --------------------------------------

    def _settle(self, conn: psycopg.Connection[Any]) -> None:
        """Wake ``join`` callers of this process if nothing is pending or
        running any more (asked only when someone joins)."""
        from psycopg.pq import TransactionStatus

        signal = self._signal
        if not signal.joiners:
            return
        if conn.info.transaction_status != TransactionStatus.IDLE:
            return  # inside a transaction: not yet
        live = _first(conn.execute(self._sql.live, {"q": self.queue}).fetchone())
        if not live:
            signal.job_settled()

    def _trim_dead(self, conn: psycopg.Connection[Any]) -> list[tuple[int, str | None]]:
        """Drop the oldest dead jobs beyond the limit; returns them to log."""
        rows = conn.execute(
            self._sql.trim_dead, {"q": self.queue, "limit": self._dead_letter_limit}
        ).fetchall()
        return [(job_id, last_error) for job_id, _, last_error in sorted(
            rows, key=lambda r: r[1])]  # fmt: skip

    def _log_dropped(self, dropped: list[tuple[int, str | None]]) -> None:
        for job_id, last_error in dropped:
            log_dropped_dead(self._dead_letter_limit, job_id, last_error)

    def _now(self, now: float) -> float | None:
        """The ``now`` parameter: the queue's clock, or NULL for the database's."""
        return now if self.clock == "queue" else None

    # -- schema --------------------------------------------------------------------

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Check the schema version; create or migrate it when it is missing or
        older (unless ``auto_migrate=False``); refuse a newer one."""
        import psycopg

        try:
            version = self._version(conn)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(
                f"{self.where}: the role may not use schema {self.schema!r} "
                f"({str(exc).strip()}); grant it USAGE on the schema and access to "
                "its tables"
            ) from exc
        if version == SCHEMA_VERSION:
            return
        self._refuse_newer(version)
        if not self.auto_migrate:
            state = "does not exist" if version == 0 else f"is at version {version}"
            raise StoreError(
                f"{self.where}: the jobq schema {self.schema!r} {state} (this jobq "
                f"needs version {SCHEMA_VERSION}); run PostgresStore(...).migrate() "
                "as a role that may create it"
            )
        self._migrate(conn)

    def _version(self, conn: psycopg.Connection[Any]) -> int:
        """The schema's version; 0 if there is no jobq schema yet."""
        names = self._sql.names
        if not _first(conn.execute(SCHEMA_EXISTS, {"schema": self.schema}).fetchone()):
            return 0
        if not _first(
            conn.execute(META_EXISTS, {"meta": names["meta_name"]}).fetchone()
        ):
            return 0
        row = conn.execute(self._sql.get_version).fetchone()
        version = _first(row)
        if not isinstance(version, int) or version < 1:
            raise StoreError(
                f"{self.where}: schema {self.schema!r} has no valid jobq schema "
                f"version ({version!r})"
            )
        return version

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.where}: schema {self.schema!r} was written by a newer jobq "
                f"(schema version {version}; this jobq knows up to "
                f"{SCHEMA_VERSION}): upgrade jobq"
            )

    def _migrate(self, conn: psycopg.Connection[Any]) -> int:
        import psycopg

        sql = self._sql
        try:
            with conn.transaction():
                conn.execute(LOCK_SCHEMA, {"lock": self.lock_key})
                version = self._version(conn)  # another host may have done it
                self._refuse_newer(version)
                if version == SCHEMA_VERSION:
                    return version
                if not _first(
                    conn.execute(SCHEMA_EXISTS, {"schema": self.schema}).fetchone()
                ):
                    conn.execute(sql.create_schema)
                for step in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in sql.migrations[step]:
                        conn.execute(statement)
                conn.execute(sql.set_version, {"version": SCHEMA_VERSION})
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StoreError(
                f"{self.where}: the role may not create or change the jobq schema "
                f"{self.schema!r} ({str(exc).strip()}); run "
                "PostgresStore(...).migrate() once as a role that may (e.g. the "
                "database owner) and grant this role access to it"
            ) from exc
        if version:
            logger.info(
                "migrated jobq schema %r from version %d to %d",
                self.schema,
                version,
                SCHEMA_VERSION,
            )
        return SCHEMA_VERSION

    # -- connections -------------------------------------------------------------------

    def _new_pool(self) -> psycopg_pool.ConnectionPool[psycopg.Connection[Any]]:
        import psycopg_pool

        pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            psycopg_pool.ConnectionPool(
                self.conninfo,
                kwargs=self._connect_kwargs(),
                min_size=1,
                max_size=self.pool_size,
                open=False,
                name=f"jobq:{self.schema}:{self.queue}",
                timeout=self.connect_timeout,
                num_workers=2,
            )
        )
        pool.open(wait=False)
        return pool

    @contextlib.contextmanager
    def _direct(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of its own (schema work, ``check``), closed after use."""
        import psycopg

        try:
            conn = psycopg.connect(self.conninfo, **self._connect_kwargs())
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to {self.where}: {str(exc).strip()}"
            ) from exc
        try:
            with conn:
                yield conn
        except psycopg.Error as exc:
            raise self._error(exc) from exc

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection from the pool for one call, returned at once.

        Connections the server closed while they sat in the pool (a restart)
        are noticed without a round trip and replaced.
        """
        import psycopg
        import psycopg_pool

        self._check_process()
        pool = self._pool
        if pool is None:
            raise StoreError(
                f"{self.where}: the store is not open (closed, or inherited "
                "through fork: open it again)"
            )
        deadline = time.monotonic() + self.connect_timeout
        try:
            while True:
                conn = pool.getconn(timeout=max(deadline - time.monotonic(), 0.001))
                if _alive(conn):
                    break
                pool.putconn(conn)  # broken: the pool replaces it
        except psycopg_pool.PoolTimeout as exc:
            raise StoreError(self._unreachable()) from exc
        except psycopg.Error as exc:
            raise self._error(exc) from exc
        try:
            yield conn
        except psycopg.Error as exc:
            raise self._error(exc) from exc
        finally:
            pool.putconn(conn)

    def _unreachable(self) -> str:
        """Why no connection came within ``connect_timeout``: try one to see."""
        import psycopg

        try:
            with psycopg.connect(self.conninfo, **self._connect_kwargs()):
                pass
        except psycopg.Error as exc:
            reason = str(exc).strip()
        else:
            reason = f"all {self.pool_size} connections of the pool stayed busy"
        return (
            f"no connection to {self.where} within "
            f"connect_timeout={self.connect_timeout:g} s: {reason}"
        )

    def _error(self, exc: Exception) -> StoreError:
        import psycopg

        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return StoreError(
                f"{self.where}: permission denied ({str(exc).strip()}); see "
                "PostgresStore.check()"
            )
        errors = psycopg.errors
        if isinstance(exc, errors.UndefinedTable | errors.UndefinedFunction):
            return StoreError(
                f"{self.where}: the jobq schema {self.schema!r} is missing or "
                f"incomplete ({str(exc).strip()}); run PostgresStore(...).migrate()"
            )
        if isinstance(exc, psycopg.OperationalError):
            return StoreError(f"{self.where}: connection lost: {str(exc).strip()}")
        return StoreError(f"{self.where}: {type(exc).__name__}: {str(exc).strip()}")

    # -- the listener ------------------------------------------------------------

    def _notify_others(self) -> None:
        """Tell the listeners of other processes (and other stores of this one)
        that this queue has new work, soon after this change committed.

        A thread of ours sends the notification, in a transaction of its own
        that does not wait for the WAL flush, so changes never wait for it, and
        NOTIFY's commit-time lock never serializes them. Requests coalesce:
        the thread clears the request before it sends, so every change that
        committed before a notification is covered by it.
        """
        self._notify_requests += 1  # a lost increment still changes the number
        self._notify_wanted.set()
        if self._notifier is None:
            self._start_notifier()

    def _start_notifier(self) -> None:
        with self._lock:
            if (
                self._notifier is None
                and self._pool is not None
                and not self._stop.is_set()
            ):
                self._notifier = threading.Thread(
                    target=self._notify_loop,
                    args=(self._stop, self._notify_wanted),
                    name=f"jobq-postgres-notify-{self.queue}",
                    daemon=True,
                )
                self._notifier.start()

    def _notify_loop(self, stop: threading.Event, wanted: threading.Event) -> None:
        """Send a notification for every batch of requests; at ``close``, send
        the one still due (unless the last one failed: the server is away)."""
        message = {"channel": self.channel, "message": f"{self._token}:{self.queue}"}
        sent, healthy = 0, True
        while True:
            wanted.wait()
            wanted.clear()
            closing = stop.is_set()
            requested = self._notify_requests
            if requested != sent and (healthy or not closing):
                sent = requested
                try:
                    with self._connection() as conn:
                        conn.execute(NOTIFY, message)
                    healthy = True
                except StoreError as exc:
                    # Idle workers elsewhere still look every second.
                    logger.debug("jobq could not notify other processes: %s", exc)
                    healthy = False
                    stop.wait(0.1)
                except Exception:
                    logger.exception("jobq could not notify other processes")
                    healthy = False
                    stop.wait(0.1)
            if closing:
                return

    def _start_listener(self) -> None:
        self._wake_pipe = os.pipe()
        for fd in self._wake_pipe:
            os.set_blocking(fd, False)
        self._listener = threading.Thread(
            target=self._listen,
            args=(self._wake_pipe, self._stop),
            name=f"jobq-postgres-listen-{self.queue}",
            daemon=True,
        )
        self._listener.start()

    def _listen(self, pipe: tuple[int, int], stop: threading.Event) -> None:
        """Wake idle workers at each notification for this queue; reconnect
        and listen again when the connection fails; without notifications
        (``listen=False``, or while reconnecting) wake them every
        ``poll_interval``. The pipe is ``close``'s to write to and to close."""
        try:
            if self.listen is False:
                while not self._stopped(pipe[0], stop, self.poll_interval):
                    self._wake_workers()
                return
            self._listen_loop(pipe[0], stop)
        except Exception:
            logger.exception(
                "the jobq listener for %s stopped; idle workers still look for "
                "jobs every second",
                self.where,
            )

    def _listen_loop(self, wake_fd: int, stop: threading.Event) -> None:
        import psycopg
        from psycopg import sql

        conninfo = self.listen if isinstance(self.listen, str) else self.conninfo
        statement = sql.SQL("LISTEN {}").format(sql.Identifier(self.channel))
        delay = RECONNECT_DELAYS[0]
        failures = 0
        while not stop.is_set():
            try:
                conn = psycopg.connect(conninfo, **self._connect_kwargs())
            except psycopg.Error as exc:
                failures += 1
                log = logger.warning if failures == 1 else logger.debug
                log("jobq cannot LISTEN at %s (%s); polling until it can",
                    self.where, str(exc).strip())  # fmt: skip
                self._wake_workers()
                if self._stopped(wake_fd, stop, min(delay, self.poll_interval)):
                    return
                delay = min(delay * 2, RECONNECT_DELAYS[1])
                continue
            self._listen_conn = conn
            try:
                conn.execute(statement)
                if failures:
                    logger.info("jobq listens at %s again", self.where)
                failures, delay = 0, RECONNECT_DELAYS[0]
                self.listening = True
                self._wake_workers()  # whatever came while nobody listened
                self._relay(conn, wake_fd, stop)
            except psycopg.Error as exc:
                failures += 1
                logger.warning(
                    "jobq's LISTEN connection to %s failed (%s); reconnecting",
                    self.where,
                    str(exc).strip(),
                )
            finally:
                self.listening = False
                self._listen_conn = None
                conn.close()

    def _relay(
        self, conn: psycopg.Connection[Any], wake_fd: int, stop: threading.Event
    ) -> None:
        """Pass notifications for this queue on to idle workers until stopped."""
        fd = conn.fileno()
        while not stop.is_set():
            ready, _, _ = select.select([fd, wake_fd], [], [], LISTEN_PING)
            if wake_fd in ready or stop.is_set():
                return
            if fd in ready:
                wake = False
                for notification in conn.notifies(timeout=0):
                    sender, _, queue = notification.payload.partition(":")
                    wake = wake or (queue == self.queue and sender != self._token)
                if wake:
                    self._wake_workers()
            else:
                conn.execute("SELECT 1")  # a dead connection fails here
                # A notification that came with the answer waits in psycopg's
                # backlog, where select() cannot see it: wake up in case.
                self._wake_workers()

    def _stopped(self, wake_fd: int, stop: threading.Event, timeout: float) -> bool:
        """Wait up to ``timeout``; whether the listener should stop."""
        if stop.is_set():
            return True
        select.select([wake_fd], [], [], timeout)
        return stop.is_set()

    def _wake_workers(self) -> None:
        signal = self._signal
        signal.jobs_added(max(signal.idle_workers, 1))


class _Statements:
    """Every statement of one schema, rendered once (names through
    ``psycopg.sql.Identifier``, values left as parameters)."""

    def __init__(self, schema: str) -> None:
        from psycopg import sql

        def ident(name: str) -> sql.Identifier:
            return sql.Identifier(schema, name)

        idents: dict[str, sql.Composable] = {
            "schema": sql.Identifier(schema),
            "jobs": ident("jobs"),
            "counts": ident("counts"),
            "meta": ident("meta"),
            "burials": ident("burials"),
            "count_jobs": ident("count_jobs"),
            "now": sql.SQL(_NOW),
            "db_now": sql.SQL(_DB_NOW),
            "lazy_commit": sql.SQL(LAZY_COMMIT),
        }
        for index in ("ready", "scheduled", "running", "dead", "completed",
                      "live_keys"):  # fmt: skip
            idents[f"jobs_{index}"] = sql.Identifier(f"jobs_{index}")
        #: Qualified names as text, for parameters such as ``::regclass``.
        self.names = {
            "schema": schema,
            "jobs_name": ident("jobs").as_string(None),
            "counts_name": ident("counts").as_string(None),
            "meta_name": ident("meta").as_string(None),
            "burials_name": ident("burials").as_string(None),
        }

        def render(template: str) -> bytes:
            return sql.SQL(template).format(**idents).as_bytes(None)

        self.migrations = {
            version: tuple(render(s) for s in statements)
            for version, statements in MIGRATIONS.items()
        }
        self.create_schema = render(CREATE_SCHEMA)
        self.get_version = render(GET_VERSION)
        self.set_version = render(SET_VERSION)
        self.add = render(ADD)
        self.add_notify = render(ADD_NOTIFY)
        self.held_key = render(HELD_KEY)
        self.claim = render(CLAIM)
        self.finish = render(FINISH)
        self.complete = render(COMPLETE)
        self.fail = render(FAIL)
        self.trim_dead = render(TRIM_DEAD)
        self.renew = render(RENEW)
        self.release = render(RELEASE)
        self.any_expired = render(ANY_EXPIRED)
        self.expired = render(EXPIRED)
        self.get = render(GET)
        self.lists = {
            JobState.PENDING: render(LIST_PENDING),
            JobState.RUNNING: render(LIST_RUNNING),
            JobState.DEAD: render(LIST_DEAD),
            JobState.COMPLETED: render(LIST_COMPLETED),
        }
        self.revive = render(REVIVE)
        self.delete_dead = render(DELETE_DEAD)
        self.cancel = render(CANCEL)
        self.counts = render(COUNTS)
        self.pending = render(PENDING)
        self.live = render(LIVE)
        self.next_due = render(NEXT_DUE)


def _alive(conn: psycopg.Connection[Any]) -> bool:
    """Whether a pooled connection still works, without a round trip: a
    server that closed it (a restart, ``pg_terminate_backend``) left an error
    and end-of-file in its socket, which reading without blocking finds."""
    import psycopg

    if conn.closed or conn.broken:
        return False
    try:
        # The first read takes the server's farewell message, if any; only a
        # second one meets the end of the stream.
        conn.pgconn.consume_input()
        conn.pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    return conn.pgconn.status == psycopg.pq.ConnStatus.OK


def _first(row: Any) -> Any:
    return None if row is None else row[0]
