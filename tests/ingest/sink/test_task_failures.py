"""A task that fails leaves no Parquet file behind: the executor functions run directly
(no Spark) on a real table. With no dead-letter destination a bad record stops the task
before its batch's rows are written, and files an earlier batch of the same task already
flushed are deleted; the error names the record's offset. (Before: the check came
after the writer closed, leaving files no snapshot references.)"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from calving.commit.errors import CorruptRecordError
from calving.commit.spec.metadata import serialize_metadata
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, STRING, NestedField
from calving.commit.table.table import create_table
from calving.ingest.decode.json_values import JsonValueDecoder
from calving.ingest.sink.executor import TaskPlan, decode_and_write_append
from tests.ingest.decode import kafka_batch

SCHEMA = Schema((NestedField(1, "id", LONG, required=True), NestedField(2, "name", STRING)))


def _batch(start: int, bad: bool = False) -> pa.RecordBatch:
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(start, start + 200)]
    if bad:
        values.append(b'{"id": 100, "name": "\xff\xfe"}')
    table = kafka_batch(values, topic="events", first_offset=start)
    return table.to_batches()[0]


def test_a_failing_append_task_leaves_no_parquet_file(sqlite_catalog, tmp_path):
    table = create_table(
        sqlite_catalog,
        ("db", "t"),
        SCHEMA,
        # A tiny target: the first batch is flushed to a file before the bad one comes.
        properties={"write.target-file-size-bytes": "1024"},
    )
    plan = TaskPlan(
        metadata_json=serialize_metadata(table.metadata),
        metadata_location=table.metadata_location,
        decoder=JsonValueDecoder(SCHEMA),
        io_properties=table.io.properties,
    )
    task = decode_and_write_append(plan)
    with pytest.raises(CorruptRecordError, match="events/0@400") as info:
        list(task(iter([_batch(0), _batch(200, bad=True)])))
    assert "UTF-8" in str(info.value)
    location = Path(table.metadata.location.removeprefix("file://"))
    assert sorted(location.rglob("*.parquet")) == []

    # The same task without the bad record writes its files (the check above is real).
    done = list(decode_and_write_append(plan)(iter([_batch(0), _batch(200)])))
    assert done and len(list(location.rglob("*.parquet"))) >= 2
