"""A Flask app with an isolated task, built by its factory, as the child
process of an isolated task finds it (``jobq.contrib.flask.child_app``:
the ``flask`` command's rules)."""

from __future__ import annotations

import isolated_tasks
from flask import Flask

from jobq.contrib.flask import JobQ

jobs = JobQ()
app_name = jobs.task(isolated_tasks.app_name, isolate=True)


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.update(MARK="built by create_app", JOBQ_KEEP_COMPLETED=60)
    jobs.init_app(app)
    return app
