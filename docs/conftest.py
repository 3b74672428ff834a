"""The documentation's Python samples run as tests: ``python -m pytest``
collects every Markdown page of ``docs/`` through Sybil.

The samples of one page share a namespace, run in order, in a temporary
directory of their own (so ``store="jobs.json"`` writes there). A sample that
needs a server or a framework's app is marked ``<!-- skip: next -->`` with its
reason, and set-up a reader need not see is an ``<!-- invisible-code-block:
python -->``. At the end of a page, every queue the samples left open is
closed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser

import jobq


def enter_directory(namespace: dict[str, Any]) -> None:
    """Run the page's samples in a new temporary directory."""
    namespace["__name__"] = "docs_sample"
    namespace["_docs_cwd"] = os.getcwd()
    namespace["_docs_dir"] = tempfile.mkdtemp(prefix="jobq-docs-")
    os.chdir(namespace["_docs_dir"])


def close_queues(namespace: dict[str, Any]) -> None:
    """Close the queues the samples left open, and leave their directory."""
    for value in list(namespace.values()):
        if isinstance(value, jobq.JobQueue):
            value.close(timeout=5)
    os.chdir(namespace["_docs_cwd"])
    shutil.rmtree(namespace["_docs_dir"], ignore_errors=True)


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser()],
    patterns=["*.md"],
    setup=enter_directory,
    teardown=close_queues,
).pytest()
