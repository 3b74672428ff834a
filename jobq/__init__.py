"""jobq: an in-process job queue with retries, backoff and dead letters.

Work that must not block a request and may fail (webhooks, e-mails,
thumbnails, imports) is enqueued, run by worker threads, retried with
exponential backoff, and parked in a dead-letter list when it keeps failing.
"""

from __future__ import annotations

import logging

from jobq._worker.limits import cancel_requested
from jobq.errors import (
    ChildDied,
    Fatal,
    JobCancelled,
    JobqError,
    JobTimeout,
    MissingExtra,
    OutcomeUnknown,
    QueueClosed,
    QueueFull,
    Retry,
    StoreError,
    StoreLocked,
)
from jobq.events import Event, EventKind
from jobq.middleware import Middleware
from jobq.options import JobOptions, PeriodicOptions, SendOptions, TaskOptions
from jobq.producers import EnqueueHook, Sending
from jobq.queue import JobQueue
from jobq.retry import RetryPolicy
from jobq.tasks import Task, task_name
from jobq.types import (
    AttemptError,
    Cancellation,
    Enqueued,
    FinishedMinute,
    Job,
    JobRecord,
    JobState,
    Limit,
    LimitUsage,
    Schedule,
    Stats,
    StepJob,
    WorkerStats,
)

__all__ = [
    "AttemptError",
    "Cancellation",
    "ChildDied",
    "EnqueueHook",
    "Enqueued",
    "Event",
    "EventKind",
    "Fatal",
    "FinishedMinute",
    "Job",
    "JobCancelled",
    "JobOptions",
    "JobQueue",
    "JobRecord",
    "JobState",
    "JobTimeout",
    "JobqError",
    "Limit",
    "LimitUsage",
    "Middleware",
    "MissingExtra",
    "OutcomeUnknown",
    "PeriodicOptions",
    "QueueClosed",
    "QueueFull",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "SendOptions",
    "Sending",
    "Stats",
    "StepJob",
    "StoreError",
    "StoreLocked",
    "Task",
    "TaskOptions",
    "WorkerStats",
    "cancel_requested",
    "task_name",
]

__version__ = "0.1.0"

logging.getLogger("jobq").addHandler(logging.NullHandler())
