"""``[maintenance]``: the policy of ``calving maintain`` and of inline maintenance in the
stream's driver (compaction thresholds, snapshot retention, orphan safety age, manifest
size, which jobs run, where rewrites run)."""

from __future__ import annotations

from dataclasses import dataclass, field

from calving.commit.errors import ConfigError
from calving.commit.maintenance.compaction_plan import (
    DEFAULT_DELETE_RATIO,
    DEFAULT_MAX_COMMITS,
    DEFAULT_MIN_INPUT_FILES,
    DEFAULT_TARGET_FILE_BYTES,
    CompactionPolicy,
)
from calving.commit.maintenance.policy import JOBS, MIN_ORPHAN_SAFETY_AGE_MS, MaintenancePolicy
from calving.ingest.config.reader import Section
from calving.ingest.config.runtime import interval_seconds

MAINTENANCE_KEYS = (
    "inline",
    "inline_interval",
    "inline_budget",
    "inline_compact_files",
    "rewrite_on",
    "jobs",
    "target_file_size_bytes",
    "min_input_files",
    "delete_ratio",
    "max_group_bytes",
    "snapshot_retention_count",
    "snapshot_retention_age",
    "orphan_safety_age",
    "manifest_target_size_bytes",
    "statistics_interval",
    "max_commits",
    "commit_pause",
)

#: Small files in one partition that make an inline compaction due before the interval.
DEFAULT_INLINE_COMPACT_FILES = 8

_DURATION = 'a duration such as "30 seconds", "15 minutes", "6 hours" or "3 days"'


@dataclass(frozen=True)
class MaintenanceConfig:
    policy: MaintenancePolicy = field(default_factory=MaintenancePolicy)
    #: Run a pass from the stream's own driver between micro-batches.
    inline: bool = False
    #: At least this long between two inline passes (seconds).
    inline_interval_s: float = 60.0
    #: No inline job (or compaction batch) starts after this many seconds of a pass.
    inline_budget_s: float = 10.0
    #: An inline compaction (that job alone) runs after a batch, without waiting for
    #: ``inline_interval``, once a partition holds this many small files (at least
    #: ``min_input_files``); 0: the interval alone decides.
    inline_compact_files: int = DEFAULT_INLINE_COMPACT_FILES
    #: "spark": rewrite groups as Spark tasks (one per group); "local": in the driver.
    rewrite_on: str = "spark"

    @property
    def compact_files_threshold(self) -> int:
        """Small files in one partition that make an inline compaction due (0: never
        before the interval): ``inline_compact_files``, raised to ``min_input_files``
        (below it the compaction would plan no group)."""
        if self.inline_compact_files == 0:
            return 0
        return max(self.inline_compact_files, self.policy.compaction.min_input_files)


def parse_maintenance(s: Section | None) -> MaintenanceConfig:
    if s is None:
        return MaintenanceConfig()
    target = _int(s, "target_file_size_bytes", DEFAULT_TARGET_FILE_BYTES, 1024)
    compaction = CompactionPolicy(
        target_file_bytes=target,
        min_input_files=_int(s, "min_input_files", DEFAULT_MIN_INPUT_FILES, 1),
        delete_ratio=s.fraction("delete_ratio", DEFAULT_DELETE_RATIO),
        max_group_bytes=_int(s, "max_group_bytes", 10 * target, target),
        max_commits=_int(s, "max_commits", DEFAULT_MAX_COMMITS, 1),
    )
    jobs = s.string_list("jobs", what=f"a list of job names ({', '.join(JOBS)})")
    for i, job in enumerate(jobs or ()):
        if job not in JOBS:
            # The name is not echoed: it may have come from ${env:...}.
            raise ConfigError(f"{s.key('jobs')}[{i}]: unknown job; known: {', '.join(JOBS)}")
    manifest_target = s.integer("manifest_target_size_bytes", None, minimum=1024)
    policy = MaintenancePolicy(
        compaction=compaction,
        retain_last=_retain_last(s),
        max_snapshot_age_ms=_ms(s, "snapshot_retention_age", "30 minutes", 0),
        orphan_safety_age_ms=_ms(s, "orphan_safety_age", "3 days", MIN_ORPHAN_SAFETY_AGE_MS),
        manifest_target_bytes=manifest_target,
        statistics_interval_ms=_ms(s, "statistics_interval", "1 hour", 0),
        jobs=JOBS if jobs is None else tuple(jobs),
        commit_pause_s=_ms(s, "commit_pause", "0.5 seconds", 0) / 1000,
    )
    config = MaintenanceConfig(
        policy=policy,
        inline=s.boolean("inline", False),
        inline_interval_s=_ms(s, "inline_interval", "1 minute", 0) / 1000,
        inline_budget_s=_ms(s, "inline_budget", "10 seconds", 1000) / 1000,
        inline_compact_files=_int(s, "inline_compact_files", DEFAULT_INLINE_COMPACT_FILES, 0),
        rewrite_on=s.string("rewrite_on", "spark", choices=("spark", "local")) or "spark",
    )
    s.finish()
    return config


def _int(s: Section, name: str, default: int, minimum: int) -> int:
    value = s.integer(name, default, minimum=minimum)
    assert value is not None
    return value


def _retain_last(s: Section) -> int:
    value = _int(s, "snapshot_retention_count", 10, 0)
    if value < 1:
        s.fail(
            "snapshot_retention_count", "must be at least 1: 0 would expire the current snapshot"
        )
    return value


def _ms(s: Section, name: str, default: str, minimum_ms: int) -> int:
    text = s.string(name, default, what=_DURATION)
    assert text is not None
    try:
        ms = int(interval_seconds(text) * 1000)
    except ValueError:
        s.fail(name, f"expected {_DURATION}, got {s.shown(s.key(name), text)}")
    if ms < minimum_ms:
        why = {
            "orphan_safety_age": ": younger files may belong to a commit in flight",
            "inline_budget": "",
        }.get(name, "")
        s.fail(
            name, f"must be at least {_shown_ms(minimum_ms)}, got {s.shown(s.key(name), text)}{why}"
        )
    return ms


def _shown_ms(ms: int) -> str:
    if ms % 3_600_000 == 0:
        return f"{ms // 3_600_000} hour(s)"
    return f"{ms / 1000:g} second(s)"


__all__ = [
    "DEFAULT_INLINE_COMPACT_FILES",
    "MAINTENANCE_KEYS",
    "MaintenanceConfig",
    "parse_maintenance",
]
