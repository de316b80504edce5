"""One maintenance pass over a table: leftovers of killed passes, compaction, manifest
rewrite, column statistics, snapshot expiry and orphan removal, in that order, each a
job with its own figures. The pass keeps a journal of the files it writes
(``calving.commit.maintenance.journal``) and removes its own unreferenced ones at the end.

A job that fails is reported and the next one still runs (each plans on a fresh read of
the table). The pass yields to the stream: its commits are *yielding* (every swap they
lose counts against their retries; the stream's losses to them do not), a pause
(``commit_pause_s``) separates any two of them, and a stop request (``stop``, set by
SIGTERM or Ctrl-C in ``calving maintain``) ends the pass at the next group, wave or
job. A deadline (``time.monotonic()``) bounds the pass: no job, and no
compaction batch, starts after it, so the stream's driver can run a pass between
micro-batches within a time budget. Tables this pass cannot maintain safely (equality
deletes or v2 position-delete files written by another engine, a format version other
than 3) are refused before anything is written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from calving.commit.errors import CalvingError, RetriesExhaustedError, UnsupportedFeatureError
from calving.commit.io import FileIO
from calving.commit.maintenance import compaction, journal, orphans
from calving.commit.maintenance.column_stats import collect_statistics
from calving.commit.maintenance.pacing import Pacer
from calving.commit.maintenance.policy import METADATA_FILE_MIN_AGE_MS, MaintenancePolicy
from calving.commit.spec.data_file import FileContent, ManifestContent
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import MANIFEST_TARGET_SIZE_BYTES, TableProperties
from calving.commit.spec.updates import RemoveSnapshots
from calving.commit.table import scan
from calving.commit.table.action import MetadataUpdates, NoChange
from calving.commit.table.actions.expire_snapshots import ExpireSnapshots
from calving.commit.table.actions.rewrite_manifests import RewriteManifests
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.table import Table

log = logging.getLogger("calving.maintenance")

#: Fields of a pass's summary (its JSON line and the table's last-pass record).
PASS_FIELDS: dict[str, str] = {
    "event": '"maintenance"',
    "table": "table name",
    "started_ms": "when the pass started (ms since the epoch)",
    "seconds": "how long the pass took",
    "ok": "no job failed",
    "stopped": "a stop request (SIGTERM, Ctrl-C) cut the pass short",
    "dry_run": "planned and reported only",
    "commits": "commits the pass made (replace snapshots and metadata changes)",
    "groups": "compaction groups planned",
    "groups_committed": "groups committed",
    "groups_given_up": "groups given up for this pass: the stream moved past them",
    "groups_given_up_by": "those groups counted by cause (the error's type name)",
    "groups_failed": "groups whose rewrite or commit failed",
    "groups_left": "groups not started (time budget or stop request)",
    "files_before": "data files the committed groups removed",
    "files_after": "data files they added",
    "bytes_before": "bytes of the removed files",
    "bytes_after": "bytes of the added files",
    "lost_swaps": "catalog swaps the compaction commits lost (to the stream) and retried",
    "jobs": "[{job, seconds, error, skipped}] in the order they ran",
}

Figures = dict[str, int | float]
#: Figure names ``given_up.<cause>``: groups given up, per error type.
_GIVEN_UP_BY = "given_up."


#: ``JobResult.skipped`` of a job whose commit lost every swap it tried (to the stream or
#: another writer): maintenance yields, and the job runs again next pass.
YIELDED = "yielded: lost the catalog swap to a concurrent commit; runs again next pass"


@dataclass
class JobResult:
    job: str
    figures: Figures = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    skipped: str | None = None

    def line(self) -> str:
        """``compact  groups=3 files_before=40 ... 1.20s`` (or the error / skip reason)."""
        head = f"{self.job:<18}"
        if self.skipped is not None:
            return f"{head}skipped: {self.skipped}"
        shown = " ".join(f"{k}={_number(v)}" for k, v in self.figures.items())
        tail = f"  FAILED: {self.error}" if self.error else ""
        return f"{head}{shown}  {self.seconds:.2f}s{tail}"


def _number(value: float) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


@dataclass
class MaintenanceReport:
    table: str
    dry_run: bool
    jobs: list[JobResult] = field(default_factory=list)
    #: When the pass started (ms since the epoch) and how long it took.
    started_ms: int = 0
    seconds: float = 0.0
    #: Commits the pass made (snapshots and metadata changes), and a stop request cut it.
    commits: int = 0
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return all(j.error is None for j in self.jobs)

    def job(self, name: str) -> JobResult | None:
        return next((j for j in self.jobs if j.job == name), None)

    def summary(self) -> dict[str, object]:
        """The pass as one JSON-ready record (``PASS_FIELDS``): the JSON line of a pass
        and the table's last-pass record."""
        compact = self.job("compact")
        figures = compact.figures if compact is not None else {}

        def figure(name: str) -> int:
            return int(figures.get(name, 0))

        return {
            "event": "maintenance",
            "table": self.table,
            "started_ms": self.started_ms,
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
            "stopped": self.stopped,
            "dry_run": self.dry_run,
            "commits": self.commits,
            "groups": figure("groups"),
            "groups_committed": figure("committed"),
            "groups_given_up": figure("given_up"),
            "groups_given_up_by": {
                k.removeprefix(_GIVEN_UP_BY): int(v)
                for k, v in sorted(figures.items())
                if k.startswith(_GIVEN_UP_BY)
            },
            "groups_failed": figure("failed"),
            "groups_left": figure("left"),
            "files_before": figure("files_before"),
            "files_after": figure("files_after"),
            "bytes_before": figure("bytes_before"),
            "bytes_after": figure("bytes_after"),
            "lost_swaps": figure("lost_swaps"),
            "jobs": [
                {
                    "job": j.job,
                    "seconds": round(j.seconds, 3),
                    "error": j.error,
                    "skipped": j.skipped,
                }
                for j in self.jobs
            ],
        }

    def lines(self) -> list[str]:
        mode = " (dry run: nothing changed)" if self.dry_run else ""
        return [f"maintenance of {self.table}{mode}"] + ["  " + j.line() for j in self.jobs]


