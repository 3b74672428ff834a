"""A Flask app that sends its welcome e-mails through jobq's Flask extension.

    pip install -e '.[flask]'
    flask --app examples/flask_app run --debug
    curl -X POST localhost:5000/signup -H 'Content-Type: application/json' \\
         -d '{"email": "ann@example.com"}'
    curl localhost:5000/stats
    cat outbox.jsonl                  # the mail, after one retry (see below)
    flask --app examples/flask_app jobq dead

Settings also come from ``FLASK_*`` environment variables
(``app.config.from_prefixed_env()``): ``FLASK_JOBQ_STORE=jobs.json`` keeps the
jobs in a file (memory by default), ``FLASK_OUTBOX=...`` moves the outbox.

The request handler only enqueues and answers 202; a worker thread "sends"
the mail: the pretend mail server refuses every address's first delivery
("421 try again later"), so the log shows a retry before the mail lands in
``outbox.jsonl``; an address ending in ``.invalid`` is a dead letter at once.

The workers start with the first request, in the process that serves it, not
in ``create_app()``: ``flask run --debug`` also creates the app in the
reloader's watcher process, which then starts nothing (and takes no lock on
a JSON store).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from flask import Flask, current_app, request

import jobq
from jobq.contrib.flask import JobQ

jobs = JobQ(max_attempts=5)  # defaults; the app's JOBQ_* config wins


class MailServer:
    """A pretend SMTP server: refuses each address's first delivery."""

    def __init__(self, outbox: Path) -> None:
        self.outbox = outbox
        self.tries: Counter[str] = Counter()
        self.lock = threading.Lock()

    def deliver(self, to: str, subject: str) -> None:
        with self.lock:
            self.tries[to] += 1
            if self.tries[to] == 1:
                raise ConnectionError("421 try again later")
            with self.outbox.open("a", encoding="utf-8") as file:
                file.write(json.dumps({"to": to, "subject": subject}) + "\n")


@jobs.task
def send_welcome_mail(to: str) -> None:
    """Runs on a worker thread, inside the app context (``current_app`` works).

    Any exception is retried with backoff; ``jobq.Fatal`` is a dead letter.
    """
    if to.endswith(".invalid"):
        raise jobq.Fatal(f"no mail server for {to}")
    server: MailServer = current_app.extensions["mail_server"]
    server.deliver(to, "Welcome!")


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """The app. Creating it opens nothing and starts no thread."""
    app = Flask(__name__)
    app.config.update(JOBQ_WORKERS=2, JOBQ_BASE_DELAY=1.0, OUTBOX="outbox.jsonl")
    app.config.from_prefixed_env()  # FLASK_JOBQ_STORE=jobs.json -> JOBQ_STORE
    app.config.update(config or {})
    app.extensions["mail_server"] = MailServer(Path(app.config["OUTBOX"]))
    jobs.init_app(app)

    @app.post("/signup")
    def signup() -> tuple[dict[str, Any], int]:
        data = request.get_json(silent=True)
        email = data.get("email") if isinstance(data, dict) else None
        if not isinstance(email, str) or "@" not in email:
            return {"error": 'send JSON like {"email": "ann@example.com"}'}, 400
        # key: a double submit while the mail is still queued is not sent twice.
        enqueued = send_welcome_mail.using(key=f"welcome:{email}").enqueue(email)
        return {"job": enqueued.id, "duplicate": enqueued.duplicate}, 202

    @app.get("/stats")
    def stats() -> dict[str, int]:
        s = jobs.queue.stats()
        return {
            "pending": s.pending,
            "running": s.running,
            "dead": s.dead,
            "completed": s.completed,
            "retried": s.retried,
        }

    return app


if __name__ == "__main__":
    # jobq logs retries (WARNING) and dead jobs (ERROR) on the "jobq" logger.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    create_app().run()
