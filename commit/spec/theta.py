"""Theta sketches for Puffin ``apache-datasketches-theta-v1`` blobs (distinct-value counts).

The Puffin spec: a serialized *compact* theta sketch of the Apache DataSketches library,
default seed (9001), fed with each distinct value converted to bytes by Iceberg's
single-value serialization. A value's hash is MurmurHash3_x64_128(bytes, seed 9001), first
64-bit half, shifted right by one (DataSketches' 63-bit hash space). A sketch keeps the
``k`` smallest hashes and ``theta``, the bound below which every distinct hash was kept,
so ``estimate = retained / (theta / 2**63)``; k = 4096 (DataSketches' default lg_k 12)
gives a relative standard error of about 1/sqrt(k) = 1.6 %.

Sketches of disjoint row sets merge (``union``) without the rows: the union keeps the k
smallest hashes below the smaller theta. Serialization is DataSketches' compact format,
serial version 3 (ordered, little-endian), which the Java and C++ libraries read.

Pure: bytes in, values out; no I/O. Hashing goes through ``mmh3`` (C), one value at a
time: about a million values a second.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import mmh3
import numpy as np

from calving.commit.errors import CorruptFileError
from calving.commit.spec.sorted_sets import unique_sorted

DEFAULT_SEED = 9001
DEFAULT_K = 4096
MAX_THETA = (1 << 63) - 1

_FAMILY_COMPACT = 3
_SERIAL_VERSION = 3
_FLAG_READ_ONLY, _FLAG_EMPTY, _FLAG_COMPACT, _FLAG_ORDERED = 0x02, 0x04, 0x08, 0x10


def hash_fixed(words: np.ndarray, width: int, seed: int = DEFAULT_SEED) -> np.ndarray:
    """63-bit theta hashes of fixed-width values: ``words`` holds each value's ``width``
    (4 or 8) little-endian bytes as an unsigned integer (uint32 for 4, uint64 for 8)."""
    if width not in (4, 8):
        raise ValueError(f"fixed-width hashing takes 4 or 8 bytes, not {width}")
    raw = words.astype("<u4" if width == 4 else "<u8").tobytes()
    return hash_bytes((raw[i : i + width] for i in range(0, len(raw), width)), seed)


def hash_bytes(values: Iterable[bytes], seed: int = DEFAULT_SEED) -> np.ndarray:
    """63-bit theta hashes of values given as their single-value serialized bytes."""
    out = [mmh3.hash64(v, seed=seed, signed=False)[0] >> 1 for v in values]
    return np.asarray(out, dtype=np.uint64)


def seed_hash(seed: int = DEFAULT_SEED) -> int:
    """The 16-bit seed check DataSketches stores in every sketch."""
    h1, _ = mmh3.hash64(struct.pack("<q", seed), seed=0, signed=False)
    return int(h1 & 0xFFFF)


@dataclass(frozen=True)
class ThetaSketch:
    """A compact theta sketch: sorted retained hashes (all below ``theta``) and theta."""

    hashes: np.ndarray  # uint64, ascending, unique, each < theta
    theta: int = MAX_THETA

    @staticmethod
    def of_hashes(hashes: np.ndarray, k: int = DEFAULT_K, theta: int = MAX_THETA) -> ThetaSketch:
        """The sketch of a set of hashes (duplicates allowed): the k smallest below theta."""
        kept = unique_sorted(hashes[hashes < np.uint64(theta)]) if len(hashes) else hashes
        if len(kept) > k:
            theta = int(kept[k])
            kept = kept[:k]
        return ThetaSketch(np.asarray(kept, dtype=np.uint64), theta)

    @property
    def estimating(self) -> bool:
        return self.theta < MAX_THETA

    def estimate(self) -> float:
        """Estimated number of distinct values."""
        if not self.estimating:
            return float(len(self.hashes))
        return len(self.hashes) / (self.theta / float(1 << 63))

    def ndv(self) -> int:
        """The estimate as the Puffin ``ndv`` property: a non-negative whole number."""
        return max(0, round(self.estimate()))


def union(sketches: Sequence[ThetaSketch], k: int = DEFAULT_K) -> ThetaSketch:
    """The sketch of the union of the sketched sets."""
    if not sketches:
        return ThetaSketch(np.zeros(0, dtype=np.uint64))
    theta = min(s.theta for s in sketches)
    return ThetaSketch.of_hashes(np.concatenate([s.hashes for s in sketches]), k, theta)


def serialize(sketch: ThetaSketch, seed: int = DEFAULT_SEED) -> bytes:
    """DataSketches compact format, serial version 3, ordered."""
    flags = _FLAG_READ_ONLY | _FLAG_COMPACT | _FLAG_ORDERED
    count = len(sketch.hashes)
    if count == 0 and not sketch.estimating:
        empty = flags | _FLAG_EMPTY
        return struct.pack(
            "<BBBBBBH", 1, _SERIAL_VERSION, _FAMILY_COMPACT, 0, 0, empty, seed_hash(seed)
        )
    pre_longs = 3 if sketch.estimating else 2
    head = struct.pack(
        "<BBBBBBH", pre_longs, _SERIAL_VERSION, _FAMILY_COMPACT, 0, 0, flags, seed_hash(seed)
    )
    head += struct.pack("<II", count, 0)
    if sketch.estimating:
        head += struct.pack("<q", sketch.theta)
    return head + sketch.hashes.astype("<u8").tobytes()


def deserialize(data: bytes, source: str, seed: int = DEFAULT_SEED) -> ThetaSketch:
    """Read a compact serial-version-3 sketch (as ``serialize`` writes it)."""
    if len(data) < 8:
        raise CorruptFileError(source, f"theta sketch of {len(data)} bytes is truncated")
    pre_longs, ser_ver, family, _, _, flags, stored_seed = struct.unpack_from("<BBBBBBH", data)
    pre_longs &= 0x3F
    if ser_ver != _SERIAL_VERSION or family != _FAMILY_COMPACT:
        raise CorruptFileError(
            source,
            f"theta sketch serial version {ser_ver} family {family} is not "
            f"a compact v{_SERIAL_VERSION} sketch",
        )
    if stored_seed != seed_hash(seed):
        raise CorruptFileError(source, f"theta sketch seed hash {stored_seed:#06x} differs")
    if flags & _FLAG_EMPTY:
        return ThetaSketch(np.zeros(0, dtype=np.uint64))
    if pre_longs not in (2, 3) or len(data) < 8 * pre_longs:
        raise CorruptFileError(source, f"theta sketch preamble of {pre_longs} longs")
    (count,) = struct.unpack_from("<I", data, 8)
    theta = struct.unpack_from("<q", data, 16)[0] if pre_longs == 3 else MAX_THETA
    end = 8 * pre_longs + 8 * count
    if len(data) != end:
        raise CorruptFileError(source, f"theta sketch holds {len(data)} bytes, want {end}")
    hashes = np.frombuffer(data, dtype="<u8", count=count, offset=8 * pre_longs)
    return ThetaSketch(hashes.astype(np.uint64), theta)
