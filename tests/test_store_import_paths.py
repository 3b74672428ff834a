"""The import paths of the stores that callers and stores of theirs may use,
kept when modules move (issue 22): each still names the same object."""

from __future__ import annotations

import jobq.stores
from jobq.stores import common, helpers


def test_every_name_in_jobq_stores_all_imports() -> None:
    for name in jobq.stores.__all__:
        assert getattr(jobq.stores, name) is not None


def test_the_json_store_imports_from_its_package() -> None:
    from jobq.stores.jsonfile import JsonFileStore

    assert JsonFileStore is jobq.stores.JsonFileStore


#: What ``jobq.stores.common`` defined before it became ``helpers``.
COMMON = [
    "DATABASE_STATES",
    "OneJobCalls",
    "batch_size",
    "database_page",
    "positive_seconds",
    "record_from_row",
]


def test_the_helpers_still_import_from_their_old_module() -> None:
    for name in COMMON:
        assert getattr(common, name) is getattr(helpers, name)
