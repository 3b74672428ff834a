"""Stores: where jobs live. ``store_from`` turns the ``store=`` argument into one."""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from jobq.stores.base import (
    STORE_MEMBERS,
    Claim,
    NewJob,
    Signal,
    Store,
    StoreStats,
    missing_members,
)
from jobq.stores.jsonfile import JsonFileStore
from jobq.stores.memory import MemoryStore

if TYPE_CHECKING:
    from jobq.stores.postgres import PostgresStore
    from jobq.stores.sqlite import SqliteStore

# The database stores are imported on first use, so that ``import jobq`` does
# not pay for modules (and ``sqlite3``) an app that keeps a JSON file never uses.
_LAZY = {"PostgresStore": "jobq.stores.postgres", "SqliteStore": "jobq.stores.sqlite"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Claim",
    "JsonFileStore",
    "MemoryStore",
    "NewJob",
    "PostgresStore",
    "Signal",
    "SqliteStore",
    "Store",
    "StoreStats",
    "store_from",
]


def store_from(spec: Any) -> Store:
    """The store named by ``spec``; opens nothing.

    ``None`` is memory; a path is the JSON file; ``sqlite:///relative.db`` and
    ``sqlite:////absolute.db`` follow SQLAlchemy's convention;
    ``postgresql://`` (or ``postgres://``) is the PostgreSQL store; a ``Store``
    object is used as it is. A malformed URL raises ``ValueError``.
    """
    if spec is None:
        return MemoryStore()
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if isinstance(spec, str):
        if not spec.strip():
            raise ValueError("store must not be an empty string")
        if spec[:7].lower() == "sqlite:":
            from jobq.stores.sqlite import SqliteStore, path_from_url

            return SqliteStore(path_from_url(spec))
        if spec.lower().startswith(("postgresql:", "postgres:")):
            from jobq.stores.postgres import PostgresStore

            return PostgresStore(spec)
        if "://" in spec:
            scheme = spec.split(":", 1)[0].lower()
            raise ValueError(
                f"unsupported store URL scheme {scheme!r} in {spec!r}: use a file "
                "path for the JSON store, or a Store object"
            )
        return JsonFileStore(spec)
    missing = missing_members(spec)
    if not missing:
        return spec  # type: ignore[no-any-return]  # it has every member of Store
    if len(missing) < len(STORE_MEMBERS):
        raise TypeError(
            f"{type(spec).__name__} is not a complete store: it lacks "
            f"{', '.join(missing)} (see jobq.stores.base.Store, and "
            "jobq.testing.StoreContractTests to check a store)"
        )
    raise TypeError(f"store must be None, a path, a store URL or a Store, not {spec!r}")
