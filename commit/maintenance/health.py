"""Table health: the figures that say when a table needs maintenance.

From the current snapshot's live files (manifests only: no data file is read, DV
cardinalities come from the DV entries' record counts) and two stats (the metadata JSON
and the manifest list): per partition the data files, bytes, rows, small files and rows
deleted by DVs; for the table the totals, the DV ratio, the snapshot and manifest counts
and the metadata size. ``needs_maintenance`` lists plain reasons when a figure is past
its threshold (thresholds default to the compaction policy's; the ``[maintenance]``
config can pass its own).

A partition needs compaction when it holds more data files than
``ceil(live bytes / target) + 1``: what a rewrite would write, plus one file of slack
for the stream's newest, still-growing data.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from calving.commit.errors import CalvingError
from calving.commit.io import FileIO
from calving.commit.maintenance.compaction_plan import Candidate, CompactionPolicy
from calving.commit.spec.data_file import DataFile, ManifestContent
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan

_POLICY = CompactionPolicy()
DEFAULT_SMALL_FILE_FRACTION = _POLICY.small_file_fraction
DEFAULT_DELETE_RATIO = _POLICY.delete_ratio
#: More snapshots than this: snapshot expiry is due (metadata JSON grows with each).
DEFAULT_MAX_SNAPSHOTS = 1_000
#: More manifests than this in the current snapshot: a manifest rewrite is due
#: (Iceberg's ``commit.manifest.min-count-to-merge`` default).
DEFAULT_MAX_MANIFESTS = 100


@dataclasses.dataclass(frozen=True)
class PartitionHealth:
    spec_id: int
    partition: tuple[Any, ...]
    #: ``name=value/...`` (the partition's path), or the tuple's repr when the spec no
    #: longer binds to the current schema.
    label: str
    data_files: int
    data_bytes: int
    rows: int
    small_files: int
    dvs: int
    deleted_rows: int
    #: Bytes of the live rows (each file's size in proportion to its live row share).
    live_bytes: int
    #: ``ceil(live_bytes / target) + 1``: the most files a healthy partition holds.
    file_budget: int

    @property
    def live_rows(self) -> int:
        return self.rows - self.deleted_rows

    @property
    def needs_compaction(self) -> bool:
        return self.data_files > self.file_budget


@dataclasses.dataclass(frozen=True)
class TableHealth:
    target_file_bytes: int
    small_file_bytes: int
    partitions: tuple[PartitionHealth, ...]  # by file count, most first
    snapshots: int
    data_manifests: int
    delete_manifests: int
    metadata_json_bytes: int
    manifest_list_bytes: int
    manifest_bytes: int
    needs_maintenance: tuple[str, ...]

    @property
    def data_files(self) -> int:
        return sum(p.data_files for p in self.partitions)

    @property
    def data_bytes(self) -> int:
        return sum(p.data_bytes for p in self.partitions)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)

    @property
    def deleted_rows(self) -> int:
        return sum(p.deleted_rows for p in self.partitions)

    @property
    def live_rows(self) -> int:
        return self.rows - self.deleted_rows

    @property
    def dvs(self) -> int:
        return sum(p.dvs for p in self.partitions)

    @property
    def dv_ratio(self) -> float:
        """Rows deleted by DVs over all rows of the live data files (0 when empty)."""
        return self.deleted_rows / self.rows if self.rows else 0.0

    @property
    def small_files(self) -> int:
        return sum(p.small_files for p in self.partitions)

    @property
    def manifests(self) -> int:
        return self.data_manifests + self.delete_manifests

    @property
    def worst_partition(self) -> PartitionHealth | None:
        """The partition furthest over its file budget (ties: more files, then the
        first in ``partitions`` order)."""
        if not self.partitions:
            return None
        return max(self.partitions, key=lambda p: (p.data_files - p.file_budget, p.data_files))

    @property
    def needs_compaction(self) -> bool:
        return any(p.needs_compaction for p in self.partitions)


def table_health(
    io: FileIO,
    metadata: TableMetadata,
    metadata_location: str,
    target_file_bytes: int,
    *,
    small_file_fraction: float = DEFAULT_SMALL_FILE_FRACTION,
    delete_ratio: float = DEFAULT_DELETE_RATIO,
    max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
    max_manifests: int = DEFAULT_MAX_MANIFESTS,
) -> TableHealth:
    """Health of ``metadata``'s current snapshot (``metadata_location``: its JSON file)."""
    # The policy checks the target and fraction (a bad value is a ValueError naming it).
    policy = CompactionPolicy(
        target_file_bytes=target_file_bytes,
        small_file_fraction=small_file_fraction,
        delete_ratio=delete_ratio,
        max_group_bytes=10 * target_file_bytes,
    )
    snapshot = metadata.current_snapshot
    live = scan.live_files(io, metadata, snapshot)
    deleted = {path: e.data_file.record_count for path, e in live.dvs.items()}
    partitions = _partitions(metadata, (e.data_file for e in live.data.values()), deleted, policy)
    health = TableHealth(
        target_file_bytes=target_file_bytes,
        small_file_bytes=_small_file_bytes(policy),
        partitions=partitions,
        snapshots=len(metadata.snapshots),
        data_manifests=sum(1 for m in live.manifests if m.content == ManifestContent.DATA),
        delete_manifests=sum(1 for m in live.manifests if m.content == ManifestContent.DELETES),
        metadata_json_bytes=io.size(metadata_location),
        manifest_list_bytes=io.size(snapshot.manifest_list) if snapshot else 0,
        manifest_bytes=sum(m.manifest_length for m in live.manifests),
        needs_maintenance=(),
    )
    reasons = maintenance_reasons(
        health, delete_ratio=delete_ratio, max_snapshots=max_snapshots, max_manifests=max_manifests
    )
    return dataclasses.replace(health, needs_maintenance=reasons)