def check_maintainable(io: FileIO, metadata: TableMetadata) -> None:
    """Refuse a table whose deletes this pass would not see: rewriting such files
    would bring deleted rows back."""
    if metadata.format_version != 3:
        raise UnsupportedFeatureError(
            f"{metadata.location}: format-version {metadata.format_version} table; "
            "calving maintains format-version 3 tables only"
        )
    for mf in scan.manifest_files(io, metadata.current_snapshot):
        if mf.content != ManifestContent.DELETES:
            continue
        for entry in scan.manifest_entries(io, metadata, mf):
            df = entry.data_file
            if df.content == FileContent.EQUALITY_DELETES or not df.referenced_data_file:
                kind = (
                    "equality delete"
                    if df.content == FileContent.EQUALITY_DELETES
                    else "v2 position delete"
                )
                raise UnsupportedFeatureError(
                    f"{df.file_path}: {kind} file (written by another engine); calving "
                    "maintenance refuses this table: rewriting its data files would bring "
                    "the deleted rows back"
                )


def run_maintenance(
    table: Table,
    policy: MaintenancePolicy,
    rewriter: compaction.RewriteFn | compaction.Rewriter,
    *,
    dry_run: bool = False,
    deadline: float | None = None,
    now_ms: int | None = None,
    stop: threading.Event | None = None,
) -> MaintenanceReport:
    """Run the policy's jobs in order; every job's figures or error in the report."""
    started = time.monotonic()
    table.refresh()
    check_maintainable(table.io, table.metadata)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = MaintenanceReport(table.name, dry_run, started_ms=int(time.time() * 1000))
    pacer = Pacer(policy.commit_pause_s, stop if stop is not None else threading.Event())
    was_yielding, table.yielding = table.yielding, True
    try:
        _run_jobs(table, policy, rewriter, report, pacer, dry_run, deadline, now)
    finally:
        table.yielding = was_yielding
        report.seconds = time.monotonic() - started
        report.stopped = pacer.stopped
    return report


