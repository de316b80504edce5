"""The index's contract beyond the model test: duplicate keys, update errors, all-or-nothing
compaction, result helpers and resident size."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap64

from calving.commit.errors import UnsupportedFeatureError
from calving.commit.index.keys import NullKeyError
from calving.commit.index.pk_index import IndexUpdateError, PrimaryKeyIndex
from calving.commit.spec.types import INT, LONG, STRING


def _ids(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def _index() -> PrimaryKeyIndex:
    return PrimaryKeyIndex([1], [LONG])


def test_a_duplicated_key_yields_every_live_position() -> None:
    index = _index()
    index.add_file("a", _ids(7, 1, 7))
    index.add_file("b", _ids(7, 2))
    matches = index.lookup(_ids(2, 7, 9))
    assert matches.found.tolist() == [True, True, False]
    assert {p: v.tolist() for p, v in matches.by_file().items()} == {"a": [0, 2], "b": [0, 1]}
    assert matches.deletes() == {"a": BitMap64([0, 2]), "b": BitMap64([0, 1])}
    index.delete_positions("a", BitMap64([2]))
    after = index.lookup(_ids(7))
    assert sorted(zip(map(after.file_path, after.file_ids), after.positions.tolist())) == [
        ("a", 0),
        ("b", 0),
    ]


def test_keys_outside_the_indexed_range_are_not_probed_and_edges_still_match() -> None:
    """Int keys out of every run's hash range are left out before the probe sort; the
    runs' first and last keys (the range's edges) must still be found, in base and delta
    runs alike, and a key between two runs' ranges not."""
    index = PrimaryKeyIndex([1], [LONG], min_merge_rows=4, merge_fraction=0.0)
    index.add_file("base", _ids(*range(100, 200)))
    index.lookup(_ids(0))  # settles "base" into one run
    index.compact()
    index.add_file("delta", _ids(500, 501, 900))
    probe = [1_000, 99, 100, 199, 200, 499, 500, 900, 901, -(2**63), 2**63 - 1, 150]
    matches = index.lookup(_ids(*probe))
    assert matches.found.tolist() == [
        False, False, True, True, False, False, True, True, False, False, False, True,
    ]  # fmt: skip
    found = sorted(zip(matches.key_rows.tolist(), map(matches.file_path, matches.file_ids)))
    assert found == [(2, "base"), (3, "base"), (6, "delta"), (7, "delta"), (11, "base")]
    assert index.lookup(_ids(*range(2_000, 3_000))).found.sum() == 0


def test_lookups_on_empty_inputs() -> None:
    index = _index()
    assert index.lookup(_ids()).found.tolist() == []
    assert index.lookup(_ids(1)).found.tolist() == [False]
    index.add_file("a", _ids())
    assert index.lookup(_ids(1)).by_file() == {}
    assert len(index) == 0 and index.file_paths == ["a"]


def test_update_errors() -> None:
    index = _index()
    index.add_file("a", _ids(1, 2, 3))
    with pytest.raises(IndexUpdateError, match="already"):
        index.add_file("a", _ids(4))
    with pytest.raises(IndexUpdateError, match="not in"):
        index.delete_positions("zz", [0])
    with pytest.raises(IndexUpdateError, match="beyond"):
        index.delete_positions("a", [3])
    with pytest.raises(IndexUpdateError, match="negative"):
        index.delete_positions("a", [-1])
    with pytest.raises(IndexUpdateError, match="positions"):
        index.add_file("b", _ids(1, 2), positions=[0])
    with pytest.raises(IndexUpdateError, match="repeated"):
        index.add_file("b", _ids(1, 2), positions=[3, 3])
    with pytest.raises(IndexUpdateError, match="beyond"):
        index.add_file("b", _ids(1), positions=[5], row_count=5)
    with pytest.raises(IndexUpdateError):
        index.remove_file("zz")
    assert index.file_paths == ["a"] and len(index) == 3


