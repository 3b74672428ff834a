"""jobq in two minutes: retries, a dead letter, and a queue that survives a restart.

    python examples/quickstart.py [DIRECTORY]

The jobs live in DIRECTORY/jobs.json (a temporary directory, removed at the
end, when none is given). The "webhooks" are simulated, so this runs offline
and finishes in about a second.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import jobq

Webhook = dict[str, str]

# The simulated receivers. A real handler would POST with urllib or requests.
FLAKY = "https://flaky.example/hooks"  # resets the connection, then rate-limits
GONE = "https://gone.example/hooks"  # answers 410 Gone: retrying cannot help
DOWN = "https://down.example/hooks"  # fails until it comes back up
SHOP = "https://shop.example/hooks"  # always fine

down = {DOWN}  # receivers that are down right now
_print_lock = threading.Lock()


def say(message: str = "") -> None:
    """Print one whole line, even with several worker threads printing."""
    with _print_lock:
        print(message, flush=True)


def send_webhook(job: jobq.Job[Webhook]) -> None:
    """The handler: deliver one webhook, or raise to have jobq try again."""
    url, event = job.payload["url"], job.payload["event"]
    where = f"job {job.id} {event} -> {url} (attempt {job.attempt})"
    if url in down:
        say(f"  {where}: connection refused")
        raise ConnectionRefusedError("connection refused")  # any exception: retry
    if url == FLAKY and job.attempt == 1:
        say(f"  {where}: connection reset")
        raise ConnectionResetError("connection reset by peer")
    if url == FLAKY and job.attempt == 2:
        say(f"  {where}: 429 Too Many Requests, asked to wait 0.1 s")
        raise jobq.Retry("429 Too Many Requests", after=0.1)  # exactly this delay
    if url == GONE:
        say(f"  {where}: 410 Gone")
        raise jobq.Fatal("410 Gone")  # no retries: straight to the dead letters
    say(f"  {where}: delivered")


def open_queue(store: Path) -> jobq.JobQueue[Webhook]:
    # Tiny delays so the demo is quick; the defaults are base_delay=1.0 s,
    # max_attempts=5. Retry n waits about base_delay * 2**(n-1) (+-20 % jitter).
    return jobq.JobQueue(send_webhook, store=store, max_attempts=4, base_delay=0.05)


def wait_for(queue: jobq.JobQueue[Any]) -> None:
    if not queue.join(timeout=30):
        sys.exit(f"the queue did not settle in 30 s: {queue.stats()}")


def main(directory: Path) -> None:
    store = directory / "jobs.json"
    say(f"Jobs are stored in {store}\n")

    say("1. Enqueue four webhooks and run them on two worker threads.")
    with open_queue(store).start(workers=2) as queue:
        for url in (SHOP, FLAKY, GONE, DOWN):
            # key: while this job is pending or running, the same key is not
            # queued twice (an idempotency key for double submits).
            queue.enqueue({"url": url, "event": "order.paid"}, key=f"paid:{url}")
        wait_for(queue)
        stats = queue.stats()
        say(
            f"   Settled: {stats.completed} delivered, {stats.retried} retries, "
            f"{stats.dead} dead.\n"
        )

        say("2. The dead-letter list keeps what failed for good, with the error:")
        for record in queue.dead_jobs():
            say(
                f"   job {record.id} to {record.payload['url']}: "
                f"{record.attempts} failed attempt(s), last_error={record.last_error!r}"
            )

        later = queue.enqueue({"url": SHOP, "event": "order.shipped"}, delay=0.5)
        say(
            f"\n3. Job {later.id} is due in 0.5 s, but the app stops now "
            f"({queue.stats().pending} job pending)."
        )
    # Leaving the with block closed the queue: running jobs finished, the file
    # was written and its lock released. Pending jobs stay in the file.

    say("\n4. A new JobQueue on the same file, as after a restart:")
    with open_queue(store) as queue:
        kept = queue.get(later)  # reading opens the file; no workers yet
        if kept is None:
            sys.exit(f"job {later.id} was lost in the restart")
        say(f"   job {kept.id} is still {kept.state}; start the workers...")
        queue.start(workers=2)
        wait_for(queue)

        down.clear()
        say(f"\n5. {DOWN} is back up: retry its dead job.")
        for record in queue.dead_jobs():
            if record.payload["url"] == DOWN:
                queue.retry_dead(record.id)
        wait_for(queue)

        stats = queue.stats()
        say(
            f"\nDone: {stats.pending} pending, {stats.dead} dead "
            f"(the 410 stays in the dead-letter list for a human to look at)."
        )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        target = Path(sys.argv[1])
        target.mkdir(parents=True, exist_ok=True)
        main(target)
    else:
        with tempfile.TemporaryDirectory(prefix="jobq-quickstart-") as tmp:
            main(Path(tmp))