@dataclass(frozen=True)
class PassContext:
    """What every job of a pass gets: the table, the policy, whether the pass only
    plans (``dry_run``), its deadline (``time.monotonic()``) and its clock (ms)."""

    table: Table
    policy: MaintenancePolicy
    dry_run: bool
    deadline: float | None
    now_ms: int


class Job(Protocol):
    """One job of a pass, named as in ``MaintenancePolicy.jobs``."""

    #: The job's name in the policy and in the report.
    name: ClassVar[str]
    #: The job counts its own commits (its ``commits`` figure) and paces between them;
    #: for the others the pass counts a commit when the table's metadata moved.
    counts_commits: ClassVar[bool]

    def run(self, ctx: PassContext) -> Figures: ...


def _run_jobs(
    table: Table,
    policy: MaintenancePolicy,
    rewriter: compaction.RewriteFn | compaction.Rewriter,
    report: MaintenanceReport,
    pacer: Pacer,
    dry_run: bool,
    deadline: float | None,
    now: int,
) -> None:
    run_journal = journal.start_run(table, dry_run=dry_run)
    own_run = run_journal.run_id if run_journal is not None else None
    watched = journal.journaled(compaction.stoppable(rewriter, pacer), run_journal)
    jobs: dict[str, Job] = {
        job.name: job
        for job in (
            CleanLeftovers(own_run),
            Compact(watched, pacer),
            RewriteManifestsJob(),
            Statistics(),
            ExpireSnapshotsJob(),
            RemoveOrphans(),
        )
    }
    ctx = PassContext(table, policy, dry_run, deadline, now)
    try:
        for name in policy.jobs:
            result = JobResult(name)
            report.jobs.append(result)
            if deadline is not None and time.monotonic() > deadline:
                result.skipped = "time budget used up"
                continue
            if not pacer.before_commit():
                result.skipped = "stopped"
                continue
            _run_job(jobs[name], ctx, result, report, pacer)
    finally:
        if run_journal is not None:
            run_journal.finish(table)


def _run_job(
    job: Job, ctx: PassContext, result: JobResult, report: MaintenanceReport, pacer: Pacer
) -> None:
    """Run one job into ``result``: its figures, or its error (the pass goes on)."""
    table = ctx.table
    started = time.monotonic()
    try:
        table.refresh()
        before = table.metadata_location
        result.figures = job.run(ctx)
        if not job.counts_commits and table.metadata_location != before:
            report.commits += 1
            pacer.committed()
    except JobFailed as err:
        log.warning("maintenance job %s on %s: %s", job.name, table.name, err)
        result.figures, result.error = err.figures, str(err)
    except RetriesExhaustedError as err:
        # Every try lost the swap cleanly (nothing of the job landed): maintenance yields
        # to the writers that won, and the job runs again next pass. Not a failure.
        log.info("maintenance job %s on %s yielded: %s", job.name, table.name, err)
        result.skipped = YIELDED
    except CalvingError as err:
        log.warning("maintenance job %s on %s failed: %s", job.name, table.name, err)
        result.error = f"{type(err).__name__}: {err}"
    if job.counts_commits:
        report.commits += int(result.figures.get("commits", 0))
    result.seconds = time.monotonic() - started


@dataclass(frozen=True)
class CleanLeftovers:
    """Files that killed passes wrote and left unreferenced (``journal``)."""

    name: ClassVar[str] = "leftovers"
    counts_commits: ClassVar[bool] = False
    #: This pass's own journal, which the job leaves alone.
    own_run: str | None

    def run(self, ctx: PassContext) -> Figures:
        return journal.clean_leftovers(
            ctx.table, own_run=self.own_run, dry_run=ctx.dry_run, now_ms=ctx.now_ms
        ).figures(ctx.dry_run)


