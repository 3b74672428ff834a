"""The SQLite store: one database file shared by many processes on one host.

Every change is one short ``BEGIN IMMEDIATE`` transaction on a WAL database:
it returns only after it committed, so it survives a crash of the process
(``synchronous="FULL"`` also survives an OS crash or power loss). No lock or
transaction is held while a handler runs, so any number of threads and
processes can claim from one file and a due job goes to exactly one of them.

The modules, one job each:

- ``statements``: the SQL run on the jobs, fixed strings with ``?`` parameters
  (and the lease renewal's, sized by how many claims it renews);
- ``schema``: the tables, indexes and triggers, their version, and
  ``migrate_schema``, which makes a file ready (WAL mode, schema created or
  checked);
- ``connections``: the file and its connections (``Database``: connect,
  transactions, errors as ``StoreError``), and the fork guard;
- ``doorbell``: wake-up datagrams between the processes of one database: a
  Unix datagram socket per open store in ``<database>-wake/``, rung after a
  commit that makes jobs claimable;
- ``wakeups``: the watcher thread that waits on the doorbell and wakes idle
  workers and joiners (or, without one, polls ``data_version``), and
  checkpoints the WAL in the background;
- ``store``: ``SqliteStore``, the store protocol on top of them, and
  ``path_from_url``.

Nothing here is imported by ``import jobq``: ``jobq.stores`` imports this
package on first use, so an app that never uses SQLite never loads ``sqlite3``.
"""

from jobq.stores.sqlite.schema import SCHEMA_VERSION
from jobq.stores.sqlite.store import SqliteStore, path_from_url

__all__ = ["SCHEMA_VERSION", "SqliteStore", "path_from_url"]
