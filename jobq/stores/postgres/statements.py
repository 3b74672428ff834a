"""The SQL the PostgreSQL store runs on the jobs: templates, and ``Statements``,
which renders them for one schema (the schema's own DDL is in ``schema``).

Every statement takes values only as parameters, and names (schema, tables,
channel) only through ``psycopg.sql.Identifier``; nothing is built from
payloads, keys or queue names.
"""

from __future__ import annotations

from jobq.types import JobState

# -- the jobs ------------------------------------------------------------------------
# ``{now}`` is the store's "now": the queue's clock when it passes one
# (``%(now)s`` is then not NULL), else the database's. ``{db_now}`` is always
# the database's clock (leases). Times from the caller arrive as offsets from
# the caller's now (``run_in``, ``keep_for``, ``error_in``).

DB_NOW = "extract(epoch FROM statement_timestamp())::float8"
NOW = f"coalesce(%(now)s::float8, {DB_NOW})"

#: ``{holds_key}``: the jobs that hold their key (``jobs_live_keys``'s
#: predicate): pending (held too), waiting or running, not stopping.
HOLDS_KEY = (
    "state IN ('scheduled', 'ready', 'held', 'waiting', 'running')"
    " AND cancel_at IS NULL"
)

ADD = """WITH added AS (
        INSERT INTO {jobs} AS j (queue, state, payload, key, priority, run_at,
                                  created_at, max_attempts, task, timeout, meta,
                                  limits)
        VALUES (%(q)s,
                CASE WHEN %(run_in)s::float8 > 0 THEN 'scheduled' ELSE 'ready' END,
                %(payload)s::json, %(key)s::text, %(priority)s::bigint,
                {now} + %(run_in)s::float8, {now}, %(max_attempts)s::integer,
                %(task)s::text, %(timeout)s::float8, %(meta)s::text,
                %(limits)s::text[])
        ON CONFLICT (queue, key) WHERE key IS NOT NULL AND {holds_key}
            DO NOTHING
        RETURNING id
    )
    SELECT id FROM added"""
# In the caller's transaction: the notification goes out when they commit.
ADD_NOTIFY = ADD.replace(
    "SELECT id FROM added", "SELECT id, pg_notify(%(channel)s, %(message)s) FROM added"
)
# Wake-ups go out after the change committed, in a transaction of their own
# that need not wait for the WAL flush; see wakeups.Notifier.
NOTIFY = """SELECT set_config('synchronous_commit', 'off', true),
    pg_notify(%(channel)s, %(message)s)"""
# A job added ``after=`` others (and any other of its batch): waiting while
# a parent is unfinished (``waits`` > 0), or cancelled at once when a
# parent's failure cancels it (``cancel_by``: then it holds no key).
ADD_CHILD = """WITH added AS (
        INSERT INTO {jobs} AS j (queue, state, payload, key, priority, run_at,
                                  created_at, max_attempts, task, timeout, meta,
                                  limits, after_failure, waits, cancel_at,
                                  cancel_by, expires_at)
        VALUES (%(q)s,
                CASE WHEN %(cancel_by)s::text IS NOT NULL THEN 'cancelled'
                     WHEN %(waits)s::integer > 0 THEN 'waiting'
                     WHEN %(run_in)s::float8 > 0 THEN 'scheduled' ELSE 'ready' END,
                %(payload)s::json, %(key)s::text, %(priority)s::bigint,
                {now} + %(run_in)s::float8, {now}, %(max_attempts)s::integer,
                %(task)s::text, %(timeout)s::float8, %(meta)s::text,
                %(limits)s::text[], %(after_failure)s::text, %(waits)s::integer,
                CASE WHEN %(cancel_by)s::text IS NOT NULL THEN {now} END,
                %(cancel_by)s::text,
                CASE WHEN %(cancel_by)s::text IS NOT NULL
                     THEN {now} + %(keep_for)s::float8 END)
        ON CONFLICT (queue, key) WHERE key IS NOT NULL AND {holds_key}
            DO NOTHING
        RETURNING id
    )
    SELECT id FROM added"""
NOTIFY_IN = "SELECT pg_notify(%(channel)s, %(message)s)"
HELD_KEY = """SELECT id FROM {jobs} WHERE queue = %(q)s AND key = %(key)s
    AND {holds_key}"""

# -- periodic jobs' schedules ------------------------------------------------------
# Takes the slot if it is later than the stored one and not passed over (the
# schedule paused, or resumed at or after it: ``slot_taken``), in one
# statement: a process asking for the same slot at once waits for the row
# lock, then finds it taken (no row); a pause waits likewise, so none comes
# between the look and the take. It returns the last job as it was (the
# update keeps it).
TAKE_SLOT = """INSERT INTO {schedules} AS s (queue, name, expression, last_slot)
    VALUES (%(q)s, %(name)s, %(expression)s, %(slot)s)
    ON CONFLICT (queue, name) DO UPDATE
        SET expression = excluded.expression, last_slot = excluded.last_slot,
            resumed_at = NULL
        WHERE s.last_slot < excluded.last_slot AND s.paused_at IS NULL
            AND (s.resumed_at IS NULL OR s.resumed_at < excluded.last_slot)
    RETURNING s.last_job_id"""
SET_SLOT_JOB = """UPDATE {schedules} SET last_job_id = %(job)s
    WHERE queue = %(q)s AND name = %(name)s"""
SCHEDULES = """SELECT name, expression, last_slot, last_job_id, paused_at, paused_by,
        resumed_at
    FROM {schedules} WHERE queue = %(q)s ORDER BY name"""
#: A row for a schedule the store has none for (``NO_SLOT``), or the
#: existing one: paused unless it is already (a row only if it changed).
PAUSE_SCHEDULE = """INSERT INTO {schedules} AS s
        (queue, name, expression, last_slot, paused_at, paused_by)
    VALUES (%(q)s, %(name)s, '', %(no_slot)s, %(now)s, %(by)s)
    ON CONFLICT (queue, name) DO UPDATE
        SET paused_at = excluded.paused_at, paused_by = excluded.paused_by
        WHERE s.paused_at IS NULL
    RETURNING 1"""
RESUME_SCHEDULE = """UPDATE {schedules}
    SET paused_at = NULL, paused_by = NULL, resumed_at = %(now)s
    WHERE queue = %(q)s AND name = %(name)s AND paused_at IS NOT NULL
    RETURNING 1"""
#: The schedule's row, made if missing and locked (a run by hand waits for
#: a slot being taken, and the other way round), with its last job.
LOCK_SCHEDULE = """INSERT INTO {schedules} AS s (queue, name, expression, last_slot)
    VALUES (%(q)s, %(name)s, '', %(no_slot)s)
    ON CONFLICT (queue, name) DO UPDATE SET last_job_id = s.last_job_id
    RETURNING s.last_job_id"""
LIVE_JOB = """SELECT EXISTS (SELECT 1 FROM {jobs} WHERE id = %(job)s
    AND state IN ('scheduled', 'ready', 'held', 'running'))"""

