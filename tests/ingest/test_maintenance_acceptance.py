"""Acceptance of table maintenance beside a live CDC stream (issue 11).

``calving run`` streams a seeded Debezium change stream (inserts, updates, deletes on
hot keys; final state known) in 200+ micro-batches (100+ on PostgreSQL) while ``calving maintain --every``
runs in another process; then one ``calving maintain --once`` pass leaves the table
healthy. The three independent readers must see exactly the generator's final state,
and the stream must never rebuild its primary-key index from the data files (the
``index_rebuilds`` field of its per-batch JSON lines, ``calving_index_rebuilds_total``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from calving.commit.errors import NoSuchNamespaceError, NoSuchTableError
from calving.ingest.cli import main
from calving.ingest.kafka.producer import produce
from tests.support import maintenance_acceptance as m
from tests.support.cdc import COLUMNS, CdcStream, cdc_events
from tests.support.oracles import ALL_READERS
from tests.support.s3 import moto_bucket

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OLD = time.time() - 10 * 86400


def _wait_for_table(config: Path, proc: Any, log: Path, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            m.load_table(config)
            return
        except (NoSuchTableError, NoSuchNamespaceError):
            time.sleep(0.3)
    raise AssertionError("the stream created no table: " + log.read_text()[-3000:])


#: Per catalog: Kafka records per batch and the committed batches required. SQLite is
#: the 200-batch acceptance; PostgreSQL runs the same checks over the same stream in
#: half as many batches (the catalog is what it adds; CI time is what it costs).
SHAPES = {"sqlite": (20, 200), "postgres": (40, 100)}


def _wait_for_batches(log: Path, proc: Any, batches: int, limit: float = 400) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if len(m.batch_records(log.read_text())) >= batches:
            return
        time.sleep(0.5)


def _stream_beside_maintain(tmp: Path, config: Path, batches: int) -> tuple[str, list[str], float]:
    """``calving -v run --available-now`` with ``calving maintain --every "2 seconds"``
    beside it: the stream's log, maintain's lines and the stream's seconds."""
    started = time.monotonic()
    stream = m.start(["-v", "run", str(config), "--available-now"], tmp, "stream.log")
    _wait_for_table(config, stream, tmp / "stream.log")
    maintain = m.start(["maintain", str(config), "--every", "2 seconds", "--local"], tmp, "m.log")
    try:
        # Maintenance stops a few batches before the stream ends, so the final pass
        # has the stream's last files and deletes to rewrite.
        _wait_for_batches(tmp / "stream.log", stream, batches - 10)
        maintain.send_signal(signal.SIGTERM)
        maintain_rc = maintain.wait(timeout=120)
        assert stream.wait(timeout=400) == 0, (tmp / "stream.log").read_text()[-3000:]
        seconds = time.monotonic() - started
    finally:
        for proc in (maintain, stream):
            if proc.poll() is None:
                proc.kill()
    lines = (tmp / "m.log").read_text().splitlines()
    assert maintain_rc == 0, lines[-40:]
    return (tmp / "stream.log").read_text(), lines, seconds


def _check_stream(log: str, lines: list[str], at_least: int) -> int:
    """``at_least`` committed batches, no index rebuild, no failed maintenance job."""
    batches = m.batch_records(log)
    committed = [b for b in batches if b["outcome"] == "committed"]
    assert len(committed) >= at_least, len(committed)
    assert not [b for b in batches if b["outcome"] == "failed"]
    assert max(b["index_rebuilds"] for b in batches) == 0
    assert [msg for msg in m.REBUILD_MESSAGES if msg in log] == []
    assert [line for line in lines if "FAILED" in line] == []
    assert sum(line.startswith("maintenance of") for line in lines) >= 3, lines
    return len(committed)


def _check_rewrites_under_the_stream(table: Any) -> tuple[int, int]:
    """A rewrite committed while the stream was committing: stream commits follow a
    replace snapshot, and the stream's deletes reached files a rewrite wrote."""
    snaps = table.metadata.snapshots
    replaces = [s for s in snaps if s.summary.get("operation") == "replace"]
    assert replaces, "no compaction committed during the stream"
    first = min(s.sequence_number for s in replaces)
    later = [
        s for s in snaps if s.sequence_number > first and s.summary.get("operation") != "replace"
    ]
    assert later, "the stream committed nothing after the first rewrite"
    followed = m.stream_dvs_on_rewritten_files(table)
    assert followed >= 1, "no stream delete landed on a rewritten file"
    return len(replaces), followed


