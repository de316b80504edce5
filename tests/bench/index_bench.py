"""Primary-key index: resident bytes per key and lookups per second, against a dict.

The peer is what a straightforward implementation would do: a Python ``dict`` from the
key (int, str, or tuple) to a ``(file id, position)`` tuple, built and probed in the same
run on the same keys. Its bytes are measured with ``tracemalloc`` (every object it owns);
the index's are the sum of its numpy arrays' ``nbytes`` plus its path strings.

Lookups go in batches (half the keys present, half absent). The dict's rate is given
twice: probing keys that are already Python objects (its best case) and including the
Arrow -> Python conversion a streaming writer would pay.

    python -m tests.bench.index_bench [--full] [--keys N] [--kinds long,string,composite]

``figures(quick)`` returns the same measurements to the suite (``python -m tests.bench``):
1M keys of each kind (quick), 1M and 10M (full); goals <= 40 bytes/key, >= 1M lookups/s.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.spec.types import LONG, STRING, PrimitiveType
from tests.bench.figures import Figure, at_least, at_most

FILE_ROWS = 100_000
BATCH = 100_000
GOAL_BYTES_PER_KEY = 40.0
GOAL_LOOKUPS_PER_S = 1_000_000.0


def _long_keys(rng: np.random.Generator, n: int) -> pa.Table:
    return pa.table({"id": rng.choice(1 << 62, size=n, replace=False).astype(np.int64)})


def _string_keys(rng: np.random.Generator, n: int) -> pa.Table:
    ids = rng.permutation(n * 4)[:n]
    return pa.table({"k": pa.array([f"customer-{i:012d}" for i in ids], pa.string())})


def _composite_keys(rng: np.random.Generator, n: int) -> pa.Table:
    ids = rng.permutation(n * 4)[:n]
    return pa.table(
        {
            "tenant": pa.array([f"t{i % 97:03d}" for i in ids], pa.string()),
            "id": pa.array(ids, pa.int64()),
        }
    )


KINDS: dict[str, tuple[list[PrimitiveType], Callable[[np.random.Generator, int], pa.Table]]] = {
    "long": ([LONG], _long_keys),
    "string": ([STRING], _string_keys),
    "composite": ([STRING, LONG], _composite_keys),
}


def _python_keys(table: pa.Table) -> list[Any]:
    columns = [c.to_pylist() for c in table.columns]
    return columns[0] if len(columns) == 1 else list(zip(*columns))


def _rate(fn: Callable[[], Any], keys: int, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return keys / best


def _measure_index(
    types: list[PrimitiveType], stored: pa.Table, probes: pa.Table
) -> tuple[float, float, float]:
    """(build seconds, resident bytes per key, lookups per second)."""
    n = stored.num_rows
    index = PrimaryKeyIndex(list(range(1, len(types) + 1)), types)
    t0 = time.perf_counter()
    for f, start in enumerate(range(0, n, FILE_ROWS)):
        index.add_file(f"s3://bucket/t/data/f{f:06d}.parquet", stored.slice(start, FILE_ROWS))
    index.compact()
    build_s = time.perf_counter() - t0
    matches = index.lookup(probes)
    assert int(matches.found.sum()) == BATCH - BATCH // 2
    return build_s, index.nbytes / n, _rate(lambda: index.lookup(probes), BATCH)


def bench_kind(kind: str, n: int, seed: int = 7) -> dict[str, float]:
    types, make = KINDS[kind]
    rng = np.random.default_rng(seed)
    everything = make(rng, n + BATCH // 2)
    stored, absent = everything.slice(0, n), everything.slice(n)
    probe_rows = np.concatenate(
        [rng.choice(n, BATCH - BATCH // 2, replace=False), np.arange(n, n + BATCH // 2)]
    )
    probes = everything.take(pa.array(rng.permutation(probe_rows)))
    assert absent.num_rows == BATCH // 2

    build_s, index_bytes, index_rate = _measure_index(types, stored, probes)
    gc.collect()
    py_stored = _python_keys(stored)
    py_probes = _python_keys(probes)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    peer: dict[Any, tuple[int, int]] = {}
    for i, key in enumerate(py_stored):
        peer[key] = (i // FILE_ROWS, i % FILE_ROWS)
    dict_bytes = (tracemalloc.get_traced_memory()[0] - before) / n
    tracemalloc.stop()
    get = peer.get
    dict_rate = _rate(lambda: [get(k) for k in py_probes], BATCH)
    dict_rate_arrow = _rate(lambda: [get(k) for k in _python_keys(probes)], BATCH)
    return {
        "build_s": build_s,
        "index_bytes": index_bytes,
        "dict_bytes": dict_bytes,
        "index_rate": index_rate,
        "dict_rate": dict_rate,
        "dict_rate_arrow": dict_rate_arrow,
    }


def _keys_label(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1_000}k" if n % 1_000 == 0 else str(n)


def figures(
    quick: bool, sizes: list[int] | None = None, kinds: list[str] | None = None
) -> list[Figure]:
    """Bytes per key and lookups per second of each key kind, against a dict."""
    sizes = sizes or ([1_000_000] if quick else [1_000_000, 10_000_000])
    out: list[Figure] = []
    for n in sizes:
        for kind in kinds or list(KINDS):
            r = bench_kind(kind, n)
            label = f"{kind} keys @{_keys_label(n)}"
            out.append(
                Figure(
                    "index",
                    f"resident bytes/key, {label}",
                    r["index_bytes"],
                    "Python dict -> (file, pos)",
                    r["dict_bytes"],
                    goal=f"<= {GOAL_BYTES_PER_KEY:.0f} B/key",
                    met=at_most(r["index_bytes"], GOAL_BYTES_PER_KEY),
                )
            )
            out.append(
                Figure(
                    "index",
                    f"lookups/s, {label}",
                    r["index_rate"],
                    "dict.get + Arrow->Python",
                    r["dict_rate_arrow"],
                    better="higher",
                    goal=">= 1M/s",
                    met=at_least(r["index_rate"], GOAL_LOOKUPS_PER_S),
                    note=f"dict.get alone (keys already Python objects): "
                    f"{r['dict_rate']:,.0f}/s; index built in {r['build_s']:.2f} s",
                )
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also run 10M keys")
    parser.add_argument("--keys", type=int, default=0, help="one size instead of the defaults")
    parser.add_argument("--kinds", default="long,string,composite")
    args = parser.parse_args()
    sizes = [args.keys] if args.keys else ([1_000_000, 10_000_000] if args.full else [1_000_000])
    print(
        f"{'kind':10} {'keys':>10} {'B/key':>7} {'dict B/key':>10} {'ratio':>6} "
        f"{'lookups/s':>11} {'dict/s':>11} {'dict+conv/s':>11} {'ratio':>6} {'build s':>8}"
    )
    for n in sizes:
        for kind in args.kinds.split(","):
            r = bench_kind(kind, n)
            print(
                f"{kind:10} {n:>10,} {r['index_bytes']:>7.1f} {r['dict_bytes']:>10.1f} "
                f"{r['dict_bytes'] / r['index_bytes']:>5.1f}x "
                f"{r['index_rate']:>11,.0f} {r['dict_rate']:>11,.0f} "
                f"{r['dict_rate_arrow']:>11,.0f} "
                f"{r['index_rate'] / r['dict_rate_arrow']:>5.1f}x {r['build_s']:>8.2f}",
                flush=True,
            )
    print("ratio columns: dict bytes / index bytes; index rate / (dict + Arrow conversion) rate")


if __name__ == "__main__":
    main()
