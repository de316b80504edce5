"""glibc's allocator for calving's processes, set with ``mallopt`` before they start
threads: the values, and the one function that sets them.

glibc gives each thread that allocates while another holds the main arena an arena of
its own (up to eight a core). A thread's arena gives its freed pages back to the kernel
and faults them in again, which costs what numpy does there a third more CPU:

* A stream's driver runs each batch's commit on a py4j callback thread, not the main
  thread. With one arena (``DRIVER_MALLOC``) the driver of a 2M-key Debezium stream
  (driver index) took 2.0-2.1 CPU-s against 2.6-2.7, and the stream ran 5-17% faster.
  ``calving run`` sets it (``ingest/launch``); glibc's trimming is left as it is.
* Spark's Python workers (``WORKER_MALLOC``, set by calving's worker daemon before it
  forks them, ``ingest/spark_daemon``) also keep arrays of up to 32 MiB in the heap
  and up to 64 MiB of free heap: a sharded index's shards merge and are read ahead in
  a worker's background thread, and arrays of a few MiB were mapped and unmapped one
  by one.

A process whose environment sets ``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_`` or glibc malloc tunables keeps its own settings. This module
imports nothing that starts a thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping, Sequence

#: glibc ``mallopt`` parameters (``malloc.h``).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8

#: The driver's settings: one arena.
DRIVER_MALLOC: tuple[tuple[int, int], ...] = ((M_ARENA_MAX, 1),)

#: The Python workers' settings: one arena, arrays up to 32 MiB from the heap, up to
#: 64 MiB of free heap kept.
WORKER_MALLOC: tuple[tuple[int, int], ...] = (
    (M_ARENA_MAX, 1),
    (M_MMAP_THRESHOLD, 32 << 20),
    (M_TRIM_THRESHOLD, 64 << 20),
)

_MALLOC_ENV = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_malloc(
    settings: Sequence[tuple[int, int]], environ: Mapping[str, str] = os.environ
) -> bool:
    """Set ``settings`` (``(parameter, value)`` pairs) with glibc's ``mallopt``, unless
    the environment sets glibc's allocator itself; False where there is no glibc or a
    setting was refused (the allocator stays as it was, or partly set)."""
    if any(k in environ for k in _MALLOC_ENV) or "glibc.malloc." in environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    return all(mallopt(param, value) == 1 for param, value in settings)