# ``{lazy_commit}``: claims and successes commit without waiting for the WAL
# flush (``lazy``, a one-row CTE the statement joins, so that it is
# evaluated). A crash of the server may forget the last of them, and those
# jobs run again, as after a crash of the worker. Everything that is promised
# (enqueues, failed attempts, dead letters) waits for the flush as usual.
LAZY_COMMIT = "lazy AS (SELECT set_config('synchronous_commit', 'off', true))"

# A claim by a store that knows of no limit takes only jobs under none
# (``limits IS NULL``: a filter on rows the claim reads anyway), so that a
# process that has not seen a declaration yet never starts a limited job.
_PICK = """WITH due AS MATERIALIZED (
        SELECT id, priority, run_at, limits FROM {jobs}
        WHERE queue = %(q)s AND state = 'scheduled' AND run_at <= {now}
        ORDER BY run_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
    ), ready AS MATERIALIZED (
        SELECT id, priority, run_at, limits FROM {jobs}
        WHERE queue = %(q)s AND state = 'ready' AND limits IS NULL
        ORDER BY priority DESC, run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    ), pick AS MATERIALIZED (
        SELECT id, limits, row_number() OVER (ORDER BY priority DESC, run_at, id)
            AS n FROM (SELECT * FROM due UNION ALL SELECT * FROM ready)
            AS c WHERE limits IS NULL
        ORDER BY priority DESC, run_at, id LIMIT %(limit)s
    ), promoted AS (
        UPDATE {jobs} SET state = 'ready'
        WHERE id IN (SELECT id FROM due) AND id NOT IN (SELECT id FROM pick)
    )"""
# The first ``start`` jobs of the claim (``pick.n``: run order) start now;
# the others are taken ahead, ``started_at`` NULL until ``START`` marks them.
_START = """UPDATE {jobs} AS j SET state = 'running', token = %(token)s,
        started_at = CASE WHEN pick.n <= %(start)s THEN {now} END,
        finished_at = NULL,
        lease_until = {db_now} + %(lease)s, owner = %(owner)s
    FROM pick, lazy WHERE j.id = pick.id
    RETURNING j.id, j.payload::text, j.attempts, j.max_attempts, j.key, j.task,
        -j.priority, j.run_at, j.timeout, j.meta, j.after_failure"""
# The plain claim takes only jobs under no limit (``_PICK``): it returns no
# column for their limits, which would cost every claim a column to load.
CLAIM = _PICK + ", {lazy_commit}\n    " + _START
# With limits: the candidates in run order, locked (``LIMITED_PICK``), then
# their keys locked in name order (``LOCK_KEYS``, which creates missing
# ones), their slots counted in a statement after it (``KEY_USE``: its
# snapshot sees every claim of those keys that committed before), and the
# outcome written at once (``START_LIMITED``): jobs started, jobs held (a
# wake per key of theirs: the next claim looks at those keys again), their
# slots, the keys' new ``tat`` and ``ready_at``.
LIMITED_PICK = (
    _PICK.replace(" AND limits IS NULL\n", "\n").replace(  # noqa: S608
        "AS c WHERE limits IS NULL", "AS c"
    )
    + "\n    SELECT id, limits FROM pick ORDER BY priority DESC, run_at, id"
).replace(
    "SELECT id, limits, row_number()",
    "SELECT id, limits, priority, run_at, row_number()",
)
LOCK_KEYS = """INSERT INTO {limit_keys} AS k (queue, name)
    SELECT %(q)s, name FROM unnest(%(keys)s::text[]) WITH ORDINALITY AS u(name, n)
    ORDER BY n
    ON CONFLICT (queue, name) DO UPDATE SET tat = k.tat
    RETURNING k.name, k.tat"""
KEY_USE = """SELECT u.name, (SELECT count(*) FROM {slots} AS s
        WHERE s.queue = %(q)s AND s.name = u.name), {now}
    FROM unnest(%(keys)s::text[]) AS u(name)"""
START_LIMITED = (
    """WITH pick AS (SELECT * FROM unnest(%(ids)s::bigint[]) WITH ORDINALITY
        AS p(id, n)),
    held AS (
        UPDATE {jobs} AS j SET state = 'held', held_by = h.name
        FROM unnest(%(held)s::bigint[], %(held_by)s::text[]) AS h(id, name)
        WHERE j.id = h.id
        RETURNING j.limits
    ), held_woke AS (
        INSERT INTO {wakes} (queue, name) SELECT %(q)s, unnest(limits) FROM held
    ), slots AS (
        INSERT INTO {slots} (queue, name, job_id)
        SELECT %(q)s, s.name, s.id
        FROM unnest(%(slot_names)s::text[], %(slot_ids)s::bigint[]) AS s(name, id)
    ), keys AS (
        UPDATE {limit_keys} AS k SET tat = u.tat,
            ready_at = coalesce(u.ready_at, k.ready_at)
        FROM unnest(%(keys)s::text[], %(tats)s::float8[], %(ready)s::float8[])
            AS u(name, tat, ready_at)
        WHERE k.queue = %(q)s AND k.name = u.name
    ), {lazy_commit}
    """  # noqa: S608
    + _START
    + ", j.limits"
)
# Releasing held jobs, a transaction of its own before the claim: the keys
# that may release (a wake left by a freed slot, or ``ready_at`` passed)
# that no one else holds now (SKIP LOCKED: a releaser never waits), their
# wakes consumed, their slots counted and whether they hold jobs, all in one
# snapshot: a wake left after it stays for the next claim. ``RELEASE_HELD``
# makes the first ``n`` held jobs of each key due again, in run order, and
# keeps the key's ``ready_at`` only if it holds more.
RELEASABLE = """WITH cand AS (
        SELECT name FROM {wakes} WHERE queue = %(q)s
        UNION SELECT name FROM {limit_keys}
        WHERE queue = %(q)s AND ready_at <= {now}
    ), k AS (
        SELECT name, tat FROM {limit_keys}
        WHERE queue = %(q)s AND name IN (SELECT name FROM cand)
        ORDER BY name FOR UPDATE SKIP LOCKED
    ), woke AS (
        DELETE FROM {wakes} WHERE queue = %(q)s AND name IN (SELECT name FROM k)
    )
    SELECT k.name, k.tat,
        (SELECT count(*) FROM {slots} AS s WHERE s.queue = %(q)s AND s.name = k.name),
        EXISTS (SELECT 1 FROM {jobs} AS j WHERE j.queue = %(q)s AND j.state = 'held'
                AND j.held_by = k.name),
        {now}
    FROM k"""
