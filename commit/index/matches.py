"""A lookup's result: the live rows holding the looked-up keys (``PrimaryKeyIndex.lookup``,
and sharded mode's merge of its shards' steps)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap64


@dataclass(frozen=True)
class Matches:
    """The live rows holding the looked-up keys.

    ``found[i]``: key ``i`` has at least one live row. The matches are flat, in key order:
    match ``j`` is key ``key_rows[j]`` at (``file_ids[j]``, ``positions[j]``); a key
    present in several live rows (duplicates) has several matches.
    """

    found: np.ndarray  # bool, one per looked-up key
    key_rows: np.ndarray  # int64, one per match
    file_ids: np.ndarray  # uint32, one per match
    positions: np.ndarray  # int64, one per match
    paths: Sequence[str]  # file id -> path (the index's id table)

    def file_path(self, file_id: int) -> str:
        return self.paths[int(file_id)]

    def by_file(self) -> dict[str, np.ndarray]:
        """Sorted positions (int64) per data file path."""
        if not len(self.file_ids):
            return {}
        order = np.lexsort((self.positions, self.file_ids))
        fids, positions = self.file_ids[order], self.positions[order]
        bounds = np.flatnonzero(np.diff(fids)) + 1
        starts = np.concatenate([[0], bounds])
        groups = np.split(positions, bounds)
        return {self.paths[int(fids[s])]: g for s, g in zip(starts, groups)}

    def deletes(self) -> dict[str, BitMap64]:
        """``by_file`` as the ``{path: BitMap64}`` a ``RowDelta`` takes."""
        return {path: BitMap64(p.tolist()) for path, p in self.by_file().items()}
