"""Prometheus's multiprocess mode under real gunicorn with two workers and
the README's ``gunicorn.conf.py``: the counters add up the jobs both
processes ran, and the store's gauges appear once (read by the process that
answers the scrape), not once per process."""

from __future__ import annotations

import re
import signal
import textwrap
import urllib.request
from pathlib import Path

import pytest
from servers import (
    post,
    start_gunicorn,
    stop,
    wait_for,
    wait_for_server,
    wait_until_done,
)

pytest.importorskip("prometheus_client")
pytest.importorskip("gunicorn")

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(60)

APP = """
import os

from flask import Flask
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jobq.contrib.flask import JobQ
from jobq.contrib.prometheus import metrics_for

jobs = JobQ()


@jobs.task(name="note")
def note(token: str) -> int:
    return os.getpid()


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.update(
        JOBQ_STORE=os.environ["APP_STORE"],
        JOBQ_WORKERS=2,
        JOBQ_KEEP_COMPLETED=3600,
        JOBQ_PROMETHEUS=True,
    )
    jobs.init_app(app)

    @app.post("/note/<token>")
    def add(token: str) -> dict:
        return {"job": note.enqueue(token).id, "pid": os.getpid()}

    @app.get("/metrics")
    def metrics() -> tuple[bytes, int, dict[str, str]]:
        registry = metrics_for(jobs.queue).registry
        return generate_latest(registry), 200, {"Content-Type": CONTENT_TYPE_LATEST}

    return app
"""


def readme_metrics_conf() -> str:
    """The Prometheus ``gunicorn.conf.py`` of docs/operating/prometheus.md."""
    readme = (ROOT / "docs" / "operating/prometheus.md").read_text()
    found = re.search(
        r"```python\n(# gunicorn\.conf\.py: Prometheus[^\n]*\n.*?)```", readme, re.S
    )
    assert found, "docs/operating/prometheus.md has no gunicorn.conf.py example"
    conf = textwrap.dedent(found.group(1))
    assert "mark_process_dead" in conf
    return conf


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
        text: str = response.read().decode()
        return text


def values(text: str, name: str) -> list[float]:
    """The values of every sample line named exactly ``name{...}``."""
    pattern = re.compile(rf"^{re.escape(name)} (\S+)$", re.M)
    return [float(v) for v in pattern.findall(text)]


def test_two_gunicorn_workers_count_together_and_gauges_appear_once(
    tmp_path: Path,
) -> None:
    (tmp_path / "metricsapp.py").write_text(textwrap.dedent(APP))
    (tmp_path / "gunicorn.conf.py").write_text(readme_metrics_conf())
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    server, port = start_gunicorn(
        tmp_path,
        "metricsapp:create_app()",
        ["-w", "2"],
        {"APP_STORE": store, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)},
    )
    log = tmp_path / "gunicorn.log"
    base = f"http://127.0.0.1:{port}"
    try:
        answers = [wait_for_server(f"{base}/note/t0", server)]

        def both_workers_answered() -> bool:  # each enqueued some jobs
            answer = post(f"{base}/note/t{len(answers)}")
            assert answer is not None
            answers.append(answer)
            return len({a["pid"] for a in answers}) == 2 and len(answers) >= 30

        assert wait_for(both_workers_answered)
        ids = [answer["job"] for answer in answers]
        total = len(ids)
        assert len(set(ids)) == total
        records = wait_until_done(store, ids)
        ran_in = {record.result for record in records.values()}

        # The events follow the store's record: the last may count a moment
        # after its job shows as completed.
        succeeded = 'jobq_jobs_succeeded_total{task="note"}'
        assert wait_for(lambda: values(scrape(f"{base}/metrics"), succeeded) == [total])
        texts = [scrape(f"{base}/metrics") for _ in range(4)]  # either worker
    finally:
        code = stop(server, signal.SIGTERM, timeout=15)
    output_text = log.read_text()
    assert code == 0, output_text
    assert "Traceback" not in output_text, output_text
    for text in texts:
        # Both processes enqueued: the sum of both.
        assert values(text, 'jobq_jobs_enqueued_total{task="note"}') == [total]
        assert values(text, 'jobq_jobs_succeeded_total{task="note"}') == [total]
        assert values(text, 'jobq_job_duration_seconds_count{task="note"}') == [total]
        assert values(text, 'jobq_job_wait_seconds_count{task="note"}') == [total]
        # The store's gauges: one sample each, the queue's, never summed.
        assert values(text, 'jobq_jobs{state="pending"}') == [0]
        assert values(text, 'jobq_jobs{state="delayed"}') == [0]
        assert values(text, 'jobq_jobs{state="running"}') == [0]
        assert values(text, "jobq_oldest_pending_age_seconds") == [0]
        idle = values(text, 'jobq_workers{state="idle"}')
        busy = values(text, 'jobq_workers{state="busy"}')
        assert busy == [0]
        assert idle == [2 * len(ran_in)]  # the live processes that ran jobs
    print(f"jobs ran in {len(ran_in)} gunicorn worker(s)")
