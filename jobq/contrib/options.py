"""The settings of the web integrations, in one table: every ``JobQueue``
option a setting can give, and the integrations' own ``STORE``, ``WORKERS``
and ``AUTOSTART``.

Flask reads each as ``app.config["JOBQ_<KEY>"]`` (``jobq.contrib.flask``),
Django as ``settings.JOBQ["<KEY>"]`` (``jobq.contrib.django.conf``, which
adds Django's own ``ON_COMMIT``, ``DATABASE`` and ``HANDLER``), so neither
lacks an option the other has. The dashboard's settings are here too
(``FLASK_DASHBOARD_OPTIONS``, ``DJANGO_DASHBOARD_OPTIONS``), so that they
are checked as every other key is. ``Option.problem`` checks a value's type; the
ranges are ``JobQueue``'s to judge. ``handler`` is the integration's (the
app's tasks, Django's ``HANDLER``) and ``clock`` is for tests, so neither is
a setting.

Needs nothing beyond the standard library (no framework is imported).
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobq.queue import MAX_PAYLOAD_BYTES

__all__ = [
    "AUTOSTART",
    "BOOL",
    "DASHBOARD",
    "DASHBOARD_ACCESS",
    "DASHBOARD_HOSTS",
    "DASHBOARD_READ_ONLY",
    "DJANGO_DASHBOARD_OPTIONS",
    "FLASK_DASHBOARD_OPTIONS",
    "INT",
    "JOBQUEUE_OPTIONS",
    "MIDDLEWARE_LIST",
    "OPTIONAL_INT",
    "OPTIONAL_SECONDS",
    "OPTIONS",
    "OWN_OPTIONS",
    "PROMETHEUS",
    "SECONDS",
    "STORE",
    "STORE_VALUE",
    "TEXT",
    "WORKERS",
    "WORKER_COUNT",
    "Kind",
    "Option",
    "by_key",
    "load",
    "load_all",
]


@dataclass(frozen=True)
class Kind:
    """What values a setting takes: ``description`` for messages ("a
    bool"), ``accepts`` to check one."""

    description: str
    accepts: Callable[[object], bool]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_seconds(value: object) -> bool:
    return isinstance(value, dt.timedelta) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    )


BOOL = Kind("a bool", lambda value: isinstance(value, bool))
INT = Kind("an int", _is_int)
OPTIONAL_INT = Kind("an int or None", lambda value: value is None or _is_int(value))
SECONDS = Kind("seconds (a number or a timedelta)", _is_seconds)
OPTIONAL_SECONDS = Kind(
    "seconds (a number or a timedelta) or None",
    lambda value: value is None or _is_seconds(value),
)
TEXT = Kind("a str", lambda value: isinstance(value, str))
WORKER_COUNT = Kind("an int of at least 1", lambda value: _is_count(value))


def _is_middleware_list(value: object) -> bool:
    return value is None or (
        isinstance(value, list | tuple)
        and all(callable(item) or isinstance(item, str) for item in value)
    )


MIDDLEWARE_LIST = Kind(
    'a list of callables or their import paths ("module.name"), or None',
    _is_middleware_list,
)
#: Anything ``store=`` takes; ``jobq.stores.store_from`` judges it.
STORE_VALUE = Kind("None, a path, a store URL or a store object", lambda value: True)


