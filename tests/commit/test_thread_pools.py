"""Process-lived thread pools: one per name, and a forked child's own."""

from __future__ import annotations

import os
import threading

from calving.commit.thread_pools import shared_pool


def test_a_name_gives_the_same_pool_and_its_threads_carry_the_name():
    pool = shared_pool("calving-test-a", 2)
    assert shared_pool("calving-test-a", 5) is pool
    assert shared_pool("calving-test-b", 2) is not pool
    names = set(pool.map(lambda _: threading.current_thread().name, range(8)))
    assert names and all(n.startswith("calving-test-a") for n in names)


def test_a_forked_child_runs_work_on_a_pool_of_its_own():
    parent = shared_pool("calving-test-fork", 2)
    assert parent.submit(lambda: 1).result() == 1  # the parent's threads are running
    pid = os.fork()
    if pid == 0:  # the child: the inherited pool has no threads; a new one must run
        ok = False
        try:
            child = shared_pool("calving-test-fork", 2)
            ok = child is not parent and child.submit(lambda: 7).result(timeout=10) == 7
        finally:
            os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
