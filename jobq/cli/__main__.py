"""``python -m jobq.cli``: the ``jobq`` command."""

from jobq.cli import main

raise SystemExit(main())
