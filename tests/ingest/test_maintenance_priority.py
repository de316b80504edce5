"""The stream beside ``calving maintain --every`` on the table shape of issue 20 (CI
cell of its hostile-shape matrix): keyed Debezium CDC into a table partitioned by
``bucket(8, id)`` and ``truncate(4, name)`` (hundreds of partitions of a few rows each),
``max_offsets_per_trigger = 1500``, and ``calving maintain --every "2 seconds"`` in a
second process, on a SQLite catalog.

The table's ``commit.retry.num-retries`` is 0: any swap the stream lost to maintenance
that counted against it would fail the stream, so a build that counts maintenance losses
is caught whenever a maintenance commit lands during a stream commit. So that such
landings are certain, not left to timing, the stream runs under the harness's hold
(``tests.faults.mutations``, ``hold-stream-swaps``: the correct build; each stream try
waits before its swap until the table moved, until three commits landed so). Required: zero
stream failures, at least one stream swap lost to maintenance (rebased, not counted),
zero maintenance failures other than groups given up, every pass at
most ``max_commits`` commits, and pyiceberg, DuckDB and pyiceberg-core equal to the
model. Then ``calving table show`` tells when the last pass ran and what it left.
"""

from __future__ import annotations

import signal
import time

import pytest

from calving.ingest.cli import main
from calving.ingest.kafka.producer import produce
from tests.faults.maintenance_matrix import SHAPES, cdc_events, passes, write_config
from tests.ingest.test_maintenance_acceptance import _wait_for_batches, _wait_for_table
from tests.support import maintenance_acceptance as m
from tests.support.oracles import ALL_READERS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COLUMNS = ["id", "name", "version"]
MAX_COMMITS = 10  # the [maintenance] max_commits the matrix's config sets


def test_stream_beside_maintain_every_2s_on_bucket_x_truncate(
    broker, make_topic, tmp_path, capsys
) -> None:
    topic = make_topic(partitions=2)
    records, final = cdc_events(SHAPES["bucket-x-truncate"])
    produce(broker.bootstrap_servers, topic, records)
    config = write_config(
        tmp_path,
        SHAPES["bucket-x-truncate"],
        "2s",
        "sqlite",
        None,
        broker.bootstrap_servers,
        topic=topic,
        max_offsets=1500,
    )

    stream = m.start(
        ["-v", "run", str(config), "--available-now"],
        tmp_path,
        "stream.log",
        mutation="hold-stream-swaps",
    )
    _wait_for_table(config, stream, tmp_path / "stream.log")
    maintain = m.start(
        ["maintain", str(config), "--every", "2 seconds", "--local"], tmp_path, "m.log"
    )
    try:
        _wait_for_batches(tmp_path / "stream.log", stream, batches=4)
        assert stream.wait(timeout=900) == 0, (tmp_path / "stream.log").read_text()[-3000:]
        time.sleep(3)  # one more pass over the finished stream's table
        maintain.send_signal(signal.SIGTERM)
        maintain_rc = maintain.wait(timeout=120)
    finally:
        for proc in (maintain, stream):
            if proc.poll() is None:
                proc.kill()
    log = (tmp_path / "stream.log").read_text()
    lines = (tmp_path / "m.log").read_text().splitlines()
    assert maintain_rc == 0, lines[-40:]

    batches = m.batch_records(log)
    assert batches and not [b for b in batches if b["outcome"] == "failed"]
    done = passes(lines)
    assert len(done) >= 2, lines[-40:]
    assert [p for p in done if not p["ok"] or p["groups_failed"]] == []
    assert max(p["commits"] for p in done) <= MAX_COMMITS + 3  # waves + manifests/expiry
    compacted = sum(p["groups_committed"] for p in done)
    assert compacted >= 1, lines[-40:]

    table = m.load_table(config)
    partitions = {e.data_file.partition for e in table.live_files().data.values()}
    assert len(partitions) >= 300, len(partitions)
    expected = sorted(final.values())
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == expected, name

    capsys.readouterr()
    assert main(["table", "show", "inv.items", "--config", str(config)]) == 0
    shown = capsys.readouterr().out
    assert "last maintenance pass" in shown and "none recorded" not in shown
    yielded = sum(b.get("swaps_lost_to_maintenance", 0) for b in batches)
    assert yielded >= 1 and "a commit landed during this stream swap" in log, log[-3000:]
    print(
        f"\n{len(batches)} batches, {len(done)} passes, {compacted} groups compacted in "
        f"{sum(p['commits'] for p in done)} commits, {len(partitions)} partitions, "
        f"{len(expected)} rows; stream swaps lost to maintenance (not counted): {yielded}; "
        f"groups given up: {sum(p['groups_given_up'] for p in done)}"
    )
