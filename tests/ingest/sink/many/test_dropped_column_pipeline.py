"""A column dropped at the source, end to end through a many-table pipeline (Spark, the
embedded broker, Debezium JSON): the column stays, rows written after the drop read
null in it by all three readers, and the table records the drop
(``calving.source.dropped-columns``) in a metadata-only commit (no snapshot of its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from calving.commit.table.actions.update_schema import dropped_at_source
from calving.ingest.demo.database import SourceDatabase, plain_table
from calving.ingest.pipeline import build_pipeline
from calving.ingest.sink.many.sink import ManyTablesSink
from tests.ingest.conftest import unique_name
from tests.support.database import create_topics, many_config, produce_pending, read_back

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_dropped_column_stays_gets_nulls_and_is_recorded(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    db = SourceDatabase(prefix=unique_name("dropped"))
    db.add_table(plain_table("t01"))
    create_topics(broker, db)
    txn = db.begin()
    for i in range(5):
        txn.upsert("t01", {"id": i, "code": f"c{i}", "amount": i, "active": True})
    db.commit(txn)
    table = db.tables["t01"]
    table.columns = [c for c in table.columns if c.name != "code"]  # the source drops it
    txn = db.begin()
    txn.upsert("t01", {"id": 100, "amount": 7, "active": False})
    txn.upsert("t01", {"id": 1, "amount": 11, "active": False})
    db.commit(txn)
    produce_pending(broker.bootstrap_servers, db)

    config = many_config(db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path)
    pipeline = build_pipeline(config, spark)
    pipeline.run(available_now=True, timeout=300)
    sink = pipeline.sink
    assert isinstance(sink, ManyTablesSink)
    replica = sink.tables["inventory.t01"].table.refresh()
    assert dropped_at_source(replica.metadata) == ["code"]
    assert replica.metadata.schema.find_field_by_name("code") is not None
    want = [
        (0, "c0", 0),
        (1, None, 11),
        (2, "c2", 2),
        (3, "c3", 3),
        (4, "c4", 4),
        (100, None, 7),
    ]
    for reader, rows in read_back(replica.metadata_location, ("id", "code", "amount")).items():
        assert rows == want, reader
    # One snapshot per committed batch: recording the drop made none.
    batches = sum(1 for s in sink.history if "inventory.t01" in s.committed)
    assert len(replica.metadata.snapshots) == batches
