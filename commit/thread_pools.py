"""Thread pools that live as long as the process: one per purpose, made on first use.

Making a ``ThreadPoolExecutor`` per call starts its threads again each time (about
0.1 ms a thread, several per commit, every batch). A pool here is made once per process
and per name; a forked child forgets its parent's pools (it inherits the objects but
none of their threads, so work submitted to them would never run) and makes its own.

A task running on a pool must not wait for work it submits to the same pool (the pool
could be full of such waiters): each caller uses its own name.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_POOLS: dict[str, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool called ``name`` (its threads are named after it), made with
    ``workers`` threads on first use."""
    with _LOCK:
        pool = _POOLS.get(name)
        if pool is None:
            pool = _POOLS[name] = ThreadPoolExecutor(workers, thread_name_prefix=name)
        return pool


def _forget_after_fork() -> None:
    global _LOCK
    _POOLS.clear()
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)

__all__ = ["shared_pool"]
