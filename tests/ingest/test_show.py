"""``calving table show``'s health section on a real table (no Spark): the figures are
checked against the files on disk, their Parquet footers and DuckDB's row count."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow.parquet as pq
from pyroaring import BitMap64

from calving.commit.spec.partition import spec_builder
from calving.commit.spec.transforms import IDENTITY
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.ingest.show import describe_table
from tests.support.oracles import duckdb_rows
from tests.support.tables import EVENTS, make_table, row, write_partitioned

REGIONS = [f"r{k:02d}" for k in range(12)]  # region k gets k + 1 data files of 2 rows


def _parquet_files(root: Path) -> dict[str, list[Path]]:
    """Data files on disk by region (from the partition directory names)."""
    out: dict[str, list[Path]] = {}
    for directory, _, names in os.walk(root / "data"):
        for name in names:
            if name.endswith(".parquet"):
                region = Path(directory).name.removeprefix("region=")
                out.setdefault(region, []).append(Path(directory) / name)
    return out


def test_show_reports_health_totals_top_partitions_and_reasons(sqlite_catalog) -> None:
    table = make_table(
        sqlite_catalog,
        "shown",
        spec=spec_builder(EVENTS, fields=[("region", IDENTITY)]),
        properties={"write.target-file-size-bytes": "65536"},
    )
    written = []
    for i in range(len(REGIONS)):
        rows = [
            row(100 * i + 2 * k + j, region=r)
            for k, r in enumerate(REGIONS)
            if k >= i
            for j in (0, 1)
        ]
        written += [f for f, _ in write_partitioned(table, rows)]
    table.commit_or_raise(FastAppend(tuple(written)))
    table.commit_or_raise(RowDelta(deletes={f.file_path: BitMap64([0]) for f in written[:60]}))

    shown = describe_table(table)
    on_disk = _parquet_files(Path(table.metadata.location.removeprefix("file://")))
    files = [p for paths in on_disk.values() for p in paths]
    rows = sum(pq.ParquetFile(p).metadata.num_rows for p in files)
    live = len(duckdb_rows(table.metadata_location, ["id"]))
    # One row of each of 60 files is deleted (a DV each; a file keeps a live row, so
    # none is emptied and removed).
    assert (len(files), rows, rows - live) == (78, 156, 60)

    # The table's write.target-file-size-bytes sizes the figures (75 % of it is small).
    assert "health (target file size 65,536 bytes (64.0 KiB); small files < 49,152 bytes)" in shown
    assert (
        f"  data files {len(files)} in {len(on_disk)} partitions   small {len(files)}   "
        f"bytes {sum(p.stat().st_size for p in files):,}   rows {rows}   live rows {live}"
    ) in shown.splitlines()
    assert f"  DVs 60   deleted rows 60   DV ratio {60 / rows:.1%}" in shown.splitlines()
    assert "  snapshots 2   manifests 2 (1 data, 1 delete)" in shown.splitlines()

    # Top 10 partitions by file count: r11 (12 files) down to r02 (3 files).
    table_rows = re.findall(r"^  (region=r\d\d)\s+0\s+(\d+)\s+(\d+)\s", shown, re.MULTILINE)
    want = sorted(on_disk, key=lambda r: -len(on_disk[r]))[:10]
    assert table_rows == [(f"region={r}", str(len(on_disk[r])), str(len(on_disk[r]))) for r in want]
    assert "partitions by file count (top 10 of 12)" in shown

    # Each file holds two rows: a file with a DV holds half its bytes live. Budget per
    # region: ceil(live bytes / target) + 1.
    halved = {f.file_path.removeprefix("file://") for f in written[:60]}

    def live_bytes(p: Path) -> int:
        return p.stat().st_size // 2 if str(p) in halved else p.stat().st_size

    budget = {r: -(-sum(live_bytes(p) for p in paths) // 65536) + 1 for r, paths in on_disk.items()}
    over = [r for r in REGIONS if len(on_disk[r]) > budget[r]]
    assert len(over) == 10  # r00 and r01: 1 and 2 files, budget 2
    small = sum(len(on_disk[r]) for r in over)
    assert (
        f"  - {len(over)} partitions need compaction: {small} files where "
        f"{sum(budget[r] for r in over)} would do ({small} small)"
    ) in shown.splitlines()
    assert "  - DV ratio 38% > 20%" in shown.splitlines()

    # An explicit target wins over the property: against 1 KiB no file is small, every
    # partition's budget grows past its file count, and none needs compaction.
    relaxed = describe_table(table, target_file_bytes=1024).splitlines()
    header = "health (target file size 1,024 bytes (1.0 KiB); small files < 768 bytes)"
    assert "small 0 " in relaxed[relaxed.index(header) + 1]
    budget = {r: -(-sum(live_bytes(p) for p in paths) // 1024) + 1 for r, paths in on_disk.items()}
    shown_budgets = dict(
        re.findall(r"^  region=(r\d\d)\s+0\s.*\s(\d+)$", "\n".join(relaxed), re.MULTILINE)
    )
    assert len(shown_budgets) == 10
    assert shown_budgets == {r: str(budget[r]) for r in shown_budgets}
    assert all(len(on_disk[r]) <= budget[r] for r in REGIONS)
    assert not any("need compaction" in line for line in relaxed)
