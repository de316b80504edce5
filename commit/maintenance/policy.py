"""What one maintenance pass does, as a value: compaction thresholds, snapshot
retention, orphan safety age and which jobs run. Pure; the ``[maintenance]`` config
section builds one (``calving.ingest.config.maintenance``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from calving.commit.errors import ConfigError
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.maintenance.pacing import DEFAULT_COMMIT_PAUSE_S

#: Every job a pass can run, in the order it runs them.
JOBS = (
    "leftovers",
    "compact",
    "rewrite-manifests",
    "expire-snapshots",
    "remove-orphans",
    # Last: the costliest job (it reads every file whose DV changed), so an inline
    # budget is spent on the others first.
    "statistics",
)

MINUTE_MS = 60 * 1000
DEFAULT_RETAIN_LAST = 10
DEFAULT_MAX_SNAPSHOT_AGE_MS = 30 * MINUTE_MS
DEFAULT_ORPHAN_SAFETY_AGE_MS = 3 * 24 * 60 * MINUTE_MS
DEFAULT_STATISTICS_INTERVAL_MS = 60 * MINUTE_MS
#: Below this, a commit in flight could still be writing the files judged orphans.
MIN_ORPHAN_SAFETY_AGE_MS = 60 * MINUTE_MS
#: An unreferenced metadata file that left the metadata log is deleted by the expiry
#: job only when it is older than the oldest logged version (a commit in flight wrote
#: its file after loading a base at least that new; had it landed, its file would be in
#: the log) and than this margin for clock skew between writers and the file store.
METADATA_FILE_MIN_AGE_MS = 2 * MINUTE_MS


@dataclass(frozen=True)
class MaintenancePolicy:
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)
    #: Snapshots kept by count: the newest ``retain_last`` ancestors of the current one.
    retain_last: int = DEFAULT_RETAIN_LAST
    #: ...and every snapshot younger than this.
    max_snapshot_age_ms: int = DEFAULT_MAX_SNAPSHOT_AGE_MS
    orphan_safety_age_ms: int = DEFAULT_ORPHAN_SAFETY_AGE_MS
    #: Column statistics are recomputed only when the newest published ones are for a
    #: snapshot older than this (under CDC every file's DV changes between passes, so
    #: each computation reads the whole table).
    statistics_interval_ms: int = DEFAULT_STATISTICS_INTERVAL_MS
    #: Merge manifests toward this size (``commit.manifest.target-size-bytes`` is set to
    #: it when it differs); None keeps the table's property.
    manifest_target_bytes: int | None = None
    jobs: tuple[str, ...] = JOBS
    #: Seconds between two commits of a pass: the stream's window (maintenance yields).
    commit_pause_s: float = DEFAULT_COMMIT_PAUSE_S

    def __post_init__(self) -> None:
        if self.commit_pause_s < 0:
            raise ConfigError(f"commit_pause must not be negative: {self.commit_pause_s}")
        if self.retain_last < 1:
            raise ConfigError(
                f"retain_last must be at least 1, got {self.retain_last}: "
                "0 would expire the current snapshot"
            )
        if self.max_snapshot_age_ms < 0:
            raise ConfigError(f"max_snapshot_age must not be negative: {self.max_snapshot_age_ms}")
        if self.orphan_safety_age_ms < MIN_ORPHAN_SAFETY_AGE_MS:
            raise ConfigError(
                f"orphan_safety_age must be at least 1 hour, got {self.orphan_safety_age_ms} ms: "
                "younger files may belong to a commit in flight"
            )
        if self.manifest_target_bytes is not None and self.manifest_target_bytes <= 0:
            raise ConfigError(
                f"manifest_target_bytes must be positive, got {self.manifest_target_bytes}"
            )
        unknown = [j for j in self.jobs if j not in JOBS]
        if unknown:
            raise ConfigError(f"unknown maintenance job {unknown[0]!r}; known: {', '.join(JOBS)}")