@dataclass(frozen=True)
class Option:
    """One setting: its ``key`` (upper case; Flask prefixes ``JOBQ_``), the
    ``JobQueue`` keyword argument it sets (``None``: the integration's own),
    what values it takes, its default and what it means."""

    key: str
    argument: str | None
    kind: Kind
    default: Any
    meaning: str
    #: Turns a setting's value (of the right kind) into the argument's
    #: (import paths into what they name); ``ImportError`` if it cannot.
    convert: Callable[[Any], Any] | None = None

    def argument_value(self, value: Any) -> Any:
        """The ``JobQueue`` argument for the setting's ``value``."""
        return value if self.convert is None else self.convert(value)

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` for this setting ("must be a bool,
        not 'yes'"), or ``None``."""
        if self.kind.accepts(value):
            return None
        return f"must be {self.kind.description}, not {value!r}"


#: ``JobQueue``'s options, passed on as they are.
JOBQUEUE_OPTIONS: tuple[Option, ...] = (
    Option(
        "MAX_ATTEMPTS",
        "max_attempts",
        INT,
        5,
        "attempts of a job before it is dead (tasks may set their own)",
    ),
    Option(
        "BASE_DELAY",
        "base_delay",
        SECONDS,
        1.0,
        "the delay before the first retry; it doubles with each attempt",
    ),
    Option(
        "MAX_DELAY", "max_delay", SECONDS, 3600.0, "the longest delay between attempts"
    ),
    Option(
        "JITTER", "jitter", BOOL, True, "spread each retry delay by ±20 % at random"
    ),
    Option(
        "DEAD_LETTER_LIMIT",
        "dead_letter_limit",
        INT,
        1000,
        "dead jobs kept; beyond it the oldest are dropped",
    ),
    Option(
        "KEEP_COMPLETED",
        "keep_completed",
        SECONDS,
        0,
        "how long a completed job is kept with its result (0: not at all)",
    ),
    Option(
        "KEEP_CANCELLED",
        "keep_cancelled",
        SECONDS,
        86400.0,
        "how long a cancelled job is kept, with who cancelled it (0: not at all)",
    ),
    Option(
        "MAX_PENDING",
        "max_pending",
        OPTIONAL_INT,
        None,
        "pending jobs at most: beyond it enqueue raises QueueFull (None: no limit)",
    ),
    Option(
        "MAX_PAYLOAD_BYTES",
        "max_payload_bytes",
        OPTIONAL_INT,
        MAX_PAYLOAD_BYTES,
        "a payload's JSON size at most (None: no limit)",
    ),
    Option(
        "WARN_RUNNING_AFTER",
        "warn_running_after",
        OPTIONAL_SECONDS,
        600.0,
        "log a WARNING for a handler running longer (None: never)",
    ),
    Option(
        "TIMEOUT",
        "timeout",
        OPTIONAL_SECONDS,
        None,
        "the default time limit of a job's attempt (None: no limit)",
    ),
    Option(
        "TIMEOUT_GRACE",
        "timeout_grace",
        SECONDS,
        5.0,
        "seconds a handler has after JobTimeout before its thread is abandoned",
    ),
    Option(
        "MAX_ABANDONED",
        "max_abandoned",
        OPTIONAL_INT,
        None,
        "abandoned threads alive beyond which none is replaced: the pool shrinks "
        "instead (None: as many as the workers)",
    ),
    Option(
        "IMMEDIATE",
        "immediate",
        BOOL,
        False,
        "run jobs in the thread that enqueues them, at once (for tests)",
    ),
    Option(
        "MIDDLEWARE",
        "middleware",
        MIDDLEWARE_LIST,
        None,
        "callables, or their import paths, that wrap every attempt of every "
        "job, the first outermost (see jobq.middleware)",
        convert=lambda value: None if value is None else load_all(value),
    ),
)

STORE = Option(
    "STORE",
    "store",
    STORE_VALUE,
    None,
    'where the jobs are: None (memory), "jobs.json", "sqlite:///jobs.db", '
    '"postgresql://..." or a store object',
)
WORKERS = Option(
    "WORKERS",
    None,
    WORKER_COUNT,
    4,
    "worker threads per serving process (and for the worker command)",
)
AUTOSTART = Option(
    "AUTOSTART",
    None,
    BOOL,
    True,
    "start the workers lazily, with the first request in the process that "
    "serves it; False: never in the web process (run the worker command)",
)

PROMETHEUS = Option(
    "PROMETHEUS",
    None,
    BOOL,
    False,
    "export the queue's Prometheus metrics (jobq.contrib.prometheus.instrument; "
    "needs jobq[prometheus])",
)

#: The integrations' own settings, in both.
OWN_OPTIONS: tuple[Option, ...] = (STORE, WORKERS, AUTOSTART, PROMETHEUS)

#: Every setting both integrations take.
OPTIONS: tuple[Option, ...] = (*OWN_OPTIONS, *JOBQUEUE_OPTIONS)

DASHBOARD = Option(
    "DASHBOARD",
    None,
    Kind(
        "a path such as '/jobq' (str) or None",
        lambda value: value is None or isinstance(value, str),
    ),
    None,
    "the path the app serves the dashboard at (jobq.web; None: no dashboard)",
)
DASHBOARD_READ_ONLY = Option(
    "DASHBOARD_READ_ONLY",
    None,
    BOOL,
    False,
    "the dashboard shows no action and refuses them",
)
DASHBOARD_HOSTS = Option(
    "DASHBOARD_HOSTS",
    None,
    Kind(
        "a list of host names (str)",
        lambda value: (
            isinstance(value, list | tuple)
            and all(isinstance(item, str) for item in value)
        ),
    ),
    (),
    "more names the dashboard answers to when it serves this machine only "
    "(no dashboard_auth): beside localhost and loopback addresses, names that "
    "resolve to this machine",
)
DASHBOARD_ACCESS = Option(
    "DASHBOARD_ACCESS",
    None,
    Kind(
        "a dotted path (str) of a function of the request returning a bool, or None",
        lambda value: value is None or isinstance(value, str),
    ),
    None,
    "who may see the dashboard (None: active staff users)",
)

#: The dashboard's settings in Flask: ``app.config["JOBQ_<KEY>"]``.
FLASK_DASHBOARD_OPTIONS: tuple[Option, ...] = (
    DASHBOARD,
    DASHBOARD_READ_ONLY,
    DASHBOARD_HOSTS,
)
#: The dashboard's settings in Django: ``settings.JOBQ_<KEY>``, beside the
#: ``JOBQ`` dict (they came first); its URLs are in ``urls.py``, not a setting.
DJANGO_DASHBOARD_OPTIONS: tuple[Option, ...] = (DASHBOARD_ACCESS, DASHBOARD_READ_ONLY)


def load_all(items: list[Any] | tuple[Any, ...]) -> list[Any]:
    """``items`` with each import path (``"module.name"``) replaced by what it
    names; ``ImportError`` naming a path that cannot be imported."""
    return [load(item) if isinstance(item, str) else item for item in items]


def load(path: str) -> Any:
    """The object the import path ``"module.name"`` names."""
    module, _, name = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ImportError(f"{path!r} cannot be imported: {exc}") from exc


def by_key(options: tuple[Option, ...] = OPTIONS) -> dict[str, Option]:
    """``options`` by key."""
    return {option.key: option for option in options}
