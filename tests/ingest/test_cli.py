"""The ``calving`` command: ``run`` from a TOML config on the session's broker and Spark,
``table show``, configuration errors, and ``demo`` as a user runs it (a subprocess)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from pyiceberg.table import StaticTable

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.table.table import Table
from calving.ingest.cli import main
from calving.ingest.kafka.producer import produce
from tests.ingest.conftest import REPO_ROOT
from tests.support.cdc import COLUMNS, cdc_events
from tests.support.lineage import identity_changes
from tests.support.oracles import duckdb_rows, pyiceberg_rows

CONFIG = """
[source]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
max_offsets_per_trigger = 3000

[format]
type = "debezium-json"

[table]
catalog = "sqlite:///catalog.db"
warehouse = "warehouse"
name = "shop.orders"
identifier_fields = ["id"]
partition = ["bucket(4, id)"]
columns = [
  {{ name = "id", type = "long" }},
  {{ name = "status", type = "string" }},
  {{ name = "version", type = "long" }},
]

[sink]
writer_id = "orders-cli"
checkpoint = "checkpoints/orders"
dead_letter_table = "orders_dead_letters"
"""


@pytest.mark.integration
def test_run_available_now_then_table_show(spark, broker, make_topic, tmp_path, capsys):
    topic = make_topic(partitions=3)
    stream = cdc_events(keys=800, events=6_000, partitions=3, seed=5)
    ends = produce(broker.bootstrap_servers, topic, stream.records)
    config = tmp_path / "orders.toml"
    config.write_text(CONFIG.format(bootstrap=broker.bootstrap_servers, topic=topic))

    assert main(["run", str(config), "--available-now"]) == 0

    catalog = SqlCatalog("calving", f"sqlite:///{tmp_path}/catalog.db", str(tmp_path / "warehouse"))
    table = Table.load(catalog, ("shop", "orders"))
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == stream.expected
    assert duckdb_rows(table.metadata_location, COLUMNS) == stream.expected
    assert table.ledger("orders-cli") == {(topic, p): e for p, e in ends.items()}
    assert table.live_files().dvs, "updates across batches must have produced DVs"
    snapshots = len(table.metadata.snapshots)

    # A second run with the checkpoint deleted replays from the ledger: nothing changes.
    import shutil

    shutil.rmtree(tmp_path / "checkpoints")
    assert main(["run", str(config), "--available-now"]) == 0
    table.refresh()
    assert len(table.metadata.snapshots) == snapshots

    capsys.readouterr()
    assert main(["table", "show", "shop.orders", "--config", str(config), "--files"]) == 0
    shown = capsys.readouterr().out
    assert "writer orders-cli" in shown
    for partition, end in ends.items():
        assert re.search(rf"{topic}/{partition}\s+{end}\b", shown)
    assert f"snapshots    {snapshots}" in shown
    assert f"deletion vectors {len(table.live_files().dvs)} " in shown
    assert "bucket[4](id)" in shown
    # The health section: rows from the Parquet footers, live rows as the readers count them.
    import pyarrow.parquet as pq

    files = [
        t.file.file_path
        for t in StaticTable.from_metadata(table.metadata_location).scan().plan_files()
    ]
    rows = sum(pq.ParquetFile(p.removeprefix("file://")).metadata.num_rows for p in files)
    assert f"rows {rows:,}   live rows {len(stream.expected):,}" in shown
    assert f"DV ratio {(rows - len(stream.expected)) / rows:.1%}" in shown


def test_config_errors_exit_2_naming_the_key(tmp_path, capsys):
    config = tmp_path / "bad.toml"
    config.write_text(
        CONFIG.format(bootstrap="127.0.0.1:1", topic="t").replace('writer_id = "orders-cli"', "")
    )
    assert main(["run", str(config)]) == 2
    err = capsys.readouterr().err
    assert "sink.writer_id" in err and str(config) in err

    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "config file not found" in capsys.readouterr().err

    os.environ.pop("CALVING_CATALOG", None)
    assert main(["table", "show", "db.t"]) == 2
    assert "--catalog" in capsys.readouterr().err


def test_table_show_on_a_missing_table_is_an_error(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/c.db"
    SqlCatalog("calving", uri, str(tmp_path)).create_namespace(("db",))
    assert main(["table", "show", "db.nothing", "--catalog", uri]) == 1
    assert "NoSuchTableError" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.slow
def test_demo_passes_its_own_check(tmp_path):
    """``calving demo`` as the README runs it, in a fresh process (its own broker and Spark)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), env.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, "-m", "calving.ingest.cli", "demo", "--events", "8000",
         "--max-offsets-per-trigger", "2500", "--warehouse", str(tmp_path / "wh"), "--no-progress"],
        check=False, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "RESULT     PASS" in out
    assert re.search(r"read back  pyiceberg \(its own SqlCatalog\): [\d,]+ rows  OK", out)
    assert re.search(r"read back  DuckDB iceberg_scan: [\d,]+ rows  OK", out)
    # Check the table once more here, independently of the demo's own check.
    table_name = re.search(r"^table      (\S+)$", out, re.MULTILINE).group(1)
    live = int(re.search(r"expected   ([\d,]+) live orders", out).group(1).replace(",", ""))
    catalog = SqlCatalog("calving", f"sqlite:///{tmp_path}/wh/catalog.db", str(tmp_path / "wh"))
    table = Table.load(catalog, tuple(table_name.split(".")))
    assert len(pyiceberg_rows(table.metadata_location, ["id"])) == live
    dvs = int(
        re.search(r"deletes    as (\d+) deletion vectors, 0 equality-delete files", out).group(1)
    )
    assert dvs > 0 and dvs == len(table.live_files().dvs)
    # Row identity as the change feed reports it, against the reference lineage reader.
    kept, new = (
        int(n.replace(",", ""))
        for n in re.search(
            r"lineage    ([\d,]+) row updates kept their _row_id; ([\d,]+) keys were deleted "
            r"and inserted in one snapshot",
            out,
        ).groups()
    )
    assert (kept, new) == identity_changes(table.metadata_location, "id")
    assert kept + new > 0
