"""The old name of ``jobq.stores.helpers``: a store written against it keeps
importing the same helpers from here."""

from jobq.stores.helpers import (
    DATABASE_STATES,
    OneJobCalls,
    batch_size,
    database_page,
    positive_seconds,
    record_from_row,
)

__all__ = [
    "DATABASE_STATES",
    "OneJobCalls",
    "batch_size",
    "database_page",
    "positive_seconds",
    "record_from_row",
]
