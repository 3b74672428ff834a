"""The PostgreSQL server the tests use (``JOBQ_TEST_POSTGRES``): each test
session makes a fresh schema in its database (``conftest.postgres_schema``)."""

from __future__ import annotations

import os

POSTGRES_URL = os.environ.get(
    "JOBQ_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
