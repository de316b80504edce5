"""Child-process bodies for the multi-process atomicity tests (spawn imports this module).

Each worker builds its own catalog (engines are per process), waits at a barrier so all
of them contend at once, then makes ``commits`` successful swaps, retrying each lost
one from a fresh read. It returns what it did, so the parent can rebuild the chain.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

from calving.commit.catalog import FilesystemCatalog, SqlCatalog
from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.errors import CatalogUnavailableError, CommitSwapLostError

Swap = tuple[str, str]  # (expected, new)


def _loop(
    catalog: Catalog,
    ident: TableIdent,
    commits: int,
    attempt: Callable[[str, int], str],
) -> tuple[list[Swap], int]:
    done: list[Swap] = []
    losses = 0
    while len(done) < commits:
        try:
            current = catalog.load_metadata_location(ident)
            new = attempt(current, len(done))
        except CommitSwapLostError:
            losses += 1
            continue
        except CatalogUnavailableError:
            time.sleep(0.01)  # not sent: safe to try again
            continue
        done.append((current, new))
    return done, losses


def sql_swapper(
    uri: str, name: str, ident: TableIdent, worker: int, commits: int, barrier: Any, out: Any
) -> None:
    catalog = SqlCatalog(name, uri, create_tables=False)
    barrier.wait(timeout=120)

    def attempt(current: str, step: int) -> str:
        new = f"file:///swaps/{worker}-{step}-{time.monotonic_ns()}.metadata.json"
        catalog.swap_metadata_location(ident, current, new)
        return new

    out.put((worker, *_loop(catalog, ident, commits, attempt)))
    catalog.close()


def fs_committer(
    warehouse: str, ident: TableIdent, worker: int, commits: int, barrier: Any, out: Any
) -> None:
    catalog = FilesystemCatalog(warehouse)
    barrier.wait(timeout=120)

    def attempt(current: str, step: int) -> str:
        new = catalog.new_metadata_location(ident, current)
        body = {"worker": worker, "step": step, "expected": current}
        catalog.commit_metadata(ident, current, new, json.dumps(body).encode())
        return new

    out.put((worker, *_loop(catalog, ident, commits, attempt)))


def run_workers(
    target: Callable[..., None], args: tuple[Any, ...], workers: int, commits: int
) -> list[tuple[int, list[Swap], int]]:
    """Start ``workers`` spawned processes on ``target(*args, worker, commits, barrier,
    out)``, release them together, and collect (worker, swaps, losses) from each."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(workers)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(*args, w, commits, barrier, out)) for w in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=300) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return results


def chain_from(start: str, swaps: list[Swap]) -> list[str]:
    """Follow expected -> new from ``start``; every swap must be used exactly once."""
    successor = dict(swaps)
    assert len(successor) == len(swaps), "two successful swaps from the same expected location"
    chain = [start]
    while chain[-1] in successor:
        chain.append(successor.pop(chain[-1]))
    assert not successor, f"swaps not on the chain: {list(successor.items())[:3]}"
    return chain
