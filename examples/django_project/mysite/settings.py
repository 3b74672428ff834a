"""A small Django project using jobq: orders whose receipts are sent by a job.

Its data (Django's database and jobq's SQLite store) goes to
``$JOBQ_EXAMPLE_DIR`` (default: this directory).
"""

from __future__ import annotations

import os
from pathlib import Path

DATA = Path(os.environ.get("JOBQ_EXAMPLE_DIR", Path(__file__).resolve().parent.parent))

SECRET_KEY = "example-only-not-secret"  # noqa: S105
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
USE_TZ = True
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "jobq.contrib.django",
    "shop",
]
MIDDLEWARE: list[str] = []
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA / "db.sqlite3",
        "ATOMIC_REQUESTS": True,  # enqueued jobs wait for the request's commit
    }
}

# jobq: one setting. Workers start with the first request of the serving
# process (runserver, gunicorn), or run on their own: manage.py jobq_worker.
JOBQ = {
    "STORE": f"sqlite:///{DATA / 'jobs.db'}",
    "WORKERS": 2,
    "MAX_ATTEMPTS": 5,
    "KEEP_COMPLETED": 3600,
}
