"""Settings of the Django project the jobq.contrib.django tests run in."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile

SECRET_KEY = "jobq-tests-only"  # noqa: S105
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
USE_TZ = True
ROOT_URLCONF = "djproject.urls"
STATIC_URL = "/static/"  # pytest-django's live_server serves it
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",  # the dashboard mounts below it, in its frame
    "django.contrib.contenttypes",
    "django.contrib.auth",  # the dashboard's staff check, and its session
    "django.contrib.sessions",
    "django.contrib.messages",  # the admin's
    "jobq.contrib.django",
    "djapp",
]
if importlib.util.find_spec("django.tasks") is None:  # Django 5.2: the backport,
    INSTALLED_APPS.append("django_tasks")  # whose app runs the backends' checks

# The dashboard's staff check needs the user; its view checks CSRF itself
# (csrf_protect), with or without CsrfViewMiddleware.
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",  # the admin's
]

# The admin's pages, and the link to the dashboard on its index
# (jobq/admin_index.html, a template of the jobq app).
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",
        # The tests' database is a file, so that the browser test's server
        # thread can have a connection of its own to it (each connection to
        # an in-memory database has a database of its own).
        "TEST": {
            "NAME": os.path.join(
                tempfile.gettempdir(), f"jobq-django-tests-{os.getpid()}.sqlite3"
            )
        },
    }
}

# One SQLite store per test session, shared with the worker processes the
# tests start (they inherit the environment variable).
if "JOBQ_DJANGO_TEST_STORE" not in os.environ:
    _directory = tempfile.mkdtemp(prefix="jobq-django-")
    atexit.register(shutil.rmtree, _directory, ignore_errors=True)
    os.environ["JOBQ_DJANGO_TEST_STORE"] = f"sqlite:///{_directory}/jobs.db"

JOBQ = {
    "STORE": os.environ["JOBQ_DJANGO_TEST_STORE"],
    "WORKERS": 2,
    "MAX_ATTEMPTS": 3,
    "BASE_DELAY": 0.1,
    "KEEP_COMPLETED": 3600,
}

# Django's Tasks framework (django.tasks, or the django_tasks backport on
# Python 3.11) runs its tasks as jobs of the queue above.
TASKS = {
    "default": {
        "BACKEND": "jobq.contrib.django.tasks.JobqBackend",
        "QUEUES": ["default", "emails"],
    },
    # A second alias of the same backend: a result names the one it came by.
    "secondary": {"BACKEND": "jobq.contrib.django.tasks.JobqBackend"},
}

# Django 6.1 warns without MAILERS (ignored by Django 5.2); the test runner
# replaces every mailer with the in-memory one (mail.outbox).
MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
