"""The ``extra`` fields of every log record about a job.

Each record jobq logs about one job carries ``job_id``, ``task`` (``None``
for a plain handler's job) and ``attempt`` (``None`` where the code that
logs does not know it: a store recovering a claim or dropping a dead job) as
attributes of the ``LogRecord``, so a JSON formatter (python-json-logger,
structlog's stdlib bridge) shows them as fields, and a filter can pick one
job's lines, without parsing the message.
"""

from __future__ import annotations

from typing import Protocol


class Attempt(Protocol):
    """What ``claim_extra`` reads of a ``jobq.stores.base.Claim`` (a
    protocol: the stores import this module, so it imports none of them)."""

    @property
    def id(self) -> int: ...

    @property
    def task(self) -> str | None: ...

    @property
    def attempt(self) -> int: ...


def job_extra(
    job_id: int, task: str | None = None, attempt: int | None = None
) -> dict[str, object]:
    """The ``extra=`` of a log record about job ``job_id``."""
    return {"job_id": job_id, "task": task, "attempt": attempt}


def claim_extra(claim: Attempt) -> dict[str, object]:
    """The ``extra=`` of a log record about the attempt ``claim`` is for."""
    return job_extra(claim.id, claim.task, claim.attempt)
