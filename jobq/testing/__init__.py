"""Testing support: the behavioural suite a store passes, and a clock moved
by hand.

``StoreContractTests`` holds the tests every store (memory, JSON file, SQLite,
PostgreSQL, or one of yours) passes; subclass it to run them on your store
(see ``jobq.testing.contract``). ``Clock`` is a wall clock a test moves with
``advance`` (``JobQueue(handler, clock=clock)``); it starts at ``T0``.

Needs pytest (``pip install 'jobq[testing]'``); ``import jobq`` never imports
this package.
"""

from __future__ import annotations

from jobq.extras import requires

with requires("testing", "jobq.testing", "pytest"):
    import pytest

from jobq.testing.clock import T0, Clock

# Failed asserts of the suite show the values compared, as in a test file.
pytest.register_assert_rewrite("jobq.testing.contract")

from jobq.testing.contract import StoreContractTests  # noqa: E402

__all__ = ["T0", "Clock", "StoreContractTests"]
