"""The Arrow memory pool of the driver process that ``calving run`` starts.

Arrow's default pool in pyarrow's wheels is mimalloc, which keeps the pages of memory
freed by other threads for their reuse instead of returning them. In a stream's driver,
running for weeks, one batch's passing peak then stays resident: in a 2,600-batch
soak the driver's RSS stepped up by 36 MiB between batches 2,000 and 2,500 and never
came down, all of it in mimalloc's arena, while the bytes Arrow had allocated stayed
below 5 MiB. With the C library's allocator (Arrow's ``system`` pool) the same soak
grew 249 to 262 MiB with no step, at the same commit times. ``calving run`` therefore
makes the system pool the driver's default; ``ARROW_DEFAULT_MEMORY_POOL`` (Arrow's own
setting) chooses another. Spark's Python workers are not changed."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow as pa

#: Arrow's own choice of default pool; when set, calving leaves the pool alone.
POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


def use_system_pool(environ: Mapping[str, str] = os.environ) -> str:
    """Make the system allocator Arrow's default pool in this process unless
    ``environ`` names one in ``ARROW_DEFAULT_MEMORY_POOL``; the pool's backend name."""
    if not environ.get(POOL_ENV):
        pa.set_memory_pool(pa.system_memory_pool())
    return str(pa.default_memory_pool().backend_name)
