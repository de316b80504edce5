"""The primary-key index's storage: sorted runs of entries, and tombstones.

A *run* is four parallel arrays sorted (or to be sorted) by key hash: ``hashes``
(uint64), ``file_ids`` (uint32), ``positions`` (uint32) and the keys themselves, or
None where the hash is a bijection of an integer key. A *tombstone* is a deleted
entry's ``file_id << 32 | position`` in a sorted, unique uint64 array. The index
(``pk_index``) keeps a base run, a delta run and pending runs, and filters them
through its tombstones; these are the array operations it does that with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calving.commit.index.keys import ByteKeys, IntKeys, Keys
from calving.commit.spec.sorted_sets import unique_sorted

#: The largest row position (and file id) an entry holds: both are uint32.
MAX_POSITION = (1 << 32) - 1


@dataclass(frozen=True)
class Run:
    """Entries of the index, sorted by hash where a run must be (base, delta)."""

    hashes: np.ndarray  # uint64
    file_ids: np.ndarray  # uint32
    positions: np.ndarray  # uint32
    keys: Keys | None  # None: the hash stands for the key

    def __len__(self) -> int:
        return len(self.hashes)

    @property
    def nbytes(self) -> int:
        extra = self.keys.nbytes if self.keys is not None else 0
        return int(self.hashes.nbytes + self.file_ids.nbytes + self.positions.nbytes + extra)

    def take(self, rows: np.ndarray) -> Run:
        keys = self.keys.take(rows) if self.keys is not None else None
        return Run(self.hashes[rows], self.file_ids[rows], self.positions[rows], keys)

    def sorted(self) -> Run:
        if len(self) < 2 or bool(np.all(self.hashes[1:] >= self.hashes[:-1])):
            return self
        return self.take(np.argsort(self.hashes, kind="stable"))


def empty_run(int_mode: bool, store_keys: bool) -> Run:
    keys: Keys | None = None
    if store_keys:
        keys = IntKeys.concat([]) if int_mode else ByteKeys.concat([])
    return Run(np.empty(0, np.uint64), np.empty(0, np.uint32), np.empty(0, np.uint32), keys)


def concat_runs(runs: Sequence[Run]) -> Run:
    runs = [r for r in runs if len(r)] or list(runs[:1])
    if len(runs) == 1:
        return runs[0]
    keys: Keys | None = None
    if runs[0].keys is not None:
        first = runs[0].keys
        parts = [r.keys for r in runs]
        keys = first.concat(parts)  # type: ignore[arg-type]
    return Run(
        np.concatenate([r.hashes for r in runs]),
        np.concatenate([r.file_ids for r in runs]),
        np.concatenate([r.positions for r in runs]),
        keys,
    )


def merge_sorted(a: Run, b: Run) -> Run:
    """Two runs sorted by hash as one, each of ``b``'s entries after ``a``'s of an equal
    hash (what a stable sort of their concatenation gives), without sorting ``a``
    again: a batch's few entries join a delta of up to an eighth of the base in one
    pass over it, where a sort of the whole delta cost more each batch as it grew."""
    if not len(b):
        return a
    if not len(a):
        return b
    at = np.searchsorted(a.hashes, b.hashes, "right")
    if a.keys is None:  # np.insert keeps values bound for one place in their order
        return Run(
            np.insert(a.hashes, at, b.hashes),
            np.insert(a.file_ids, at, b.file_ids),
            np.insert(a.positions, at, b.positions),
            None,
        )
    n, m = len(a), len(b)
    slots = at + np.arange(m)
    order = np.empty(n + m, np.int64)
    from_b = np.zeros(n + m, bool)
    from_b[slots] = True
    order[slots] = np.arange(n, n + m)
    order[~from_b] = np.arange(n)
    return concat_runs([a, b]).take(order)


#: A full run's entries are checked against the tombstones through a bitmap when it
#: takes at most this many bytes an entry (else by a binary search each).
BITMAP_BYTES_PER_ENTRY = 8


def tombstoned(
    tomb: np.ndarray,
    file_rows: np.ndarray,
    file_ids: np.ndarray,
    positions: np.ndarray,
    by_bitmap: bool | None = None,
) -> np.ndarray:
    """Which entries ``(file_ids[i], positions[i])`` the tombstones ``tomb`` (sorted,
    unique ``file id << 32 | position``) name.

    A few entries (a lookup's candidates) are searched for in the tombstones. Many (a
    full merge's whole run) are looked up in a bitmap over the rows of the files that
    have tombstones: one gather an entry, where a binary search each was three quarters
    of a shard's merge in a stream's profile (0.71 of 0.98 s). The bitmap takes a bit a
    row of those files; past ``BITMAP_BYTES_PER_ENTRY`` bytes an entry the search is
    kept. ``by_bitmap`` forces either way."""
    n = len(file_ids)
    if by_bitmap is None and n < 4 * len(tomb):
        by_bitmap = False  # a lookup's candidates: no need to look at the files
    if by_bitmap is not False:
        tomb_files = (tomb >> np.uint64(32)).astype(np.int64)
        first_of_file = np.flatnonzero(np.r_[True, tomb_files[1:] != tomb_files[:-1]])
        files = tomb_files[first_of_file]
        rows = file_rows[files].astype(np.int64)
        total = int(rows.sum())
        if by_bitmap is None:
            by_bitmap = total <= 8 * BITMAP_BYTES_PER_ENTRY * n
    if not by_bitmap:
        locs = (file_ids.astype(np.uint64) << np.uint64(32)) | positions.astype(np.uint64)
        at = np.minimum(np.searchsorted(tomb, locs), len(tomb) - 1)
        return tomb[at] == locs  # type: ignore[no-any-return]
    tomb_rows = (tomb & np.uint64(MAX_POSITION)).astype(np.int64)
    offset = np.full(len(file_rows), -1, np.int64)
    offset[files] = np.cumsum(rows) - rows
    bit = offset[tomb_files] + tomb_rows  # ascending, as the tombstones are
    byte = bit >> 3
    first_of_byte = np.flatnonzero(np.r_[True, byte[1:] != byte[:-1]])
    bitmap = np.zeros((total + 7) // 8, np.uint8)
    flags = np.left_shift(1, bit & 7).astype(np.uint8)
    bitmap[byte[first_of_byte]] = np.bitwise_or.reduceat(flags, first_of_byte)
    start = offset[file_ids]
    named = np.flatnonzero(start >= 0)
    at_bit = start[named] + positions[named].astype(np.int64)
    dead = np.zeros(n, bool)
    dead[named] = (bitmap[at_bit >> 3] >> (at_bit & 7).astype(np.uint8)) & np.uint8(1) != 0
    return dead


def insert_sorted(sorted_unique: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.union1d(sorted_unique, values)`` without sorting the (large) first array
    again: the few new values are inserted at their places (``values`` are not sorted
    either when they already ascend, as one file's deleted positions do)."""
    values = values.astype(sorted_unique.dtype, copy=False)
    ascending = len(values) < 2 or bool(np.all(values[1:] > values[:-1]))
    new = values if ascending else unique_sorted(values)
    if not len(sorted_unique):
        return new
    at = np.searchsorted(sorted_unique, new)
    present = sorted_unique[np.minimum(at, len(sorted_unique) - 1)] == new
    return np.insert(sorted_unique, at[~present], new[~present])