def test_deletes_of_many_files_at_once_equal_one_call_a_file() -> None:
    one, many = _index(), _index()
    for index in (one, many):
        index.add_file("a", _ids(1, 2, 3))
        index.add_file("b", _ids(4, 5, 6, 7), positions=[0, 1, 2, 9], row_count=10)
    one.delete_positions("a", [2])
    one.delete_positions("b", [0, 9])
    # "new" has no deleted rows: not looked up (a delta's file table lists the files it
    # adds too, which the index does not hold yet).
    many.delete_located(["b", "new", "a"], np.array([0, 2, 0]), np.array([0, 2, 9]))
    for index in (one, many):
        assert index.lookup(_ids(1, 2, 3, 4, 5, 6, 7)).found.tolist() == [
            True, True, False, False, True, True, False
        ]  # fmt: skip
    assert one.live_rows_per_file() == many.live_rows_per_file() == {"a": 2, "b": 2}
    with pytest.raises(IndexUpdateError, match=r"^b: position 10 beyond its 10 rows"):
        many.delete_located(["a", "b"], np.array([0, 1]), np.array([0, 10]))
    with pytest.raises(IndexUpdateError, match="^zz: not in"):
        many.delete_located(["a", "zz"], np.array([1]), np.array([0]))
    with pytest.raises(IndexUpdateError, match="position -1"):
        many.delete_located(["a"], np.array([0]), np.array([-1]))
    many.delete_located(["zz"], np.array([], np.int64), np.array([], np.int64))  # nothing
    assert many.live_rows_per_file() == {"a": 2, "b": 2}


def test_delete_is_idempotent() -> None:
    index = _index()
    index.add_file("a", _ids(1, 2, 3), positions=[0, 2, 4], row_count=6)
    index.delete_positions("a", [2, 2, 5])
    index.delete_positions("a", np.array([2], np.uint64))
    assert index.live_rows_per_file() == {"a": 2}
    assert index.lookup(_ids(1, 2, 3)).found.tolist() == [True, False, True]


def test_replace_files_is_all_or_nothing() -> None:
    index = _index()
    index.add_file("a", _ids(1, 2))
    index.add_file("b", _ids(3))
    bad = pa.table({"id": pa.array([1, None], pa.int64())})
    with pytest.raises(NullKeyError):
        index.replace_files(["a", "b"], {"c": _ids(2, 3), "d": bad})
    with pytest.raises(IndexUpdateError):
        index.replace_files(["a", "missing"], {"c": _ids(1, 2)})
    with pytest.raises(IndexUpdateError):
        index.replace_files(["a"], {"b": _ids(1, 2)})  # b is live and not replaced
    assert sorted(index.file_paths) == ["a", "b"] and len(index) == 3

    index.replace_files(["a", "b"], {"c": _ids(3, 1, 2)})
    assert index.lookup(_ids(1, 2, 3)).by_file()["c"].tolist() == [0, 1, 2]
    assert index.file_paths == ["c"]


def test_a_path_removed_and_added_again_is_a_new_file() -> None:
    index = _index()
    index.add_file("a", _ids(1, 2))
    old = index.lookup(_ids(1))
    index.replace_files(["a"], {"a": _ids(2, 1)})
    new = index.lookup(_ids(1))
    assert new.positions.tolist() == [1] and new.file_ids[0] != old.file_ids[0]
    assert old.file_path(old.file_ids[0]) == "a"  # ids are never reused


