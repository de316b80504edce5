"""Publish a snapshot's statistics file (and the per-file sketch cache it was merged from).

Metadata only: ``SetStatistics`` replaces the snapshot's earlier statistics entry and the
``calving.statistics.file-sketches`` property points at the new cache. After the commit
the files the table no longer references (the replaced statistics file, the previous
cache) are deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

from calving.commit.errors import CommitConflictError
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import (
    FILE_SKETCHES,
    STATISTICS_COMPUTED_MS,
    TableProperties,
)
from calving.commit.spec.statistics import StatisticsFile
from calving.commit.spec.updates import SetProperties, SetStatistics
from calving.commit.table.action import MetadataUpdates, Plan

FILE_SKETCHES_PROPERTY = FILE_SKETCHES.name


class StatisticsSnapshotGoneError(CommitConflictError):
    """The snapshot the statistics describe was expired before they were published."""


@dataclass(frozen=True)
class UpdateStatistics:
    statistics: StatisticsFile
    file_sketches_location: str
    #: When the sketches were computed (``calving.statistics.computed-ms``); None: unset.
    computed_ms: int | None = None

    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        snapshot_id = self.statistics.snapshot_id
        if base.snapshot_by_id(snapshot_id) is None:
            raise StatisticsSnapshotGoneError(
                f"snapshot {snapshot_id} was expired before its statistics were published"
            )
        properties = {FILE_SKETCHES_PROPERTY: self.file_sketches_location}
        if self.computed_ms is not None:
            properties[STATISTICS_COMPUTED_MS.name] = str(self.computed_ms)
        return MetadataUpdates((SetStatistics(self.statistics), SetProperties(properties)))

    def after_commit(self, before: TableMetadata, after: TableMetadata, io: FileIO) -> None:
        referenced = {s.statistics_path for s in after.statistics}
        referenced.add(TableProperties(after.properties).file_sketches or "")
        gone = {s.statistics_path for s in before.statistics} - referenced
        previous = TableProperties(before.properties).file_sketches
        if previous and previous not in referenced:
            gone.add(previous)
        for location in sorted(gone):
            if io.exists(location):
                io.delete(location)
