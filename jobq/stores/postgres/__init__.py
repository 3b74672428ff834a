"""The PostgreSQL store: one queue that processes on many hosts share."""

from jobq.stores.postgres.store import SCHEMA_VERSION, PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]
