"""The position map of a rewrite (compaction): where every copied row went.

A rewrite reads the live rows of its input files in order and writes them to new files,
so ``(old file, old position) -> (new file, new position)`` is a sequence of runs: a
stretch of consecutive old positions that landed on consecutive new positions. Deletes
that reach a rewritten file after the rewrite was planned (the stream's DVs, a
concurrent row delta) are carried through this map to the rows' new places instead of
failing either side.

Rows the rewrite did not copy (deleted when it read them) are not in the map. The map
file is calving's own format: magic ``CALVPMAP``, format version, a JSON header with the
old and new file paths, five little-endian int64 arrays of runs (old file index, old
start, new file index, new start, length; sorted by old file and start) and a CRC-32 of
everything before it. Pure: bytes in, values out; no I/O.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calving.commit.errors import CorruptFileError, Terminal
from calving.commit.spec.sorted_sets import distinct_ids

MAGIC = b"CALVPMAP"
FORMAT_VERSION = 1
SUMMARY_PROPERTY = "calving.rewrite.position-map"
_HEAD = struct.Struct("<8sII")  # magic, version, header length


class UnmappedPositionError(Terminal):
    """A position the rewrite did not copy (it was deleted before the rewrite read it)."""


@dataclass(frozen=True)
class PositionMap:
    old_files: tuple[str, ...]
    new_files: tuple[str, ...]
    old_file: np.ndarray  # int64 index into old_files, per run
    old_start: np.ndarray
    new_file: np.ndarray
    new_start: np.ndarray
    length: np.ndarray

    @staticmethod
    def from_rows(
        old_files: tuple[str, ...],
        new_files: tuple[str, ...],
        old_file: np.ndarray,
        old_pos: np.ndarray,
        new_file: np.ndarray,
        new_pos: np.ndarray,
    ) -> PositionMap:
        """Runs from one entry per copied row (any order)."""
        order = np.lexsort((old_pos, old_file))
        of, op = old_file[order].astype(np.int64), old_pos[order].astype(np.int64)
        nf, np_ = new_file[order].astype(np.int64), new_pos[order].astype(np.int64)
        if len(of) == 0:
            empty = np.zeros(0, dtype=np.int64)
            return PositionMap(old_files, new_files, empty, empty, empty, empty, empty)
        breaks = np.ones(len(of), dtype=bool)
        breaks[1:] = (
            (of[1:] != of[:-1]) | (op[1:] != op[:-1] + 1) | (nf[1:] != nf[:-1])
            | (np_[1:] != np_[:-1] + 1)
        )  # fmt: skip
        starts = np.flatnonzero(breaks)
        lengths = np.diff(np.append(starts, len(of)))
        return PositionMap(
            old_files, new_files, of[starts], op[starts], nf[starts], np_[starts], lengths
        )

    @property
    def rows(self) -> int:
        return int(self.length.sum())

    def covers(self, old_path: str) -> bool:
        return old_path in self.old_files

    def copied(self, old_path: str) -> np.ndarray:
        """Every position of ``old_path`` the rewrite copied (sorted)."""
        fidx = self.old_files.index(old_path)
        lo, hi = np.searchsorted(self.old_file, [fidx, fidx + 1])
        runs = [
            np.arange(start, start + length, dtype=np.int64)
            for start, length in zip(self.old_start[lo:hi], self.length[lo:hi])
        ]
        return np.sort(np.concatenate(runs)) if runs else np.zeros(0, dtype=np.int64)

    def translate(
        self, old_path: str, positions: np.ndarray, *, strict: bool = True
    ) -> dict[str, np.ndarray]:
        """New (file, positions) of rows at ``positions`` of ``old_path``. A position the
        map does not hold raises ``UnmappedPositionError`` (``strict``) or is dropped."""
        fidx = self.old_files.index(old_path)
        lo, hi = np.searchsorted(self.old_file, [fidx, fidx + 1])
        starts, lengths = self.old_start[lo:hi], self.length[lo:hi]
        pos = np.asarray(positions, dtype=np.int64)
        if hi == lo:
            starts, lengths = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        run = np.searchsorted(starts, pos, side="right") - 1
        inside = (run >= 0) & (pos < starts[np.maximum(run, 0)] + lengths[np.maximum(run, 0)])
        if strict and not inside.all():
            missing = pos[~inside][:3].tolist()
            raise UnmappedPositionError(
                f"rewrite did not copy row(s) {missing} of {old_path}: they were deleted "
                "before it read them"
            )
        pos, run = pos[inside], run[inside] + lo
        target = self.new_file[run]
        moved = self.new_start[run] + (pos - self.old_start[run])
        out: dict[str, np.ndarray] = {}
        for t in distinct_ids(target):
            out[self.new_files[int(t)]] = np.sort(moved[target == t])
        return out

    def locate(
        self, old_file: np.ndarray, positions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row (an index into ``old_files`` and a position of that file): whether the
        rewrite copied it, and where to (an index into ``new_files``, a position), the
        latter two for the copied rows only, in order."""
        of = np.asarray(old_file, dtype=np.int64)
        pos = np.asarray(positions, dtype=np.int64)
        keys = (self.old_file << 32) | self.old_start  # sorted: runs by old file, start
        run = np.searchsorted(keys, (of << 32) | pos, side="right") - 1
        at = np.maximum(run, 0)
        if len(keys):
            inside = (
                (run >= 0)
                & (self.old_file[at] == of)
                & (pos < self.old_start[at] + self.length[at])
            )
        else:
            inside = np.zeros(len(pos), dtype=bool)
        run = run[inside]
        return inside, self.new_file[run], self.new_start[run] + (pos[inside] - self.old_start[run])


