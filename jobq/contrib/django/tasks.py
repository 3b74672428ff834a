"""A backend for Django's Tasks framework: ``django.tasks`` (Django 6+) or
its backport ``django_tasks`` (``pip install django-tasks``, Django 5.2)::

    TASKS = {"default": {"BACKEND": "jobq.contrib.django.tasks.JobqBackend"}}

``task.enqueue(...)`` adds a job to ``jobq.contrib.django.get_queue()``:
``JobRecord.task`` is the task's import path (``module.qualname``), the
payload ``{"args": [...], "kwargs": {...}}``, and ``task.priority`` and
``task.run_after`` are the job's priority and due time. Retries, backoff,
``KEEP_COMPLETED`` and the dead-letter list come from ``settings.JOBQ``.
The queue's workers (first request, ``manage.py jobq_worker``,
``run_pending()``) import the path and run it only if it is a Django
``Task``; they send ``task_started`` and ``task_finished``.

``TaskResult.id`` is the job's id as text. Inside ``transaction.atomic``
(with ``JOBQ["ON_COMMIT"]``, the default) the job is written when the
transaction commits: until then ``id`` is ``""`` and ``enqueued_at`` is
``None``; the commit fills them in and sends ``task_enqueued``, and a
rollback leaves them so, with no job.

Limits: the backend's ``task_class`` is ``JobqTask``, a Django ``Task``
with jobq's ``limits``: ``@task(limits=["smtp"])`` for every job of the
task, ``.using(limits=[f"account:{pk}"])`` for one call's (added to the
task's), each declared with ``get_queue().limit(...)`` in every process.

Statuses: pending READY, running RUNNING, completed SUCCESSFUL (kept only
with ``KEEP_COMPLETED``; else ``get_result`` raises
``TaskResultDoesNotExist`` once it succeeded), dead FAILED. ``get_result``
reads the store: ``supports_get_result`` is True for a file or database
store, False for the memory store (results of this process only).

This module imports the framework only when ``JobqBackend`` is asked for,
so a project without it still starts (the app imports every app's
``tasks`` module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobq.contrib.django._tasks_backend import JobqBackend as JobqBackend
    from jobq.contrib.django._tasks_backend import JobqTask as JobqTask
    from jobq.contrib.django._tasks_backend import NotADjangoTask as NotADjangoTask
    from jobq.contrib.django._tasks_backend import (
        ReturnValueNotJSON as ReturnValueNotJSON,
    )

__all__ = ["JobqBackend", "JobqTask", "NotADjangoTask", "ReturnValueNotJSON"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from jobq.contrib.django import _tasks_backend

        return getattr(_tasks_backend, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
