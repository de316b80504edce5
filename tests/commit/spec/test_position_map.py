"""Rewrite position maps: runs, translation against a per-row oracle, bytes round trip."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.errors import CorruptFileError
from calving.commit.spec import position_map as pm


def _copy(sizes: list[int], deleted: list[set[int]], target: int) -> tuple[pm.PositionMap, dict]:
    """Copy the live rows of files of ``sizes`` in order into new files of at most
    ``target`` rows, as a compaction does; returns the map and a per-row oracle."""
    old_f, old_p, new_f, new_p, oracle = [], [], [], [], {}
    out_file, out_pos = 0, 0
    for f, size in enumerate(sizes):
        for p in range(size):
            if p in deleted[f]:
                continue
            if out_pos == target:
                out_file, out_pos = out_file + 1, 0
            old_f.append(f), old_p.append(p), new_f.append(out_file), new_p.append(out_pos)
            oracle[(f"old{f}", p)] = (f"new{out_file}", out_pos)
            out_pos += 1
    pmap = pm.PositionMap.from_rows(
        tuple(f"old{i}" for i in range(len(sizes))),
        tuple(f"new{i}" for i in range(out_file + 1)),
        *(np.array(a, dtype=np.int64) for a in (old_f, old_p, new_f, new_p)),
    )
    return pmap, oracle


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=5),
    data=st.data(),
    target=st.integers(1, 80),
)
def test_translation_matches_a_per_row_oracle(sizes, data, target) -> None:
    deleted = [set(data.draw(st.lists(st.integers(0, max(s - 1, 0)), max_size=s))) for s in sizes]
    pmap, oracle = _copy(sizes, deleted, target)
    assert pmap.rows == len(oracle)
    back = pm.deserialize(pm.serialize(pmap), "m")
    for f, size in enumerate(sizes):
        copied = [p for p in range(size) if p not in deleted[f]]
        for m in (pmap, back):
            got = m.translate(f"old{f}", np.array(copied, dtype=np.int64)) if copied else {}
            want: dict[str, list[int]] = {}
            for p in copied:
                nf, np_ = oracle[(f"old{f}", p)]
                want.setdefault(nf, []).append(np_)
            assert {k: v.tolist() for k, v in got.items()} == {
                k: sorted(v) for k, v in want.items()
            }
        if deleted[f]:
            gone = np.array(sorted(deleted[f]), dtype=np.int64)
            with pytest.raises(pm.UnmappedPositionError):
                pmap.translate(f"old{f}", gone)
            assert pmap.translate(f"old{f}", gone, strict=False) == {}


def test_a_sequential_copy_is_a_few_runs() -> None:
    pmap, _ = _copy([400_000, 300_000], [set(range(0, 1000, 10)), set()], 500_000)
    # Each deleted row breaks a run; otherwise one run per (old file, new file) stretch.
    assert len(pmap.length) <= 100 + 3
    assert len(pm.serialize(pmap)) < 10_000


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:10], "truncated"),
        (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], "checksum"),
        (lambda b: b"X" + b[1:-4] + b"\0\0\0\0", "checksum"),
    ],
)
def test_corrupt_maps_raise_typed_errors(mutate, message) -> None:
    pmap, _ = _copy([10, 5], [{1}, set()], 4)
    with pytest.raises(CorruptFileError, match=message):
        pm.deserialize(mutate(pm.serialize(pmap)), "m.pmap")
