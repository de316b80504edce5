"""Set and remove table properties."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.updates import RemoveProperties, SetProperties, TableUpdate
from calving.commit.table.action import MetadataUpdates, NoChange, Plan


@dataclass(frozen=True)
class UpdateProperties:
    set: Mapping[str, str] = field(default_factory=dict)
    remove: tuple[str, ...] = ()

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        updates: list[TableUpdate] = []
        changed = {k: str(v) for k, v in self.set.items() if base.properties.get(k) != str(v)}
        if changed:
            updates.append(SetProperties(changed))
        gone = tuple(k for k in self.remove if k in base.properties)
        if gone:
            updates.append(RemoveProperties(gone))
        if not updates:
            return NoChange("properties already as requested")
        return MetadataUpdates(tuple(updates))
