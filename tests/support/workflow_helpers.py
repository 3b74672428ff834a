"""What the tests of the surfaces that show workflows share (the commands,
the dashboard, Prometheus): a queue whose store runs them, and one small
workflow in every shape a page or a command must show.

Deterministic, with no thread: the parents run in one ``run_pending()``
before the children are added, and nothing runs after that."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import jobq
from jobq.stores.base import capabilities_of

#: The payload of a step that fails (dead at once: ``Fatal``).
DIES = "dies"


def needs_workflows(queue: jobq.JobQueue[Any]) -> None:
    """Skip where ``queue``'s store does not run workflows (yet)."""
    if not capabilities_of(queue.store).workflows:
        pytest.skip(f"{type(queue.store).__name__} runs no workflows")


def step(job: jobq.Job[Any]) -> Any:
    """The handler: returns its payload, or dies for ``DIES``."""
    if job.payload == DIES:
        raise jobq.Fatal("the step failed")
    return job.payload


@dataclass(frozen=True)
class Workflow:
    """The ids of ``build``'s jobs."""

    dead: int  #: a parent that died
    done: int  #: a parent that completed (kept)
    child: int  #: waits on ``dead`` (after ``dead`` and ``done``)
    grandchild: int  #: waits on ``child``, after_failure="cancel"
    gone: int  #: a dead parent deleted: no longer stored
    orphan: int  #: pending, after ``gone`` with after_failure="run"


def build(queue: jobq.JobQueue[Any]) -> Workflow:
    """A workflow on ``queue`` (made with ``step`` as handler, and
    ``keep_completed``): two parents (one dead, one completed), their
    waiting child and grandchild, and a pending job whose parent is gone."""
    needs_workflows(queue)
    dead, done, gone = (queue.enqueue(payload).id for payload in (DIES, "ok", DIES))
    queue.run_pending()
    child = queue.enqueue("parse", after=[dead, done]).id
    grandchild = queue.enqueue("report", after=[child], after_failure="cancel").id
    orphan = queue.enqueue("clean up", after=[gone], after_failure="run").id
    assert queue.delete_dead(gone)
    return Workflow(dead, done, child, grandchild, gone, orphan)
