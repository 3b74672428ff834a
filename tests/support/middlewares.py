"""Middleware the tests name by import path (``"middlewares.passthrough"``),
as the Flask and Django settings do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jobq


def passthrough(job: jobq.Job[Any], call_next: Callable[[], object]) -> object:
    """Calls the rest of the chain and returns what it returned."""
    return call_next()
