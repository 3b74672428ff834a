"""The ``JOBQ`` setting: one dict, read when the queue is first built.

Checked by the system checks (``jobq.E001`` ... ``jobq.E005``) and again when
the queue is built (``ImproperlyConfigured``), with the same messages.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from jobq.stores import store_from

SETTING = "JOBQ"

#: ``JOBQ`` keys that become ``JobQueue`` keyword arguments, by key.
QUEUE_OPTIONS = {
    "MAX_ATTEMPTS": "max_attempts",
    "BASE_DELAY": "base_delay",
    "MAX_DELAY": "max_delay",
    "JITTER": "jitter",
    "DEAD_LETTER_LIMIT": "dead_letter_limit",
    "KEEP_COMPLETED": "keep_completed",
    "MAX_PENDING": "max_pending",
    "MAX_PAYLOAD_BYTES": "max_payload_bytes",
    "WARN_RUNNING_AFTER": "warn_running_after",
    "IMMEDIATE": "immediate",
}

#: Keys of the integration itself, with their defaults.
OWN_DEFAULTS: dict[str, Any] = {
    "STORE": None,
    "WORKERS": 4,
    "HANDLER": None,
    "AUTOSTART": True,
    "ON_COMMIT": True,
    "DATABASE": "default",
}

KNOWN_KEYS = frozenset(OWN_DEFAULTS) | frozenset(QUEUE_OPTIONS)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with ``JOBQ``: a check id, a message and a hint."""

    id: str
    msg: str
    hint: str | None = None


@dataclass
class Config:
    """``JOBQ`` read and checked."""

    store: Any = None
    workers: int = 4
    handler: str | None = None
    autostart: bool = True
    on_commit: bool = True
    database: str = "default"
    queue_options: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)


def read() -> Config:
    """``settings.JOBQ`` (default ``{}``) as a ``Config``; its ``problems``
    list what is wrong (empty when all is well)."""
    raw = getattr(settings, SETTING, {})
    config = Config()
    if not isinstance(raw, dict):
        config.problems.append(
            Problem(
                "jobq.E001",
                f"settings.JOBQ must be a dict, not {type(raw).__name__}.",
                'e.g. JOBQ = {"STORE": "sqlite:///jobs.db", "WORKERS": 4}',
            )
        )
        return config
    unknown = sorted(str(key) for key in raw if key not in KNOWN_KEYS)
    if unknown:
        config.problems.append(
            Problem(
                "jobq.E002",
                f"settings.JOBQ has unknown keys: {', '.join(unknown)}.",
                f"Known keys: {', '.join(sorted(KNOWN_KEYS))}.",
            )
        )
    own = {**OWN_DEFAULTS, **{k: v for k, v in raw.items() if k in OWN_DEFAULTS}}
    _read_own(config, own)
    config.queue_options = {
        QUEUE_OPTIONS[key]: value for key, value in raw.items() if key in QUEUE_OPTIONS
    }
    if not any(p.id == "jobq.E004" for p in config.problems):
        _check_queue_options(config)
    return config


def _read_own(config: Config, own: dict[str, Any]) -> None:
    store = own["STORE"]
    if isinstance(store, os.PathLike):
        store = os.fspath(store)
    try:
        store_from(store)  # opens nothing; raises for a malformed URL
    except (TypeError, ValueError) as exc:
        config.problems.append(
            Problem(
                "jobq.E004",
                f"settings.JOBQ['STORE'] is not a store: {exc}",
                "Use None (memory), a JSON file path, sqlite:///relative.db, "
                "sqlite:////absolute.db or postgresql://user@host/db.",
            )
        )
    else:
        config.store = store
    for key, kind in (("AUTOSTART", bool), ("ON_COMMIT", bool), ("DATABASE", str)):
        if not isinstance(own[key], kind):
            config.problems.append(_bad_type(key, own[key], kind.__name__))
    workers = own["WORKERS"]
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        config.problems.append(_bad_type("WORKERS", workers, "int of at least 1"))
    handler = own["HANDLER"]
    if handler is not None:
        problem = _check_handler(handler)
        if problem is not None:
            config.problems.append(problem)
    if config.problems:
        return
    config.workers = workers
    config.handler = handler
    config.autostart = own["AUTOSTART"]
    config.on_commit = own["ON_COMMIT"]
    config.database = own["DATABASE"]


def _check_handler(handler: object) -> Problem | None:
    if not isinstance(handler, str):
        return _bad_type("HANDLER", handler, "dotted path (str)")
    try:
        found = import_string(handler)
    except ImportError as exc:
        return Problem(
            "jobq.E005",
            f"settings.JOBQ['HANDLER'] {handler!r} cannot be imported: {exc}",
            "Give the dotted path of a function taking a jobq.Job.",
        )
    if not callable(found):
        return Problem(
            "jobq.E005",
            f"settings.JOBQ['HANDLER'] {handler!r} is not callable.",
        )
    return None


def _check_queue_options(config: Config) -> None:
    """Let ``JobQueue`` itself judge the options (it opens nothing)."""
    from jobq.queue import JobQueue

    try:
        JobQueue(None, **config.queue_options)
    except (TypeError, ValueError) as exc:
        config.problems.append(
            Problem(
                "jobq.E003",
                f"settings.JOBQ has a bad value: {exc}",
                "Keys are JobQueue's options in upper case, e.g. MAX_ATTEMPTS.",
            )
        )


def _bad_type(key: str, value: object, expected: str) -> Problem:
    return Problem(
        "jobq.E003",
        f"settings.JOBQ[{key!r}] must be a {expected}, not {value!r}.",
    )
