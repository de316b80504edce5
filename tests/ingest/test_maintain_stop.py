"""``calving maintain CONFIG --once --local`` as a separate process stopped by SIGTERM in
the middle of a pass (after its first replace snapshot, during the pause before the
next wave): it exits 0 within seconds, its JSON line says the pass stopped with groups
left, and the table is whole: the three readers see every row, every data file on disk
is referenced or was deleted by the next pass's leftovers job, and that next pass
finishes the compaction. Real SQLite catalog, real local rewrites."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from calving.commit.table.actions.fast_append import FastAppend
from calving.ingest.catalogs import ensure_table, file_io, open_catalog
from calving.ingest.cli import main
from calving.ingest.config.loader import load_config
from tests.support import maintenance_acceptance as m
from tests.support.oracles import ALL_READERS
from tests.support.tables import write_partitioned

pytestmark = pytest.mark.integration

BUCKETS = 16
COLUMNS = ["id", "status", "version"]


def _replaces(config: Path) -> int:
    table = m.load_table(config)
    return sum(1 for s in table.metadata.snapshots if s.summary.get("operation") == "replace")


def test_sigterm_in_the_middle_of_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    extra = 'max_commits = 4\ncommit_pause = "5 seconds"'
    config = m.write_config(tmp_path, buckets=BUCKETS, extra=extra)
    rows = _write_small_files(config)
    proc = m.start(["maintain", str(config), "--once", "--local"], tmp_path, "maintain.log")
    deadline = time.monotonic() + 120
    while _replaces(config) == 0:
        assert proc.poll() is None, (tmp_path / "maintain.log").read_text()
        assert time.monotonic() < deadline, "no wave committed"
        time.sleep(0.1)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, (tmp_path / "maintain.log").read_text()
    assert time.monotonic() - sent < 10  # within the pause, not after the pass's end
    out = (tmp_path / "maintain.log").read_text().splitlines()
    summary = json.loads(next(line for line in out if line.startswith("{")))
    assert summary["stopped"] is True and summary["ok"] is True
    assert 0 < summary["groups_committed"] < summary["groups"]
    assert summary["groups_left"] == summary["groups"] - summary["groups_committed"]

    table = m.load_table(config)
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == sorted(rows), name

    # The next pass finishes the job: every bucket in one file, nothing unreferenced.
    capsys.readouterr()
    unpaused = m.write_config(
        tmp_path,
        "unpaused.toml",
        buckets=BUCKETS,
        extra='max_commits = 4\ncommit_pause = "0 seconds"',
    )
    assert main(["maintain", str(unpaused), "--once", "--local"]) == 0
    table = m.load_table(config)
    assert len(table.live_files().data) == BUCKETS
    on_disk = {str(p) for p in (tmp_path / "warehouse").rglob("*.parquet")}
    assert on_disk <= m.reachable_local(table)  # no file the stop left unreferenced
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == sorted(rows), name


def _write_small_files(config: Path) -> list[tuple[int, str, int]]:
    """Four appends, each one file per bucket: four small files in every bucket."""
    cfg = load_config(config)
    io = file_io(cfg.table)
    table = ensure_table(open_catalog(cfg.table, io), io, cfg.table)
    rows: list[tuple[int, str, int]] = []
    for b in range(4):
        batch = [(b * 1000 + i, f"s{i}", b) for i in range(256)]
        rows += batch
        written = write_partitioned(table, [dict(zip(COLUMNS, r)) for r in batch])
        assert len(written) == BUCKETS
        table.commit_or_raise(FastAppend(tuple(f for f, _ in written)))
    return rows
