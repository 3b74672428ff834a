"""The behavioural suite every store passes: ``StoreContractTests``.

The four built-in stores run it, and so can a store of yours: subclass it in a
test module (named ``Test...``, so that pytest collects it) and say how to
build your store over this test's place::

    from jobq.stores.base import Store
    from jobq.testing import StoreContractTests

    class TestMyStore(StoreContractTests):
        persistent = True  # a second store over the same place sees the jobs

        def make_store(self, *, queue_clock: bool = False) -> Store:
            return MyStore(self.tmp_path / "jobs")

Each test builds queues over your store (``make_queue``), runs their jobs with
``run_pending`` in the test's thread and moves time with a ``Clock``, so
nothing waits. It uses the public API only, plus the ``Store`` methods where
the rule is the store's own (claim fencing, batches, ``list_jobs``,
``next_due``, wake-ups): a failing test names a rule of ``jobq.stores.base``
the store breaks. Needs pytest only.

The tests are grouped by topic, one module and one class each, all
subclasses of ``ContractBase`` (``base``: ``make_store``, ``persistent``, the
fixtures and helpers): ``enqueue`` (enqueue and keys), ``claims`` (claims and
leases), ``retries`` (retries and burial), ``dead`` (dead letters), ``kept``
(kept results), ``schedules`` (``ScheduleStore``: skipped for a store
without it, as the optional reads are), ``pages``, ``reads``,
``wakeups`` (the ``Signal`` calls that wake workers and ``join`` callers),
``cancels`` (``cancel``, stopping jobs and how they end), ``limits``
(``LimitStore``, skipped for a store without it), ``workflows``
(``after=``, skipped for a store that does not declare it),
``activity`` (``ActivityStore``: beats, the registry of processes, the
figures per minute; skipped likewise) and ``closing`` (``close`` while other
threads still call the store).
``StoreContractTests`` combines them: subclass it, not the parts.
"""

from __future__ import annotations

from jobq.testing.contract.activity import ActivityTests
from jobq.testing.contract.base import (
    ContractBase,
    MakeQueue,
    OpenStore,
    Recorder,
    WakeUps,
    bury,
    claim_one,
    claimed_again,
    die,
    fail_one,
    fail_with_value_error,
    failed_attempt,
    finish_one,
    slot_job,
    succeed,
)
from jobq.testing.contract.cancels import CancelTests
from jobq.testing.contract.claims import ClaimTests
from jobq.testing.contract.closing import ClosingTests
from jobq.testing.contract.dead import DeadLetterTests
from jobq.testing.contract.enqueue import EnqueueTests
from jobq.testing.contract.kept import KeptResultTests
from jobq.testing.contract.limits import LimitTests
from jobq.testing.contract.pages import PageTests
from jobq.testing.contract.reads import ReadTests
from jobq.testing.contract.retries import (
    Interrupt,
    RetryTests,
    parse_invoice,
    raise_deep,
)
from jobq.testing.contract.schedules import ScheduleTests
from jobq.testing.contract.wakeups import WakeUpTests
from jobq.testing.contract.workflows import WorkflowTests

__all__ = [
    "ActivityTests",
    "CancelTests",
    "ClaimTests",
    "ClosingTests",
    "ContractBase",
    "DeadLetterTests",
    "EnqueueTests",
    "Interrupt",
    "KeptResultTests",
    "LimitTests",
    "MakeQueue",
    "OpenStore",
    "PageTests",
    "ReadTests",
    "Recorder",
    "RetryTests",
    "ScheduleTests",
    "StoreContractTests",
    "WakeUpTests",
    "WakeUps",
    "WorkflowTests",
    "bury",
    "claim_one",
    "claimed_again",
    "die",
    "fail_one",
    "fail_with_value_error",
    "failed_attempt",
    "finish_one",
    "parse_invoice",
    "raise_deep",
    "slot_job",
    "succeed",
]


# pytest collects the tests of the last base first: the topics are listed
# backwards, so that they run (and are reported) in the order above.
class StoreContractTests(
    ClosingTests,
    ActivityTests,
    WorkflowTests,
    LimitTests,
    CancelTests,
    WakeUpTests,
    ReadTests,
    PageTests,
    ScheduleTests,
    KeptResultTests,
    DeadLetterTests,
    RetryTests,
    ClaimTests,
    EnqueueTests,
):
    """What every store must do, as tests; subclass it to run them on yours.

    A subclass overrides ``make_store`` and may set ``persistent``. Each test
    gets a fresh place: ``self.tmp_path`` (pytest's ``tmp_path``) is set
    before the test runs, for stores that keep files; a store kept elsewhere
    (a database) adds an autouse fixture of its own that picks a fresh place
    (a new database, schema or queue name) for ``make_store`` to use.
    """
