"""Sharded mode on a standalone cluster of two one-core workers: tasks pinned to
executors stay there job after job; the rebuild writes each shard on its owner and
the separate stage steps it there, so every step finds its shard cached and each
executor's cache holds its own shards only; a restart with twice the shards splits
them on their owners, where the next steps find them (its jobs' items by broadcast,
the earlier ones' in the pinned relation); the table reads back exactly
(pyiceberg).

The cluster's driver runs in a child process (``tests.support.shard_owners``): this
process already has a local Spark session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.cost import _cluster_env
from tests.deploy.cluster import StandaloneCluster
from tests.support.oracles import pyiceberg_rows
from tests.support.shard_owners import BATCHES, BATCHES_AFTER, RESHARDED, SHARDS

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_shards_step_on_their_owners_and_stay_cached_there(tmp_path: Path) -> None:
    cluster = StandaloneCluster(_cluster_env(tmp_path / "home"), tmp_path / "spark", 2)
    try:
        cluster.start()
        command = [sys.executable, "-m", "tests.support.shard_owners", cluster.url, str(tmp_path)]
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600)
    finally:
        cluster.stop()
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    out = json.loads(lines[-1])

    # Pinned tasks: item i on executor i, job after job, and swapped with the places.
    assert len(out["places"]) == 2
    first = dict(out["pinned"][0])
    assert first[0] != first[1]
    for job in out["pinned"][1:3]:
        assert dict(job) == first
    assert dict(out["pinned"][3]) == {0: first[1], 1: first[0]}

    # One rebuild (the first batch's, its shards written and cached on their owners);
    # every step is a hit, the first batch's too.
    assert out["rebuilds"] == 1
    counts = [SHARDS] * BATCHES + [RESHARDED] * BATCHES_AFTER
    assert [s["shards"] for s in out["steps"]] == counts
    assert [s["hits"] for s in out["steps"]] == counts
    # Executor i caches shards s with s mod 2 == i, and no other.
    assert {owner: shards for owner, shards, _ in out["cached"]} == {0: [0, 2], 1: [1, 3]}
    # Each owner's worker tidied the shards it stepped as its tasks ended.
    assert all(tidied > 0 for _, _, tidied in out["cached"])
    # The restart with 8 shards split the 4 on the executors (no rebuild), each group
    # on the owner of its new shards, which the first steps found cached there; the
    # old shards are gone from the caches.
    assert out["reshards"] == [1, 0] and out["reshard_places"] == [0, 1]
    assert {owner: shards for owner, shards, _ in out["cached_after"]} == {
        0: [0, 2, 4, 6],
        1: [1, 3, 5, 7],
    }

    # The table: each key once; the initial live keys and every upserted one; the
    # last upsert of each key wins (a batch's amount is its seed, 1..BATCHES).
    before = {i for (i,) in pyiceberg_rows(out["initial"], ["id"])}
    rows = pyiceberg_rows(out["final"], ["id", "name", "amount"])
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids))
    last: dict[int, float] = {}
    for seed, keys in enumerate(out["upserted"], start=1):
        last.update(dict.fromkeys(keys, float(seed)))
    assert set(ids) == before | set(last)
    got = {i: (name, amount) for i, name, amount in rows if i in last}
    assert got == {i: (f"updated-{i}", a) for i, a in last.items()}
