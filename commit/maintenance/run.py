"""One maintenance pass over a table: leftovers of killed passes, compaction, manifest
rewrite, column statistics, snapshot expiry and orphan removal, in that order, each a
job with its own figures. The pass keeps a journal of the files it writes
(``calving.commit.maintenance.journal``) and removes its own unreferenced ones at the end.

A job that fails is reported and the next one still runs (each plans on a fresh read of
the table). A deadline (``time.monotonic()``) bounds the pass: no job, and no
compaction batch, starts after it, so the stream's driver can run a pass between
micro-batches within a time budget. Tables this pass cannot maintain safely (equality
deletes or v2 position-delete files written by another engine, a format version other
than 3) are refused before anything is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from calving.commit.errors import CalvingError, UnsupportedFeatureError
from calving.commit.io import FileIO
from calving.commit.maintenance import compaction, journal, orphans
from calving.commit.maintenance.column_stats import collect_statistics
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

Figures = dict[str, int | float]


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

    @property
    def ok(self) -> bool:
        return all(j.error is None for j in self.jobs)

    def job(self, name: str) -> JobResult | None:
        return next((j for j in self.jobs if j.job == name), None)

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


Job = Callable[[Table, MaintenancePolicy, bool, float | None, int], Figures]


def run_maintenance(
    table: Table,
    policy: MaintenancePolicy,
    rewriter: compaction.RewriteFn | compaction.Rewriter,
    *,
    dry_run: bool = False,
    deadline: float | None = None,
    now_ms: int | None = None,
) -> MaintenanceReport:
    """Run the policy's jobs in order; every job's figures or error in the report."""
    table.refresh()
    check_maintainable(table.io, table.metadata)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = MaintenanceReport(table.name, dry_run)
    run_journal = journal.start_run(table, dry_run=dry_run)
    own_run = run_journal.run_id if run_journal is not None else None
    watched = journal.journaled(rewriter, run_journal)
    jobs: dict[str, Job] = {
        "leftovers": lambda t, p, d, dl, n: journal.clean_leftovers(
            t, own_run=own_run, dry_run=d, now_ms=n
        ).figures(d),
        "compact": lambda t, p, d, dl, n: _compact(t, p, watched, d, dl),
        "rewrite-manifests": _rewrite_manifests,
        "statistics": _statistics,
        "expire-snapshots": _expire,
        "remove-orphans": _remove_orphans,
    }
    try:
        for name in policy.jobs:
            result = JobResult(name)
            report.jobs.append(result)
            if deadline is not None and time.monotonic() > deadline:
                result.skipped = "time budget used up"
                continue
            started = time.monotonic()
            try:
                table.refresh()
                result.figures = jobs[name](table, policy, dry_run, deadline, now)
            except JobFailed as err:
                log.warning("maintenance job %s on %s: %s", name, table.name, err)
                result.figures, result.error = err.figures, str(err)
            except CalvingError as err:
                log.warning("maintenance job %s on %s failed: %s", name, table.name, err)
                result.error = f"{type(err).__name__}: {err}"
            result.seconds = time.monotonic() - started
    finally:
        if run_journal is not None:
            run_journal.finish(table)
    return report


def _compact(
    table: Table,
    policy: MaintenancePolicy,
    rewriter: compaction.RewriteFn | compaction.Rewriter,
    dry_run: bool,
    deadline: float | None,
) -> Figures:
    r = compaction.compact(table, policy.compaction, rewriter, dry_run=dry_run, deadline=deadline)
    figures: Figures = {
        "groups": r.groups_planned,
        "committed": r.groups_committed,
        "left": r.groups_left,
        "files_before": r.files_before,
        "files_after": r.files_after,
        "bytes_before": r.bytes_before,
        "bytes_after": r.bytes_after,
        "dvs_purged": r.dvs_purged,
        "deletes_carried": r.deletes_carried,
    }
    if r.groups_failed:
        failed = f"{len(r.groups_failed)} group(s) failed; first: {r.groups_failed[0]}"
        raise JobFailed(failed, figures)
    return figures


class JobFailed(CalvingError):
    """A job did part of its work (its figures) and failed on the rest."""

    def __init__(self, message: str, figures: Figures) -> None:
        super().__init__(message)
        self.figures = figures


def _rewrite_manifests(
    table: Table, policy: MaintenancePolicy, dry_run: bool, _deadline: float | None, _now: int
) -> Figures:
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


def _statistics(
    table: Table, policy: MaintenancePolicy, dry_run: bool, _deadline: float | None, now: int
) -> Figures:
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


def _expire(
    table: Table, policy: MaintenancePolicy, dry_run: bool, _deadline: float | None, now: int
) -> Figures:
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


def _remove_orphans(
    table: Table, policy: MaintenancePolicy, dry_run: bool, _deadline: float | None, now: int
) -> Figures:
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
