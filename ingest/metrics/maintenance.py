"""Per-pass figures of maintenance (``calving maintain`` or inline): Prometheus families
and one JSON line per pass.

``MaintenanceMetrics.pass_done(report)`` adds a pass's figures to the registry (the
stream's own when maintenance runs inline, so one endpoint serves both) and emits the
pass's summary (``calving.commit.maintenance.run.PASS_FIELDS``) as one JSON object on
the ``calving.metrics`` logger at INFO. ``MAINTENANCE_METRICS`` documents every name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from calving.commit.maintenance.run import MaintenanceReport
from calving.ingest.metrics.exposition import Counter, Gauge, Histogram, Registry

log = logging.getLogger("calving.metrics")

PASS_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

#: name -> (type, extra labels beyond table, help). Rendered in this order.
MAINTENANCE_METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "calving_maintenance_passes_total": (
        "counter",
        ("outcome",),
        "Maintenance passes, by outcome: ok, failed (a job failed), stopped (SIGTERM/Ctrl-C).",
    ),
    "calving_maintenance_commits_total": (
        "counter",
        (),
        "Commits maintenance made (replace snapshots of compaction waves, metadata changes).",
    ),
    "calving_maintenance_groups_total": (
        "counter",
        ("result",),
        (
            "Compaction groups by result: committed, given_up (the stream moved past them; "
            "retried next pass), failed, left (time budget or stop request)."
        ),
    ),
    "calving_maintenance_files_rewritten_total": (
        "counter",
        (),
        "Data files compaction removed (rewritten into fewer).",
    ),
    "calving_maintenance_files_written_total": ("counter", (), "Data files compaction wrote."),
    "calving_maintenance_bytes_rewritten_total": (
        "counter",
        (),
        "Bytes of the data files compaction removed.",
    ),
    "calving_maintenance_lost_swaps_total": (
        "counter",
        (),
        "Catalog swaps maintenance's commits lost (to the stream) and retried or gave up.",
    ),
    "calving_maintenance_pass_duration_seconds": ("histogram", (), "Whole maintenance pass."),
    "calving_maintenance_last_pass_timestamp_seconds": (
        "gauge",
        (),
        "Unix time at which the last maintenance pass ended.",
    ),
}


def maintenance_families(registry: Registry) -> dict[str, Any]:
    """Every family of ``MAINTENANCE_METRICS``, registered in ``registry`` (once per
    registry: the tables of a many-table pipeline share them by their labels)."""
    families: dict[str, Any] = {}
    for name, (kind, extra, help_text) in MAINTENANCE_METRICS.items():
        labels = ("table", *extra)
        family: Counter | Gauge | Histogram
        if kind == "counter":
            family = Counter(name, help_text, labels)
        elif kind == "gauge":
            family = Gauge(name, help_text, labels)
        else:
            family = Histogram(name, help_text, labels, PASS_BUCKETS)
        families[name] = registry.register(family)
    return families


class MaintenanceMetrics:
    """The maintenance figures of one table; ``log_passes``: emit the JSON line;
    ``families``: those of another table's ``MaintenanceMetrics`` on the same registry."""

    def __init__(
        self,
        table: str,
        *,
        registry: Registry | None = None,
        log_passes: bool = True,
        families: dict[str, Any] | None = None,
    ) -> None:
        self.registry = registry or Registry()
        self.labels = {"table": table}
        self.log_passes = log_passes
        self.families = families if families is not None else maintenance_families(self.registry)
        for name, (kind, extra, _) in MAINTENANCE_METRICS.items():
            if kind == "counter" and not extra:
                self.families[name].touch(**self.labels)

    def pass_done(self, report: MaintenanceReport, ended_s: float) -> dict[str, Any]:
        """Count the pass and log its JSON line; returns the summary logged."""
        summary = report.summary()
        self.update(summary, ended_s)
        if self.log_passes:
            log.info("%s", json.dumps(summary, sort_keys=True))
        return summary

    def update(self, summary: Mapping[str, Any], ended_s: float) -> None:
        f, labels = self.families, self.labels
        outcome = "stopped" if summary["stopped"] else ("ok" if summary["ok"] else "failed")
        f["calving_maintenance_passes_total"].inc(1, outcome=outcome, **labels)
        f["calving_maintenance_commits_total"].inc(summary["commits"], **labels)
        for result in ("committed", "given_up", "failed", "left"):
            f["calving_maintenance_groups_total"].inc(
                summary[f"groups_{result}"], result=result, **labels
            )
        f["calving_maintenance_files_rewritten_total"].inc(summary["files_before"], **labels)
        f["calving_maintenance_files_written_total"].inc(summary["files_after"], **labels)
        f["calving_maintenance_bytes_rewritten_total"].inc(summary["bytes_before"], **labels)
        f["calving_maintenance_lost_swaps_total"].inc(summary["lost_swaps"], **labels)
        f["calving_maintenance_pass_duration_seconds"].observe(summary["seconds"], **labels)
        f["calving_maintenance_last_pass_timestamp_seconds"].set(ended_s, **labels)