RELEASE_HELD = """WITH plan AS (
        SELECT * FROM unnest(%(keys)s::text[], %(counts)s::integer[],
                             %(ready)s::float8[]) AS p(name, n, ready_at)
    ), freed AS (
        UPDATE {jobs} AS j SET state = 'ready', held_by = NULL
        FROM (SELECT h.id FROM plan CROSS JOIN LATERAL (
                SELECT id FROM {jobs} WHERE queue = %(q)s AND state = 'held'
                  AND held_by = plan.name
                ORDER BY priority DESC, run_at, id LIMIT plan.n
                FOR UPDATE SKIP LOCKED) AS h) AS r
        WHERE j.id = r.id
        RETURNING j.id
    ), keys AS (
        UPDATE {limit_keys} AS k SET ready_at = CASE WHEN EXISTS (
                SELECT 1 FROM {jobs} WHERE queue = %(q)s AND state = 'held'
                  AND held_by = plan.name
                ORDER BY priority DESC, run_at, id OFFSET plan.n)
            THEN plan.ready_at END
        FROM plan WHERE k.queue = %(q)s AND k.name = plan.name
    )
    SELECT count(*) FROM freed"""
#: Whether the queue has limits declared (a claim then checks them).
HAS_LIMITS = "SELECT EXISTS (SELECT 1 FROM {limits} WHERE queue = %(q)s)"
LIMITS = """SELECT name, concurrency, rate, per, burst FROM {limits}
    WHERE queue = %(q)s ORDER BY name"""
# One statement: the stored declaration as it was (none: new), and the new one.
DECLARE_LIMIT = """WITH old AS (
        SELECT concurrency, rate, per, burst FROM {limits}
        WHERE queue = %(q)s AND name = %(name)s FOR UPDATE
    ), stored AS (
        INSERT INTO {limits} AS l (queue, name, concurrency, rate, per, burst)
        VALUES (%(q)s, %(name)s, %(concurrency)s, %(rate)s, %(per)s, %(burst)s)
        ON CONFLICT (queue, name) DO UPDATE SET concurrency = excluded.concurrency,
            rate = excluded.rate, per = excluded.per, burst = excluded.burst
    )
    SELECT concurrency, rate, per, burst FROM old"""
RUNNING_PER_KEY = """SELECT name, count(*) FROM {slots} WHERE queue = %(q)s
    GROUP BY name"""
HELD_PER_KEY = """SELECT held_by, count(*) FROM {jobs}
    WHERE queue = %(q)s AND state = 'held' GROUP BY held_by"""

# ``{purge}``: kept jobs past their time, up to ``batch`` of each state: a
# CTE of the statements that finish and cancel jobs (each state read
# through its index).
PURGE = """expired AS (
        DELETE FROM {jobs} WHERE id IN (
            SELECT id FROM {jobs}
            WHERE queue = %(q)s AND state = 'completed' AND expires_at <= {now}
            LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
        RETURNING id, after_failure
    ), expired_cancelled AS (
        DELETE FROM {jobs} WHERE id IN (
            SELECT id FROM {jobs}
            WHERE queue = %(q)s AND state = 'cancelled' AND expires_at <= {now}
            LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
        RETURNING id, after_failure
    ), expired_deps AS (
        DELETE FROM {deps} WHERE child IN (
            SELECT id FROM expired WHERE after_failure IS NOT NULL
            UNION ALL
            SELECT id FROM expired_cancelled WHERE after_failure IS NOT NULL)
    )"""

# Ending claims: ``ids`` and ``tokens`` (and ``results``) are arrays, one
# item per claim; the ids whose claim was current come back.
#
# Workflows: the plain statements end only jobs that never had a parent or
# a child (``NO_CHILDREN``, one filter on the row they change anyway), so a
# job outside every workflow costs what it did. Any other comes back as not
# ended, and the store ends it again in a transaction with the ``_WORKFLOW``
# variant, then writes what that end does to the children in it. The
# filter is checked on the row as it is once its lock is held: ``add``
# locks (and counts) a parent before it links a child to it, so a finish
# that waited for such an ``add`` sees the count and leaves the job alone;
# the next statement of the transaction (a new snapshot) sees the child.
NO_CHILDREN = "\n      AND j.children IS NULL AND j.after_failure IS NULL"
#: What the ``_WORKFLOW`` variants return for each job they ended.
WORKFLOW_RETURNING = "j.children IS NOT NULL, j.after_failure IS NOT NULL"
_FINISH_ANY = """DELETE FROM {jobs} AS j
    USING unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token), lazy
    WHERE j.id = c.id AND j.token = c.token AND j.queue = %(q)s
      AND j.state = 'running'"""
_FINISH = _FINISH_ANY + NO_CHILDREN
FINISH = "WITH {purge}, {lazy_commit}\n    " + _FINISH + "\n    RETURNING j.id"
FINISH_WORKFLOW = (
    "WITH {purge}, {lazy_commit}\n    "
    + _FINISH_ANY
    + "\n    RETURNING j.id, "
    + WORKFLOW_RETURNING
)
# A stopping job whose handler returned completes: its request is dropped.
_COMPLETE_ANY = """UPDATE {jobs} AS j SET state = 'completed',
        result = c.result::json, expires_at = {now} + %(keep_for)s::float8,
        finished_at = {now}, cancel_at = NULL, cancel_by = NULL,
        cancel_attempt = NULL
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[])
        AS c(id, token, result), lazy
    WHERE j.id = c.id AND j.token = c.token AND j.queue = %(q)s
      AND j.state = 'running'"""
_COMPLETE = _COMPLETE_ANY + NO_CHILDREN
COMPLETE = "WITH {purge}, {lazy_commit}\n    " + _COMPLETE + "\n    RETURNING j.id"
COMPLETE_WORKFLOW = FINISH_WORKFLOW.replace(_FINISH_ANY, _COMPLETE_ANY)
# A stopping job given back never ran again: it ends cancelled.
_RELEASE = """UPDATE {jobs} AS j
    SET state = CASE WHEN cancel_at IS NULL THEN 'ready' ELSE 'cancelled' END,
        started_at = NULL
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
    WHERE j.id = c.id AND j.token = c.token AND j.queue = %(q)s
      AND j.state = 'running'"""
RELEASE = _RELEASE + "\n    RETURNING j.id, j.state, j.children IS NOT NULL"

# A failed attempt: pending again in ``retry_in`` seconds, or dead (``retry_in``
# NULL), or cancelled whatever ``retry_in`` if it was stopping (kept until
# the ``expires_at`` its cancel set), with the error appended to the newest
# ``kept``.
_FAIL = """UPDATE {jobs} AS j SET
            state = CASE WHEN cancel_at IS NOT NULL THEN 'cancelled'
                         WHEN %(retry_in)s::float8 IS NULL THEN 'dead'
                         WHEN %(retry_in)s::float8 > 0 THEN 'scheduled'
                         ELSE 'ready' END,
            run_at = CASE WHEN cancel_at IS NOT NULL
                            OR %(retry_in)s::float8 IS NULL THEN run_at
                          ELSE {now} + %(retry_in)s::float8 END,
            buried = CASE WHEN cancel_at IS NULL AND %(retry_in)s::float8 IS NULL
                          THEN nextval(%(burials)s::regclass) END,
            attempts = attempts + 1,
            finished_at = {now},
            last_error = %(last_error)s::text,
            errors = CASE WHEN jsonb_array_length(errors) >= %(kept)s::integer
                          THEN errors - 0 ELSE errors END
                || jsonb_build_array(jsonb_build_array(%(etype)s::text,
                       %(emessage)s::text, %(etraceback)s::text,
                       {now} + %(error_in)s::float8))
        WHERE id = %(id)s AND queue = %(q)s AND state = 'running'
          AND token = %(token)s"""
