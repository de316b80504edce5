"""The snapshot summary: what one snapshot adds and removes, under Iceberg's keys.

``SummaryCounters`` is filled while the producer plans and writes an attempt;
``snapshot_summary`` turns it, the parent's totals and the action's own entries
(writer id, commit id, offsets) into the summary map, in that order of precedence.
"""

from __future__ import annotations

from collections.abc import Mapping

from calving.commit.spec.data_file import DataFile
from calving.commit.spec.snapshot import Snapshot, updated_totals


class SummaryCounters:
    def __init__(self) -> None:
        self.added_data_files = 0
        self.added_records = 0
        self.added_files_size = 0
        self.removed_data_files = 0
        self.removed_records = 0
        self.removed_files_size = 0
        self.added_dvs = 0
        self.added_positions = 0
        self.removed_dvs = 0
        self.removed_positions = 0

    def added_data(self, f: DataFile) -> None:
        self.added_data_files += 1
        self.added_records += f.record_count
        self.added_files_size += f.file_size_in_bytes

    def removed_data(self, f: DataFile) -> None:
        self.removed_data_files += 1
        self.removed_records += f.record_count
        self.removed_files_size += f.file_size_in_bytes

    def added_dv(self, dv: DataFile) -> None:
        self.added_dvs += 1
        self.added_positions += dv.record_count

    def added_puffin(self, size_in_bytes: int) -> None:
        """A Puffin file counts once toward ``added-files-size``, whatever its blobs."""
        self.added_files_size += size_in_bytes

    def removed_dv(self, dv: DataFile) -> None:
        self.removed_dvs += 1
        self.removed_positions += dv.record_count

    def summary(self) -> dict[str, str]:
        pairs = {
            "added-data-files": self.added_data_files,
            "added-records": self.added_records,
            "added-files-size": self.added_files_size,
            "removed-data-files": self.removed_data_files,
            "deleted-records": self.removed_records,
            "removed-files-size": self.removed_files_size,
            "added-delete-files": self.added_dvs,
            "added-dvs": self.added_dvs,
            "added-position-deletes": self.added_positions,
            "removed-delete-files": self.removed_dvs,
            "removed-dvs": self.removed_dvs,
            "removed-position-deletes": self.removed_positions,
        }
        return {k: str(v) for k, v in pairs.items() if v}

    def total_deltas(self) -> dict[str, int]:
        return {
            "total-records": self.added_records - self.removed_records,
            "total-files-size": self.added_files_size - self.removed_files_size,
            "total-data-files": self.added_data_files - self.removed_data_files,
            "total-delete-files": self.added_dvs - self.removed_dvs,
            "total-position-deletes": self.added_positions - self.removed_positions,
        }


def snapshot_summary(
    operation: str,
    counters: SummaryCounters,
    parent_summary: Mapping[str, str] | None,
    extra: Mapping[str, str],
) -> dict[str, str]:
    """The summary of a new snapshot: operation, this snapshot's counts, the totals
    carried from ``parent_summary``, then ``extra`` (which wins on a clash)."""
    summary: dict[str, str] = {"operation": operation}
    summary.update(counters.summary())
    summary.update(updated_totals(parent_summary, counters.total_deltas()))
    summary.update(extra)
    return summary


def live_rows(snapshot: Snapshot | None) -> int | None:
    """Live rows of a snapshot from its summary totals (records minus position
    deletes; 0 without a snapshot, None when the summary lacks the totals): in a keyed
    table calving writes, one per live key."""
    if snapshot is None:
        return 0
    summary = snapshot.summary
    try:
        return int(summary["total-records"]) - int(summary.get("total-position-deletes", 0))
    except (KeyError, ValueError):
        return None
