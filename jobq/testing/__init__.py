"""What tests of jobq and of your own stores use: a clock moved by hand.

Needs pytest (``pip install 'jobq[testing]'``); ``import jobq`` never imports
this package.
"""

from __future__ import annotations

from jobq.testing.clock import T0, Clock

__all__ = ["T0", "Clock"]
