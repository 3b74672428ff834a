"""The PostgreSQL store: one queue that processes on many hosts share.

Every change is one short transaction, most of them a single statement in
autocommit mode, on a connection borrowed from a pool and returned at once: no
lock, transaction or connection is held while a handler runs.

The modules, one job each:

- ``statements``: the SQL run on the jobs, and ``Statements``, which renders
  it for one schema;
- ``schema``: the tables, indexes and triggers, their version, creating and
  migrating them (``migrate_schema``), the privileges a store needs;
- ``conninfo``: connection strings: parsed, checked, shown without password;
- ``connections``: the driver, and ``Database``: direct connections, the
  pool's, psycopg's errors as ``StoreError``;
- ``wakeups``: LISTEN/NOTIFY: the ``Notifier`` and ``Listener`` threads;
- ``store``: ``PostgresStore``, the store protocol on top of them.

PgBouncer in transaction pooling mode: ``LISTEN`` does not work through it (a
session-level feature: notifications go to whichever server connection
listened). Pass ``listen=False`` (idle workers then poll, every
``poll_interval`` and at least every second) or point ``listen`` at a direct
connection string to PostgreSQL. Everything else works through it: claims,
advisory locks (transaction-scoped only) and all writes are single
transactions. Pass ``prepare=False`` unless PgBouncer >= 1.21 runs with
``max_prepared_statements`` set.

Nothing here imports psycopg until a store is built, and ``jobq.stores``
imports this package on first use, so ``import jobq`` needs nothing beyond the
standard library.
"""

from jobq.stores.postgres.schema import SCHEMA_VERSION
from jobq.stores.postgres.store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]
