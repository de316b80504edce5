"""The worker's shard cache: it hands a chain out once, evicts the least recently used
shard that no recent round used (and keeps what fits when an index outgrows it), counts each shard's bytes once, keeps a bounded memo of its own deltas, and runs its
background work (tidies) in one thread that every use waits for."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from calving.commit.index.shard_cache import ShardCache
from calving.commit.index.store import build_from_table
from tests.commit.index.test_shard_chain import _chain


def test_the_cache_hands_a_chain_out_once_and_evicts_the_oldest(sqlite_catalog: Any) -> None:
    table, manifest, shard_index = _chain(sqlite_catalog, "int")
    cache = ShardCache()
    a, b = manifest.shards[0], manifest.shards[1]
    cache.put(a, shard_index, 1 << 30)
    assert cache.take(a) is shard_index and cache.take(a) is None  # taken: changed in place
    cache.put(a, shard_index, 1 << 30)
    cache.end_round()
    cache.end_round()  # a is not used in two rounds: it may go
    cache.put(b, build_from_table(table.io, table.metadata), shard_index.nbytes + 1)
    assert cache.take(a) is None and cache.take(b) is not None  # a went: over the budget
    assert (cache.hits, cache.misses) == (2, 2)
    # An earlier state of a chain (its base and first delta) serves the chain that grew.
    first = replace(b, deltas=("d1",))
    cache.put(first, shard_index, 1 << 30)
    assert cache.take_prefix(replace(b, deltas=("d1x", "d2"))) is None  # another history
    assert cache.take_prefix(replace(b, deltas=("d1", "d2"))) == (shard_index, 1)
    assert len(cache) == 0
    # A base replaced (a reshard): every cached state on it goes, others stay.
    cache.put(replace(b, deltas=("d1",)), shard_index, 1 << 30)
    cache.put(b, shard_index, 1 << 30)
    cache.put(a, shard_index, 1 << 30)
    cache.forget(b.location)
    assert len(cache) == 1 and cache.shards() == [a.shard]


def test_the_cache_counts_each_shard_once_as_it_was_put(sqlite_catalog: Any) -> None:
    table, manifest, shard_index = _chain(sqlite_catalog, "int")
    whole = build_from_table(table.io, table.metadata)
    a, b = manifest.shards[0], manifest.shards[1]
    cache = ShardCache()
    cache.put(a, shard_index, 1 << 30)
    cache.put(b, whole, 1 << 30)
    assert cache.nbytes == shard_index.nbytes + whole.nbytes
    cache.put(b, whole, 1 << 30)  # the same chain again: counted once
    assert cache.nbytes == shard_index.nbytes + whole.nbytes
    taken = cache.take(a)
    assert taken is shard_index and cache.nbytes == whole.nbytes
    cache.put(a, shard_index, 1 << 30)
    cache.keep(a.shard % 2, 2)  # owner of a's shard among two: b's goes
    assert cache.nbytes == shard_index.nbytes and cache.shards() == [a.shard]
    cache.forget(a.location)
    assert cache.nbytes == 0 and len(cache) == 0
    cache.put(a, shard_index, 1 << 30)
    cache.put(b, whole, whole.nbytes)  # over the budget, a used in this round: b is not kept
    assert cache.nbytes == shard_index.nbytes and cache.shards() == [a.shard]
    cache.end_round()
    cache.put(b, whole, whole.nbytes)  # a used in the round before: still kept
    assert cache.shards() == [a.shard]
    cache.end_round()
    cache.put(b, whole, whole.nbytes)  # a unused for two rounds: the oldest goes
    assert cache.nbytes == whole.nbytes and cache.shards() == [b.shard]
    cache.clear()
    assert cache.nbytes == 0


@pytest.mark.parametrize("fit", [3, 5, 8])
def test_an_index_larger_than_the_cache_keeps_what_fits_batch_after_batch(
    sqlite_catalog: Any, fit: int
) -> None:
    """Eight shards stepped in the same order every round (a task each), the cache
    holding ``fit`` of them: the same ``fit`` shards are found every round after the
    first, the others read (with plain LRU eviction, each put evicted the shard the
    next step asked for: no hit at all), and a shard nobody uses any more ages out."""
    _, manifest, shard_index = _chain(sqlite_catalog, "int")
    chains = [replace(manifest.shards[0], location=f"s{i}", shard=i) for i in range(8)]
    budget = fit * shard_index.nbytes
    cache = ShardCache()
    found = []
    for _ in range(5):
        hits = 0
        for chain in chains:  # a step: take the shard (or read it), put it back
            hits += cache.take(chain) is not None
            cache.put(chain, shard_index, budget, stepped=True)
        cache.tidy_in_background()  # the task ends: the round with it
        found.append(hits)
        assert cache.nbytes <= budget
    assert found == [0] + [min(fit, 8)] * 4
    kept = cache.shards()
    assert len(kept) == min(fit, 8)
    # The table's shards are replaced (other chains): the old ones go once unused for
    # two rounds, and the new ones take their place.
    fresh = [replace(c, location=f"new-{c.location}") for c in chains]
    for round_ in range(3):
        for chain in fresh:
            cache.take(chain)
            cache.put(chain, shard_index, budget)
        cache.end_round()
        if round_ == 0:
            assert set(cache.shards()) == set(kept) or fit == 8  # old ones still protected
    assert len(cache) == min(fit, 8)
    assert all(cache.take(c) is not None for c in fresh[: min(fit, 8)])


def test_a_remembered_delta_is_handed_out_once_and_the_memo_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from calving.commit.index import shard_cache
    from calving.commit.index.keys import IntKeys
    from calving.commit.index.shard_chain import AddedFile, Deleted

    def changes(n: int) -> tuple[list[AddedFile], Deleted]:
        keys = IntKeys(np.arange(n, dtype=np.int64))
        added = [AddedFile("f.parquet", n, keys, np.arange(n, dtype=np.int64))]
        none = np.empty(0, np.int64)
        return added, Deleted((), IntKeys(none), none, none)

    cache = ShardCache()
    added, deleted = changes(3)
    cache.remember_delta("d1", added, deleted)
    assert cache.recall_delta("d1") == (added, deleted)
    assert cache.recall_delta("d1") is None  # handed out once
    # 16 bytes an entry (key and position): three of 1000 entries fit in 40,000 bytes.
    monkeypatch.setattr(shard_cache, "DELTA_MEMO_BYTES", 40_000)
    for name in ("d2", "d3", "d4"):
        cache.remember_delta(name, *changes(1000))
    assert cache.recall_delta("d2") is None  # the oldest went
    assert cache.recall_delta("d4") is not None and cache.recall_delta("d3") is not None
    cache.remember_delta("d5", *changes(1))
    cache.clear()
    assert cache.recall_delta("d5") is None


def test_the_cache_tidies_stepped_shards_in_a_thread_that_every_use_waits_for(
    sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tidy_in_background`` tidies the shards steps put, in a thread; taking a shard
    waits for it, and a shard whose tidy failed is not handed out again."""
    import threading
    import time

    table, manifest, shard_index = _chain(sqlite_catalog, "int")
    a, b = manifest.shards[0], manifest.shards[1]
    other = build_from_table(table.io, table.metadata)
    cache = ShardCache()
    done = threading.Event()
    calls: list[str] = []

    def slow_tidy() -> bool:
        calls.append(threading.current_thread().name)
        time.sleep(0.3)
        done.set()
        return True

    monkeypatch.setattr(shard_index, "tidy", slow_tidy)
    monkeypatch.setattr(other, "tidy", lambda: calls.append("not stepped") or False)
    cache.put(a, shard_index, 1 << 30, stepped=True)
    cache.put(b, other, 1 << 30)  # put by a rebuild, say: not tidied
    cache.tidy_in_background()
    assert cache.take(a) is shard_index and done.is_set()  # waited for the tidy
    assert calls == ["calving-shard-tidy"] and (cache.tidied, cache.merged) == (1, 1)
    cache.tidy_in_background()  # nothing stepped since: no thread
    assert cache._background is None and calls == ["calving-shard-tidy"]

    def broken_tidy() -> bool:
        raise MemoryError("half merged")

    monkeypatch.setattr(shard_index, "tidy", broken_tidy)
    cache.put(a, shard_index, 1 << 30, stepped=True)
    cache.tidy_in_background()
    assert cache.take(a) is None and cache.shards() == [b.shard]
    assert cache.nbytes == other.nbytes
