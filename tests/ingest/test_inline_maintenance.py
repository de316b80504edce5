"""``[maintenance] inline = true``: the stream's own driver runs maintenance passes between
micro-batches (rewrites as Spark tasks on the stream's session), so the pipeline alone
keeps its table compacted; every pass ends without a failed job, the stream's later
deltas land on the rewritten files, and the readers see exactly the change stream's
final state."""

from __future__ import annotations

from typing import Any

import pytest

from calving.ingest.config.loader import parse_config
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import build_pipeline
from tests.support.cdc import COLUMNS, cdc_events
from tests.support.oracles import ALL_READERS

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _config(broker: Any, topic: str, tmp_path: Any) -> Any:
    return parse_config(
        {
            "source": {
                "bootstrap_servers": broker.bootstrap_servers,
                "topics": [topic],
                "max_offsets_per_trigger": 150,
            },
            "format": {"type": "debezium-json", "key_format": "json"},
            "table": {
                "catalog": f"sqlite:///{tmp_path}/catalog.db",
                "warehouse": str(tmp_path / "warehouse"),
                "name": "db.inline",
                "identifier_fields": ["id"],
                "partition": ["bucket(2, id)"],
                "columns": [
                    {"name": "id", "type": "long", "required": True},
                    {"name": "status", "type": "string"},
                    {"name": "version", "type": "long"},
                ],
            },
            "sink": {"writer_id": "inline", "checkpoint": str(tmp_path / "ckpt")},
            "maintenance": {
                "inline": True,
                "inline_interval": "0 seconds",
                "inline_budget": "30 seconds",
                "min_input_files": 3,
                "target_file_size_bytes": 1 << 20,
                "snapshot_retention_count": 5,
                "snapshot_retention_age": "0 seconds",
            },
        },
        "inline-test",
    )


def test_inline_maintenance_keeps_the_streamed_table_compact(
    spark, broker, make_topic, tmp_path
) -> None:
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=150, events=2400, partitions=2, seed=5)
    produce(broker.bootstrap_servers, topic, stream.records)
    pipeline = build_pipeline(_config(broker, topic, tmp_path), spark)
    assert pipeline.maintainer is not None
    pipeline.run(available_now=True, timeout=400)

    maintainer = pipeline.maintainer
    assert maintainer.passes >= 5, maintainer.passes
    failed = [line for r in maintainer.reports for line in r.lines() if "FAILED" in line]
    assert failed == []
    table = pipeline.table.refresh()
    compacted = sum(
        int(r.job("compact").figures.get("committed", 0))  # type: ignore[union-attr]  # job() is Optional; compaction ran in this pass
        for r in maintainer.reports
    )
    assert compacted >= 2, [r.lines() for r in maintainer.reports]
    live = table.live_files()
    per_partition: dict[Any, int] = {}
    for e in live.data.values():
        per_partition[e.data_file.partition] = per_partition.get(e.data_file.partition, 0) + 1
    # Between passes the stream adds at most a few files per partition.
    assert max(per_partition.values()) <= 6, per_partition
    assert len(table.metadata.snapshots) <= 5 + 6  # retention kept it short
    print("\n".join(line for r in maintainer.reports for line in r.lines()))
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == stream.expected, name
