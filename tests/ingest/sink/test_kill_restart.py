"""SIGKILL the driver mid-stream, restart with and without the checkpoint: the table
still holds exactly the source's final state (no duplicates, nothing lost)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.table.table import create_table
from calving.ingest.kafka.producer import produce
from tests.support.cdc import COLUMNS, SCHEMA, cdc_events
from tests.support.oracles import duckdb_rows, pyiceberg_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def _driver(args: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.stream_driver", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        start_new_session=True,  # the whole driver (Python + JVM) dies together
    )


def _kill_after_commits(proc: subprocess.Popen, commits: int, timeout: float = 300) -> int:
    seen = 0
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while seen < commits and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("committed"):
            seen += 1
    time.sleep(0.3)  # land the kill inside the next batch, not between batches
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    return seen


@pytest.mark.parametrize("keep_checkpoint", [True, False], ids=["checkpoint", "no-checkpoint"])
def test_sigkill_driver_and_restart(broker, make_topic, tmp_path, keep_checkpoint):
    topic = make_topic(partitions=4)
    stream = cdc_events(keys=5000, events=30000, partitions=4, seed=3)
    produce(broker.bootstrap_servers, topic, stream.records)
    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", str(tmp_path / "wh")
    catalog = SqlCatalog("calving", uri, warehouse)
    catalog.create_namespace(("db",))
    table = create_table(catalog, ("db", "orders"), SCHEMA)
    ckpt = tmp_path / "ckpt"
    args = [
        "--bootstrap", broker.bootstrap_servers, "--topic", topic, "--catalog", uri,
        "--warehouse", warehouse, "--table", "db.orders", "--checkpoint", str(ckpt),
        "--writer", "orders", "--format", "debezium", "--max-offsets", "3000",
    ]  # fmt: skip
    first = _driver(args, tmp_path / "first.log")
    committed = _kill_after_commits(first, commits=3)
    assert committed >= 1, (tmp_path / "first.log").read_text()[-3000:]
    table.refresh()
    assert table.metadata.current_snapshot_id is not None
    if not keep_checkpoint:
        shutil.rmtree(ckpt)
    second = _driver([*args, "--available-now"], tmp_path / "second.log")
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, (tmp_path / "second.log").read_text()[-3000:]
    assert "drained" in out
    table.refresh()
    rows = pyiceberg_rows(table.metadata_location, COLUMNS)
    assert len({r[0] for r in rows}) == len(rows), "duplicate keys"
    assert rows == stream.expected
    assert duckdb_rows(table.metadata_location, COLUMNS) == stream.expected
    ends = {(topic, p): e for p, e in broker_end_offsets(stream, topic).items()}
    assert table.ledger("orders") == ends


def broker_end_offsets(stream, topic: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for part, *_ in stream.records:
        counts[part] = counts.get(part, 0) + 1
    return counts
