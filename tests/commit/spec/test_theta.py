"""Theta sketches (Puffin apache-datasketches-theta-v1) against the Apache DataSketches
library as the independent implementation: same hashes for the values it can take, its
reader accepts our bytes, and estimates stay inside its error bounds of exact counts."""

from __future__ import annotations

import struct

import datasketches as ds
import numpy as np
import pytest

from calving.commit.errors import CorruptFileError
from calving.commit.spec import theta


def _ds_sketch(
    values: list[int] | list[float] | list[str], lg_k: int = 16
) -> ds.compact_theta_sketch:
    s = ds.update_theta_sketch(lg_k)
    for v in values:
        s.update(v)
    return s.compact()


def test_long_double_and_string_hashes_are_datasketches_hashes() -> None:
    """DataSketches' update(int) hashes 8 LE bytes, update(float) the double's 8 bytes,
    update(str) its UTF-8 bytes: Iceberg's single-value serialization of long, double and
    string. Our vectorized and per-value hashers must retain exactly its hashes."""
    rng = np.random.default_rng(7)
    longs = rng.integers(-(2**62), 2**62, size=2000, dtype=np.int64)
    ours = theta.hash_fixed(longs.view(np.uint64), 8)
    assert sorted(ours.tolist()) == sorted(_ds_sketch([int(v) for v in longs]))

    doubles = rng.normal(size=500)
    ours = theta.hash_fixed(doubles.view(np.uint64), 8)
    assert sorted(ours.tolist()) == sorted(_ds_sketch([float(v) for v in doubles]))

    words = [f"key-{i}-é" for i in range(700)]
    ours = theta.hash_bytes(w.encode() for w in words)
    assert sorted(ours.tolist()) == sorted(_ds_sketch(words))


def test_four_byte_values_hash_like_their_bytes() -> None:
    """int, float and date serialize to 4 bytes; the column path must equal hashing
    those bytes one by one (which DataSketches' Python API cannot take)."""
    ints = np.arange(-300, 300, dtype=np.int32)
    ours = theta.hash_fixed(ints.view(np.uint32), 4)
    expected = theta.hash_bytes(struct.pack("<i", int(v)) for v in ints)
    assert ours.tolist() == expected.tolist()


def test_exact_mode_bytes_equal_datasketches_serialization() -> None:
    values = list(range(1000))
    sketch = theta.ThetaSketch.of_hashes(theta.hash_fixed(np.arange(1000, dtype=np.uint64), 8))
    assert not sketch.estimating
    assert theta.serialize(sketch) == _ds_sketch(values).serialize()
    assert theta.deserialize(theta.serialize(sketch), "t").hashes.tolist() == sketch.hashes.tolist()


@pytest.mark.parametrize("distinct", [0, 1, 4096, 4097, 250_000])
def test_estimates_within_datasketches_bounds(distinct: int) -> None:
    rng = np.random.default_rng(distinct)
    values = rng.permutation(np.arange(distinct, dtype=np.int64) * 7919)
    repeated = np.concatenate([values, values[: distinct // 3]])  # duplicates do not count
    sketch = theta.ThetaSketch.of_hashes(theta.hash_fixed(repeated.view(np.uint64), 8))
    data = theta.serialize(sketch)
    read = ds.compact_theta_sketch.deserialize(data)
    assert read.num_retained == len(sketch.hashes) <= theta.DEFAULT_K
    assert read.get_estimate() == pytest.approx(sketch.estimate())
    assert read.get_lower_bound(3) <= distinct <= read.get_upper_bound(3)
    assert sketch.ndv() == round(read.get_estimate())
    assert read.is_estimation_mode() == (distinct > theta.DEFAULT_K)
    assert read.theta64 == sketch.theta
    back = theta.deserialize(data, "t")
    assert (back.theta, back.hashes.tolist()) == (sketch.theta, sketch.hashes.tolist())


def test_union_of_sketches_is_the_sketch_of_the_union() -> None:
    a = np.arange(0, 60_000, dtype=np.uint64)
    b = np.arange(40_000, 90_000, dtype=np.uint64)
    sa = theta.ThetaSketch.of_hashes(theta.hash_fixed(a, 8))
    sb = theta.ThetaSketch.of_hashes(theta.hash_fixed(b, 8))
    whole = theta.ThetaSketch.of_hashes(theta.hash_fixed(np.concatenate([a, b]), 8))
    merged = theta.union([sa, sb])
    assert merged.theta == whole.theta
    assert merged.hashes.tolist() == whole.hashes.tolist()
    merged_ds = ds.theta_union(12)
    merged_ds.update(ds.compact_theta_sketch.deserialize(theta.serialize(sa)))
    merged_ds.update(ds.compact_theta_sketch.deserialize(theta.serialize(sb)))
    assert (
        merged_ds.get_result().get_lower_bound(3)
        <= 90_000
        <= merged_ds.get_result().get_upper_bound(3)
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:5], "truncated"),
        (lambda b: b[:1] + b"\x02" + b[2:], "serial version"),
        (lambda b: b[:6] + b"\x00\x00" + b[8:], "seed hash"),
        (lambda b: b[:-3], "bytes, want"),
        (lambda b: b[:2] + b"\x01" + b[3:], "family"),
    ],
)
def test_corrupt_sketches_raise_typed_errors(mutate, message) -> None:
    data = theta.serialize(
        theta.ThetaSketch.of_hashes(theta.hash_fixed(np.arange(9, dtype=np.uint64), 8))
    )
    with pytest.raises(CorruptFileError, match=message):
        theta.deserialize(mutate(data), "f.puffin")
