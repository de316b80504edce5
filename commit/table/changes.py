"""What a snapshot-producing action asks for, as a value.

Actions (fast append, row delta, rewrite) validate against the refreshed base
and return a ``SnapshotChanges``; the producer turns it into files and updates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyroaring import BitMap64

from calving.commit.spec.data_file import DataFile


@dataclass(frozen=True)
class SnapshotChanges:
    operation: str
    added_data_files: tuple[DataFile, ...] = ()
    # Paths of live data files this snapshot removes (their DVs go with them).
    removed_data_files: tuple[str, ...] = ()
    # Data file path -> row positions to delete; unioned with the file's current DV.
    deletes: Mapping[str, BitMap64] = field(default_factory=dict)
    # Extra snapshot summary entries (writer id, commit id, offsets).
    summary: Mapping[str, str] = field(default_factory=dict)
    # Table properties set in the same commit (the exactly-once ledger).
    properties: Mapping[str, str] = field(default_factory=dict)
    # Schema the added files were written with.
    schema_id: int | None = None
    # Rewrite every manifest toward the target size, grouped by partition (maintenance).
    rewrite_manifests: bool = False

    @property
    def is_empty(self) -> bool:
        return not (
            self.rewrite_manifests
            or self.added_data_files
            or self.removed_data_files
            or any(len(p) for p in self.deletes.values())
        )
