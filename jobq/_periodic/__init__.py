"""Periodic jobs, private to jobq: ``slots`` (when a schedule falls due:
pure arithmetic of times) and ``scheduler`` (declarations, and the
enqueueing of each slot once across processes). ``JobQueue.periodic`` is
the public face."""
