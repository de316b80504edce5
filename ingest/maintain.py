"""Maintenance of a pipeline's table: ``calving maintain CONFIG.toml`` (a separate
process, once or every DURATION) and inline passes in the stream's own driver.

Both build a ``Maintainer`` from the pipeline's config: the table from its catalog, the
``[maintenance]`` policy, and a rewriter (Spark executors, or this process). A pass is
``calving.commit.maintenance.run.run_maintenance``; its report is printed one line per
job, then its summary as one JSON line; the summary is also kept as the table's
last-pass record (``calving table show``) and counted in ``MaintenanceMetrics``. A stop
request (``Maintainer.stop``) ends a pass at the next group, wave or job. Inline passes
never fail the stream: an error is logged and the next pass tries again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import CalvingError
from calving.commit.io import FileIO
from calving.commit.maintenance.compaction import OneByOne, Rewriter
from calving.commit.maintenance.compaction_plan import partition_with_small_files
from calving.commit.maintenance.last_pass import write_last_pass
from calving.commit.maintenance.run import MaintenanceReport, run_maintenance
from calving.commit.spec.data_file import EntryStatus, ManifestContent
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan
from calving.commit.table.table import Table
from calving.ingest.catalogs import file_io, open_catalog
from calving.ingest.config.loader import CalvingConfig
from calving.ingest.config.maintenance import MaintenanceConfig
from calving.ingest.metrics.exposition import Registry
from calving.ingest.metrics.maintenance import MaintenanceMetrics
from calving.ingest.metrics.server import MetricsServer
from calving.ingest.write.rewrite import local_rewrite
from calving.ingest.write.rewrite_spark import SparkRewriter

log = logging.getLogger("calving.maintenance")


def rewriter_for(
    config: MaintenanceConfig, table: Table, spark: Any | None, io_properties: dict[str, str]
) -> Rewriter:
    """Spark tasks when ``rewrite_on = "spark"`` and a session is given, else local."""
    target = config.policy.compaction.target_file_bytes
    if config.rewrite_on == "spark" and spark is not None:
        return SparkRewriter(spark, io_properties, target)
    return OneByOne(local_rewrite(table.io, target))


def compaction_due(config: MaintenanceConfig, io: FileIO, metadata: TableMetadata) -> bool:
    """A partition of ``metadata``'s current snapshot holds at least
    ``config.compact_files_threshold`` small files (and that threshold is on). Reads
    the data manifests through the process's caches, which the stream's commits fill;
    a snapshot that added no data file (nothing for the count) is not looked into."""
    threshold = config.compact_files_threshold
    snapshot = metadata.current_snapshot
    if threshold == 0 or "compact" not in config.policy.jobs or snapshot is None:
        return False
    if snapshot.summary.get("added-data-files", "0") == "0":
        return False
    files = (
        entry.data_file
        for manifest in scan.manifest_files(io, snapshot)
        if manifest.content == ManifestContent.DATA
        for entry in scan.manifest_entries(io, metadata, manifest)
        if entry.status != EntryStatus.DELETED
    )
    return partition_with_small_files(files, config.policy.compaction, threshold)


@dataclass
class Maintainer:
    table: Table
    config: MaintenanceConfig
    rewriter: Rewriter
    #: Passes run so far, and when the last one started (``time.monotonic()``).
    passes: int = 0
    last_started: float | None = None
    reports: list[MaintenanceReport] = field(default_factory=list)
    keep_reports: int = 10
    #: Set to stop the pass under way (at its next group, wave or job) and any later one.
    stop: threading.Event = field(default_factory=threading.Event)
    metrics: MaintenanceMetrics | None = None
    #: The table's metadata as the stream's coordinator holds it (inline): read after
    #: each batch to see whether a compaction is due by file count.
    stream_metadata: Callable[[], TableMetadata] | None = None

    def use_stop(self, stop: threading.Event) -> None:
        """Stop passes (and a Spark rewrite job under way) when ``stop`` is set."""
        self.stop = stop
        if isinstance(self.rewriter, SparkRewriter):
            self.rewriter.stop = stop

    def run_pass(
        self,
        *,
        dry_run: bool = False,
        budget_s: float | None = None,
        inline: bool = False,
        by_file_count: bool = False,
    ) -> MaintenanceReport:
        """One pass. ``inline``: run by the stream's own driver between its batches, so
        no commit of the stream can come between the pass's commits: no pause.
        ``by_file_count``: the compaction alone, of the partitions holding
        ``compact_files_threshold`` small files, committed as one snapshot; such a pass
        does not count as the interval's pass."""
        started = time.monotonic()
        if not by_file_count:
            self.last_started = started
        deadline = None if budget_s is None else started + budget_s
        policy = self.config.policy
        if inline:
            policy = dataclasses.replace(policy, commit_pause_s=0.0)
        if by_file_count:
            compaction = dataclasses.replace(
                policy.compaction,
                max_commits=1,
                due_small_files=self.config.compact_files_threshold,
            )
            policy = dataclasses.replace(policy, jobs=("compact",), compaction=compaction)
        report = run_maintenance(
            self.table,
            policy,
            self.rewriter,
            dry_run=dry_run,
            deadline=deadline,
            stop=self.stop,
        )
        self.passes += 1
        self.reports = [*self.reports, report][-self.keep_reports :]
        if self.metrics is None:
            self.metrics = MaintenanceMetrics(self.table.name)
        self.metrics.pass_done(report, time.time())
        if not dry_run:
            try:
                write_last_pass(self.table.io, self.table.metadata, report.summary())
            except CalvingError as err:  # the record is informative; the pass stands
                log.warning("could not record the last pass of %s: %s", self.table.name, err)
        return report

    def after_batch(self) -> MaintenanceReport | None:
        """Inline: a pass within the budget when the interval has passed, else a
        compaction alone when the table as the stream just committed it
        (``stream_metadata``) has a partition of ``compact_files_threshold`` small
        files; never raises."""
        now = time.monotonic()
        if self.last_started is None or now - self.last_started >= self.config.inline_interval_s:
            return self.inline_pass(self.config.inline_budget_s)
        current = self.stream_metadata
        if current is not None and compaction_due(self.config, self.table.io, current()):
            return self.inline_pass(self.config.inline_budget_s, by_file_count=True)
        return None

    def inline_pass(self, budget_s: float, by_file_count: bool = False) -> MaintenanceReport | None:
        """A pass from the stream's driver within ``budget_s`` (``by_file_count``: the
        compaction due by file count, see ``run_pass``); None if it raised (logged:
        inline maintenance never fails the stream)."""
        try:
            report = self.run_pass(budget_s=budget_s, inline=True, by_file_count=by_file_count)
        except Exception:  # inline maintenance must never fail the stream
            log.warning("inline maintenance of %s failed", self.table.name, exc_info=True)
            return None
        for line in report.lines():
            log.info("%s", line)
        return report


