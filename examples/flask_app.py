"""A Flask app that sends its welcome e-mails through jobq.

    pip install -e '.[flask]'
    JOBQ_STORE=jobs.json python examples/flask_app.py
    curl -X POST localhost:5000/signup -H 'Content-Type: application/json' \\
         -d '{"email": "ann@example.com"}'
    curl localhost:5000/stats

``flask --app examples/flask_app run --debug`` works too: it calls
``create_app()`` (the memory store), and
``flask --app 'examples/flask_app:create_app("jobs.json")' run`` keeps the jobs
in a file.

The request handler only enqueues and answers 202 at once; a worker thread
"sends" the mail (appends it to an outbox list, ``app.extensions["outbox"]``).
A full Flask extension (config keys, CLI commands) comes with
``jobq.contrib.flask``; this file shows the pattern with plain Flask.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
from typing import Any

from flask import Flask, current_app, request

import jobq

Mail = dict[str, str]


def send_welcome_mail(job: jobq.Job[Mail]) -> None:
    """Deliver one welcome mail. Runs on a worker thread, inside the app context."""
    to = job.payload["to"]
    if to.endswith(".invalid"):
        raise jobq.Fatal(f"no mail server for {to}")  # dead letter, no retries
    outbox: list[dict[str, Any]] = current_app.extensions["outbox"]
    # Delivery is at least once: after a crash this job may run again. The job
    # id is a natural idempotency key (a real mail API would take it as one).
    if any(mail["job"] == job.id for mail in outbox):
        return
    outbox.append({"job": job.id, "to": to, "subject": "Welcome!"})


def create_app(store_path: str | os.PathLike[str] | None = None) -> Flask:
    """The app; ``store_path`` is the JSON file for the jobs (memory if ``None``).

    Building the queue opens nothing, so creating the app is always safe. The
    workers start with the first request, in the process that serves it: under
    ``flask run --debug`` the app is also created in the reloader's watcher
    process, which never serves a request and so never takes the JSON file's
    lock (and gunicorn's master with ``--preload`` stays thread-free). Jobs
    left pending by the previous run resume with that first request.
    """
    app = Flask(__name__)
    app.extensions["outbox"] = []

    def run_in_app_context(job: jobq.Job[Mail]) -> None:
        with app.app_context():
            send_welcome_mail(job)

    queue: jobq.JobQueue[Mail] = jobq.JobQueue(
        run_in_app_context, store=store_path, max_attempts=5, base_delay=1.0
    )
    app.extensions["jobq"] = queue
    # On exit: let running jobs finish (up to 10 s) and release the store.
    # Pending jobs stay in the JSON file for the next start.
    atexit.register(queue.close, timeout=10)

    @app.before_request
    def start_workers() -> None:
        queue.start(workers=2)  # a no-op while the workers run

    @app.post("/signup")
    def signup() -> tuple[dict[str, Any], int]:
        data = request.get_json(silent=True)
        email = data.get("email") if isinstance(data, dict) else None
        if not isinstance(email, str) or "@" not in email:
            return {"error": 'send JSON like {"email": "ann@example.com"}'}, 400
        # key: a double submit while the mail is still queued is not sent twice.
        enqueued = queue.enqueue({"to": email}, key=f"welcome:{email}")
        return {"job": enqueued.id, "duplicate": enqueued.duplicate}, 202

    @app.get("/stats")
    def stats() -> dict[str, int]:
        return dataclasses.asdict(queue.stats())

    return app


if __name__ == "__main__":
    # jobq logs retries (WARNING) and dead jobs (ERROR) on the "jobq" logger.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    create_app(os.environ.get("JOBQ_STORE")).run()
