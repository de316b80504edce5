"""The ``calving`` process's entry point: what must be decided before anything else is
imported, then the command (:mod:`calving.ingest.cli`).

Arrow chooses its default memory pool once per process, when it is first used. A
stream's driver allocates in bursts (a batch's decode, a commit's manifests) and frees
them again; mimalloc, Arrow's default, keeps the pages of a passing peak (a soak's
driver grew 36 MiB in one step at a few MiB of Arrow data, and kept them), the C
library's allocator gives them back. So the driver runs on the system pool unless
``ARROW_DEFAULT_MEMORY_POOL`` names another. Only the driver: the variable is not
passed on to the processes it starts (Spark's JVM and its Python workers keep Arrow's
default). ``python -m calving.ingest.launch`` runs it too (``__main__``).

It first gives the process one glibc arena (``allocator.DRIVER_MALLOC``), before any
thread starts: a batch's commit runs on a py4j callback thread, which glibc would give
an arena of its own that returns its pages and faults them in again.
"""

from __future__ import annotations

import os
import sys

POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
DRIVER_POOL = "system"


def choose_memory_pool() -> str:
    """Make ``DRIVER_POOL`` this process's default Arrow pool unless ``POOL_ENV`` is set,
    and return the default pool's backend name. Once pyarrow is imported the choice is
    made: then this only reports it (switching a pool under live buffers is not done)."""
    if "pyarrow" in sys.modules:
        import pyarrow

        return str(pyarrow.default_memory_pool().backend_name)
    ours = POOL_ENV not in os.environ
    if ours:
        os.environ[POOL_ENV] = DRIVER_POOL
    try:
        import pyarrow

        return str(pyarrow.default_memory_pool().backend_name)
    finally:
        if ours:
            del os.environ[POOL_ENV]


def prepare_driver() -> str:
    """What the ``calving`` process decides first: one glibc arena (unless its
    environment sets glibc's allocator), then Arrow's pool (``choose_memory_pool``,
    whose backend name it returns)."""
    from calving.ingest.allocator import DRIVER_MALLOC, tune_malloc

    tune_malloc(DRIVER_MALLOC)
    return choose_memory_pool()


def main(argv: list[str] | None = None) -> int:
    """``calving ARGV``: the installed command."""
    prepare_driver()
    from calving.ingest.cli import main as command

    return command(argv)