def maintenance_reasons(
    health: TableHealth,
    *,
    delete_ratio: float = DEFAULT_DELETE_RATIO,
    max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
    max_manifests: int = DEFAULT_MAX_MANIFESTS,
) -> tuple[str, ...]:
    """Plain reasons, one per figure past its threshold (empty: nothing to do)."""
    reasons: list[str] = []
    over = [p for p in health.partitions if p.needs_compaction]
    if over:
        files = sum(p.data_files for p in over)
        budget = sum(p.file_budget for p in over)
        small = sum(p.small_files for p in over)
        reasons.append(
            f"{_count(len(over), 'partition')} need compaction: {files:,} files where "
            f"{budget:,} would do ({small:,} small)"
        )
    if health.dv_ratio > delete_ratio:
        reasons.append(f"DV ratio {health.dv_ratio:.0%} > {delete_ratio:.0%}")
    if health.snapshots > max_snapshots:
        reasons.append(f"{health.snapshots:,} snapshots > {max_snapshots:,}")
    if health.manifests > max_manifests:
        reasons.append(f"{health.manifests:,} manifests > {max_manifests:,}")
    return tuple(reasons)


def _partitions(
    metadata: TableMetadata,
    files: Iterable[DataFile],
    deleted: Mapping[str, int],
    policy: CompactionPolicy,
) -> tuple[PartitionHealth, ...]:
    small = _small_file_bytes(policy)
    groups: dict[tuple[int, tuple[Any, ...]], list[Candidate]] = {}
    for f in files:
        groups.setdefault((f.spec_id, f.partition), []).append(
            Candidate(f, deleted.get(f.file_path, 0))
        )
    out = []
    for (spec_id, partition), members in groups.items():
        live_bytes = sum(c.live_bytes for c in members)
        out.append(
            PartitionHealth(
                spec_id=spec_id,
                partition=partition,
                label=partition_label(metadata, spec_id, partition),
                data_files=len(members),
                data_bytes=sum(c.data_file.file_size_in_bytes for c in members),
                rows=sum(c.data_file.record_count for c in members),
                small_files=sum(1 for c in members if c.data_file.file_size_in_bytes < small),
                dvs=sum(1 for c in members if c.data_file.file_path in deleted),
                deleted_rows=sum(c.deleted_rows for c in members),
                live_bytes=live_bytes,
                file_budget=-(-live_bytes // policy.target_file_bytes) + 1,
            )
        )
    return tuple(sorted(out, key=lambda p: (-p.data_files, p.spec_id, p.label)))


def _small_file_bytes(policy: CompactionPolicy) -> int:
    """Files below this size are small (the compaction planner's rule, rounded up)."""
    return math.ceil(policy.target_file_bytes * policy.small_file_fraction)


def partition_label(metadata: TableMetadata, spec_id: int, partition: tuple[Any, ...]) -> str:
    """``name=value/...`` for a partition, ``(unpartitioned)`` for none."""
    if not partition:
        return "(unpartitioned)"
    try:
        return metadata.spec_by_id(spec_id).partition_path(metadata.schema, partition)
    except CalvingError:  # an old spec whose source column left the schema
        return repr(partition)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
