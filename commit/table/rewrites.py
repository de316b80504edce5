"""Following rewrites: where did the rows of a data file that a rewrite removed go?

A rewrite (compaction) that commits with a position map names it in its snapshot summary
(``calving.rewrite.position-map``). Deletes a writer aimed at a file that has since been
rewritten are moved through those maps, through chains of rewrites, until they land on
live files. Positions a rewrite did not copy were already deleted: they need nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from pyroaring import BitMap64

from calving.commit.io import FileIO
from calving.commit.spec import position_map as pm
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan

_MAPS: dict[str, pm.PositionMap] = {}
_MAX_CACHED = 64


def load_map(io: FileIO, location: str) -> pm.PositionMap:
    cached = _MAPS.get(location)
    if cached is None:
        cached = pm.deserialize(io.read(location), location)
        if len(_MAPS) >= _MAX_CACHED:
            _MAPS.pop(next(iter(_MAPS)))
        _MAPS[location] = cached
    return cached


def rewrite_maps(io: FileIO, base: TableMetadata) -> list[pm.PositionMap]:
    """Position maps of the table's snapshots, newest first."""
    out = []
    for snap in sorted(base.snapshots, key=lambda s: s.sequence_number, reverse=True):
        location = snap.summary.get(pm.SUMMARY_PROPERTY)
        if location:
            out.append(load_map(io, location))
    return out


def follow_rewrites(
    io: FileIO, base: TableMetadata, live: scan.LiveFiles, deletes: Mapping[str, BitMap64]
) -> tuple[dict[str, BitMap64], dict[str, BitMap64]]:
    """(deletes moved onto live files, deletes no map could place) for deletes aimed at
    files that are no longer live."""
    maps = rewrite_maps(io, base) if deletes else []
    moved: dict[str, BitMap64] = {}
    lost: dict[str, BitMap64] = {}
    pending = list(deletes.items())
    while pending:
        path, positions = pending.pop()
        if path in live.data:
            moved[path] = moved.get(path, BitMap64()) | positions
            continue
        pmap = next((m for m in maps if m.covers(path)), None)
        if pmap is None:
            lost[path] = lost.get(path, BitMap64()) | positions
            continue
        array = np.fromiter(positions, dtype=np.int64, count=len(positions))
        for new_path, new_positions in pmap.translate(path, array, strict=False).items():
            pending.append((new_path, BitMap64(new_positions.tolist())))
    return moved, lost
