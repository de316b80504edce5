"""Maintenance is observable: each pass adds its figures to the ``calving_maintenance_*``
series (served at /metrics), logs one JSON line on ``calving.metrics``, and leaves a
last-pass record that ``calving table show`` prints; a stop request is counted as a
stopped pass. Real SQLite catalog, real local rewrites, a real HTTP scrape."""

from __future__ import annotations

import json
import logging
import threading
import urllib.request

import pytest

from calving.commit.maintenance.compaction import OneByOne
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.maintenance.last_pass import read_last_pass
from calving.commit.maintenance.policy import MaintenancePolicy
from calving.commit.maintenance.run import PASS_FIELDS
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import bucket
from calving.commit.table.actions.fast_append import FastAppend
from calving.ingest.config.maintenance import MaintenanceConfig
from calving.ingest.maintain import Maintainer
from calving.ingest.metrics.maintenance import MaintenanceMetrics
from calving.ingest.metrics.server import MetricsServer
from calving.ingest.show import describe_table
from calving.ingest.write.rewrite import local_rewrite
from tests.support.tables import EVENTS, make_table, row, write_partitioned

pytestmark = pytest.mark.integration

POLICY = MaintenancePolicy(
    compaction=CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2, max_commits=2),
    commit_pause_s=0.0,
    jobs=("compact", "expire-snapshots"),
)


def _table(catalog):
    table = make_table(catalog, "observed", spec=spec_builder(EVENTS, fields=[("id", bucket(4))]))
    for b in range(3):
        written = write_partitioned(table, [row(b * 100 + i) for i in range(20)])
        table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
    return table


def _maintainer(table) -> Maintainer:
    return Maintainer(
        table,
        MaintenanceConfig(policy=POLICY, rewrite_on="local"),
        OneByOne(local_rewrite(table.io, 1 << 20)),
        metrics=MaintenanceMetrics(table.name),
    )


def test_a_pass_is_counted_logged_recorded_and_shown(sqlite_catalog, caplog):
    table = _table(sqlite_catalog)
    files = len(table.live_files().data)
    maintainer = _maintainer(table)
    caplog.set_level(logging.INFO, logger="calving.metrics")
    report = maintainer.run_pass()
    assert report.ok

    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "calving.metrics"]
    assert len(lines) == 1
    line = lines[0]
    assert set(line) == set(PASS_FIELDS)
    assert line["event"] == "maintenance" and line["table"] == "db.observed"
    assert line["groups"] == 4 and line["groups_committed"] == 4
    assert line["commits"] >= 2 and line["files_before"] == files and line["files_after"] == 4
    assert [j["job"] for j in line["jobs"]] == ["compact", "expire-snapshots"]

    metrics = maintainer.metrics
    assert metrics is not None
    server = MetricsServer(metrics.registry, "127.0.0.1", 0)
    try:
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    finally:
        server.close()
    labels = 'table="db.observed"'
    assert f'calving_maintenance_passes_total{{outcome="ok",{labels}}} 1.0' in text
    assert f'calving_maintenance_groups_total{{result="committed",{labels}}} 4.0' in text
    assert f"calving_maintenance_files_rewritten_total{{{labels}}} {float(files)}" in text
    assert f"calving_maintenance_commits_total{{{labels}}} {float(line['commits'])}" in text

    record = read_last_pass(table.io, table.metadata)
    assert record == line
    shown = describe_table(table.refresh())
    assert "last maintenance pass" in shown
    assert "groups 4: committed 4, given up 0, failed 0, left 0" in shown
    assert f"data files {files} -> 4" in shown


def test_a_table_never_maintained_says_so(sqlite_catalog):
    table = _table(sqlite_catalog)
    assert "last maintenance pass  none recorded" in describe_table(table)


def test_a_stopped_pass_is_counted_as_stopped(sqlite_catalog):
    table = _table(sqlite_catalog)
    maintainer = _maintainer(table)
    stop = threading.Event()
    stop.set()  # SIGTERM before the pass started its jobs
    maintainer.use_stop(stop)
    report = maintainer.run_pass()
    assert report.stopped and all(j.skipped == "stopped" for j in report.jobs)
    summary = report.summary()
    assert summary["stopped"] and summary["commits"] == 0
    family = maintainer.metrics.families["calving_maintenance_passes_total"]  # type: ignore[union-attr]  # metrics is Optional; this maintainer has them
    assert family.value(outcome="stopped", table="db.observed") == 1
    assert "stopped" in describe_table(table.refresh())
