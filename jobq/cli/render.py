"""``jobq.admin.render`` by its first name: what the commands print, shared
with ``flask jobq`` and ``manage.py jobq``, lives there now."""

from jobq.admin.render import *  # noqa: F403
from jobq.admin.render import __all__ as __all__
