"""Flask and Django parity of options: one table (``jobq.contrib.options``)
gives both integrations their settings, so each takes every ``JobQueue``
option, both take the same ones, each given reaches the queue, and both
refuse a value of the wrong type.
"""

from __future__ import annotations

import datetime as dt
import inspect
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flask")

from django.test import override_settings
from flask import Flask
from middlewares import passthrough

import jobq
from jobq.contrib import options
from jobq.contrib.django import DjangoJobQueue, conf
from jobq.contrib.flask import CONFIG_OPTIONS, PREFIX, JobQ

ROOT = Path(__file__).resolve().parents[1]

#: A value other than the default for each ``JobQueue`` option of the table.
SAMPLES: dict[str, Any] = {
    "MAX_ATTEMPTS": 7,
    "BASE_DELAY": 0.5,
    "MAX_DELAY": dt.timedelta(minutes=1),
    "JITTER": False,
    "DEAD_LETTER_LIMIT": 10,
    "KEEP_COMPLETED": 30,
    "KEEP_CANCELLED": dt.timedelta(minutes=5),
    "MAX_PENDING": 100,
    "MAX_PAYLOAD_BYTES": 4096,
    "WARN_RUNNING_AFTER": None,
    "TIMEOUT": dt.timedelta(seconds=30),
    "TIMEOUT_GRACE": 2,
    "MAX_ABANDONED": 3,
    "IMMEDIATE": True,
    "MIDDLEWARE": ["middlewares.passthrough"],
}

#: ``JobQueue`` parameters that are not settings: the integration supplies
#: the handler and the task resolver, and a clock is for tests.
NOT_SETTINGS = {"handler", "clock", "resolve_task"}

DJANGO_ONLY = {"ON_COMMIT", "DATABASE", "HANDLER"}


def expected_arguments() -> dict[str, Any]:
    table = options.by_key()
    return {
        table[key].argument: table[key].argument_value(value)
        for key, value in SAMPLES.items()
    }


def reached(queue: jobq.JobQueue[Any], own_middleware: int = 0) -> dict[str, Any]:
    """What a queue shows of the samples' options (its middleware less the
    integration's own, which come first)."""
    return {
        "max_attempts": queue.policy.max_attempts,
        "base_delay": queue.policy.base_delay,
        "max_delay": queue.policy.max_delay,
        "jitter": queue.policy.jitter,
        "dead_letter_limit": queue.dead_letter_limit,
        "keep_cancelled": queue.keep_cancelled,
        "max_pending": queue.max_pending,
        "max_payload_bytes": queue.max_payload_bytes,
        "timeout": queue.timeout,
        "timeout_grace": queue.timeout_grace,
        "max_abandoned": queue.max_abandoned,
        "immediate": queue.immediate,
        "middleware": queue.middleware[own_middleware:],
    }


SHOWN = {
    "max_attempts": 7,
    "base_delay": 0.5,
    "max_delay": 60.0,
    "jitter": False,
    "dead_letter_limit": 10,
    "keep_cancelled": 300.0,
    "max_pending": 100,
    "max_payload_bytes": 4096,
    "timeout": 30.0,
    "timeout_grace": 2.0,
    "max_abandoned": 3,
    "immediate": True,
    "middleware": (passthrough,),
}


# -- the table ---------------------------------------------------------------------


def test_every_jobqueue_option_is_in_the_table_with_its_default() -> None:
    parameters = inspect.signature(jobq.JobQueue).parameters
    table = {o.argument: o for o in options.OPTIONS if o.argument is not None}

    assert set(table) == set(parameters) - NOT_SETTINGS
    for argument, option in table.items():
        assert option.default == parameters[argument].default, option.key
        assert option.key == argument.upper()
        assert option.problem(option.default) is None, option.key  # it takes it


def test_the_samples_cover_every_jobqueue_option() -> None:
    assert set(SAMPLES) == {o.key for o in options.JOBQUEUE_OPTIONS}
    for key, value in SAMPLES.items():
        assert value != options.by_key()[key].default, key


