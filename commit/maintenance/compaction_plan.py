"""Compaction planning: which live data files to rewrite together.

Per partition (and partition spec), a file is a candidate when it is smaller than
``small_file_bytes`` (a fraction of the target) or its deletion vector deletes more than
``delete_ratio`` of its rows. Candidates are bin-packed, first-fit by live bytes in
descending order, into groups of at most ``max_group_bytes``; a group is kept when it
has at least ``min_input_files`` files, or one file whose DV is over the threshold (it is
rewritten alone to drop its deleted rows); with ``due_small_files``, only partitions
holding that many small files are planned. The groups of a pass are committed in at most
``max_commits`` replace snapshots (``calving.commit.maintenance.compaction.waves``); a
group that fails is left out of its wave's commit, so the others are kept.

Pure: takes the live files (with their DV cardinalities) and returns groups; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from calving.commit.spec.data_file import DataFile

DEFAULT_TARGET_FILE_BYTES = 128 * 1024 * 1024
DEFAULT_MIN_INPUT_FILES = 5
DEFAULT_DELETE_RATIO = 0.2
#: At most this many replace snapshots per pass (Iceberg's partial-progress.max-commits).
DEFAULT_MAX_COMMITS = 10


@dataclass(frozen=True)
class CompactionPolicy:
    target_file_bytes: int = DEFAULT_TARGET_FILE_BYTES
    min_input_files: int = DEFAULT_MIN_INPUT_FILES
    delete_ratio: float = DEFAULT_DELETE_RATIO
    # A file below this many bytes counts as small (Iceberg's default: 75 % of target).
    small_file_fraction: float = 0.75
    # At most this many input bytes per rewrite group (bounded work and memory).
    max_group_bytes: int = 10 * DEFAULT_TARGET_FILE_BYTES
    #: The groups of a pass commit in at most this many replace snapshots (waves).
    max_commits: int = DEFAULT_MAX_COMMITS
    #: Plan only partitions holding at least this many small files (0: every
    #: partition): an inline compaction due by file count rewrites what made it due.
    due_small_files: int = 0

    def __post_init__(self) -> None:
        if self.max_commits < 1:
            raise ValueError(f"max_commits must be >= 1, got {self.max_commits}")
        if self.target_file_bytes <= 0:
            raise ValueError(f"target_file_bytes must be positive, got {self.target_file_bytes}")
        if self.min_input_files < 1:
            raise ValueError(f"min_input_files must be >= 1, got {self.min_input_files}")
        if not 0 < self.delete_ratio <= 1:
            raise ValueError(f"delete_ratio must be in (0, 1], got {self.delete_ratio}")
        if not 0 < self.small_file_fraction <= 1:
            raise ValueError(
                f"small_file_fraction must be in (0, 1], got {self.small_file_fraction}"
            )
        if self.max_group_bytes < self.target_file_bytes:
            raise ValueError("max_group_bytes must be at least target_file_bytes")
        if self.due_small_files < 0:
            raise ValueError(f"due_small_files must be >= 0, got {self.due_small_files}")

    @property
    def small_file_bytes(self) -> float:
        """A file below this many bytes is small."""
        return self.target_file_bytes * self.small_file_fraction


@dataclass(frozen=True)
class Candidate:
    data_file: DataFile
    deleted_rows: int

    @property
    def live_rows(self) -> int:
        return self.data_file.record_count - self.deleted_rows

    @property
    def live_bytes(self) -> int:
        """Bytes of live rows, estimated in proportion to the live row share."""
        rows = max(self.data_file.record_count, 1)
        return self.data_file.file_size_in_bytes * self.live_rows // rows

    @property
    def delete_ratio(self) -> float:
        return self.deleted_rows / max(self.data_file.record_count, 1)


@dataclass(frozen=True)
class RewriteGroup:
    spec_id: int
    partition: tuple[Any, ...]
    files: tuple[Candidate, ...]

    @property
    def input_bytes(self) -> int:
        return sum(c.data_file.file_size_in_bytes for c in self.files)

    @property
    def live_bytes(self) -> int:
        return sum(c.live_bytes for c in self.files)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(c.data_file.file_path for c in self.files)


def partition_with_small_files(
    files: Iterable[DataFile], policy: CompactionPolicy, count: int
) -> bool:
    """Some partition (of any spec) holds at least ``count`` small files (below
    ``small_file_fraction`` of the target): what makes an inline compaction due by file
    count. Stops at the first such partition."""
    small = policy.small_file_bytes
    counts: dict[tuple[int, tuple[Any, ...]], int] = {}
    for f in files:
        if f.file_size_in_bytes < small:
            where = (f.spec_id, f.partition)
            seen = counts.get(where, 0) + 1
            if seen >= count:
                return True
            counts[where] = seen
    return False


def plan_compaction(
    files: Iterable[DataFile], deleted_rows: Mapping[str, int], policy: CompactionPolicy
) -> list[RewriteGroup]:
    """Rewrite groups for the live ``files`` (``deleted_rows``: DV cardinality by path)."""
    small = policy.small_file_bytes
    by_partition: dict[tuple[int, tuple[Any, ...]], list[Candidate]] = {}
    for f in files:
        c = Candidate(f, deleted_rows.get(f.file_path, 0))
        if f.file_size_in_bytes < small or c.delete_ratio > policy.delete_ratio:
            by_partition.setdefault((f.spec_id, f.partition), []).append(c)
    groups: list[RewriteGroup] = []
    for (spec_id, partition), candidates in sorted(
        by_partition.items(), key=lambda kv: repr(kv[0])
    ):
        smalls = sum(1 for c in candidates if c.data_file.file_size_in_bytes < small)
        if smalls < policy.due_small_files:
            continue
        for members in _bin_pack(candidates, policy.max_group_bytes):
            dv_heavy = any(c.delete_ratio > policy.delete_ratio for c in members)
            if len(members) >= policy.min_input_files or dv_heavy:
                groups.append(RewriteGroup(spec_id, partition, tuple(members)))
    return groups


def _bin_pack(candidates: list[Candidate], capacity: int) -> list[list[Candidate]]:
    bins: list[tuple[int, list[Candidate]]] = []
    ordered = sorted(candidates, key=lambda c: (-c.live_bytes, c.data_file.file_path))
    for c in ordered:
        for i, (used, members) in enumerate(bins):
            if used + c.live_bytes <= capacity:
                bins[i] = (used + c.live_bytes, [*members, c])
                break
        else:
            bins.append((c.live_bytes, [c]))
    return [members for _, members in bins]


def expected_output_files(group: RewriteGroup, policy: CompactionPolicy) -> int:
    """ceil(live bytes / target), at least 1: what a rewrite of the group should write."""
    return max(1, -(-group.live_bytes // policy.target_file_bytes))
