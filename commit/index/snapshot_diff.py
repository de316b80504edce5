"""What changed between two snapshots' live files, as a primary-key index applies it
(the driver index's catch-up, and every shard's in sharded mode)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from calving.commit.io import FileIO
from calving.commit.table import scan


@dataclass(frozen=True)
class SnapshotDiff:
    """What changed between two snapshots' live files, as an index applies it: files
    removed, positions newly deleted in files both hold, and files added (a file whose
    deleted rows came back, as after a rollback, is both removed and added)."""

    removed: list[str]
    deletes: dict[str, np.ndarray]
    added: list[str]
    new: scan.LiveFiles


def diff_snapshots(io: FileIO, old: scan.LiveFiles, new: scan.LiveFiles) -> SnapshotDiff:
    removed = [p for p in old.data if p not in new.data]
    added = sorted(p for p in new.data if p not in old.data)
    deletes: dict[str, np.ndarray] = {}
    for path in old.data.keys() & new.data.keys():
        before, after = old.dvs.get(path), new.dvs.get(path)
        if _same_dv(before, after):
            continue
        was = old.positions_deleted(io, path)
        now = new.positions_deleted(io, path)
        if len(was - now):  # rows came back (a rollback): index the file afresh
            removed.append(path)
            added.append(path)
        else:
            deletes[path] = bitmap_positions(now - was)
    return SnapshotDiff(removed, deletes, added, new)


def _same_dv(a: scan.LiveEntry | None, b: scan.LiveEntry | None) -> bool:
    if a is None or b is None:
        return a is b
    fa, fb = a.data_file, b.data_file
    return (fa.file_path, fa.content_offset) == (fb.file_path, fb.content_offset)


def bitmap_positions(bitmap: Any) -> np.ndarray:
    return np.frombuffer(bitmap.to_array(), np.uint64).astype(np.int64)
