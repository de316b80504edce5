"""Compaction: plan groups, have them rewritten (by the function the caller passes: a
local task or Spark executors) in waves, and commit each wave as one replace snapshot.

The groups are split into at most ``max_commits`` waves (Iceberg's
``partial-progress.max-commits``); a wave is one ``rewrite_many`` call (one Spark job)
and one commit, whatever the number of partitions. Each group's rewrite records a
position map; a wave's maps are merged into one file, written next to the metadata and
named in the snapshot summary, so deletes the stream commits while the wave is being
rewritten are carried onto the new files (``RewriteFiles``) and the stream's own row
deltas follow the map: neither side fails because of the other.

Maintenance yields: its commits are *yielding* (``calving.commit.table.yielding``), a
pause separates them (``calving.commit.maintenance.pacing``), and a group whose rewrite
can no longer apply (``RewriteConflictError``) is given up for this pass while the
others of its wave are committed again without it. A wave that loses its swap past the
retry budget is given up whole. Written files are deleted only when the commit
certainly did not land. A stop request ends the pass at the next group (local
rewrites) or wave.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pyroaring import BitMap64

from calving.commit.errors import CalvingError, CommitConflictError, RetriesExhaustedError
from calving.commit.io import FileIO
from calving.commit.maintenance.compaction_plan import (
    CompactionPolicy,
    RewriteGroup,
    plan_compaction,
)
from calving.commit.maintenance.pacing import Pacer
from calving.commit.spec import position_map as pm
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan
from calving.commit.table.actions.rewrite_files import RewriteConflictError, RewriteFiles
from calving.commit.table.committer import CommitOutcome, Committed, Conflicted, Skipped
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


class PassStoppedError(CalvingError):
    """The pass was asked to stop before this group was rewritten."""


@dataclass
class OneByOne:
    """A ``Rewriter`` over a ``RewriteFn`` (groups in turn, in this process); once
    ``stop`` is set, the groups not yet started come back as ``PassStoppedError``."""

    fn: RewriteFn
    parallelism: int = 1
    stop: Callable[[], bool] | None = None

    def rewrite_many(
        self, metadata: TableMetadata, jobs: Sequence[tuple[RewriteGroup, Inputs]]
    ) -> list[Rewritten | CalvingError]:
        out: list[Rewritten | CalvingError] = []
        for group, inputs in jobs:
            if self.stop is not None and self.stop():
                out.append(PassStoppedError("stopped before this group"))
                continue
            try:
                out.append(self.fn(metadata, group, inputs))
            except CalvingError as err:
                out.append(err)
        return out


@dataclass
class CompactionReport:
    groups_planned: int = 0
    groups_committed: int = 0
    #: Groups whose rewrite failed (an I/O error, a task error): the job failed.
    groups_failed: list[str] = field(default_factory=list)
    #: Groups given up for this pass because the stream moved on (a conflict no map
    #: resolves, a wave that lost its swap past the retry budget): not a failure.
    groups_given_up: list[str] = field(default_factory=list)
    groups_left: int = 0  # not started: the time budget ran out, or a stop request
    files_before: int = 0
    bytes_before: int = 0
    files_after: int = 0
    bytes_after: int = 0
    dvs_purged: int = 0
    deletes_carried: int = 0
    #: Replace snapshots committed, and swaps those commits lost (to the stream).
    commits: int = 0
    lost_swaps: int = 0
    stopped: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class Member:
    """One rewritten group of a wave, ready to commit."""

    group: RewriteGroup
    inputs: Inputs
    added: tuple[DataFile, ...]
    pmap: pm.PositionMap


def stoppable(rewrite: RewriteFn | Rewriter, pacer: Pacer) -> Rewriter:
    """``rewrite`` as a ``Rewriter``; a local one stops between groups on ``pacer.stop``."""
    if not isinstance(rewrite, Rewriter):
        return OneByOne(rewrite, stop=lambda: pacer.stopped)
    if isinstance(rewrite, OneByOne) and rewrite.stop is None:
        return dataclasses.replace(rewrite, stop=lambda: pacer.stopped)
    return rewrite


def waves(groups: Sequence[RewriteGroup], max_commits: int) -> list[list[RewriteGroup]]:
    """``groups`` cut, in order, into at most ``max_commits`` waves of near-equal size."""
    if not groups:
        return []
    n = min(max(1, max_commits), len(groups))
    size, extra = divmod(len(groups), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(list(groups[start:end]))
        start = end
    return out


def compact(
    table: Table,
    policy: CompactionPolicy,
    rewrite: RewriteFn | Rewriter,
    *,
    dry_run: bool = False,
    deadline: float | None = None,
    pacer: Pacer | None = None,
) -> CompactionReport:
    """Plan on the current snapshot, then rewrite and commit wave after wave (at most
    ``policy.max_commits``); no wave starts after ``deadline`` (``time.monotonic()``) or
    once ``pacer.stop`` is set, and ``pacer`` spaces the commits (none by default)."""
    started = time.monotonic()
    pacer = pacer or Pacer(pause_s=0.0)
    rewriter = stoppable(rewrite, pacer)
    metadata = table.metadata
    live = scan.live_files(table.io, metadata, metadata.current_snapshot)
    dv_rows = {p: e.data_file.record_count for p, e in live.dvs.items()}
    groups = plan_compaction((e.data_file for e in live.data.values()), dv_rows, policy)
    report = CompactionReport(groups_planned=len(groups))
    if dry_run:
        report.files_before = sum(len(g.files) for g in groups)
        report.bytes_before = sum(g.input_bytes for g in groups)
        return report
    planned = waves(groups, policy.max_commits)
    for i, wave in enumerate(planned):
        if pacer.stopped or (deadline is not None and time.monotonic() > deadline):
            report.groups_left += sum(len(w) for w in planned[i:])
            report.stopped = pacer.stopped
            break
        jobs = [(g, _inputs(table.io, live, g)) for g in wave]
        results = rewriter.rewrite_many(table.metadata, jobs)
        members = _rewritten(jobs, results, report)
        if members and not pacer.before_commit():
            _delete_quietly(table.io, [f.file_path for m in members for f in m.added])
            report.groups_left += len(members) + sum(len(w) for w in planned[i + 1 :])
            report.stopped = True
            break
        if members:
            _commit_wave(table, members, report)
            pacer.committed()
    report.stopped = report.stopped or pacer.stopped
    report.seconds = time.monotonic() - started
    return report


def _inputs(io: FileIO, live: scan.LiveFiles, group: RewriteGroup) -> Inputs:
    return [(c.data_file, live.positions_deleted(io, c.data_file.file_path)) for c in group.files]


def _rewritten(
    jobs: Sequence[tuple[RewriteGroup, Inputs]],
    results: Sequence[Rewritten | CalvingError],
    report: CompactionReport,
) -> list[Member]:
    members = []
    for (group, inputs), result in zip(jobs, results):
        if isinstance(result, PassStoppedError):
            report.groups_left += 1
        elif isinstance(result, CalvingError):
            log.warning("compaction group %s failed: %s", group.paths[:3], result)
            report.groups_failed.append(f"{type(result).__name__}: {result}")
        else:
            members.append(Member(group, inputs, result[0], result[1]))
    return members


def _commit_wave(table: Table, members: list[Member], report: CompactionReport) -> None:
    """Commit the wave's groups as one replace snapshot; a group the table moved past
    is given up and the others are committed again without it."""
    while members:
        pmap = pm.merge([m.pmap for m in members])
        map_location = (
            f"{table.metadata.location.rstrip('/')}/metadata/rewrite-{uuid.uuid4().hex}.pmap"
        )
        added = tuple(f for m in members for f in m.added)
        try:
            table.io.write(map_location, pm.serialize(pmap))
        except CalvingError as err:
            _delete_quietly(table.io, [f.file_path for f in added] + [map_location])
            report.groups_failed += [f"{type(err).__name__}: {err}"] * len(members)
            return
        action = RewriteFiles(
            removed=tuple(p for m in members for p in m.group.paths),
            added=added,
            deletes_seen={f.file_path: len(d) for m in members for f, d in m.inputs if len(d)},
            position_map=pmap,
            position_map_location=map_location,
        )
        outcome: CommitOutcome | CalvingError
        try:
            outcome = table.commit(action)
        except CalvingError as err:  # not a commit outcome: an error outside the swap
            outcome = err
        if isinstance(outcome, Committed):
            _count(table, members, outcome, report)
            return
        if isinstance(outcome, Skipped):
            return
        if isinstance(outcome, Conflicted):
            report.lost_swaps += max(0, outcome.attempts - 1)
        error = outcome if isinstance(outcome, CalvingError) else outcome.error
        # A Conflicted outcome certainly did not land; an Unknown one may have.
        cleanable = isinstance(outcome, Conflicted) or (
            isinstance(outcome, CalvingError) and outcome.cleanable
        )
        if cleanable:
            _delete_quietly(table.io, [map_location])
        bad = _member_of(members, error)
        if bad is not None and cleanable:
            _delete_quietly(table.io, [f.file_path for f in bad.added])
            report.groups_given_up.append(f"{type(error).__name__}: {error}")
            members = [m for m in members if m is not bad]
            continue
        reason = f"{type(error).__name__}: {error}"
        log.warning("compaction wave of %d group(s) not committed: %s", len(members), reason)
        if cleanable:
            _delete_quietly(table.io, [f.file_path for f in added])
        yielded = cleanable and isinstance(error, CommitConflictError | RetriesExhaustedError)
        (report.groups_given_up if yielded else report.groups_failed).extend(
            [reason] * len(members)
        )
        return


def _member_of(members: Sequence[Member], error: CalvingError) -> Member | None:
    if not isinstance(error, RewriteConflictError):
        return None
    return next((m for m in members if error.path in m.group.paths), None)


def _count(
    table: Table, members: Sequence[Member], outcome: Committed, report: CompactionReport
) -> None:
    report.commits += 1
    report.lost_swaps += outcome.attempts - 1
    report.groups_committed += len(members)
    for m in members:
        report.files_before += len(m.group.files)
        report.bytes_before += m.group.input_bytes
        report.files_after += len(m.added)
        report.bytes_after += sum(f.file_size_in_bytes for f in m.added)
        report.dvs_purged += sum(1 for _, d in m.inputs if len(d))
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