# A retry leaves the children waiting: only a parent's end needs them.
_FAIL_ALONE = (
    _FAIL
    + """
          AND (j.children IS NULL OR (j.cancel_at IS NULL
                                      AND %(retry_in)s::float8 IS NOT NULL))"""
)
FAIL = f"""WITH failed AS (
        {_FAIL_ALONE}
        RETURNING state
    )
    SELECT state FROM failed"""  # noqa: S608
FAIL_WORKFLOW = f"""WITH failed AS (
        {_FAIL}
        RETURNING state, children
    )
    SELECT state, children IS NOT NULL FROM failed"""  # noqa: S608

# Ending claims under limits (the store picks these for a claim whose
# ``Claim.limits`` are not empty; any other ends as above, touching no limits
# table, at no cost to queues without limits): the change as the CTE
# ``ended``, then the slots of the rows it ended dropped and a wake left per
# key, in the same statement (the next claim releases that key's held jobs
# if a slot is free). A stale claim ends no row, so frees nothing: a new
# attempt's slot of that job is never dropped.
_FREED = """freed AS (
        DELETE FROM {slots}
        WHERE job_id IN (SELECT id FROM ended WHERE limits IS NOT NULL)
    ), woke AS (
        INSERT INTO {wakes} (queue, name) SELECT %(q)s, unnest(limits) FROM ended
    )"""


def _freeing(ctes: str, change: str, returned: str) -> str:
    """``change`` (an UPDATE or DELETE aliasing the jobs ``j``), after
    ``ctes``, freeing the slots of what it ended; ``returned`` of each row."""
    return f"""WITH {ctes}ended AS (
    {change}
    RETURNING j.id, j.limits, j.state, j.children, j.after_failure
    ), {_FREED}
    SELECT {returned} FROM ended"""  # noqa: S608


_ENDED_WORKFLOW = "children IS NOT NULL, after_failure IS NOT NULL"
FINISH_LIMITED = _freeing("{purge}, {lazy_commit}, ", _FINISH, "id")
FINISH_LIMITED_WORKFLOW = _freeing(
    "{purge}, {lazy_commit}, ", _FINISH_ANY, "id, " + _ENDED_WORKFLOW
)
COMPLETE_LIMITED = _freeing("{purge}, {lazy_commit}, ", _COMPLETE, "id")
COMPLETE_LIMITED_WORKFLOW = _freeing(
    "{purge}, {lazy_commit}, ", _COMPLETE_ANY, "id, " + _ENDED_WORKFLOW
)
RELEASE_LIMITED = _freeing("", _RELEASE, "id, state, children IS NOT NULL")
FAIL_LIMITED = _freeing("", _FAIL_ALONE, "state")
FAIL_LIMITED_WORKFLOW = _freeing("", _FAIL, "state, children IS NOT NULL")
# The dead-letter trim, in the transaction that buried: first LOCK_DEAD, a
# lock per queue held until that transaction ends, then TRIM_DEAD in a
# statement of its own, whose snapshot (READ COMMITTED: one per statement) is
# taken once the lock is held, so it sees every burial committed before. Two
# burials that counted at once without it would each leave the other's dead
# job out of the count: both trim, or neither, and the list ends shorter or
# longer than the limit.
LOCK_DEAD = "SELECT pg_advisory_xact_lock(%(lock)s)"
TRIM_DEAD = """DELETE FROM {jobs} WHERE id IN (
        SELECT id FROM {jobs} WHERE queue = %(q)s AND state = 'dead'
        ORDER BY buried
        LIMIT greatest((SELECT coalesce(sum(n), 0) FROM {counts}
                        WHERE queue = %(q)s AND state = 'dead') - %(limit)s, 0)::bigint
        FOR UPDATE SKIP LOCKED)
    RETURNING id, buried, last_error, children IS NOT NULL,
        after_failure IS NOT NULL"""

# Claims taken ahead start: a statement sent with the one that records the
# workers' last outcomes (a pipeline: one round trip), or alone. Only a claim
# still this process's starts: its token current and its lease not run out
# (a process stopped past its lease may have lost it to another's recovery,
# or is about to); the others are left to recovery, which gives them back.
START = """WITH {lazy_commit}
    UPDATE {jobs} AS j SET started_at = {now}
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token), lazy
    WHERE j.id = c.id AND j.token = c.token AND j.queue = %(q)s
      AND j.state = 'running' AND j.lease_until > {db_now}
    RETURNING j.id"""
# Renewing waits for no row lock while it holds another: a transaction that
# marks one held job started and ends another (``finish_many``) locks them
# in its own order, and two such waits would deadlock (PostgreSQL then
# kills one after ``deadlock_timeout``, a second at least). So the rows
# free now are renewed at once, and the held rows some transaction has
# locked are returned, to be renewed one by one, each in a transaction of
# its own, which holds nothing while it waits (``RENEW_ONE``).
RENEW = """WITH held AS (
        SELECT j.id, j.token FROM {jobs} AS j
        JOIN unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
          ON j.id = c.id AND j.token = c.token
        WHERE j.queue = %(q)s AND j.state = 'running'
    ), free AS (
        SELECT j.id FROM {jobs} AS j JOIN held ON j.id = held.id
        WHERE j.token = held.token AND j.state = 'running'
        FOR UPDATE OF j SKIP LOCKED
    ), renewed AS (
        UPDATE {jobs} AS j SET lease_until = {db_now} + %(lease)s
        FROM free WHERE j.id = free.id
        RETURNING j.id)
    SELECT id, token FROM held WHERE id NOT IN (SELECT id FROM renewed)"""
RENEW_ONE = """UPDATE {jobs} SET lease_until = {db_now} + %(lease)s
    WHERE id = %(id)s AND token = %(token)s AND queue = %(q)s
      AND state = 'running'"""
ANY_EXPIRED = """SELECT EXISTS (SELECT 1 FROM {jobs}
    WHERE queue = %(q)s AND state = 'running' AND lease_until <= {db_now})"""
EXPIRED = """SELECT id, token, limits IS NOT NULL, started_at IS NULL, attempts,
        max_attempts, cancel_at IS NOT NULL
    FROM {jobs}
    WHERE queue = %(q)s AND state = 'running' AND lease_until <= {db_now}
    ORDER BY id FOR UPDATE SKIP LOCKED"""