def _readers_exact(table: Any, stream: CdcStream, readers: dict[str, Any] = ALL_READERS) -> None:
    for name, reader in readers.items():
        assert reader(table.metadata_location, COLUMNS) == stream.expected, name


def _one_pass(config: Path, capsys: Any) -> list[str]:
    capsys.readouterr()
    status = main(["maintain", str(config), "--once", "--local"])
    out = capsys.readouterr().out.splitlines()
    assert status == 0, out
    assert [line for line in out if "FAILED" in line] == [], out
    return out


def _check_health(table: Any, stream: CdcStream, before: Any, tmp: Path) -> dict[str, Any]:
    """Files per partition, no DV on a file the pass rewrote and none over the delete
    ratio left, bytes vs a fresh write."""
    assert m.over_bound(table, m.TARGET) == {}, m.data_files_by_partition(table)
    new = {s.snapshot_id for s in table.metadata.snapshots} - {
        s.snapshot_id for s in before.metadata.snapshots
    }
    rewritten = m.files_added_by(table, new)
    assert rewritten, "the pass rewrote nothing"
    live = table.live_files()
    assert [p for p in live.dvs if p in rewritten] == []
    # What the pass left alone deletes at most delete_ratio (0.2) of its file's rows.
    ratios = {
        p: dv.data_file.record_count / live.data[p].data_file.record_count
        for p, dv in live.dvs.items()
    }
    assert max(ratios.values(), default=0) <= 0.2, ratios
    live_bytes = sum(e.data_file.file_size_in_bytes for e in live.data.values())
    fresh_dir = tmp / "fresh"
    fresh_dir.mkdir()
    fresh = m.fresh_write_bytes(table, stream.expected, fresh_dir)
    assert live_bytes <= 2 * fresh, (live_bytes, fresh)
    return {"live_bytes": live_bytes, "fresh_bytes": fresh, "files": len(live.data)}


def _check_retention(table: Any, before: Any, count: int) -> int:
    """Kept: the current snapshot and its newest ancestors (``count`` in all), and what
    the pass itself committed (younger than its age cutoff). Returns how many expired."""
    old_ids = {s.snapshot_id for s in before.metadata.snapshots}
    newest, snap = set(), table.metadata.current_snapshot
    while snap is not None and len(newest) < count:
        newest.add(snap.snapshot_id)
        snap = table.metadata.snapshot_by_id(snap.parent_snapshot_id)
    kept = {s.snapshot_id for s in table.metadata.snapshots}
    assert {i for i in kept & old_ids if i not in newest} == set()
    return len(old_ids - kept)


def _plant(warehouse: Path, name: str, mtime: float) -> Path:
    data_dir = next(warehouse.rglob("data"))
    path = data_dir / name
    path.write_bytes(b"PAR1 not referenced by any snapshot")
    os.utime(path, (mtime, mtime))
    return path


