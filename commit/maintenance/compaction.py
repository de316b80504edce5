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

#: (group, its inputs with the DV positions seen at planning) -> (new files, position map)
RewriteFn = Callable[
    [TableMetadata, RewriteGroup, Sequence[tuple[DataFile, BitMap64]]],
    tuple[tuple[DataFile, ...], pm.PositionMap],
]


@dataclass
class CompactionReport:
    groups_planned: int = 0
    groups_committed: int = 0
    groups_failed: list[str] = field(default_factory=list)
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    dvs_purged: int = 0
    deletes_carried: int = 0
    seconds: float = 0.0


def compact(
    table: Table, policy: CompactionPolicy, rewrite: RewriteFn, *, dry_run: bool = False
) -> CompactionReport:
    """Plan on the current snapshot and rewrite every group (one commit each)."""
    started = time.monotonic()
    metadata = table.metadata
    live = scan.live_files(table.io, metadata, metadata.current_snapshot)
    dv_rows = {p: e.data_file.record_count for p, e in live.dvs.items()}
    groups = plan_compaction((e.data_file for e in live.data.values()), dv_rows, policy)
    report = CompactionReport(groups_planned=len(groups))
    if dry_run:
        report.files_before = sum(len(g.files) for g in groups)
        report.bytes_before = sum(g.input_bytes for g in groups)
        return report
    for group in groups:
        try:
            _compact_group(table, live, group, rewrite, report)
        except CalvingError as err:
            log.warning("compaction group %s failed: %s", group.paths[:3], err)
            report.groups_failed.append(f"{type(err).__name__}: {err}")
    report.seconds = time.monotonic() - started
    return report


def _compact_group(
    table: Table,
    live: scan.LiveFiles,
    group: RewriteGroup,
    rewrite: RewriteFn,
    report: CompactionReport,
) -> None:
    inputs = [
        (c.data_file, live.positions_deleted(table.io, c.data_file.file_path)) for c in group.files
    ]
    added, pmap = rewrite(table.metadata, group, inputs)
    map_location = f"{table.metadata.location.rstrip('/')}/metadata/rewrite-{uuid.uuid4().hex}.pmap"
    written = [f.file_path for f in added] + [map_location]
    table.io.write(map_location, pm.serialize(pmap))
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