# A workflow's columns cost nothing for a job outside one: each look-up
# runs only for a job with parents (``after_failure``) or children.
_COLUMNS = """id, state, payload::text, attempts, run_at, created_at, last_error,
    key, priority, result::text, task, errors, max_attempts, started_at,
    finished_at, timeout, meta, cancel_at, cancel_by, cancel_attempt,
    limits, held_by, after_failure,
    CASE WHEN after_failure IS NOT NULL THEN (
        SELECT array_agg(parent ORDER BY position) FROM {deps} WHERE child = id) END,
    CASE WHEN after_failure IS NOT NULL THEN (
        SELECT array_agg(parent ORDER BY position) FROM {deps}
        WHERE child = id AND outcome IS NULL) END,
    CASE WHEN children IS NOT NULL THEN (
        SELECT array_agg(child ORDER BY child) FROM {deps} WHERE parent = id) END,
    state IN ('completed', 'cancelled') AND expires_at <= {now}"""
RECORD = "SELECT " + _COLUMNS + " FROM {jobs}"  # noqa: S608
GET = RECORD + " WHERE id = %(id)s AND queue = %(q)s"
LIST_DEAD = (
    RECORD + " WHERE queue = %(q)s AND state = 'dead' ORDER BY buried LIMIT %(limit)s"
)
LIST_PENDING = (
    RECORD + " WHERE queue = %(q)s AND state IN ('scheduled', 'ready', 'held')"
    " ORDER BY run_at, priority DESC, id LIMIT %(limit)s"
)
LIST_RUNNING = (
    RECORD + " WHERE queue = %(q)s AND state = 'running'"
    " ORDER BY run_at, priority DESC, id LIMIT %(limit)s"
)
LIST_COMPLETED = (
    RECORD + " WHERE queue = %(q)s AND state = 'completed'"
    " ORDER BY run_at, priority DESC, id LIMIT %(limit)s"
)
LIST_WAITING = (
    RECORD + " WHERE queue = %(q)s AND state = 'waiting'"
    " ORDER BY run_at, priority DESC, id LIMIT %(limit)s"
)
LIST_CANCELLED = (
    RECORD + " WHERE queue = %(q)s AND state = 'cancelled'"
    " ORDER BY run_at, priority DESC, id LIMIT %(limit)s"
)

REVIVE = """WITH revived AS (
        UPDATE {jobs} AS j SET state = 'ready', attempts = 0, run_at = {now},
            buried = NULL
        WHERE id = %(id)s AND queue = %(q)s AND state = 'dead'
          AND (key IS NULL OR NOT EXISTS (
              SELECT 1 FROM {jobs} AS o WHERE o.queue = j.queue AND o.key = j.key
                AND {holds_key}))
        RETURNING id
    )
    SELECT id FROM revived"""
DELETE_DEAD = """DELETE FROM {jobs} WHERE id = %(id)s AND queue = %(q)s
    AND state = 'dead' RETURNING id, children IS NOT NULL, after_failure IS NOT NULL"""
# One statement, so that requests at once see each other (the second waits
# for the row, then finds the first's request): a pending job ends
# cancelled, a running one keeps running with the request (the first one
# kept); the state comes back ('running': stopping). Purges as FINISH does.
# A pending job under limits that ends leaves a wake per key: one released
# from 'held' was counted on to take a free slot, which another takes now
# (a wake for a scheduled or held one finds nothing to release).
CANCEL = """WITH {purge}, ended AS (
    UPDATE {jobs} SET
        state = CASE WHEN state = 'running' THEN 'running' ELSE 'cancelled' END,
        held_by = NULL,
        cancel_at = coalesce(cancel_at, {now}),
        cancel_by = coalesce(cancel_by, %(by)s::text),
        cancel_attempt = CASE WHEN state = 'running'
                              THEN coalesce(cancel_attempt, attempts + 1) END,
        expires_at = CASE WHEN cancel_at IS NULL
                          THEN {now} + %(keep_for)s::float8 ELSE expires_at END
    WHERE id = %(id)s AND queue = %(q)s
      AND state IN ('scheduled', 'ready', 'held', 'waiting', 'running')
    RETURNING state, limits, children
    ), woke AS (
        INSERT INTO {wakes} (queue, name)
        SELECT %(q)s, unnest(limits) FROM ended WHERE state = 'cancelled'
    )
    SELECT state, children IS NOT NULL FROM ended"""
# The claims asked to stop, of those given (current ones only): by id.
STOPS_REQUESTED = """SELECT j.id FROM {jobs} AS j
    JOIN unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
        ON j.id = c.id AND j.token = c.token
    WHERE j.queue = %(q)s AND j.state = 'running' AND j.cancel_at IS NOT NULL"""
COUNTS = "SELECT state, sum(n) FROM {counts} WHERE queue = %(q)s GROUP BY state"
PENDING = """SELECT coalesce(sum(n), 0) FROM {counts}
    WHERE queue = %(q)s AND state IN ('scheduled', 'ready', 'held')"""
LIVE = """SELECT coalesce(sum(n), 0) FROM {counts}
    WHERE queue = %(q)s AND state IN ('scheduled', 'ready', 'held', 'running')"""

# -- workflows (see schema's version 7) --------------------------------------------
# Adding a child: its parents locked in id order and read as they are once
# locked (a parent ending meanwhile is seen ended), then each one's count
# of children raised, and the child's rows added.
LOCK_PARENTS = """SELECT id, queue, state, result::text FROM {jobs}
    WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id FOR NO KEY UPDATE"""
#: The last job id given (0: none yet), to tell ids never given.
LAST_ID = "SELECT coalesce(pg_sequence_last_value(%(seq)s::regclass), 0)"
COUNT_CHILDREN = """UPDATE {jobs} AS j SET children = coalesce(j.children, 0) + c.n
    FROM unnest(%(ids)s::bigint[], %(counts)s::integer[]) AS c(id, n)
    WHERE j.id = c.id"""
ADD_DEPS = """INSERT INTO {deps} (child, position, parent, outcome, result)
    SELECT * FROM unnest(%(children)s::bigint[], %(positions)s::integer[],
                         %(parents)s::bigint[], %(outcomes)s::text[],
                         %(results)s::text[])"""
DELETE_DEPS = "DELETE FROM {deps} WHERE child = ANY(%(ids)s::bigint[])"
# A parent's end: its waiting children whose slot for it is unset, locked
# in id order (two parents of one child ending at once take its lock one
# after the other, and the second sees the first's slot set: the child is
# released once), as they are once locked (one released meanwhile drops out).
WAITING_CHILDREN = """SELECT j.id, d.position, d.parent, j.after_failure
    FROM {deps} AS d JOIN {jobs} AS j ON j.id = d.child
    WHERE d.parent = ANY(%(parents)s::bigint[]) AND d.outcome IS NULL
      AND j.state = 'waiting'
    ORDER BY j.id, d.position
    FOR NO KEY UPDATE OF j"""
