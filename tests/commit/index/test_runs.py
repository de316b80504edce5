"""The index's runs and tombstones: a batch's merge into a sorted run, tombstone
inserts, and the two ways a run's entries are checked against the tombstones."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.index.keys import IntKeys
from calving.commit.index.runs import Run, concat_runs, insert_sorted, merge_sorted, tombstoned


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=60),
    st.lists(st.integers(0, 2**64 - 1), max_size=20),
)
def test_tombstones_merge_as_a_sorted_union(existing, new):
    base = np.unique(np.array(existing, dtype=np.uint64))
    values = np.array(new + existing[:3], dtype=np.uint64)  # some already present
    merged = insert_sorted(base, values)
    assert merged.dtype == np.uint64
    assert merged.tolist() == np.union1d(base, values).tolist()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 40), max_size=60),
    st.lists(st.integers(0, 40), max_size=20),
)
def test_a_batch_joins_the_sorted_delta_as_a_stable_sort_of_both_would(
    delta: list[int], batch: list[int]
) -> None:
    def run(hashes: list[int], first_id: int, with_keys: bool) -> Run:
        n = len(hashes)
        ids = np.arange(first_id, first_id + n, dtype=np.uint32)
        keys = IntKeys(ids.astype(np.int64)) if with_keys else None
        return Run(np.array(hashes, np.uint64), ids, ids.copy(), keys)

    for with_keys in (False, True):  # the hash stands for the key, or keys stored
        a = run(sorted(delta), 0, with_keys)
        b = run(batch, len(delta), with_keys).sorted()
        merged = merge_sorted(a, b)
        want = concat_runs([a, b])
        want = want.take(np.argsort(want.hashes, kind="stable"))
        assert merged.hashes.tolist() == want.hashes.tolist()
        # equal hashes keep their order: the delta's entries first, then the batch's
        assert merged.file_ids.tolist() == want.file_ids.tolist()
        assert merged.positions.tolist() == want.positions.tolist()
        if with_keys:
            assert isinstance(merged.keys, IntKeys) and isinstance(want.keys, IntKeys)
            assert merged.keys.values.tolist() == want.keys.values.tolist()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_tombstones_are_found_alike_by_search_and_by_bitmap(data: st.DataObject) -> None:
    """A full merge's check of every entry against the tombstones (a bitmap over the
    rows of the files with tombstones) and a lookup's (a binary search each) agree with
    a set of (file, position): entries of files without tombstones, the first and last
    row of a file, positions at byte edges of the bitmap."""
    file_rows = np.array(data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=6)), np.int64)
    rows = [(f, p) for f, n in enumerate(file_rows.tolist()) for p in range(n)]
    dead = data.draw(st.sets(st.sampled_from(rows), min_size=1))
    entries = data.draw(st.lists(st.sampled_from(rows), min_size=1, max_size=300))
    tomb = np.array(sorted((f << 32) | p for f, p in dead), np.uint64)
    file_ids = np.array([f for f, _ in entries], np.uint32)
    positions = np.array([p for _, p in entries], np.uint32)
    want = [e in dead for e in entries]
    for by_bitmap in (False, True, None):  # the search, the bitmap, the choice
        got = tombstoned(tomb, file_rows, file_ids, positions, by_bitmap)
        assert got.tolist() == want, by_bitmap
