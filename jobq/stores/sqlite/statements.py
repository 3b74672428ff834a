"""The SQL the SQLite store runs on the jobs (the schema is in ``schema``).

Every statement is a fixed string taking values as ``?`` parameters (the
lease renewal's text depends on how many claims it renews, nothing else);
nothing is built from payloads, keys or other values.
"""

from __future__ import annotations

from jobq.types import JobState

# -- the jobs ------------------------------------------------------------------------

# A stopping job (``cancel_at`` set) holds no key: ``jobq_live_keys``.
HELD_KEY = """SELECT id FROM jobq_jobs
    WHERE key = ? AND state IN ('scheduled', 'ready', 'running', 'held', 'waiting')
    AND cancel_at IS NULL"""
INSERT_ROW = """INSERT INTO jobq_jobs
    (state, payload, key, priority, run_at, created_at, max_attempts, task,
     timeout, meta, limits)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
INSERT = INSERT_ROW + " RETURNING id"
#: A job added ``after=`` parents: waiting (``waiting_on`` > 0), pending, or
#: cancelled at once by a parent that failed.
INSERT_CHILD = """INSERT INTO jobq_jobs
    (state, payload, key, priority, run_at, created_at, max_attempts, task,
     timeout, meta, limits, after_failure, waiting_on, cancel_at, cancel_by,
     expires_at)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"""

# -- periodic jobs' schedules -----------------------------------------------------

_SCHEDULE_COLUMNS = (
    "name, expression, last_slot, last_job_id, paused_at, paused_by, resumed_at"
)
GET_SCHEDULE = f"SELECT {_SCHEDULE_COLUMNS} FROM jobq_schedules WHERE name = ?"  # noqa: S608
#: A schedule's whole state (``SlotState``), as the write computed it.
PUT_SCHEDULE = f"""INSERT INTO jobq_schedules ({_SCHEDULE_COLUMNS})
    VALUES (?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (name) DO UPDATE SET expression = excluded.expression,
        last_slot = excluded.last_slot, last_job_id = excluded.last_job_id,
        paused_at = excluded.paused_at, paused_by = excluded.paused_by,
        resumed_at = excluded.resumed_at"""  # noqa: S608
SCHEDULES = f"SELECT {_SCHEDULE_COLUMNS} FROM jobq_schedules ORDER BY name"  # noqa: S608
LIVE_JOB = """SELECT 1 FROM jobq_jobs
    WHERE id = ? AND state IN ('scheduled', 'ready', 'running', 'held', 'waiting')"""

# Cheap read first, so idle workers never take the write lock for nothing.
ANY_DUE = """SELECT EXISTS (SELECT 1 FROM jobq_jobs WHERE state = 'ready')
    OR EXISTS (SELECT 1 FROM jobq_jobs WHERE state = 'scheduled' AND run_at <= ?)"""
#: ``ANY_DUE`` where limits are in use: also whether a key may release held
#: jobs (``READY_KEYS``), a probe of ``jobq_limit_ready``.
ANY_DUE_OR_READY = """SELECT EXISTS (SELECT 1 FROM jobq_jobs WHERE state = 'ready')
    OR EXISTS (SELECT 1 FROM jobq_jobs WHERE state = 'scheduled' AND run_at <= ?),
    EXISTS (SELECT 1 FROM jobq_limit_keys WHERE held > 0 AND ready_at <= ?)"""
#: Whether limits are in use in this file: declared by some process.
LIMITS_DECLARED = "SELECT EXISTS (SELECT 1 FROM jobq_limits)"
PROMOTE = (
    "UPDATE jobq_jobs SET state = 'ready' WHERE state = 'scheduled' AND run_at <= ?"
)
# A job under limits keeps its attempt times until its limits admit it
# (``ADMIT``): one they hold back never started.
CLAIM = """UPDATE jobq_jobs SET state = 'running', token = token + 1,
        started_at = iif(limits IS NULL, ?, started_at),
        finished_at = iif(limits IS NULL, NULL, finished_at),
        lease_until = ?, owner_host = ?, owner_pid = ?, owner_nonce = ?
    WHERE id IN (SELECT id FROM jobq_jobs WHERE state = 'ready'
                 ORDER BY priority DESC, run_at, id LIMIT ?)
    RETURNING id, token, payload, attempts, max_attempts, key, task,
        -priority, run_at, timeout, meta, limits, after_failure"""
# A stopping job never started, so it ends cancelled, its attempts unchanged.
RELEASE = """UPDATE jobq_jobs SET started_at = NULL,
        state = CASE WHEN cancel_at IS NULL THEN 'ready' ELSE 'cancelled' END
    WHERE id = ? AND state = 'running' AND token = ?
    RETURNING cancel_at IS NOT NULL, children"""

EXPIRE_COMPLETED = "DELETE FROM jobq_jobs WHERE state = 'completed' AND expires_at <= ?"
EXPIRE_CANCELLED = "DELETE FROM jobq_jobs WHERE state = 'cancelled' AND expires_at <= ?"
# A claim ends in one of two statements: first for a job without children
# (nearly all: no RETURNING, which costs a finish some 20 %), then, if that
# ended nothing, for one with children, whose waiting children are then
# told (see "Workflows"); a claim no longer current is ended by neither.
DELETE_CLAIMED = """DELETE FROM jobq_jobs WHERE id = ? AND state = 'running'
    AND token = ? AND children = 0"""
DELETE_PARENT = "DELETE FROM jobq_jobs WHERE id = ? AND state = 'running' AND token = ?"
# A stopping job whose handler returned completes: the request is dropped.
COMPLETE = """UPDATE jobq_jobs SET state = 'completed', result = ?, expires_at = ?,
        finished_at = ?, cancel_at = NULL, cancel_by = NULL, cancel_attempt = NULL
    WHERE id = ? AND state = 'running' AND token = ? AND children = 0"""
COMPLETE_PARENT = COMPLETE.replace(" AND children = 0", "")
CLAIMED = """SELECT attempts, errors, cancel_at IS NOT NULL, children FROM jobq_jobs
    WHERE id = ? AND state = 'running' AND token = ?"""
RETRY = """UPDATE jobq_jobs SET state = ?, run_at = ?, attempts = ?, last_error = ?,
    errors = ?, finished_at = ? WHERE id = ?"""
BURY = """UPDATE jobq_jobs SET state = 'dead', attempts = ?, last_error = ?, errors = ?,
        finished_at = ?,
        buried = (SELECT coalesce(max(buried), 0) + 1 FROM jobq_jobs
                  WHERE state = 'dead')
    WHERE id = ?"""
# A stopping job's failed attempt: kept until the ``expires_at`` of its cancel.
END_CANCELLED = """UPDATE jobq_jobs SET state = 'cancelled', attempts = ?,
    last_error = ?, errors = ?, finished_at = ? WHERE id = ?"""
DEAD_COUNT = "SELECT n FROM jobq_counts WHERE state = 'dead'"
PENDING_COUNT = """SELECT sum(n) FROM jobq_counts
    WHERE state IN ('scheduled', 'ready', 'held')"""
LIVE_COUNT = """SELECT sum(n) FROM jobq_counts
    WHERE state IN ('scheduled', 'ready', 'running', 'held')"""
OLDEST_DEAD = """SELECT id, last_error, children FROM jobq_jobs WHERE state = 'dead'
    ORDER BY buried LIMIT ?"""
DELETE = "DELETE FROM jobq_jobs WHERE id = ?"


def renew(claims: int) -> str:
    """The statement that renews ``claims`` leases at once: the new
    ``lease_until``, then an id and a token per claim. A join on a VALUES
    list, so each claim is one primary-key lookup however many jobs run (an
    ``(id, token) IN (VALUES ...)`` scans every running job instead). The
    text depends only on the count; the queue renews the same few counts
    again and again, which ``sqlite3``'s statement cache keeps prepared."""
    pairs = ", ".join(["(?, ?)"] * claims)  # placeholders only, never values
    return f"""UPDATE jobq_jobs SET lease_until = ?
    FROM (VALUES {pairs}) AS claim
    WHERE jobq_jobs.id = claim.column1 AND jobq_jobs.token = claim.column2
      AND jobq_jobs.state = 'running'"""  # noqa: S608


def stops(claims: int) -> str:
    """The statement that reads which of ``claims`` claims (an id and a
    token each) are stopping: one primary-key lookup each, as ``renew``."""
    pairs = ", ".join(["(?, ?)"] * claims)  # placeholders only, never values
    return f"""SELECT jobq_jobs.id FROM (VALUES {pairs}) AS claim
    JOIN jobq_jobs ON jobq_jobs.id = claim.column1
    WHERE jobq_jobs.token = claim.column2 AND jobq_jobs.state = 'running'
      AND jobq_jobs.cancel_at IS NOT NULL"""  # noqa: S608


#: Claims per ``renew`` statement: 2 variables each, plus one, stay within
#: 999, the lowest limit SQLite builds have had (``SQLITE_MAX_VARIABLE_NUMBER``
#: before 3.32); more claims take one more statement in the same transaction.
RENEW_CHUNK = 499

ANY_EXPIRED = """SELECT EXISTS (SELECT 1 FROM jobq_jobs
    WHERE state = 'running' AND lease_until <= ?)"""
OWNERS = """SELECT DISTINCT owner_pid, owner_nonce FROM jobq_jobs
    WHERE state = 'running' AND owner_host = ?"""
_RECOVERED = """id, attempts, max_attempts, errors, cancel_at IS NOT NULL,
    limits IS NOT NULL, children"""
EXPIRED = f"""SELECT {_RECOVERED} FROM jobq_jobs
    WHERE state = 'running' AND lease_until <= ?"""  # noqa: S608
OWNED = f"""SELECT {_RECOVERED} FROM jobq_jobs
    WHERE state = 'running' AND owner_host = ? AND owner_pid = ? AND owner_nonce = ?"""  # noqa: S608

_COLUMNS = """id, state, payload, attempts, run_at, created_at, last_error, key,
    priority, result, task, errors, max_attempts, started_at, finished_at,
    timeout, meta, expires_at, cancel_at, cancel_by, cancel_attempt, limits,
    held_by, after_failure, children"""
#: Where a record's columns (``_COLUMNS``) hold ``expires_at``, and the
#: cancellation's (at, by, attempt), the (limits, held_by) and the
#: (after_failure, children) start; how many there are.
EXPIRES_AT, CANCELS_AT, LIMITS_AT, FAMILY_AT, WIDTH = 17, 18, 21, 23, 25
RECORD = f"SELECT {_COLUMNS} FROM jobq_jobs"  # noqa: S608
GET = RECORD + " WHERE id = ?"
LIST_DEAD = RECORD + " WHERE state = 'dead' ORDER BY buried LIMIT ?"
LIST_PENDING = (
    RECORD + " WHERE state IN ('scheduled', 'ready', 'held')"
    " ORDER BY run_at, priority DESC, id LIMIT ?"
)
LIST_RUNNING = (
    RECORD + " WHERE state = 'running' ORDER BY run_at, priority DESC, id LIMIT ?"
)
LIST_COMPLETED = (
    RECORD + " WHERE state = 'completed' ORDER BY run_at, priority DESC, id LIMIT ?"
)
LIST_CANCELLED = (
    RECORD + " WHERE state = 'cancelled' ORDER BY run_at, priority DESC, id LIMIT ?"
)
#: The waiting jobs are among the children: each has a row at position 0 in
#: ``jobq_deps``, read in its key's order. No index of the jobs table of its
#: own: one costs every job's insert and delete (0.6 % of a no-op job).
_CHILDREN = "SELECT child FROM jobq_deps WHERE position = 0"
LIST_WAITING = (
    RECORD + f" WHERE id IN ({_CHILDREN}) AND waiting_on IS NOT NULL"
    " ORDER BY id LIMIT ?"
)

DEAD_KEY = "SELECT key FROM jobq_jobs WHERE id = ? AND state = 'dead'"
REVIVE = """UPDATE jobq_jobs SET state = 'ready', attempts = 0, run_at = ?,
    buried = NULL WHERE id = ?"""
DELETE_DEAD = """DELETE FROM jobq_jobs WHERE id = ? AND state = 'dead'
    RETURNING children"""
CANCEL_STATE = """SELECT state, cancel_at IS NOT NULL, limits, held_by, children
    FROM jobq_jobs WHERE id = ?"""
CANCEL_PENDING = """UPDATE jobq_jobs SET state = 'cancelled', cancel_at = ?,
    cancel_by = ?, expires_at = ?, held_by = NULL, waiting_on = NULL WHERE id = ?"""
STOP_RUNNING = """UPDATE jobq_jobs SET cancel_at = ?, cancel_by = ?,
    cancel_attempt = attempts + 1, expires_at = ? WHERE id = ?"""
COUNTS = "SELECT state, n FROM jobq_counts"
# A key holding jobs may release one at its ``ready_at``.
NEXT_DUE = """SELECT
    (SELECT run_at FROM jobq_jobs WHERE state = 'ready'
     ORDER BY priority DESC, run_at, id LIMIT 1),
    (SELECT run_at FROM jobq_jobs WHERE state = 'scheduled' ORDER BY run_at LIMIT 1),
    (SELECT ready_at FROM jobq_limit_keys WHERE held > 0 AND ready_at IS NOT NULL
     ORDER BY ready_at LIMIT 1)"""

#: The statement that lists the jobs in each state (``list_jobs``).
LISTS = {
    JobState.PENDING: LIST_PENDING,
    JobState.RUNNING: LIST_RUNNING,
    JobState.DEAD: LIST_DEAD,
    JobState.COMPLETED: LIST_COMPLETED,
    JobState.CANCELLED: LIST_CANCELLED,
    JobState.WAITING: LIST_WAITING,
}

# -- pragmas -----------------------------------------------------------------------

DATA_VERSION = "PRAGMA data_version"  # changes when another connection commits
#: The watcher's checkpoint (PASSIVE: it never waits for, nor blocks, anyone).
CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
#: Pages in the WAL at which a commit checkpoints by itself: only when no
#: watcher did (SQLite's default is 1,000, reached in a fraction of a second).
AUTOCHECKPOINT = "PRAGMA wal_autocheckpoint = 10000"

#: The fixed pragma for each ``synchronous`` option.
SYNCHRONOUS = {
    "NORMAL": "PRAGMA synchronous = NORMAL",  # WAL: survives a process crash
    "FULL": "PRAGMA synchronous = FULL",  # also an OS crash or power loss
}

# -- pages of a list (``page_jobs``): one index range each, filters on top -----
# Each statement selects a job's record and then its cursor (its sort key);
# the first page starts from a cursor before every job (``FIRST_CURSORS``).

_FILTERS = """ AND (:task IS NULL OR task = :task) AND (:key IS NULL OR key = :key)
    AND (:error IS NULL OR instr(last_error, :error) > 0)"""
#: Due jobs in run order: the rest of the cursor's priority, then the lower
#: priorities (two ranges of ``jobq_ready``), and scheduled jobs already due
#: that no claim moved to ready yet (few: every claim moves them).
_PAGE_DUE = f"""SELECT * FROM (
    SELECT * FROM (SELECT {_COLUMNS}, priority, run_at, id
        FROM jobq_jobs WHERE state = 'ready' AND priority = :c0
        AND (run_at, id) > (:c1, :c2){_FILTERS} ORDER BY run_at, id LIMIT :limit)
    UNION ALL
    SELECT * FROM (SELECT {_COLUMNS}, priority, run_at, id
        FROM jobq_jobs WHERE state = 'ready' AND priority < :c0{_FILTERS}
        ORDER BY priority DESC, run_at, id LIMIT :limit)
    UNION ALL
    SELECT * FROM (SELECT {_COLUMNS}, priority, run_at, id
        FROM jobq_jobs WHERE state = 'scheduled' AND run_at <= :now
        AND (priority < :c0 OR (priority = :c0 AND (run_at, id) > (:c1, :c2))){_FILTERS}
        ORDER BY priority DESC, run_at, id LIMIT :limit)
    UNION ALL
    SELECT * FROM (SELECT {_COLUMNS}, priority, run_at, id
        FROM jobq_jobs INDEXED BY jobq_held_order WHERE held_by IS NOT NULL
        AND (priority < :c0 OR (priority = :c0 AND (run_at, id) > (:c1, :c2))){_FILTERS}
        ORDER BY priority DESC, run_at, id LIMIT :limit)
    ) ORDER BY {WIDTH + 1} DESC, {WIDTH + 2}, {WIDTH + 3} LIMIT :limit"""  # noqa: S608


def _page_kept(state: str) -> str:
    """The page statement of kept jobs in ``state`` (a fixed name), newest
    expiry first: a range of its index (``jobq_completed``, ...)."""
    return f"""SELECT {_COLUMNS}, expires_at, id FROM jobq_jobs
        WHERE state = '{state}' AND expires_at > :now
        AND (expires_at, id) < (:c0, :c1){_FILTERS}
        ORDER BY expires_at DESC, id DESC LIMIT :limit"""  # noqa: S608


#: Scheduled jobs not due yet, earliest first: after a failed attempt
#: (retrying; see ``jobq.stores.pages``), a range of ``jobq_retrying``; or
#: never attempted (delayed), a range of ``jobq_scheduled`` past the
#: retrying jobs due before the page's.
_PAGE_SCHEDULED = f"""SELECT {_COLUMNS}, run_at, id FROM jobq_jobs
    WHERE state = 'scheduled' AND run_at > :now AND (run_at, id) > (:c0, :c1)
    AND attempts {{}} 0{_FILTERS} ORDER BY run_at, id LIMIT :limit"""  # noqa: S608

PAGES = {
    "due": _PAGE_DUE,
    "delayed": _PAGE_SCHEDULED.format("="),
    "retrying": _PAGE_SCHEDULED.format(">"),
    "running": f"""SELECT {_COLUMNS}, id FROM jobq_jobs INDEXED BY jobq_running
        WHERE state = 'running' AND id > :c0{_FILTERS} ORDER BY id LIMIT :limit""",  # noqa: S608
    "dead": f"""SELECT {_COLUMNS}, buried FROM jobq_jobs
        WHERE state = 'dead' AND buried < :c0{_FILTERS}
        ORDER BY buried DESC LIMIT :limit""",  # noqa: S608
    "waiting": f"""SELECT {_COLUMNS}, id FROM jobq_jobs
        WHERE id IN ({_CHILDREN} AND child > :c0) AND waiting_on IS NOT NULL
        {_FILTERS} ORDER BY id LIMIT :limit""",  # noqa: S608
    "completed": _page_kept("completed"),
    "cancelled": _page_kept("cancelled"),
}
#: Due jobs that no claim moved yet (scheduled and due, and held ones) are
#: listed with the due ones: held jobs in ``jobq_held_order``.
#: Scheduled jobs due at ``now`` that no claim moved yet: the delayed count is
#: the scheduled count less these (a range of ``jobq_scheduled``; few).
DUE_SCHEDULED = """SELECT count(*) FROM jobq_jobs
    WHERE state = 'scheduled' AND run_at <= ?"""
#: Delayed jobs after a failed attempt, not due at ``now`` (the retrying
#: count): a range of ``jobq_retrying``, about as many rows as it counts.
RETRYING = """SELECT count(*) FROM jobq_jobs
    WHERE state = 'scheduled' AND attempts > 0 AND run_at > ?"""
#: Completed jobs expired that no finish purged yet: the kept count is the
#: completed count less these (a range of ``jobq_completed``; few while
#: workers finish jobs, since each finish purges them).
EXPIRED_COMPLETED = """SELECT count(*) FROM jobq_jobs
    WHERE state = 'completed' AND expires_at <= ?"""
EXPIRED_CANCELLED = """SELECT count(*) FROM jobq_jobs
    WHERE state = 'cancelled' AND expires_at <= ?"""
#: Jobs finished per minute since a time (``finished_per_minute``): for each
#: minute up to now's, two counts over its range of ``jobq_finished`` (which
#: covers every column read). Three times faster than one GROUP BY over the
#: whole range, which sorts every row into a temporary b-tree first.
FINISHED_PER_MINUTE = """WITH RECURSIVE minutes(start) AS (SELECT :since
        UNION ALL SELECT start + 60 FROM minutes WHERE start + 60 <= :now)
    SELECT start,
        (SELECT count(*) FROM jobq_jobs INDEXED BY jobq_finished
            WHERE state IN ('completed', 'dead') AND finished_at >= start
            AND finished_at < start + 60 AND state = 'completed'
            AND expires_at > :now),
        (SELECT count(*) FROM jobq_jobs INDEXED BY jobq_finished
            WHERE state IN ('completed', 'dead') AND finished_at >= start
            AND finished_at < start + 60 AND state = 'dead')
    FROM minutes ORDER BY start"""

# -- limits (see "Limits" in ``jobq.stores.base``; the tables in ``schema``) -----

GET_LIMIT = """SELECT name, concurrency, rate, per, burst FROM jobq_limits
    WHERE name = ?"""
PUT_LIMIT = """INSERT INTO jobq_limits (name, concurrency, rate, per, burst)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (name) DO UPDATE SET concurrency = excluded.concurrency,
        rate = excluded.rate, per = excluded.per, burst = excluded.burst"""
LIMITS = "SELECT name, concurrency, rate, per, burst FROM jobq_limits ORDER BY name"
#: Attempts running and jobs held, per concrete key (``limit_usage``).
SLOTS_PER_KEY = "SELECT name, count(*) FROM jobq_slots GROUP BY name"
HELD_PER_KEY = "SELECT name, held FROM jobq_limit_keys WHERE held > 0"
#: The keys that may release held jobs now: a range of ``jobq_limit_ready``.
READY_KEYS = """SELECT name, tat FROM jobq_limit_keys
    WHERE held > 0 AND ready_at <= ?"""
READY_KEY_EXISTS = """SELECT EXISTS (SELECT 1 FROM jobq_limit_keys
    WHERE held > 0 AND ready_at <= ?)"""
KEY_STATE = """SELECT tat, held,
    (SELECT count(*) FROM jobq_slots WHERE jobq_slots.name = jobq_limit_keys.name)
    FROM jobq_limit_keys WHERE name = ?"""
NEW_KEY = "INSERT OR IGNORE INTO jobq_limit_keys (name) VALUES (?)"
SET_KEY = "UPDATE jobq_limit_keys SET tat = ?, ready_at = ? WHERE name = ?"
SET_READY = "UPDATE jobq_limit_keys SET ready_at = ? WHERE name = ?"
TAKE_SLOT = "INSERT INTO jobq_slots (name, job_id) VALUES (?, ?)"
#: A claimed job its limits admit starts now (``CLAIM`` left its times).
ADMIT = "UPDATE jobq_jobs SET started_at = ?, finished_at = NULL WHERE id = ?"
#: A claimed job a limit holds back: held by that key, as before the claim.
HOLD = """UPDATE jobq_jobs SET state = 'held', held_by = ?, lease_until = NULL,
    owner_host = NULL, owner_pid = NULL, owner_nonce = NULL WHERE id = ?"""
#: A key holds one more job, or ``?`` fewer.
HELD_MORE = "UPDATE jobq_limit_keys SET held = held + 1 WHERE name = ?"
HELD_FEWER = "UPDATE jobq_limit_keys SET held = held - ? WHERE name = ?"
#: A limited claim ended: its keys may release a held job (``ready_at`` 0),
#: then its slots are gone (``limiting.free_slots``).
SLOTS_READY = """UPDATE jobq_limit_keys SET ready_at = 0 WHERE held > 0
    AND name IN (SELECT name FROM jobq_slots WHERE job_id = ?)"""
FREE_SLOTS = "DELETE FROM jobq_slots WHERE job_id = ?"
#: A released job cancelled before a claim took it gives its keys' place back.
KEYS_READY = """UPDATE jobq_limit_keys SET ready_at = 0 WHERE held > 0
    AND name IN (SELECT value FROM json_each(?))"""
#: A key's first held jobs, in run order, due again: a range of ``jobq_held``.
RELEASE_HELD = """UPDATE jobq_jobs SET state = 'ready', held_by = NULL
    WHERE id IN (SELECT id FROM jobq_jobs WHERE state = 'held' AND held_by = ?
                 ORDER BY priority DESC, run_at, id LIMIT ?)"""

# -- workflows (see "Workflows" in ``jobq.stores.base``; ``jobq_deps`` in ``schema``) --

#: The highest id ever given: a parent id above it was never given.
LAST_ID = "SELECT seq FROM sqlite_sequence WHERE name = 'jobq_jobs'"
#: A parent named in ``after``: its state, result and whether it is gone
#: for callers (a kept job expired).
PARENT = """SELECT state, result, expires_at IS NOT NULL AND expires_at <= ?
    AND state IN ('completed', 'cancelled') FROM jobq_jobs WHERE id = ?"""
ADD_CHILD = "UPDATE jobq_jobs SET children = children + 1 WHERE id = ?"
INSERT_DEP = """INSERT INTO jobq_deps (child, position, parent, outcome, result)
    VALUES (?, ?, ?, ?, ?)"""
#: A parent's children still waiting for it: a range of ``jobq_deps_parent``.
WAITING_CHILDREN = """SELECT jobq_deps.child, jobq_deps.position,
        jobq_jobs.after_failure
    FROM jobq_deps JOIN jobq_jobs ON jobq_jobs.id = jobq_deps.child
    WHERE jobq_deps.parent = ? AND jobq_deps.outcome IS NULL
      AND jobq_jobs.state = 'waiting'
    ORDER BY jobq_deps.child"""
SET_SLOT = """UPDATE jobq_deps SET outcome = ?, result = ?
    WHERE child = ? AND position = ? AND outcome IS NULL"""
#: One slot less to wait for; the last one releases the job, due at its
#: ``run_at`` or now if later (the right-hand sides read the old row).
SLOT_SET = """UPDATE jobq_jobs SET waiting_on = nullif(waiting_on - 1, 0),
        state = iif(waiting_on > 1, 'waiting', iif(run_at <= :now, 'ready',
                                                   'scheduled')),
        run_at = iif(waiting_on > 1, run_at, max(run_at, :now))
    WHERE id = :id AND state = 'waiting' RETURNING state, task"""
#: A waiting job a parent's end cancelled; returns its count of children.
CANCEL_CHILD = """UPDATE jobq_jobs SET state = 'cancelled', cancel_at = ?,
        cancel_by = ?, expires_at = ?, waiting_on = NULL
    WHERE id = ? AND state = 'waiting' RETURNING children"""
#: A claimed child's parents, in ``after`` order, with their outcomes.
PARENTS = """SELECT parent, outcome, result FROM jobq_deps WHERE child = ?
    ORDER BY position"""
#: A job's children, by id: a range of ``jobq_deps_parent``.
CHILDREN = "SELECT child FROM jobq_deps WHERE parent = ? ORDER BY child"