@dataclass(frozen=True)
class Compact:
    """Compaction through the pass's journaled, stoppable rewriter."""

    name: ClassVar[str] = "compact"
    counts_commits: ClassVar[bool] = True
    rewriter: compaction.RewriteFn | compaction.Rewriter
    pacer: Pacer

    def run(self, ctx: PassContext) -> Figures:
        r = compaction.compact(
            ctx.table,
            ctx.policy.compaction,
            self.rewriter,
            dry_run=ctx.dry_run,
            deadline=ctx.deadline,
            pacer=self.pacer,
        )
        figures: Figures = {
            "groups": r.groups_planned,
            "committed": r.groups_committed,
            "given_up": len(r.groups_given_up),
            "failed": len(r.groups_failed),
            "left": r.groups_left,
            "commits": r.commits,
            "lost_swaps": r.lost_swaps,
            "files_before": r.files_before,
            "files_after": r.files_after,
            "bytes_before": r.bytes_before,
            "bytes_after": r.bytes_after,
            "dvs_purged": r.dvs_purged,
            "deletes_carried": r.deletes_carried,
        }
        causes = Counter(reason.split(":", 1)[0] for reason in r.groups_given_up)
        figures.update({_GIVEN_UP_BY + cause: n for cause, n in sorted(causes.items())})
        if r.groups_failed:
            failed = f"{len(r.groups_failed)} group(s) failed; first: {r.groups_failed[0]}"
            raise JobFailed(failed, figures)
        return figures


class JobFailed(CalvingError):
    """A job did part of its work (its figures) and failed on the rest."""

    def __init__(self, message: str, figures: Figures) -> None:
        super().__init__(message)
        self.figures = figures


@dataclass(frozen=True)
class RewriteManifestsJob:
    """Manifests regrouped to the policy's target size (``RewriteManifests``)."""

    name: ClassVar[str] = "rewrite-manifests"
    counts_commits: ClassVar[bool] = False

    def run(self, ctx: PassContext) -> Figures:
        return _rewrite_manifests(ctx.table, ctx.policy, ctx.dry_run)


def _rewrite_manifests(table: Table, policy: MaintenancePolicy, dry_run: bool) -> Figures:
    before = len(scan.manifest_files(table.io, table.metadata.current_snapshot))
    target = policy.manifest_target_bytes
    current = TableProperties(table.metadata.properties).manifest_target_size_bytes
    if dry_run:
        return {"manifests_before": before}
    if target is not None and target != current:
        table.commit_or_raise(UpdateProperties(set={MANIFEST_TARGET_SIZE_BYTES.name: str(target)}))
    table.commit_or_raise(RewriteManifests())
    after = len(scan.manifest_files(table.io, table.metadata.current_snapshot))
    return {"manifests_before": before, "manifests_after": after}


@dataclass(frozen=True)
class Statistics:
    """Column statistics (NDV sketches) of the current snapshot, at most once an interval."""

    name: ClassVar[str] = "statistics"
    counts_commits: ClassVar[bool] = False

    def run(self, ctx: PassContext) -> Figures:
        return _statistics(ctx.table, ctx.policy, ctx.dry_run, ctx.now_ms)