def serialize(pmap: PositionMap) -> bytes:
    header = json.dumps(
        {
            "old-files": list(pmap.old_files),
            "new-files": list(pmap.new_files),
            "runs": len(pmap.length),
        },
        separators=(",", ":"),
    ).encode()
    arrays = b"".join(
        np.asarray(a, dtype="<i8").tobytes()
        for a in (pmap.old_file, pmap.old_start, pmap.new_file, pmap.new_start, pmap.length)
    )
    body = _HEAD.pack(MAGIC, FORMAT_VERSION, len(header)) + header + arrays
    return body + struct.pack("<I", zlib.crc32(body))


def deserialize(data: bytes, source: str) -> PositionMap:
    if len(data) < _HEAD.size + 4:
        raise CorruptFileError(source, f"position map of {len(data)} bytes is truncated")
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if zlib.crc32(data[:-4]) != crc:
        raise CorruptFileError(source, "position map checksum mismatch")
    magic, version, header_len = _HEAD.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION:
        raise CorruptFileError(source, f"not a position map (magic {magic!r}, v{version})")
    header = json.loads(data[_HEAD.size : _HEAD.size + header_len])
    runs = int(header["runs"])
    offset = _HEAD.size + header_len
    if len(data) - 4 - offset != 5 * 8 * runs:
        raise CorruptFileError(source, f"position map with {runs} runs has the wrong length")
    arrays = [
        np.frombuffer(data, dtype="<i8", count=runs, offset=offset + i * 8 * runs).astype(np.int64)
        for i in range(5)
    ]
    return PositionMap(tuple(header["old-files"]), tuple(header["new-files"]), *arrays)


def merge(maps: Sequence[PositionMap]) -> PositionMap:
    """One map for several rewrites of disjoint input files (the groups one commit
    carries): their file lists concatenated, each map's runs re-indexed after the files
    of the maps before it, so the runs stay sorted by old file and start."""
    if len(maps) == 1:
        return maps[0]
    old_files: list[str] = []
    new_files: list[str] = []
    arrays: list[list[np.ndarray]] = [[], [], [], [], []]
    for m in maps:
        parts = (
            m.old_file + len(old_files),
            m.old_start,
            m.new_file + len(new_files),
            m.new_start,
            m.length,
        )
        for out, part in zip(arrays, parts):
            out.append(np.asarray(part, dtype=np.int64))
        old_files += m.old_files
        new_files += m.new_files
    if len(set(old_files)) != len(old_files):
        raise ValueError("position maps to merge must cover disjoint input files")
    joined = [np.concatenate(a) if a else np.zeros(0, dtype=np.int64) for a in arrays]
    return PositionMap(tuple(old_files), tuple(new_files), *joined)
