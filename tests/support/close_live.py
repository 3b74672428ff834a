"""Closing a queue under a handler that still uses its store: the test
(tests/test_close_live.py) and the long repro (benchmarks/close_live.py)
run the same child.

The child runs ``rounds`` rounds, each on a fresh store of one kind: a task
enqueues children in a loop while two workers run them, and the queue is
closed with ``close(timeout=0.2)``, which returns and releases the store
while that handler still runs. The handler must then get ``QueueClosed``
or ``StoreError`` from its next enqueue, never anything else, and the
process must not crash (a connection closed under a thread inside it
segfaulted SQLite). The child exits 0 and prints ``ok`` after every round
went so, with how many handlers got each; 2 if a handler met another
exception; a crash shows as a signal.
"""

from __future__ import annotations

import subprocess
import sys

#: A cap on the child's run, so that a hung child fails, never hangs.
WAIT = 600

# argv: store kind (memory, json, sqlite, postgres), where (a directory, or
# "url schema" for PostgreSQL), rounds.
CHILD = r"""
import faulthandler, os, secrets, sys, threading
import jobq
from jobq.stores import JsonFileStore, MemoryStore, PostgresStore, SqliteStore

faulthandler.enable()
kind, where, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])


def new_store(n):
    if kind == "memory":
        return MemoryStore()
    if kind == "json":
        return JsonFileStore(os.path.join(where, f"jobs-{n}.json"))
    if kind == "sqlite":
        return SqliteStore(os.path.join(where, f"jobs-{n}.db"))
    url, schema = where.split(" ")
    return PostgresStore(url, schema=schema, queue=f"close-{secrets.token_hex(4)}")


got = {"QueueClosed": 0, "StoreError": 0}
for n in range(rounds):
    queue = jobq.JobQueue(store=new_store(n))
    busy, stopped, raised = threading.Event(), threading.Event(), []

    @queue.task(name="child")
    def child(i):
        pass

    @queue.task(name="spawn")
    def spawn():
        try:
            for i in range(1_000_000):
                child.enqueue(i)
                if i == 20:
                    busy.set()
        except (jobq.QueueClosed, jobq.StoreError) as exc:
            raised.append(type(exc).__name__)
        except BaseException as exc:
            raised.append(repr(exc))
        finally:
            stopped.set()

    queue.start(workers=2)
    spawn.enqueue()
    if not busy.wait(60):
        sys.exit("the handler did not start")
    queue.close(timeout=0.2)
    if not stopped.wait(60):
        sys.exit("the handler did not stop after close()")
    if raised[0] not in ("QueueClosed", "StoreError"):
        print("the handler got", raised[0], flush=True)
        sys.exit(2)
    got[raised[0]] += 1
print("ok", got["QueueClosed"], got["StoreError"], flush=True)
"""


def run_child(kind: str, where: str, rounds: int) -> subprocess.CompletedProcess[str]:
    """Run the child for ``rounds`` rounds on ``kind`` stores at ``where``."""
    return subprocess.run(
        [sys.executable, "-c", CHILD, kind, where, str(rounds)],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
