"""The primary-key index: key -> every live (data file, row position) holding it.

Layout (columnar, no Python object per key). Entries live in *runs*, each four parallel
numpy arrays: ``hashes`` (uint64), ``file_ids`` (uint32), ``positions`` (uint32) and the
keys themselves (``IntKeys``/``ByteKeys``), except where the hash is a bijection of an
integer key, which then stands for the key (16 bytes per entry in all). There are:

* the *base* run, sorted by hash;
* the *delta* run, sorted by hash, holding entries added since the last full merge;
* *pending* runs, unsorted, one per ``add_file`` since the last lookup (sorted into the
  delta when a lookup needs them, so a burst of additions costs one sort).

Deletes never touch the runs: ``delete_positions`` records ``file_id << 32 | position``
tombstones (a sorted uint64 array) and ``remove_file`` clears the file's live flag.
Lookups filter candidates through both; a full merge drops dead entries once the delta,
the tombstones or the entries of removed files outgrow ``merge_fraction`` of the base.

Exactness: a hash match is only a candidate; the stored key must compare equal.

Duplicate keys: a well-formed CDC table has one live row per key, but a table written
by other tools may hold several. The index keeps every (file, position) of a key and a
lookup returns all of them, so an update deletes every old version of the row.

Not thread-safe: one writer (the driver's coordinator) owns an index.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import BitMap64

from calving.commit.errors import Terminal, UnsupportedFeatureError
from calving.commit.index.keys import (
    DEFAULT_HASHER,
    IntKeys,
    KeyCodec,
    KeyHasher,
    Keys,
)
from calving.commit.index.matches import Matches
from calving.commit.index.runs import (
    MAX_POSITION,
    Run,
    concat_runs,
    empty_run,
    insert_sorted,
    merge_sorted,
    tombstoned,
)
from calving.commit.spec.position_map import PositionMap
from calving.commit.spec.sorted_sets import all_distinct
from calving.commit.spec.types import PrimitiveType


class IndexUpdateError(Terminal):
    """An update that does not fit the index: unknown or already indexed file, position
    out of the file's range, malformed positions."""


# ---------------------------------------------------------------- the index