# -- parity ------------------------------------------------------------------------


def test_flask_and_django_take_the_same_settings() -> None:
    flask_keys = {key.removeprefix(PREFIX) for key in CONFIG_OPTIONS} | {
        "WORKERS",
        "AUTOSTART",
        "PROMETHEUS",
    }
    django_keys = set(conf.KNOWN_KEYS) - DJANGO_ONLY

    assert flask_keys == django_keys == set(options.by_key())
    assert {"JITTER", "MAX_PAYLOAD_BYTES", "WARN_RUNNING_AFTER"} <= flask_keys
    assert set(conf.OWN_DEFAULTS) == {
        "STORE", "WORKERS", "AUTOSTART", "PROMETHEUS", *DJANGO_ONLY
    }  # fmt: skip


def test_each_flask_setting_reaches_the_queue(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    given: list[dict[str, Any]] = []

    class Recording(jobq.JobQueue[Any]):
        def __init__(self, handler: Any = None, **kwargs: Any) -> None:
            given.append(kwargs)
            super().__init__(handler, **kwargs)

    monkeypatch.setattr("jobq.contrib.flask.JobQueue", Recording)
    app = Flask("options")
    app.config.update({PREFIX + key: value for key, value in SAMPLES.items()})
    app.config.update(JOBQ_WORKERS=3, JOBQ_AUTOSTART=False)

    with caplog.at_level(logging.WARNING, "jobq"):
        JobQ(app)
    queue = app.extensions["jobq"].queue

    (arguments,) = given
    expected = expected_arguments()
    # The app context is the outermost middleware, the app's own follow it.
    assert arguments.pop("middleware")[1:] == expected.pop("middleware")
    assert arguments == expected
    assert reached(queue, own_middleware=1) == SHOWN
    assert app.extensions["jobq"].workers == 3
    assert app.extensions["jobq"].autostart is False
    assert caplog.records == []  # every key known
    queue.close()


def test_each_django_setting_reaches_the_queue() -> None:
    with override_settings(JOBQ={**SAMPLES, "STORE": None, "WORKERS": 3}):
        found = conf.read()

    assert found.problems == []
    assert found.queue_options == expected_arguments()
    assert found.workers == 3
    queue = DjangoJobQueue(None, store=found.store, **found.queue_options)
    assert reached(queue, own_middleware=1) == SHOWN  # after close_old_connections
    queue.close()


@pytest.mark.parametrize(
    "key", [o.key for o in options.OPTIONS if o.kind is not options.STORE_VALUE]
)
def test_a_value_of_the_wrong_type_is_refused_by_both(key: str) -> None:
    app = Flask("bad")
    app.config[PREFIX + key] = "nonsense"
    with override_settings(JOBQ={key: "nonsense"}):
        problems = conf.read().problems

    with pytest.raises(TypeError, match=PREFIX + key):
        JobQ(app)
    assert [(p.id, key in p.msg) for p in problems] == [("jobq.E003", True)]


def test_flask_warns_of_a_jobq_key_it_does_not_know(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = Flask("typo")
    app.config["JOBQ_MAX_ATEMPTS"] = 3

    with caplog.at_level(logging.WARNING, "jobq"):
        JobQ(app)

    assert "JOBQ_MAX_ATEMPTS" in caplog.text
    app.extensions["jobq"].queue.close()


# -- the documentation lists them --------------------------------------------------


def section(title: str, end: str | None) -> str:
    text = (ROOT / "docs" / "reference" / "settings.md").read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n")
    return text[start : text.index(f"\n{end}\n", start) if end else None]


def test_the_settings_page_lists_every_setting_of_both() -> None:
    flask = section("## Flask", "## Django")
    django = section("## Django", None)

    for key in options.by_key():
        assert f"`{PREFIX}{key}`" in flask, key
    for key in conf.KNOWN_KEYS:
        assert f"`{key}`" in django, key
