"""Closing under a live caller: ``close`` releases the store while another
thread may still be inside one of its calls, or call it later (a handler
that outlived ``close(timeout)``, a worker recording its last outcome).

Every such call returns as it would have, or raises ``StoreError``; none
meets a connection, file or descriptor released under it (a SQLite
connection closed while another thread is inside it crashes the process).
These tests are the only ones of the suite with threads of their own: two
threads call the store in a loop while the test's thread closes it.
"""

from __future__ import annotations

import threading

from jobq.errors import StoreError
from jobq.stores.base import Done, NewJob, Store
from jobq.testing.clock import Clock
from jobq.testing.contract.base import ContractBase, OpenStore

#: Rounds of open, use and close per test: a close lands in a call often
#: enough within a few.
ROUNDS = 5

#: Calls each thread makes after the close, if the store still answers
#: (a store that keeps nothing to release, such as memory's, may).
AFTER_CLOSE = 20

#: The longest a thread may take to see the close (seconds).
LONGEST = 30.0


def new_job(run_at: float) -> NewJob:
    return NewJob('"x"', run_at, None, 0, 3)


class Caller:
    """A thread that adds, claims and finishes jobs in a loop, and keeps
    whatever its calls raised but ``StoreError`` after the close."""

    def __init__(self, store: Store, clock: Clock, closing: threading.Event) -> None:
        self.store = store
        self.clock = clock
        self.closing = closing
        self.busy = threading.Event()
        self.problems: list[BaseException] = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        after = 0
        while after < AFTER_CLOSE:
            try:
                self.one_round()
            except StoreError as exc:
                if not self.closing.is_set():
                    self.problems.append(exc)
                return
            except BaseException as exc:  # noqa: BLE001 - anything else is a bug
                self.problems.append(exc)
                return
            self.busy.set()
            if self.closing.is_set():
                after += 1

    def one_round(self) -> None:
        now = self.clock()
        store = self.store
        store.add([new_job(now)], now)
        claims = store.claim_many(now, 1)
        store.finish_many([Done(claim, None) for claim in claims], None, now)
        store.stats()


class ClosingTests(ContractBase):
    """``close`` while other threads call the store."""

    def test_a_store_closed_under_threads_that_call_it_fails_their_calls_cleanly(
        self, open_store: OpenStore, clock: Clock
    ) -> None:
        for _ in range(ROUNDS):
            store, _ = open_store()
            closing = threading.Event()
            callers = [Caller(store, clock, closing) for _ in range(2)]
            for caller in callers:
                assert caller.busy.wait(LONGEST), caller.problems
            closing.set()
            store.close()
            for caller in callers:
                caller.thread.join(LONGEST)
                assert not caller.thread.is_alive(), "a call hung after close()"
                assert caller.problems == [], (
                    "a call made while or after the store was closed raised "
                    "something other than StoreError"
                )