@pytest.mark.parametrize("catalog_kind", ["sqlite", "postgres"])
def test_maintenance_beside_a_live_cdc_stream_then_one_pass(
    catalog_kind, request, broker, make_topic, tmp_path, capsys
) -> None:
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=1200, events=3800, partitions=2, seed=11)
    produce(broker.bootstrap_servers, topic, stream.records)
    catalog = {"catalog": request.getfixturevalue("pg_url")} if catalog_kind == "postgres" else {}
    fields = {"bootstrap": broker.bootstrap_servers, "topic": topic, **catalog}
    fields["catalog_name"] = f"c_{topic[-8:]}"
    max_offsets, at_least = SHAPES[catalog_kind]
    fields["max_offsets"] = max_offsets
    config = m.write_config(tmp_path, **fields)

    log, lines, seconds = _stream_beside_maintain(tmp_path, config, at_least)
    batches = _check_stream(log, lines, at_least)
    compactions = m.compactions_committed(lines)
    assert compactions >= 1, lines
    table = m.load_table(config)
    replaces, dvs_followed = _check_rewrites_under_the_stream(table)
    _readers_exact(table, stream)

    # One pass with a short retention over the stopped stream's table.
    m.write_config(tmp_path, **fields, retain_count=3, retain_age="0 seconds")
    before = m.load_table(config)
    reached_before = m.reachable_local(before)
    old_orphan = _plant(tmp_path / "warehouse", "planted-old.parquet", OLD)
    young_orphan = _plant(tmp_path / "warehouse", "planted-young.parquet", time.time())
    started = time.monotonic()
    out = _one_pass(config, capsys)
    pass_seconds = time.monotonic() - started
    table = m.load_table(config)

    expired = _check_retention(table, before, 3)
    reached = m.reachable_local(table)
    gone = reached_before - reached
    assert gone and [p for p in gone if os.path.exists(p)] == []
    assert not old_orphan.exists() and young_orphan.exists()
    on_disk = m.files_on_disk(tmp_path / "warehouse") - {str(young_orphan)}
    data_on_disk = {p for p in on_disk if "/data/" in p}
    assert data_on_disk <= reached, sorted(data_on_disk - reached)[:5]
    health = _check_health(table, stream, before, tmp_path)
    _readers_exact(table, stream)
    print(
        f"\n{catalog_kind}: {batches} batches in {seconds:.0f}s, "
        f"{sum(x.startswith('maintenance of') for x in lines)} passes, {compactions} groups "
        f"compacted ({replaces} replace snapshots, {dvs_followed} DVs on rewritten files), "
        f"{len(stream.expected)} rows; one pass expired {expired} snapshots {pass_seconds:.1f}s: {health}\n"
        + "\n".join(out)
    )


def _short_stream_then_one_pass(
    tmp: Path, broker: Any, topic: str, capsys: Any, **fields: Any
) -> tuple[Any, CdcStream]:
    stream = cdc_events(keys=300, events=600, partitions=2, seed=3)
    produce(broker.bootstrap_servers, topic, stream.records)
    config = m.write_config(
        tmp, bootstrap=broker.bootstrap_servers, topic=topic, retain_count=3, **fields
    )
    assert main(["run", str(config), "--available-now"]) == 0
    before = m.load_table(config)
    assert len(before.metadata.snapshots) >= 30
    out = _one_pass(config, capsys)
    assert m.compactions_committed(out) >= 1, out
    table = m.load_table(config)
    _check_retention(table, before, 3)
    assert m.over_bound(table, m.TARGET) == {}
    return table, stream


def test_one_pass_on_a_filesystem_catalog(spark, broker, make_topic, tmp_path, capsys) -> None:
    catalog = f"file://{tmp_path}/fswarehouse"
    table, stream = _short_stream_then_one_pass(
        tmp_path,
        broker,
        make_topic(partitions=2),
        capsys,
        catalog=catalog,
        warehouse="",
        retain_age="0 seconds",
    )
    _readers_exact(table, stream)


def test_one_pass_on_an_s3_warehouse(spark, broker, make_topic, tmp_path, capsys) -> None:
    with moto_bucket("calving-maint") as props:
        table_io = "[table.io]\n" + "\n".join(f'"{k}" = "{v}"' for k, v in props.items())
        table, stream = _short_stream_then_one_pass(
            tmp_path,
            broker,
            make_topic(partitions=2),
            capsys,
            warehouse='warehouse = "s3://calving-maint/wh"',
            table_io=table_io,
            retain_age="0 seconds",
        )
        _readers_exact(table, stream, m.s3_readers(props))


@pytest.mark.parametrize(
    ("key", "value"), [("snapshot_retention_count", "0"), ("target_file_size_bytes", "-1")]
)
@pytest.mark.parametrize("command", ["maintain", "run"])
def test_a_bad_maintenance_value_exits_2_naming_the_key(command, key, value, tmp_path, capsys):
    config = m.write_config(tmp_path, extra=f"{key} = {value}")
    text = config.read_text().replace(f"{key} = ", f"# {key} = ", 1)
    config.write_text(text)  # the default's line commented out, the bad one last
    assert main([command, str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"maintenance.{key}" in err[0], err
    assert not (tmp_path / "catalog.db").exists()
    assert not (tmp_path / "warehouse").exists()


def test_maintain_on_a_missing_table_names_it(tmp_path, capsys) -> None:
    config = m.write_config(tmp_path)
    assert main(["maintain", str(config), "--once", "--local"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shop.orders" in err[0], err
