"""``jobq.admin.operations`` by its first name: what each command does,
shared with ``flask jobq`` and ``manage.py jobq``, lives there now."""

from jobq.admin.operations import *  # noqa: F403
from jobq.admin.operations import __all__ as __all__