# The slots set, and each child counted down: one with none left is pending,
# due at its run_at or now if later.
SET_SLOTS = """WITH slots AS (
        UPDATE {deps} AS d SET outcome = s.outcome, result = s.result
        FROM unnest(%(children)s::bigint[], %(positions)s::integer[],
                    %(outcomes)s::text[], %(results)s::text[])
            AS s(child, position, outcome, result)
        WHERE d.child = s.child AND d.position = s.position AND d.outcome IS NULL
        RETURNING d.child
    ), counted AS (
        SELECT child, count(*)::integer AS n FROM slots GROUP BY child
    )
    UPDATE {jobs} AS j SET waits = j.waits - c.n,
        state = CASE WHEN j.waits > c.n THEN 'waiting'
                     WHEN j.run_at > {now} THEN 'scheduled' ELSE 'ready' END,
        run_at = CASE WHEN j.waits > c.n THEN j.run_at
                      ELSE greatest(j.run_at, {now}) END
    FROM counted AS c WHERE j.id = c.child AND j.state = 'waiting'
    RETURNING j.id, j.task, j.state <> 'waiting'"""
CANCEL_CHILDREN = """UPDATE {jobs} AS j SET state = 'cancelled', cancel_at = {now},
        cancel_by = c.by, cancel_attempt = NULL,
        expires_at = {now} + %(keep_for)s::float8
    FROM unnest(%(ids)s::bigint[], %(by)s::text[]) AS c(id, by)
    WHERE j.id = c.id AND j.state = 'waiting'
    RETURNING j.id, j.children IS NOT NULL"""
#: A claimed child's parents, in order, with their outcomes.
PARENTS = """SELECT child, parent, outcome, result FROM {deps}
    WHERE child = ANY(%(ids)s::bigint[]) ORDER BY child, position"""

NEXT_DUE = """SELECT
    (SELECT run_at FROM {jobs} WHERE queue = %(q)s AND state = 'ready'
     ORDER BY priority DESC, run_at, id LIMIT 1),
    (SELECT run_at FROM {jobs} WHERE queue = %(q)s AND state = 'scheduled'
     ORDER BY run_at LIMIT 1),
    {now},
    (SELECT ready_at FROM {limit_keys} WHERE queue = %(q)s AND ready_at IS NOT NULL
     ORDER BY ready_at LIMIT 1)"""


# -- pages of a list (``page_jobs``), as the SQLite store's: each selects a
# job's record, then its sort key (the cursor); ``%(cN)s`` the cursor's values.
_FILTERS = """ AND (%(task)s::text IS NULL OR task = %(task)s)
    AND (%(key)s::text IS NULL OR key = %(key)s)
    AND (%(error)s::text IS NULL OR strpos(last_error, %(error)s) > 0)"""
# Due jobs: ready ones (``jobs_ready``), scheduled ones due that no claim
# moved yet (``jobs_scheduled``; few) and held ones (pending and due:
# ``jobs_held_order``), each a range of its index after the cursor, merged.
_PAGE_DUE = (
    "SELECT * FROM ((SELECT " + _COLUMNS + ", priority, run_at, id FROM {jobs}"  # noqa: S608
    " WHERE queue = %(q)s AND state = 'ready' AND priority = %(c0)s"
    " AND (run_at, id) > (%(c1)s, %(c2)s)"
    + _FILTERS
    + " ORDER BY run_at, id LIMIT %(limit)s)"
    " UNION ALL (SELECT " + _COLUMNS + ", priority, run_at, id FROM {jobs}"
    " WHERE queue = %(q)s AND state = 'ready' AND priority < %(c0)s"
    + _FILTERS
    + " ORDER BY priority DESC, run_at, id LIMIT %(limit)s)"
    " UNION ALL (SELECT " + _COLUMNS + ", priority, run_at, id FROM {jobs}"
    " WHERE queue = %(q)s AND state = 'scheduled' AND run_at <= {now}"
    " AND (priority < %(c0)s OR (priority = %(c0)s"
    " AND (run_at, id) > (%(c1)s, %(c2)s)))"
    + _FILTERS
    + " ORDER BY priority DESC, run_at, id LIMIT %(limit)s)"
    " UNION ALL (SELECT " + _COLUMNS + ", priority, run_at, id FROM {jobs}"
    " WHERE queue = %(q)s AND state = 'held' AND priority = %(c0)s"
    " AND (run_at, id) > (%(c1)s, %(c2)s)"
    + _FILTERS
    + " ORDER BY run_at, id LIMIT %(limit)s)"
    " UNION ALL (SELECT " + _COLUMNS + ", priority, run_at, id FROM {jobs}"
    " WHERE queue = %(q)s AND state = 'held' AND priority < %(c0)s"
    + _FILTERS
    + " ORDER BY priority DESC, run_at, id LIMIT %(limit)s)) AS due"
    " ORDER BY 28 DESC, 29, 30 LIMIT %(limit)s"
)
# Scheduled jobs not due yet, earliest first: after a failed attempt
# (retrying; see ``jobq.stores.pages``), a range of ``jobs_retrying``; or
# never attempted (delayed), a range of ``jobs_scheduled`` past the retrying
# jobs due before the page's.
_PAGE_SCHEDULED = (
    "SELECT " + _COLUMNS + ", run_at, id FROM {jobs}"  # noqa: S608
    " WHERE queue = %(q)s AND state = 'scheduled' AND run_at > {now}"
    " AND (run_at, id) > (%(c0)s, %(c1)s) AND attempts {attempts} 0"
    + _FILTERS
    + " ORDER BY run_at, id LIMIT %(limit)s"
)
PAGES = {
    "due": _PAGE_DUE,
    "delayed": _PAGE_SCHEDULED.replace("{attempts}", "="),
    "retrying": _PAGE_SCHEDULED.replace("{attempts}", ">"),
    "running": "SELECT " + _COLUMNS + ", id FROM {jobs}"  # noqa: S608
    " WHERE queue = %(q)s AND state = 'running' AND id > %(c0)s"
    + _FILTERS
    + " ORDER BY id LIMIT %(limit)s",
    "waiting": "SELECT " + _COLUMNS + ", id FROM {jobs}"  # noqa: S608
    " WHERE queue = %(q)s AND state = 'waiting' AND id > %(c0)s"
    + _FILTERS
    + " ORDER BY id LIMIT %(limit)s",
    "dead": "SELECT " + _COLUMNS + ", buried FROM {jobs}"  # noqa: S608
    " WHERE queue = %(q)s AND state = 'dead' AND buried < %(c0)s"
    + _FILTERS
    + " ORDER BY buried DESC LIMIT %(limit)s",
    "completed": "SELECT " + _COLUMNS + ", expires_at, id FROM {jobs}"  # noqa: S608
    " WHERE queue = %(q)s AND state = 'completed' AND expires_at > {now}"
    " AND (expires_at, id) < (%(c0)s, %(c1)s)"
    + _FILTERS
    + " ORDER BY expires_at DESC, id DESC LIMIT %(limit)s",
}
#: Kept cancelled jobs, as kept completed ones (through ``jobs_cancelled``).
PAGES["cancelled"] = PAGES["completed"].replace(
    "state = 'completed'", "state = 'cancelled'"
)
#: For the transaction of a read that must not start parallel workers.
SERIAL = "SET LOCAL max_parallel_workers_per_gather = 0"
#: Scheduled jobs already due that no claim moved yet (see ``stats``).
DUE_SCHEDULED = """SELECT count(*) FROM {jobs}
    WHERE queue = %(q)s AND state = 'scheduled' AND run_at <= {now}"""
