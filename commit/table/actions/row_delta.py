"""Add data files and delete rows by position (deletion vectors) in one snapshot.

Deletes for a file that already has a DV are unioned with it by the producer, so
two writers deleting rows of the same file both commit. Deletes aimed at a file
that a concurrent rewrite removed follow the rewrite's position map to the rows' new
places; what no map covers is handed to ``rebase`` (the caller re-resolves it, by key);
without one it is returned inside ``DeletesOnRewrittenFilesError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pyroaring import BitMap64

from calving.commit.errors import CommitConflictError
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan
from calving.commit.table.action import NoChange, Plan
from calving.commit.table.actions.validation import check_schema_compatible, ledger_step
from calving.commit.table.changes import SnapshotChanges
from calving.commit.table.ledger import LedgerClaim
from calving.commit.table.rewrites import follow_rewrites

Rebase = Callable[[TableMetadata, Mapping[str, BitMap64]], Mapping[str, BitMap64]]


class DeletesOnRewrittenFilesError(CommitConflictError):
    """Rows to delete live in files a concurrent commit removed (e.g. compaction).

    ``deletes`` maps each removed file to the positions that were to be deleted, so
    the caller can find the rows again (by key) and retry.
    """

    def __init__(self, deletes: Mapping[str, BitMap64]) -> None:
        self.deletes = dict(deletes)
        files = ", ".join(sorted(deletes)[:5])
        super().__init__(
            f"{len(deletes)} data file(s) receiving deletes were removed concurrently: {files}"
        )


@dataclass(frozen=True)
class RowDelta:
    added_data_files: tuple[DataFile, ...] = ()
    deletes: Mapping[str, BitMap64] = field(default_factory=dict)
    ledger: LedgerClaim | None = None
    schema_id: int | None = None
    rebase: Rebase | None = None
    #: More snapshot summary entries (e.g. the last source transaction committed).
    summary: Mapping[str, str] = field(default_factory=dict)
    #: Table properties set in the same swap (e.g. the index manifest of the last commit).
    properties: Mapping[str, str] = field(default_factory=dict)

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        check_schema_compatible(base, self.schema_id)
        step = ledger_step(base, self.ledger, commit_id)
        if step is None:
            return NoChange("offsets already committed (exactly-once replay)")
        summary, properties = step
        summary = {**summary, **self.summary}
        properties = {**properties, **self.properties}

        deletes = {p: bm for p, bm in self.deletes.items() if len(bm)}
        if deletes:
            live = scan.live_files(io, base, base.current_snapshot)
            added = {f.file_path for f in self.added_data_files}
            gone = {p: bm for p, bm in deletes.items() if p not in live.data and p not in added}
            for p in gone:
                del deletes[p]
            moved, gone = follow_rewrites(io, base, live, gone)
            for p, bm in moved.items():
                deletes[p] = deletes.get(p, BitMap64()) | bm
            if gone:
                if self.rebase is None:
                    raise DeletesOnRewrittenFilesError(gone)
                for p, bm in self.rebase(base, gone).items():
                    if p not in live.data and p not in added:
                        raise DeletesOnRewrittenFilesError({p: bm})
                    deletes[p] = deletes.get(p, BitMap64()) | bm

        if not self.added_data_files and not deletes and not properties:
            return NoChange("nothing to change")
        if not deletes:
            operation = "append"
        elif not self.added_data_files:
            operation = "delete"
        else:
            operation = "overwrite"
        return SnapshotChanges(
            operation=operation,
            added_data_files=self.added_data_files,
            deletes=deletes,
            summary=summary,
            properties=properties,
            schema_id=self.schema_id,
        )
