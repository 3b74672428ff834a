"""What handlers that hang for good do to the process: threads and memory.

300 jobs whose handler blocks forever (``threading.Event().wait()``, the
shape of a socket read with no timeout against a dead server), each
attempt limited to 0.05 s with a 0.05 s grace, 3 attempts, 4 workers, the
memory store. Every attempt is abandoned at its limit; the run ends when
every job is dead, or when nothing has changed for a second (a pool that
stopped replacing its threads), at most 60 s. It prints the threads of the
process, the handlers still blocked, the jobs by state and the memory then;
then it lets the blocked handlers return and prints the same once the
queue has drained (a bounded pool resumes and runs what was left).

Run: ``python -m benchmarks.hangs [MAX_ABANDONED]`` (without it, the
queue's default).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import jobq

JOBS = 300
LIMIT = 0.05
GRACE = 0.05
ATTEMPTS = 3
WORKERS = 4
LONGEST = 60.0


def memory() -> str:
    """This process's resident and virtual memory, from ``/proc``."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return f"RSS {fields['VmRSS']}, virtual {fields['VmSize']}"


def report(when: str, queue: jobq.JobQueue[Any], blocked: int, seconds: float) -> None:
    stats = queue.stats()
    workers = queue.worker_stats()
    print(
        f"{when} ({seconds:.1f} s): {threading.active_count()} threads, "
        f"{blocked} handlers blocked, stats().abandoned {stats.abandoned}, "
        f"workers {workers}; jobs pending {stats.pending}, running "
        f"{stats.running}, dead {stats.dead}, completed {stats.completed}; "
        f"{memory()}",
        flush=True,
    )


def main(max_abandoned: int | None = None) -> None:
    release = threading.Event()
    lock = threading.Lock()
    blocked = [0]

    def hang(job: jobq.Job[Any]) -> None:
        with lock:
            blocked[0] += 1
        try:
            release.wait()
        finally:
            with lock:
                blocked[0] -= 1

    options: dict[str, Any] = {}
    if max_abandoned is not None:  # the option does not exist before issue 30
        options["max_abandoned"] = max_abandoned
    queue = jobq.JobQueue(
        hang, timeout=LIMIT, timeout_grace=GRACE, max_attempts=ATTEMPTS,
        base_delay=0.01, jitter=False, **options,
    )  # fmt: skip
    report("before", queue, blocked[0], 0.0)
    queue.enqueue_many([None] * JOBS)
    started = time.monotonic()
    queue.start(workers=WORKERS)
    seen: tuple[int, int] | None = None
    changed = started
    while time.monotonic() - started < LONGEST:
        stats = queue.stats()
        if stats.dead == JOBS:
            break
        now = (stats.dead, stats.retried)
        if now != seen:
            seen, changed = now, time.monotonic()
        elif time.monotonic() - changed > 1.0:
            break
        time.sleep(0.05)
    report("hung", queue, blocked[0], time.monotonic() - started)
    release.set()
    queue.join(timeout=LONGEST)
    time.sleep(0.2)  # the returned threads end
    report("released and drained", queue, blocked[0], time.monotonic() - started)
    queue.close(timeout=5)


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:2]))