class PrimaryKeyIndex:
    """Maps primary key -> every live (data file, position) holding it.

    Keys are passed as Arrow tables whose columns are the key columns in
    ``key_field_ids`` order (matched by position, not by name). ``table_uuid`` and
    ``snapshot_id`` say which table state the index reflects; whoever applies a
    snapshot's changes sets them (``store.catch_up`` and ``store.build_from_table`` do).
    """

    def __init__(
        self,
        key_field_ids: Sequence[int],
        key_types: Sequence[PrimitiveType],
        *,
        table_uuid: str | None = None,
        snapshot_id: int | None = None,
        hasher: KeyHasher = DEFAULT_HASHER,
        min_merge_rows: int = 1 << 16,
        merge_fraction: float = 0.125,
    ) -> None:
        if len(key_field_ids) != len(key_types):
            raise ValueError("key_field_ids and key_types differ in length")
        self.key_field_ids = tuple(int(i) for i in key_field_ids)
        self.key_types = tuple(key_types)
        self.codec = KeyCodec(self.key_types, self.key_field_ids)
        self.hasher = hasher
        self.table_uuid = table_uuid
        self.snapshot_id = snapshot_id
        self.min_merge_rows = min_merge_rows
        self.merge_fraction = merge_fraction
        self._store_keys = not (self.codec.int_mode and hasher.ints_are_keys)
        self._base = empty_run(self.codec.int_mode, self._store_keys)
        self._delta = self._base
        self._pending: list[Run] = []
        self._tomb = np.empty(0, np.uint64)
        self._tomb_pending: list[np.ndarray] = []
        self._paths: list[str] = []
        self._path_bytes = 0  # sys.getsizeof of every path in ``_paths``
        self._ids: dict[str, int] = {}
        self._file_live = np.zeros(16, bool)
        self._file_rows = np.zeros(16, np.int64)
        self._file_entries = np.zeros(16, np.int64)
        self._dead_entries = 0
        #: Whether ``tidy`` merges between batches (then lookups merge only at twice
        #: the limit).
        self._tidied = False

    def promote_key_types(self, key_types: Sequence[PrimitiveType]) -> None:
        """Follow a schema change of the key columns that keeps every key's encoding
        (int -> long, decimal precision widening)."""
        codec = KeyCodec(tuple(key_types), self.key_field_ids)
        if codec.encoding_class() != self.codec.encoding_class():
            raise IndexUpdateError(
                f"key types {[str(t) for t in key_types]} do not encode like "
                f"{[str(t) for t in self.key_types]}; rebuild the index"
            )
        self.key_types, self.codec = codec.key_types, codec

    # ------------------------------------------------------------ files

    @property
    def file_paths(self) -> list[str]:
        """Paths of the indexed (live) data files."""
        return list(self._ids)

    def has_file(self, file_path: str) -> bool:
        return file_path in self._ids

    def file_path(self, file_id: int) -> str:
        return self._paths[int(file_id)]

    def file_row_count(self, file_path: str) -> int:
        return int(self._file_rows[self._require(file_path)])

    def _require(self, file_path: str) -> int:
        fid = self._ids.get(file_path)
        if fid is None:
            raise IndexUpdateError(f"{file_path}: not in the primary-key index")
        return fid

    def _new_file_id(self, file_path: str, rows: int, entries: int) -> int:
        fid = len(self._paths)
        if fid > MAX_POSITION:
            raise UnsupportedFeatureError("primary-key index: more than 2^32 file ids")
        if fid >= len(self._file_live):
            grow = len(self._file_live)
            self._file_live = np.concatenate([self._file_live, np.zeros(grow, bool)])
            self._file_rows = np.concatenate([self._file_rows, np.zeros(grow, np.int64)])
            self._file_entries = np.concatenate([self._file_entries, np.zeros(grow, np.int64)])
        self._paths.append(file_path)
        self._path_bytes += sys.getsizeof(file_path)
        self._ids[file_path] = fid
        self._file_live[fid] = True
        self._file_rows[fid] = rows
        self._file_entries[fid] = entries
        return fid

    # ------------------------------------------------------------ updates

    def add_file(
        self,
        file_path: str,
        keys: pa.Table | pa.RecordBatch,
        *,
        positions: Any = None,
        row_count: int | None = None,
    ) -> None:
        """Index a new data file. Row ``i`` of ``keys`` is at position ``i``, or at
        ``positions[i]`` when given (e.g. the rows a deletion vector left live).
        ``row_count`` is the file's row count (default: one past the last position);
        later deletes must fall below it."""
        self._add_encoded(file_path, *self._prepare(file_path, keys, positions, row_count))

    def _prepare(
        self,
        file_path: str,
        keys: pa.Table | pa.RecordBatch,
        positions: Any,
        row_count: int | None,
    ) -> tuple[Keys, np.ndarray, int]:
        if file_path in self._ids:
            raise IndexUpdateError(f"{file_path}: already in the primary-key index")
        encoded = self.codec.encode(keys)
        n = len(encoded)
        if positions is None:
            top = n
            pos64 = None
        else:
            pos64 = _as_positions(positions)
            if len(pos64) != n:
                raise IndexUpdateError(f"{file_path}: {n} keys but {len(pos64)} positions")
            if not all_distinct(pos64):
                raise IndexUpdateError(f"{file_path}: repeated positions")
            top = int(pos64.max()) + 1 if n else 0
        rows = top if row_count is None else row_count
        if top > rows:
            raise IndexUpdateError(f"{file_path}: position beyond the file's {rows} rows")
        if rows > MAX_POSITION + 1:
            raise UnsupportedFeatureError(f"{file_path}: more than 2^32 rows in one file")
        pos = np.arange(n, dtype=np.uint32) if pos64 is None else pos64.astype(np.uint32)
        return encoded, pos, rows

    def add_encoded(self, file_path: str, keys: Keys, positions: Any, row_count: int) -> None:
        """``add_file`` for keys already encoded (a shard delta's entries): row ``i`` of
        ``keys`` is at ``positions[i]`` of a file of ``row_count`` rows."""
        if file_path in self._ids:
            raise IndexUpdateError(f"{file_path}: already in the primary-key index")
        pos = _as_positions(positions)
        if len(pos) != len(keys):
            raise IndexUpdateError(f"{file_path}: {len(keys)} keys but {len(pos)} positions")
        if len(pos) and int(pos.max()) >= row_count:
            raise IndexUpdateError(f"{file_path}: position beyond the file's {row_count} rows")
        if isinstance(keys, IntKeys) != self.codec.int_mode:
            raise IndexUpdateError("key column kind does not fit the key types")
        self._add_encoded(file_path, keys, pos.astype(np.uint32), row_count)

    def _add_encoded(self, file_path: str, keys: Keys, positions: np.ndarray, rows: int) -> None:
        fid = self._new_file_id(file_path, rows, len(keys))
        hashes = self.hasher.hash(keys)
        file_ids = np.full(len(keys), fid, np.uint32)
        if len(keys):
            self._pending.append(
                Run(hashes, file_ids, positions, keys if self._store_keys else None)
            )

    def delete_positions(self, file_path: str, positions: Any) -> None:
        """Forget the rows at ``positions`` of a file (a new deletion vector's positions).
        Idempotent; positions not indexed (already deleted) are ignored."""
        self._require(file_path)  # an unknown file is refused, even with no positions
        pos = _as_positions(positions)
        self.delete_located([file_path], np.zeros(len(pos), np.int64), pos)

    def delete_located(
        self, files: Sequence[str], file_index: np.ndarray, positions: np.ndarray
    ) -> None:
        """``delete_positions`` for many files at once: position ``positions[i]`` of
        ``files[file_index[i]]`` (a shard delta's deleted rows)."""
        if not len(positions):
            return
        at = np.asarray(file_index, np.int64)
        fids = np.zeros(len(files), np.int64)
        for u in np.flatnonzero(np.bincount(at, minlength=len(files))):
            fids[u] = self._require(files[int(u)])  # only the files with deleted rows
        fids = fids[at]
        pos = np.asarray(positions, np.int64)
        beyond = np.flatnonzero((pos < 0) | (pos >= self._file_rows[fids]))
        if len(beyond):
            i = int(beyond[0])
            raise IndexUpdateError(
                f"{files[int(at[i])]}: position {int(pos[i])} beyond its "
                f"{self._file_rows[fids[i]]} rows"
            )
        self._tomb_pending.append((fids.astype(np.uint64) << np.uint64(32)) | pos.astype(np.uint64))

    def rename_file(self, old: str, new: str) -> None:
        """The file ``old`` is now at ``new`` (the same rows at the same positions)."""
        fid = self._require(old)
        if new in self._ids:
            raise IndexUpdateError(f"{new}: already in the primary-key index")
        del self._ids[old]
        self._ids[new] = fid
        self._path_bytes += sys.getsizeof(new) - sys.getsizeof(old)
        self._paths[fid] = new

    def remove_file(self, file_path: str) -> None:
        """Forget every row of a data file the table no longer holds."""
        fid = self._require(file_path)
        del self._ids[file_path]
        self._file_live[fid] = False
        self._dead_entries += int(self._file_entries[fid])

    def replace_files(
        self, removed: Iterable[str], added: Mapping[str, pa.Table | pa.RecordBatch]
    ) -> None:
        """Compaction: forget ``removed`` and index each new file from its keys (row order
        = positions). All or nothing: a bad key or path leaves the index unchanged."""
        removed = list(removed)
        if len(set(removed)) != len(removed):
            raise IndexUpdateError("replace_files: a removed file is named twice")
        for path in removed:
            self._require(path)
        prepared = []
        for path, keys in added.items():
            if path in self._ids and path not in removed:
                raise IndexUpdateError(f"{path}: already in the primary-key index")
            saved = self._ids.pop(path, None)  # a path both removed and re-added is new
            try:
                prepared.append((path, *self._prepare(path, keys, None, None)))
            finally:
                if saved is not None:
                    self._ids[path] = saved
        for path in removed:
            self.remove_file(path)
        for path, keys_, pos, rows in prepared:
            self._add_encoded(path, keys_, pos, rows)

    def remap_files(self, pmap: PositionMap, new_rows: Mapping[str, int]) -> None:
        """A rewrite with a position map: the entries of its input files move to the rows
        the rewrite copied them to, in place (a rewrite keeps keys, so the runs keep
        their hash order); entries of rows it did not copy (deleted when it read them)
        die with the input files. No key is read and no entry is added, so following a
        compaction costs the index one pass over its file ids, not a new run of the
        rewritten rows and a full merge when the old ones pile up. ``new_rows``: each
        new file's row count. All or nothing: an unknown input or a known output file
        leaves the index unchanged."""
        for path in pmap.old_files:
            self._require(path)
        for path in pmap.new_files:
            if path in self._ids:
                raise IndexUpdateError(f"{path}: already in the primary-key index")
            if path not in new_rows:
                raise IndexUpdateError(f"{path}: no row count for a rewritten file")
        old_ids = np.array([self._ids[p] for p in pmap.old_files], dtype=np.int64)
        new_ids = np.array(
            [self._new_file_id(p, new_rows[p], 0) for p in pmap.new_files], dtype=np.uint32
        )
        which = np.full(len(self._paths), -1, dtype=np.int64)
        which[old_ids] = np.arange(len(old_ids))
        moved_to = np.zeros(len(new_ids), dtype=np.int64)
        moved_from = np.zeros(len(old_ids), dtype=np.int64)

        def remapped(run: Run) -> Run:
            of = which[run.file_ids]
            rows = np.flatnonzero(of >= 0)
            if not len(rows):
                return run
            inside, new_file, new_pos = pmap.locate(of[rows], run.positions[rows])
            rows = rows[inside]
            moved_from[:] += np.bincount(of[rows], minlength=len(old_ids))
            moved_to[:] += np.bincount(new_file, minlength=len(new_ids))
            file_ids, positions = run.file_ids.copy(), run.positions.copy()
            file_ids[rows] = new_ids[new_file]
            positions[rows] = new_pos.astype(np.uint32)
            return Run(run.hashes, file_ids, positions, run.keys)

        self._base = remapped(self._base)
        self._delta = remapped(self._delta)
        self._pending = [remapped(run) for run in self._pending]
        self._file_entries[new_ids] = moved_to
        self._file_entries[old_ids] -= moved_from
        for path in pmap.old_files:
            self.remove_file(path)

    # ------------------------------------------------------------ lookups

    def lookup(self, keys: pa.Table | pa.RecordBatch) -> Matches:
        """Every live (file, position) of each key; vectorized over the batch."""
        return self.lookup_encoded(self.codec.encode(keys))

    def lookup_encoded(self, encoded: Keys) -> Matches:
        """``lookup`` for keys already encoded by this index's codec."""
        n = len(encoded)
        self._settle()
        hashes = self.hasher.hash(encoded)
        runs = [run for run in (self._base, self._delta) if len(run)]
        order = self._probe_order(hashes, runs)
        sorted_hashes = hashes[order]
        parts = [self._probe(run, sorted_hashes, order, encoded) for run in runs]
        if parts:
            key_rows = np.concatenate([p[0] for p in parts])
            file_ids = np.concatenate([p[1] for p in parts])
            positions = np.concatenate([p[2] for p in parts]).astype(np.int64)
            by_key = np.argsort(key_rows, kind="stable")
            key_rows, file_ids, positions = key_rows[by_key], file_ids[by_key], positions[by_key]
        else:
            key_rows = np.empty(0, np.int64)
            file_ids = np.empty(0, np.uint32)
            positions = np.empty(0, np.int64)
        found = np.zeros(n, bool)
        found[key_rows] = True
        return Matches(found, key_rows, file_ids, positions, self._paths)

    def _probe_order(self, hashes: np.ndarray, runs: Sequence[Run]) -> np.ndarray:
        """The key rows to probe, in hash order (sorted probes walk memory in order).
        A key whose hash lies outside every (sorted) run's first..last hash is in no
        run: with int keys, which hash in key order, such keys are left out before the
        sort, so a batch of keys past every indexed one (an initial snapshot read in key
        order) sorts and searches nothing. Byte keys hash at random: no key is left out
        that way, so they skip the test."""
        if not runs:
            return np.empty(0, np.int64)
        if not self.codec.int_mode:
            return np.argsort(hashes, kind="stable")
        inside = np.zeros(len(hashes), bool)
        for run in runs:
            inside |= (hashes >= run.hashes[0]) & (hashes <= run.hashes[-1])
        rows: np.ndarray = np.flatnonzero(inside)
        ordered: np.ndarray = rows[np.argsort(hashes[rows], kind="stable")]
        return ordered

    def _probe(
        self, run: Run, probes: np.ndarray, order: np.ndarray, keys: Keys
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        size = len(run)
        # Only probes within the run's hash range can match: with int keys (hashed in
        # order) a batch of keys past every indexed one, as an initial snapshot read in
        # key order brings, skips the search.
        first = int(np.searchsorted(probes, run.hashes[0], "left"))
        last = int(np.searchsorted(probes, run.hashes[-1], "right"))
        if first > 0 or last < len(probes):
            probes, order = probes[first:last], order[first:last]
        lo = np.searchsorted(run.hashes, probes, "left")
        at = np.minimum(lo, size - 1)
        hit = run.hashes[at] == probes
        following = np.minimum(lo + 1, size - 1)
        repeated = hit & (lo + 1 < size) & (run.hashes[following] == probes)
        if not repeated.any():
            probe_rows = np.flatnonzero(hit)
            run_rows = lo[probe_rows]
        else:  # equal hashes: duplicate keys or collisions, expand every candidate
            hi = np.searchsorted(run.hashes, probes, "right")
            count = np.where(hit, hi - lo, 0)
            probe_rows = np.repeat(np.arange(len(probes)), count)
            starts = np.cumsum(count) - count
            run_rows = np.arange(int(count.sum())) - np.repeat(starts - lo, count)
        key_rows = order[probe_rows]
        if run.keys is not None:
            same = keys.equal_at(key_rows, run.keys, run_rows)  # type: ignore[arg-type]
            key_rows, run_rows = key_rows[same], run_rows[same]
        file_ids = run.file_ids[run_rows]
        positions = run.positions[run_rows]
        alive = self._alive(file_ids, positions)
        return key_rows[alive], file_ids[alive], positions[alive]

    def _alive(self, file_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        alive = self._file_live[file_ids]
        if len(self._tomb):
            alive &= ~tombstoned(self._tomb, self._file_rows, file_ids, positions)
        return alive  # type: ignore[no-any-return]

    # ------------------------------------------------------------ maintenance

    def _settle(self) -> None:
        """Sort pending additions into the delta; merge fully when deletes pile up (at
        twice the limit once ``tidy`` merges between batches: a safety net, should the
        tidies stop)."""
        if self._pending:
            self._delta = merge_sorted(self._delta, concat_runs(self._pending).sorted())
            self._pending = []
        if self._tomb_pending:
            self._tomb = insert_sorted(self._tomb, np.concatenate(self._tomb_pending))
            self._tomb_pending = []
        if self._piled_up(2 if self._tidied else 1):
            self.compact()

    def _piled_up(self, times: int = 1) -> bool:
        """Whether the delta, the tombstones or the dead entries outgrow ``times`` the
        merge limit."""
        limit = max(self.min_merge_rows, int(len(self._base) * self.merge_fraction))
        return max(len(self._delta), len(self._tomb), self._dead_entries) > limit * times

    def tidy(self) -> bool:
        """Between batches (a worker's idle time): settle, and merge fully when past the
        limit. From the first tidy on, lookups leave the merges to the tidies, which
        merge as often as lookups would have, so that a lookup, on a batch's critical
        path, does not. Returns whether it merged."""
        self._tidied = True
        self._settle()
        if not self._piled_up():
            return False
        self.compact()
        return True

    def compact(self) -> None:
        """Merge everything into one sorted base run without dead entries (nothing to
        do when the base is all there is: a shard just read, or just merged)."""
        if not (
            self._pending
            or self._tomb_pending
            or len(self._delta)
            or len(self._tomb)
            or self._dead_entries
        ):
            return
        if self._tomb_pending:
            self._tomb = insert_sorted(self._tomb, np.concatenate(self._tomb_pending))
            self._tomb_pending = []
        merged = concat_runs([self._base, self._delta, *self._pending])
        alive = self._alive(merged.file_ids, merged.positions)
        if not alive.all():
            merged = merged.take(np.flatnonzero(alive))
        self._base = merged.sorted()
        self._delta = empty_run(self.codec.int_mode, self._store_keys)
        self._pending = []
        self._tomb = np.empty(0, np.uint64)
        self._file_entries[: len(self._paths)] = np.bincount(
            self._base.file_ids, minlength=len(self._paths)
        )[: len(self._paths)]
        self._dead_entries = 0

    def __len__(self) -> int:
        """Live entries (compacts first)."""
        self.compact()
        return len(self._base)

    def live_rows_per_file(self) -> dict[str, int]:
        """Indexed rows of each live file (compacts first)."""
        self.compact()
        return {path: int(self._file_entries[fid]) for path, fid in self._ids.items()}

    @property
    def nbytes(self) -> int:
        """Resident bytes: numpy arrays plus the file path strings."""
        arrays = self._base.nbytes + self._delta.nbytes + sum(r.nbytes for r in self._pending)
        arrays += self._tomb.nbytes + sum(t.nbytes for t in self._tomb_pending)
        arrays += self._file_live.nbytes + self._file_rows.nbytes + self._file_entries.nbytes
        return int(arrays + self._path_bytes)

    # ------------------------------------------------------------ persistence support

    def export_entries(self) -> tuple[Keys, np.ndarray, np.ndarray, list[tuple[str, int]]]:
        """Compact, then (keys, file indexes, positions, [(path, row count)]) with file
        indexes renumbered densely over the live files, entries in hash order."""
        self.compact()
        run = self._base
        live = np.flatnonzero(self._file_live[: len(self._paths)])
        renumber = np.full(len(self._paths), -1, np.int64)
        renumber[live] = np.arange(len(live))
        files = [(self._paths[i], int(self._file_rows[i])) for i in live]
        keys: Keys = (
            run.keys if run.keys is not None else IntKeys(self.hasher.int_from_hash(run.hashes))
        )
        file_index = renumber[run.file_ids].astype(np.uint32)
        return keys, file_index, run.positions, files

    @classmethod
    def from_entries(
        cls,
        key_field_ids: Sequence[int],
        key_types: Sequence[PrimitiveType],
        keys: Keys,
        file_index: np.ndarray,
        positions: np.ndarray,
        files: Sequence[tuple[str, int]],
        **options: Any,
    ) -> PrimaryKeyIndex:
        """An index holding the given entries (``file_index`` points into ``files``).
        Raises ``IndexUpdateError`` on inconsistent input."""
        index = cls(key_field_ids, key_types, **options)
        file_index = np.asarray(file_index, np.uint32)
        positions = np.asarray(positions, np.uint32)
        if not len(file_index) == len(positions) == len(keys):
            raise IndexUpdateError("entry columns differ in length")
        if len(file_index) and int(file_index.max()) >= len(files):
            raise IndexUpdateError("an entry names a file id beyond the file table")
        for path, rows in files:
            if path in index._ids:
                raise IndexUpdateError(f"{path}: named twice in the file table")
            index._new_file_id(path, rows, 0)
        rows_of = index._file_rows[: len(files)]
        if len(positions) and bool(np.any(positions >= rows_of[file_index])):
            raise IndexUpdateError("an entry's position is beyond its file's row count")
        if isinstance(keys, IntKeys) != index.codec.int_mode:
            raise IndexUpdateError("key column kind does not fit the key types")
        hashes = index.hasher.hash(keys)
        run = Run(hashes, file_index, positions, keys if index._store_keys else None)
        index._base = run.sorted()
        index._file_entries[: len(files)] = np.bincount(file_index, minlength=len(files))
        return index


def _as_positions(positions: Any) -> np.ndarray:
    if isinstance(positions, BitMap64):
        return np.frombuffer(positions.to_array(), np.uint64).astype(np.int64)
    pos = np.asarray(positions)
    if pos.ndim != 1 or (len(pos) and pos.dtype.kind not in "iu"):
        raise IndexUpdateError(f"positions must be a 1-d integer array, got {pos.dtype}")
    pos = pos.astype(np.int64)
    if len(pos) and int(pos.min()) < 0:
        raise IndexUpdateError("negative position")
    return pos