#: Delayed jobs after a failed attempt, not due yet (the retrying count): an
#: index-only range of ``jobs_retrying``.
RETRYING = """SELECT count(*) FROM {jobs}
    WHERE queue = %(q)s AND state = 'scheduled' AND attempts > 0 AND run_at > {now}"""
#: Completed jobs expired that no finish purged yet (see ``stats``).
EXPIRED_COMPLETED = """SELECT count(*) FROM {jobs}
    WHERE queue = %(q)s AND state = 'completed' AND expires_at <= {now}"""
#: Cancelled jobs expired that no finish or cancel purged yet (``stats``).
EXPIRED_CANCELLED = EXPIRED_COMPLETED.replace("'completed'", "'cancelled'")
#: Jobs finished per minute since a time (``finished_per_minute``): one
#: range of ``jobs_finished`` (which covers every column read) per minute,
#: each counted by a plain aggregate: a GROUP BY over the whole range would
#: sort every row first. ``(SELECT {now})`` is computed once (an init plan),
#: not for each row as the database clock's expression would be.
FINISHED_PER_MINUTE = """SELECT m.start::float8, c.completed, c.died
    FROM generate_series(%(since)s::bigint, floor({now})::bigint, 60) AS m(start)
    CROSS JOIN LATERAL (SELECT
            count(*) FILTER (WHERE state = 'completed'
                AND expires_at > (SELECT {now}))
                AS completed,
            count(*) FILTER (WHERE state = 'dead') AS died
        FROM {jobs}
        WHERE queue = %(q)s AND state IN ('completed', 'dead')
            AND finished_at >= m.start AND finished_at < m.start + 60) AS c
    ORDER BY m.start"""


# -- activity (see schema's version 8) ---------------------------------------------
# A beat's statements, in one transaction, take their row locks in one
# order whichever process runs them: its own process row, the outcome rows
# in the key's order (``ORDER BY``: the upsert locks them as it inserts),
# the minute's sample, then the drops, which never wait (SKIP LOCKED: a row
# another beat holds is dropped by a later beat). So beats never deadlock.
PUT_PROCESS = """INSERT INTO {processes} AS p (queue, id, host, pid, started, seen,
        gone_after, workers, busy, running)
    VALUES (%(q)s, %(id)s, %(host)s, %(pid)s, %(started)s, %(seen)s,
        %(gone_after)s, %(workers)s, %(busy)s, %(running)s)
    ON CONFLICT (queue, id) DO UPDATE SET host = excluded.host, pid = excluded.pid,
        started = excluded.started, seen = excluded.seen,
        gone_after = excluded.gone_after, workers = excluded.workers,
        busy = excluded.busy, running = excluded.running"""
# One row per (minute, task) of the beat; ``durations``: every row's
# buckets one after the other (``buckets`` each), as an array of arrays
# cannot be cut into rows by ``unnest``.
# ``error_ats``, ``error_jobs``, ``errors``: NULL where the row has no
# error; the later error is kept (on a tie, the one written first).
ADD_OUTCOMES = """INSERT INTO {outcomes} AS o (queue, minute, named, task, succeeded,
        failed, dead, cancelled, durations, error_at, error_job, error)
    SELECT %(q)s, r.minute, r.task IS NOT NULL, coalesce(r.task, ''), r.succeeded,
        r.failed, r.dead, r.cancelled,
        (%(durations)s::bigint[])[(r.n - 1) * %(buckets)s + 1 : r.n * %(buckets)s],
        r.error_at, r.error_job, r.error
    FROM unnest(%(minutes)s::float8[], %(tasks)s::text[], %(succeeded)s::bigint[],
                %(failed)s::bigint[], %(dead)s::bigint[], %(cancelled)s::bigint[],
                %(error_ats)s::float8[], %(error_jobs)s::bigint[], %(errors)s::text[])
        WITH ORDINALITY AS r(minute, task, succeeded, failed, dead, cancelled,
                             error_at, error_job, error, n)
    ORDER BY r.minute, r.task IS NOT NULL, r.task COLLATE "C"
    ON CONFLICT (queue, minute, named, task) DO UPDATE SET
        succeeded = o.succeeded + excluded.succeeded,
        failed = o.failed + excluded.failed,
        dead = o.dead + excluded.dead,
        cancelled = o.cancelled + excluded.cancelled,
        durations = ARRAY(SELECT a + b
            FROM unnest(o.durations, excluded.durations) WITH ORDINALITY AS d(a, b, i)
            ORDER BY i),
        (error_at, error_job, error) = (
            SELECT e.error_at, e.error_job, e.error
            FROM (VALUES (0, o.error_at, o.error_job, o.error),
                         (1, excluded.error_at, excluded.error_job, excluded.error))
                AS e(newer, error_at, error_job, error)
            ORDER BY e.error_at DESC NULLS LAST, e.newer LIMIT 1)"""
# The first sample of a minute wins.
ADD_SAMPLE = """INSERT INTO {samples} (queue, minute, pending, running, waiting,
        latency)
    VALUES (%(q)s, %(minute)s, %(pending)s, %(running)s, %(waiting)s, %(latency)s)
    ON CONFLICT (queue, minute) DO NOTHING"""
# The outer deletes repeat the range, so that both sides read only it.
DROP_OLD_ACTIVITY = """WITH old_outcomes AS (
        DELETE FROM {outcomes} WHERE queue = %(q)s AND minute < %(oldest)s
        AND (minute, named, task) IN (
            SELECT minute, named, task FROM {outcomes}
            WHERE queue = %(q)s AND minute < %(oldest)s FOR UPDATE SKIP LOCKED)
    ), old_samples AS (
        DELETE FROM {samples} WHERE queue = %(q)s AND minute < %(oldest)s
        AND minute IN (
            SELECT minute FROM {samples}
            WHERE queue = %(q)s AND minute < %(oldest)s FOR UPDATE SKIP LOCKED)
    )
    DELETE FROM {processes} WHERE queue = %(q)s AND id IN (
        SELECT id FROM {processes}
        WHERE queue = %(q)s AND %(now)s::float8 > seen + gone_after + %(gone_kept)s
        FOR UPDATE SKIP LOCKED)"""
LEAVE = "DELETE FROM {processes} WHERE queue = %(q)s AND id = %(id)s"
PROCESSES = """SELECT id, host, pid, started, seen, workers, busy, running,
        %(now)s::float8 > seen + gone_after
    FROM {processes} WHERE queue = %(q)s ORDER BY host, started, id"""
# Plain jobs' rows first in each minute (``named`` false), as the key orders.
OUTCOMES = """SELECT minute, CASE WHEN named THEN task END, succeeded, failed, dead,
        cancelled, durations, error_at, error_job, error
    FROM {outcomes} WHERE queue = %(q)s AND minute BETWEEN %(first)s AND %(last)s
    ORDER BY minute, named, task"""