def build_maintainer(
    config: CalvingConfig,
    spark: Any | None = None,
    *,
    local: bool = False,
    registry: Registry | None = None,
) -> Maintainer:
    """The pipeline's table (it must exist) and its ``[maintenance]`` policy; its
    figures go to ``registry`` (the stream's, inline) or a registry of its own."""
    io = file_io(config.table)
    table = Table.load(open_catalog(config.table, io), config.table.ident, io)
    rewriter = rewriter_for(config.maintenance, table, None if local else spark, config.table.io)
    metrics = MaintenanceMetrics(
        table.name, registry=registry, log_passes=config.metrics.log_batches
    )
    return Maintainer(table, config.maintenance, rewriter, metrics=metrics)


def run_command(
    config: CalvingConfig,
    *,
    every_s: float | None,
    dry_run: bool,
    local: bool,
    stop: threading.Event,
    spark_factory: Callable[[], Any],
    out: Callable[[str], None] = print,
    metrics_port: int | None = None,
) -> int:
    """``calving maintain``: one pass, or a pass every ``every_s`` seconds until
    ``stop`` (which also ends a pass under way at its next group, wave or job). Exit
    status: 0, or 1 when the (last) pass had a failed job. ``metrics_port``: serve the
    maintenance figures there while it runs."""
    local = local or config.maintenance.rewrite_on == "local"
    maintainer = build_maintainer(config, None if local else spark_factory(), local=local)
    maintainer.use_stop(stop)
    server = None
    if metrics_port is not None and maintainer.metrics is not None:
        server = MetricsServer(maintainer.metrics.registry, config.metrics.host, metrics_port)
        out(f"metrics at {server.url}")
    try:
        return _passes(maintainer, every_s=every_s, dry_run=dry_run, stop=stop, out=out)
    finally:
        if server is not None:
            server.close()


def _passes(
    maintainer: Maintainer,
    *,
    every_s: float | None,
    dry_run: bool,
    stop: threading.Event,
    out: Callable[[str], None],
) -> int:
    ok = True
    while not stop.is_set():
        started = time.monotonic()
        report = maintainer.run_pass(dry_run=dry_run)
        for line in report.lines():
            out(line)
        out(json.dumps(report.summary(), sort_keys=True))
        ok = report.ok
        if every_s is None:
            break
        stop.wait(max(0.0, started + every_s - time.monotonic()))
    return 0 if ok else 1
