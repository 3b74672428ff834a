"""The engine that runs a queue's jobs, private to jobq.

Its modules import one way, each only those below it:

- ``pool``: the worker threads, the watchdog, abandoned threads replaced;
- ``dispatch``: one place that records outcomes and claims for every
  worker (group commit);
- ``runner``: one attempt of one claimed job, its outcome recorded, its
  events told;
- ``limits``: the time limit, a wrapper around the handler call that
  knows nothing of the runner;
- ``interrupt``: how an exception reaches a handler's thread safely;
- ``stacks``: another thread's stack, read without its frame objects.

Nothing here is public; ``jobq.queue`` is the facade over it.
"""