MINUTE_OUTCOMES = """SELECT minute, sum(succeeded)::bigint, sum(failed)::bigint,
        sum(dead)::bigint, sum(cancelled)::bigint
    FROM {outcomes} WHERE queue = %(q)s AND minute BETWEEN %(first)s AND %(last)s
    GROUP BY minute ORDER BY minute"""
SAMPLES = """SELECT minute, pending, running, waiting, latency FROM {samples}
    WHERE queue = %(q)s AND minute BETWEEN %(first)s AND %(last)s ORDER BY minute"""


class Statements:
    """Every statement of one schema, rendered once (names through
    ``psycopg.sql.Identifier``, values left as parameters); ``render`` renders
    others for the same schema."""

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
            "schedules": ident("schedules"),
            "limits": ident("limits"),
            "limit_keys": ident("limit_keys"),
            "slots": ident("slots"),
            "wakes": ident("wakes"),
            "deps": ident("deps"),
            "processes": ident("processes"),
            "outcomes": ident("outcomes"),
            "samples": ident("samples"),
            "count_jobs": ident("count_jobs"),
            "now": sql.SQL(NOW),
            "db_now": sql.SQL(DB_NOW),
            "lazy_commit": sql.SQL(LAZY_COMMIT),
            "holds_key": sql.SQL(HOLDS_KEY),
        }
        for index in ("ready", "scheduled", "running", "dead", "completed",
                      "live_keys", "finished", "cancelled", "held",
                      "held_order", "waiting", "retrying"):  # fmt: skip
            idents[f"jobs_{index}"] = sql.Identifier(f"jobs_{index}")
        for index in ("limit_keys_ready", "slots_jobs", "wakes_names", "deps_parent"):
            idents[index] = sql.Identifier(index)
        #: Qualified names as text, for parameters such as ``::regclass``.
        self.names: dict[str, str] = {
            "schema": schema,
            "jobs_name": ident("jobs").as_string(None),
            "counts_name": ident("counts").as_string(None),
            "meta_name": ident("meta").as_string(None),
            "burials_name": ident("burials").as_string(None),
            "schedules_name": ident("schedules").as_string(None),
        }
        for table in ("limits", "limit_keys", "slots", "wakes", "deps", "jobs_id_seq",
                      "processes", "outcomes", "samples"):  # fmt: skip
            self.names[f"{table}_name"] = ident(table).as_string(None)
        idents["purge"] = sql.SQL(PURGE).format(**idents)
        self._idents = idents
        render = self.render
        self.add = render(ADD)
        self.add_notify = render(ADD_NOTIFY)
        self.add_child = render(ADD_CHILD)
        self.notify_in = render(NOTIFY_IN)
        self.held_key = render(HELD_KEY)
        self.claim = render(CLAIM)
        self.finish = render(FINISH)
        self.complete = render(COMPLETE)
        self.fail = render(FAIL)
        self.finish_limited = render(FINISH_LIMITED)
        self.complete_limited = render(COMPLETE_LIMITED)
        self.release_limited = render(RELEASE_LIMITED)
        self.fail_limited = render(FAIL_LIMITED)
        self.finish_workflow = render(FINISH_WORKFLOW)
        self.complete_workflow = render(COMPLETE_WORKFLOW)
        self.fail_workflow = render(FAIL_WORKFLOW)
        self.finish_limited_workflow = render(FINISH_LIMITED_WORKFLOW)
        self.complete_limited_workflow = render(COMPLETE_LIMITED_WORKFLOW)
        self.fail_limited_workflow = render(FAIL_LIMITED_WORKFLOW)
        self.lock_parents = render(LOCK_PARENTS)
        self.last_id = render(LAST_ID)
        self.count_children = render(COUNT_CHILDREN)
        self.add_deps = render(ADD_DEPS)
        self.delete_deps = render(DELETE_DEPS)
        self.waiting_children = render(WAITING_CHILDREN)
        self.set_slots = render(SET_SLOTS)
        self.cancel_children = render(CANCEL_CHILDREN)
        self.parents = render(PARENTS)
        self.lock_dead = render(LOCK_DEAD)
        self.trim_dead = render(TRIM_DEAD)
        self.renew = render(RENEW)
        self.renew_one = render(RENEW_ONE)
        self.release = render(RELEASE)
        self.start = render(START)
        self.any_expired = render(ANY_EXPIRED)
        self.expired = render(EXPIRED)
        self.get = render(GET)
        self.lists = {
            JobState.PENDING: render(LIST_PENDING),
            JobState.RUNNING: render(LIST_RUNNING),
            JobState.DEAD: render(LIST_DEAD),
            JobState.COMPLETED: render(LIST_COMPLETED),
            JobState.CANCELLED: render(LIST_CANCELLED),
            JobState.WAITING: render(LIST_WAITING),
        }
        self.revive = render(REVIVE)
        self.delete_dead = render(DELETE_DEAD)
        self.cancel = render(CANCEL)
        self.stops_requested = render(STOPS_REQUESTED)
        self.counts = render(COUNTS)
        self.due_scheduled = render(DUE_SCHEDULED)
        self.retrying = render(RETRYING)
        self.expired_completed = render(EXPIRED_COMPLETED)
        self.expired_cancelled = render(EXPIRED_CANCELLED)
        self.finished_per_minute = render(FINISHED_PER_MINUTE)
        self.serial = render(SERIAL)
        self.pages = {view: render(text) for view, text in PAGES.items()}
        self.pending = render(PENDING)
        self.live = render(LIVE)
        self.next_due = render(NEXT_DUE)
        self.take_slot = render(TAKE_SLOT)
        self.set_slot_job = render(SET_SLOT_JOB)
        self.schedules = render(SCHEDULES)
        self.pause_schedule = render(PAUSE_SCHEDULE)
        self.resume_schedule = render(RESUME_SCHEDULE)
        self.lock_schedule = render(LOCK_SCHEDULE)
        self.live_job = render(LIVE_JOB)
        self.limited_pick = render(LIMITED_PICK)
        self.lock_keys = render(LOCK_KEYS)
        self.key_use = render(KEY_USE)
        self.start_limited = render(START_LIMITED)
        self.releasable = render(RELEASABLE)
        self.release_held = render(RELEASE_HELD)
        self.has_limits = render(HAS_LIMITS)
        self.limits = render(LIMITS)
        self.declare_limit = render(DECLARE_LIMIT)
        self.running_per_key = render(RUNNING_PER_KEY)
        self.held_per_key = render(HELD_PER_KEY)
        self.put_process = render(PUT_PROCESS)
        self.add_outcomes = render(ADD_OUTCOMES)
        self.add_sample = render(ADD_SAMPLE)
        self.drop_old_activity = render(DROP_OLD_ACTIVITY)
        self.leave = render(LEAVE)
        self.processes = render(PROCESSES)
        self.outcomes = render(OUTCOMES)
        self.minute_outcomes = render(MINUTE_OUTCOMES)
        self.samples = render(SAMPLES)

    def render(self, template: str) -> bytes:
        """``template`` with this schema's names in its ``{x}`` fields."""
        from psycopg import sql

        return sql.SQL(template).format(**self._idents).as_bytes(None)
