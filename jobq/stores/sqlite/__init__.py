"""The SQLite store: one database file shared by many processes on one host."""

from jobq.stores.sqlite.store import SCHEMA_VERSION, SqliteStore, path_from_url

__all__ = ["SCHEMA_VERSION", "SqliteStore", "path_from_url"]