def _statistics(table: Table, policy: MaintenancePolicy, dry_run: bool, now: int) -> Figures:
    m = table.metadata
    snap = m.current_snapshot
    if snap is None:
        return {"columns": 0}
    if any(s.snapshot_id == snap.snapshot_id for s in m.statistics):
        return {"columns": 0, "up_to_date": 1}
    # Judged by when they were computed, not by their snapshot's age: expiry removes
    # the statistics of expired snapshots long before the interval is up.
    computed = TableProperties(m.properties).statistics_computed_ms
    if computed and now - computed < policy.statistics_interval_ms:
        return {"columns": 0, "age_s": (now - computed) // 1000}
    if dry_run:
        return {"snapshot_without_statistics": 1}
    r = collect_statistics(table)
    return {
        "columns": len(r.ndv),
        "files_sketched": r.files_sketched,
        "files_reused": r.files_reused,
    }


@dataclass(frozen=True)
class ExpireSnapshotsJob:
    """Snapshot expiry, then the metadata files that left the metadata log."""

    name: ClassVar[str] = "expire-snapshots"
    counts_commits: ClassVar[bool] = False

    def run(self, ctx: PassContext) -> Figures:
        return _expire(ctx.table, ctx.policy, ctx.dry_run, ctx.now_ms)


def _expire(table: Table, policy: MaintenancePolicy, dry_run: bool, now: int) -> Figures:
    action = ExpireSnapshots(
        older_than_ms=now - policy.max_snapshot_age_ms, retain_last=policy.retain_last
    )
    before = len(table.metadata.snapshots)
    if dry_run:
        plan = action.plan(table.metadata, table.io, "dry-run")
        expired = 0 if isinstance(plan, NoChange) else _removed_count(plan)
        return {"snapshots_before": before, "would_expire": expired}
    table.commit_or_raise(action)
    metadata_deleted = _delete_old_metadata_files(table, now)
    return {
        "snapshots_before": before,
        "snapshots_after": len(table.metadata.snapshots),
        "files_deleted": len(action.deleted),
        "metadata_files_deleted": metadata_deleted,
    }


def _removed_count(plan: object) -> int:
    if not isinstance(plan, MetadataUpdates):
        return 0
    return sum(len(u.snapshot_ids) for u in plan.updates if isinstance(u, RemoveSnapshots))


def _delete_old_metadata_files(table: Table, now: int) -> int:
    """Metadata files that left the metadata log (``write.metadata.previous-versions-max``):
    unreferenced, older than the oldest logged one and than ``METADATA_FILE_MIN_AGE_MS``
    (a commit in flight writes a young one). The filesystem catalog's version files stay
    (see ``orphans``)."""
    m = table.metadata
    logged = {orphans.canonical(e.metadata_file) for e in m.metadata_log}
    logged.add(orphans.canonical(table.metadata_location))
    oldest = min((e.timestamp_ms for e in m.metadata_log), default=m.last_updated_ms)
    cutoff = min(oldest, now - METADATA_FILE_MIN_AGE_MS)
    deleted = 0
    for f in table.io.list_files(m.location.rstrip("/") + "/metadata/"):
        if not f.location.endswith(".metadata.json") or orphans.is_catalog_version_file(f.location):
            continue
        if orphans.canonical(f.location) in logged or f.modified_ms >= cutoff:
            continue
        table.io.delete(f.location)
        deleted += 1
    return deleted


#: Listings retried when a file the metadata references is not listed.
ORPHAN_LISTING_ATTEMPTS = 3


@dataclass(frozen=True)
class RemoveOrphans:
    """Files under the table's location that no metadata references."""

    name: ClassVar[str] = "remove-orphans"
    counts_commits: ClassVar[bool] = False

    def run(self, ctx: PassContext) -> Figures:
        return _remove_orphans(ctx.table, ctx.policy, ctx.dry_run, ctx.now_ms)


def _remove_orphans(table: Table, policy: MaintenancePolicy, dry_run: bool, now: int) -> Figures:
    """A live stream replaces its index file (and a commit may drop other referenced
    files) between this job's read of the metadata and its listing: a referenced file
    missing from the listing is judged again on a fresh read of the table."""
    for attempt in range(1, ORPHAN_LISTING_ATTEMPTS + 1):
        try:
            r = orphans.remove_orphans(
                table.io,
                table.metadata,
                table.metadata_location,
                older_than_ms=now - policy.orphan_safety_age_ms,
                dry_run=dry_run,
            )
            break
        except orphans.OrphanListingMismatchError:
            if attempt == ORPHAN_LISTING_ATTEMPTS:
                raise
            table.refresh()
    return {
        "orphans": len(r.orphans),
        "deleted": r.deleted,
        "bytes_deleted": r.deleted_bytes,
        "too_young": r.too_young,
    }
