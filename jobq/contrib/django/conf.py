"""The ``JOBQ`` setting: one dict, read when the queue is first built.

Its keys are those of ``jobq.contrib.options.OPTIONS`` (Flask's ``JOBQ_*``
config keys without the prefix: ``STORE``, ``WORKERS``, ``AUTOSTART`` and
every ``JobQueue`` option) and Django's own ``ON_COMMIT``, ``DATABASE`` and
``HANDLER``. Checked by the system checks (``jobq.E001`` ... ``jobq.E005``)
and again when the queue is built (``ImproperlyConfigured``), with the same
messages; value types come from the table, ranges are ``JobQueue``'s.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from jobq.contrib.options import (
    BOOL,
    DASHBOARD_ACCESS,
    DJANGO_DASHBOARD_OPTIONS,
    JOBQUEUE_OPTIONS,
    OPTIONS,
    OWN_OPTIONS,
    TEXT,
    Kind,
    Option,
    by_key,
)
from jobq.stores import store_from

SETTING = "JOBQ"

#: Django's own keys, beside those of ``jobq.contrib.options.OPTIONS``.
ON_COMMIT = Option(
    "ON_COMMIT",
    None,
    BOOL,
    True,
    "write a job enqueued in an atomic block when the transaction commits",
)
DATABASE = Option(
    "DATABASE",
    None,
    TEXT,
    "default",
    "the alias of the database connection whose transactions are watched",
)
HANDLER = Option(
    "HANDLER",
    None,
    Kind(
        "a dotted path (str) or None",
        lambda value: value is None or isinstance(value, str),
    ),
    None,
    "the dotted path of the function that runs plain jobs (enqueue(payload))",
)
DJANGO_OPTIONS: tuple[Option, ...] = (ON_COMMIT, DATABASE, HANDLER)

#: Every ``JOBQ`` key: the integrations' shared table, then Django's own.
SETTINGS = by_key((*OPTIONS, *DJANGO_OPTIONS))

#: ``JOBQ`` keys that become ``JobQueue`` keyword arguments, by key (``STORE``
#: is read on its own: ``jobq.E004``).
QUEUE_OPTIONS = {
    option.key: option.argument for option in JOBQUEUE_OPTIONS if option.argument
}

#: Keys of the integration itself, with their defaults.
OWN_DEFAULTS: dict[str, Any] = {
    option.key: option.default for option in (*OWN_OPTIONS, *DJANGO_OPTIONS)
}

KNOWN_KEYS = frozenset(SETTINGS)


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
    prometheus: bool = False
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
    typed = _check_types(config, {k: raw[k] for k in QUEUE_OPTIONS if k in raw})
    converted = typed and _convert(config, raw)
    if converted and not any(p.id == "jobq.E004" for p in config.problems):
        _check_queue_options(config)
    return config


def _convert(config: Config, raw: dict[str, Any]) -> bool:
    """Turn the queue options' import paths (``MIDDLEWARE``) into what they
    name; whether all could be imported (``jobq.E005`` for each that not)."""
    table = by_key()
    for key in QUEUE_OPTIONS:
        if key not in raw:
            continue
        try:
            config.queue_options[QUEUE_OPTIONS[key]] = table[key].argument_value(
                raw[key]
            )
        except ImportError as exc:
            config.problems.append(
                Problem(
                    "jobq.E005",
                    f"settings.JOBQ[{key!r}]: {exc}",
                    "Give dotted paths of callables, e.g. 'myapp.jobs.timed'.",
                )
            )
            return False
    return True


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
    _check_types(
        config,
        {
            k: own[k]
            for k in ("WORKERS", "AUTOSTART", "PROMETHEUS", "ON_COMMIT", "DATABASE")
        },
    )
    handler = own["HANDLER"]
    if handler is not None:
        problem = _check_handler(handler)
        if problem is not None:
            config.problems.append(problem)
    if config.problems:
        return
    config.workers = own["WORKERS"]
    config.handler = handler
    config.autostart = own["AUTOSTART"]
    config.on_commit = own["ON_COMMIT"]
    config.database = own["DATABASE"]
    config.prometheus = own["PROMETHEUS"]


def _check_types(config: Config, values: dict[str, Any]) -> bool:
    """A ``jobq.E003`` for each value of the wrong type (by the table);
    whether all were right."""
    right = True
    for key, value in values.items():
        problem = SETTINGS[key].problem(value)
        if problem is not None:
            config.problems.append(
                Problem("jobq.E003", f"settings.JOBQ[{key!r}] {problem}.")
            )
            right = False
    return right


def _check_handler(handler: object) -> Problem | None:
    if not isinstance(handler, str):
        problem = HANDLER.problem(handler) or "must be a dotted path (str)"
        return Problem("jobq.E003", f"settings.JOBQ['HANDLER'] {problem}.")
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


def dashboard_problems() -> list[Problem]:
    """What is wrong with the dashboard's settings (``settings.JOBQ_<KEY>`` of
    ``DJANGO_DASHBOARD_OPTIONS``): ``jobq.E003`` for a value of the wrong type
    (by the table), ``jobq.E005`` for an access check that cannot be imported
    or is not callable. Empty when all is well."""
    problems = []
    for option in DJANGO_DASHBOARD_OPTIONS:
        name = "JOBQ_" + option.key
        problem = option.problem(getattr(settings, name, option.default))
        if problem is not None:
            problems.append(Problem("jobq.E003", f"settings.{name} {problem}."))
    access = getattr(settings, "JOBQ_" + DASHBOARD_ACCESS.key, None)
    if isinstance(access, str):
        found = _access_problem(access)
        if found is not None:
            problems.append(found)
    return problems


def _access_problem(access: str) -> Problem | None:
    hint = "Give the dotted path of a function of the request returning a bool."
    try:
        found = import_string(access)
    except ImportError as exc:
        return Problem(
            "jobq.E005",
            f"settings.JOBQ_DASHBOARD_ACCESS {access!r} cannot be imported: {exc}",
            hint,
        )
    if not callable(found):
        return Problem(
            "jobq.E005",
            f"settings.JOBQ_DASHBOARD_ACCESS {access!r} is not callable.",
            hint,
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
