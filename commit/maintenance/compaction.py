"""Compaction: plan groups, have each rewritten (by the function the caller passes: a
local task or Spark executors), and commit one replace snapshot per group.

Each group's rewrite records a position map, written next to the metadata and named in
the rewrite's snapshot summary, so deletes the stream commits while the group is being
rewritten are carried onto the new files (``RewriteFiles``) and the stream's own row
deltas follow the map: neither side fails because of the other. A group that fails
(a conflict no map can resolve, an I/O error) is reported and the others go on; its
written files are deleted only when the commit certainly did not land.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pyroaring import BitMap64

from calving.commit.errors import CalvingError, Cleanable
from calving.commit.io import FileIO
from calving.commit.maintenance.compaction_plan import (
    CompactionPolicy,
    RewriteGroup,
    plan_compaction,
)
from calving.commit.spec import position_map as pm
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan
from calving.commit.table.actions.rewrite_files import RewriteFiles
from calving.commit.table.committer import Committed
from calving.commit.table.table import Table

log = logging.getLogger("calving.maintenance")

#: A group's inputs: each file with the DV positions seen when the group was planned.
Inputs = Sequence[tuple[DataFile, BitMap64]]
#: The rewritten group: the new files and where each old row went.
Rewritten = tuple[tuple[DataFile, ...], pm.PositionMap]
#: (group, its inputs) -> (new files, position map); one group at a time.
RewriteFn = Callable[[TableMetadata, RewriteGroup, Inputs], Rewritten]


@runtime_checkable
class Rewriter(Protocol):
    """Rewrites several groups at once (e.g. one Spark task each); a group that failed
    is its error in the result, so the others still commit."""

    parallelism: int

    def rewrite_many(
        self, metadata: TableMetadata, jobs: Sequence[tuple[RewriteGroup, Inputs]]
    ) -> list[Rewritten | CalvingError]: ...


@dataclass
class OneByOne:
    """A ``Rewriter`` over a ``RewriteFn`` (groups in turn, in this process)."""

    fn: RewriteFn
    parallelism: int = 1

    def rewrite_many(
        self, metadata: TableMetadata, jobs: Sequence[tuple[RewriteGroup, Inputs]]
    ) -> list[Rewritten | CalvingError]:
        out: list[Rewritten | CalvingError] = []
        for group, inputs in jobs:
            try:
                out.append(self.fn(metadata, group, inputs))
            except CalvingError as err:
                out.append(err)
        return out


@dataclass
class CompactionReport:
    groups_planned: int = 0
    groups_committed: int = 0
    groups_failed: list[str] = field(default_factory=list)
    groups_left: int = 0  # not started: the time budget ran out
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    dvs_purged: int = 0
    deletes_carried: int = 0
    seconds: float = 0.0


def compact(
    table: Table,
    policy: CompactionPolicy,
    rewrite: RewriteFn | Rewriter,
    *,
    dry_run: bool = False,
    deadline: float | None = None,
) -> CompactionReport:
    """Plan on the current snapshot and rewrite every group (one commit each), in
    batches of the rewriter's parallelism; no batch starts after ``deadline``
    (``time.monotonic()``)."""
    started = time.monotonic()
    rewriter = rewrite if isinstance(rewrite, Rewriter) else OneByOne(rewrite)
    metadata = table.metadata
    live = scan.live_files(table.io, metadata, metadata.current_snapshot)
    dv_rows = {p: e.data_file.record_count for p, e in live.dvs.items()}
    groups = plan_compaction((e.data_file for e in live.data.values()), dv_rows, policy)
    report = CompactionReport(groups_planned=len(groups))
    if dry_run:
        report.files_before = sum(len(g.files) for g in groups)
        report.bytes_before = sum(g.input_bytes for g in groups)
        return report
    step = max(1, rewriter.parallelism)
    for start in range(0, len(groups), step):
        if deadline is not None and time.monotonic() > deadline:
            report.groups_left = len(groups) - start
            break
        batch = groups[start : start + step]
        jobs = [(g, _inputs(table.io, live, g)) for g in batch]
        results = rewriter.rewrite_many(table.metadata, jobs)
        for (group, inputs), result in zip(jobs, results):
            try:
                if isinstance(result, CalvingError):
                    raise result
                _commit_group(table, group, inputs, result, report)
            except CalvingError as err:
                log.warning("compaction group %s failed: %s", group.paths[:3], err)
                report.groups_failed.append(f"{type(err).__name__}: {err}")
    report.seconds = time.monotonic() - started
    return report


def _inputs(io: FileIO, live: scan.LiveFiles, group: RewriteGroup) -> Inputs:
    return [(c.data_file, live.positions_deleted(io, c.data_file.file_path)) for c in group.files]


def _commit_group(
    table: Table,
    group: RewriteGroup,
    inputs: Inputs,
    rewritten: Rewritten,
    report: CompactionReport,
) -> None:
    added, pmap = rewritten
    map_location = f"{table.metadata.location.rstrip('/')}/metadata/rewrite-{uuid.uuid4().hex}.pmap"
    written = [f.file_path for f in added] + [map_location]
    try:
        table.io.write(map_location, pm.serialize(pmap))
    except CalvingError:
        _delete_quietly(table.io, written)
        raise
    action = RewriteFiles(
        removed=group.paths,
        added=added,
        deletes_seen={p: len(d) for (f, d), p in zip(inputs, group.paths) if len(d)},
        position_map=pmap,
        position_map_location=map_location,
    )
    try:
        outcome = table.commit_or_raise(action)
    except Cleanable:
        _delete_quietly(table.io, written)
        raise
    if isinstance(outcome, Committed):
        report.groups_committed += 1
        report.files_before += len(group.files)
        report.bytes_before += group.input_bytes
        report.files_after += len(added)
        report.bytes_after += sum(f.file_size_in_bytes for f in added)
        report.dvs_purged += sum(1 for _, d in inputs if len(d))
        snap = table.metadata.current_snapshot
        carried = snap.summary.get("added-position-deletes", "0") if snap else "0"
        report.deletes_carried += int(carried)


def _delete_quietly(io: FileIO, locations: Sequence[str]) -> None:
    for location in locations:
        try:
            if io.exists(location):
                io.delete(location)
        except CalvingError as err:  # cleanup is best effort; orphan removal finishes it
            log.warning("could not delete %s after a failed rewrite: %s", location, err)
