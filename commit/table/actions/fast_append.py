"""Append data files, keeping every existing manifest as it is."""

from __future__ import annotations

from dataclasses import dataclass

from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table.action import NoChange, Plan
from calving.commit.table.actions.validation import check_schema_compatible, ledger_step
from calving.commit.table.changes import SnapshotChanges
from calving.commit.table.ledger import LedgerClaim


@dataclass(frozen=True)
class FastAppend:
    data_files: tuple[DataFile, ...]
    ledger: LedgerClaim | None = None
    schema_id: int | None = None

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        check_schema_compatible(base, self.schema_id)
        step = ledger_step(base, self.ledger, commit_id)
        if step is None:
            return NoChange("offsets already committed (exactly-once replay)")
        summary, properties = step
        if not self.data_files and not properties:
            return NoChange("nothing to append")
        return SnapshotChanges(
            operation="append",
            added_data_files=self.data_files,
            summary=summary,
            properties=properties,
            schema_id=self.schema_id,
        )