def test_long_keys_take_sixteen_bytes_resident() -> None:
    index = _index()
    n = 200_000
    for f in range(4):
        index.add_file(f"s3://bucket/data/{f}.parquet", _ids(*range(f * n // 4, (f + 1) * n // 4)))
    index.compact()
    assert index.nbytes / n <= 16.1
    assert index.lookup(_ids(0, n - 1, n)).found.tolist() == [True, True, False]


def test_string_keys_stay_compact() -> None:
    index = PrimaryKeyIndex([1], [STRING])
    keys = pa.table({"k": [f"order-{i:010d}" for i in range(100_000)]})  # 16 bytes each
    index.add_file("f", keys)
    index.compact()
    assert index.nbytes / 100_000 <= 40 + 1


def test_promote_key_types_follows_int_to_long_only() -> None:
    index = PrimaryKeyIndex([1], [INT])
    index.add_file("a", pa.table({"id": pa.array([1, 2], pa.int32())}))
    index.promote_key_types([LONG])
    index.add_file("b", _ids(2**40))
    assert index.lookup(_ids(2, 2**40)).found.tolist() == [True, True]
    with pytest.raises(IndexUpdateError):
        index.promote_key_types([STRING])


def test_positions_past_two_to_the_32_are_refused_not_wrapped() -> None:
    index = _index()
    with pytest.raises(UnsupportedFeatureError):
        index.add_file("a", _ids(1), positions=[2**32 + 5])
    with pytest.raises(IndexUpdateError):
        index.add_file("a", _ids(1), positions=[2**32 + 5], row_count=10)
    assert index.file_paths == []


def test_a_rewrite_moves_entries_in_place_and_leaves_no_dead_weight() -> None:
    """Following a position map moves the entries of the rewritten files: nothing is
    added, nothing re-sorted (the base keeps its hash array), and only the rows the
    rewrite did not copy count as dead (what makes a full merge due)."""
    from calving.commit.spec.position_map import PositionMap

    index = PrimaryKeyIndex([1], [LONG], min_merge_rows=1, merge_fraction=0.5)
    index.add_file("a", pa.table({"id": pa.array(range(6), pa.int64())}))
    index.add_file("b", pa.table({"id": pa.array(range(10, 14), pa.int64())}))
    index.add_file("c", pa.table({"id": pa.array(range(20, 30), pa.int64())}))
    index.compact()
    hashes = index._base.hashes
    # a's rows 0-5 and b's 0-2 go to "n" (b's row 3 was deleted before the rewrite read it)
    pmap = PositionMap.from_rows(
        ("a", "b"),
        ("n",),
        np.array([0] * 6 + [1] * 3, np.int64),
        np.array([*range(6), *range(3)], np.int64),
        np.zeros(9, np.int64),
        np.arange(9, dtype=np.int64),
    )
    index.remap_files(pmap, {"n": 9})
    assert index._base.hashes is hashes and not index._pending
    assert index._dead_entries == 1  # b's row 3 only
    found = index.lookup(pa.table({"id": pa.array([0, 5, 10, 12, 13, 25], pa.int64())}))
    got = sorted(
        (int(r), found.file_path(f), int(p))
        for r, f, p in zip(found.key_rows, found.file_ids, found.positions)
    )
    assert got == [(0, "n", 0), (1, "n", 5), (2, "n", 6), (3, "n", 8), (5, "c", 5)]
    assert sorted(index.file_paths) == ["c", "n"]
    assert index.live_rows_per_file() == {"c": 10, "n": 9}


def test_a_full_merge_drops_the_deleted_entries_through_the_bitmap() -> None:
    """A merge of many entries with few tombstones (the bitmap's case): exactly the
    deleted rows are gone, over files with and without deletes."""
    index = PrimaryKeyIndex([1], [LONG], min_merge_rows=1 << 30)
    index.add_file("a", _ids(*range(1000)))
    index.add_file("b", _ids(*range(1000, 1500)))
    index.add_file("c", _ids(*range(2000, 2100)))
    index.delete_positions("a", [0, 7, 8, 999])
    index.delete_positions("c", [50])
    index.compact()
    assert len(index._base) == 1600 - 5
    assert index.live_rows_per_file() == {"a": 996, "b": 500, "c": 99}
    found = index.lookup(_ids(0, 7, 8, 9, 999, 998, 1000, 2050, 2051))
    assert sorted(int(r) for r in found.key_rows) == [3, 5, 6, 8]


@pytest.mark.parametrize("key_type", [LONG, STRING], ids=str)
def test_tidy_takes_the_merges_off_the_lookups_as_often_as_they_merged(
    key_type: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once ``tidy`` (a worker's idle time) merges between batches, lookups leave the
    merges to it: as many merges as lookups alone did, none in a lookup, the same
    entries found; should the tidies stop, lookups merge again at twice the limit."""

    def column(values: list[int]) -> pa.Table:
        if key_type == STRING:
            return pa.table({"id": pa.array([f"k{v}" for v in values], pa.string())})
        return _ids(*values)

    tidied = PrimaryKeyIndex([1], [key_type], min_merge_rows=10, merge_fraction=0.125)
    plain = PrimaryKeyIndex([1], [key_type], min_merge_rows=10, merge_fraction=0.125)
    merges = {"tidied": 0, "plain": 0}
    for name, index in (("tidied", tidied), ("plain", plain)):
        index.add_file("base", column(list(range(1000))))
        index.compact()  # a base of 1000 entries: the limit is 125
        merge = index.compact

        def counted(merge: Any = merge, name: str = name) -> None:
            merges[name] += 1
            merge()

        monkeypatch.setattr(index, "compact", counted)
    on_lookup = {"tidied": 0, "plain": 0}

    def batch(b: int, tidy: bool) -> None:  # 50 updates: past the limit every third
        keys = list(range(b * 50 % 1000, b * 50 % 1000 + 50))
        for name, index in (("tidied", tidied), ("plain", plain)):
            before = merges[name]
            matches = index.lookup(column(keys))
            on_lookup[name] += merges[name] - before
            for path, positions in matches.by_file().items():
                index.delete_positions(path, positions)
            index.add_file(f"f{b}", column(keys))
        if tidy:
            assert tidied.tidy() == (b % 3 == 2)

    for b in range(9):
        batch(b, tidy=True)
    assert on_lookup == {"tidied": 0, "plain": 2} and merges == {"tidied": 3, "plain": 2}
    everything = column(list(range(1000)))
    a, b = tidied.lookup(everything), plain.lookup(everything)
    assert a.found.all() and b.found.all()
    pairs = {
        name: sorted(zip(m.key_rows.tolist(), map(m.file_path, m.file_ids), m.positions.tolist()))
        for name, m in (("tidied", a), ("plain", b))
    }
    assert pairs["tidied"] == pairs["plain"]
    for b in range(9, 16):  # no more tidies: a lookup merges past 250
        batch(b, tidy=False)
    assert on_lookup["tidied"] == 1


def test_a_merge_with_nothing_to_merge_leaves_the_base_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shard just read (or just merged) is one sorted base: writing it again as a base
    (``export_entries``) or counting its entries does not sort it again; a delete, an
    addition or a removed file does."""
    from calving.commit.index.runs import Run

    index = _index()
    index.add_file("a.parquet", _ids(5, 3, 9))
    index.compact()
    sorts = []
    sort = Run.sorted

    def counted(run: Run) -> Run:
        sorts.append(len(run))
        return sort(run)

    monkeypatch.setattr(Run, "sorted", counted)
    assert len(index) == 3 and sorted(index.export_entries()[2].tolist()) == [0, 1, 2]
    assert sorts == []
    for change in (
        lambda: index.delete_positions("a.parquet", [1]),
        lambda: index.add_file("b.parquet", _ids(7)),
        lambda: index.remove_file("b.parquet"),
    ):
        change()
        index.compact()
        assert len(sorts) == 1, "the change was merged"
        sorts.clear()
        index.compact()
        assert sorts == [], "and once merged, not again"
    assert index.live_rows_per_file() == {"a.parquet": 2}
