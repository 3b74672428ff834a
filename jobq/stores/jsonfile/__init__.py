"""The JSON-file store: the memory store, kept on disk by one process.

A snapshot plus a journal of changes, each change appended (and with
``fsync=True`` fsynced) before the call that made it returns; other
processes may read the file.

The modules, one job each:

- ``fileio``: the file system as the store sees it (``FileIO``, the seam the
  fault-injection tests swap), durable replaces, moving damaged files aside,
  and the single-owner ``flock`` (``OwnerLock``);
- ``formats``: the snapshot document and the journal's record bodies, both
  ways (``State`` reads them back);
- ``journal``: the journal's segment files and their CRC-framed records, and
  ``scan``, which finds the intact records around damage;
- ``reading``: reading the snapshot and the segments into memory, and what
  of them is damaged, without changing a file;
- ``store``: ``JsonFileStore``, the store protocol on a ``MemoryStore`` that
  records its changes in the journal.
"""

from jobq.stores.jsonfile.store import JsonFileStore

__all__ = ["JsonFileStore"]
