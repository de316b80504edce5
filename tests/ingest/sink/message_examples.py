"""The commit messages recorded in ``tests/vectors/sink_messages/messages.arrows``
(one of each kind, with the awkward values: decimal/uuid/binary partitions, bounds,
timestamps absent and zero, an empty unknown-fields map). Re-record with
``python -m tests.ingest.sink.message_examples`` only for a deliberate format change."""

from __future__ import annotations

import decimal
import uuid
from pathlib import Path

import pyarrow as pa

from calving.commit.spec.data_file import DataFile, FileContent
from calving.ingest.sink import messages as msg

VECTOR = Path(__file__).resolve().parents[2] / "vectors" / "sink_messages" / "messages.arrows"


def _file(path: str, partition: tuple, rows: int) -> DataFile:
    return DataFile(
        content=FileContent.DATA,
        file_path=path,
        file_format="PARQUET",
        partition=partition,
        record_count=rows,
        file_size_in_bytes=1234,
        column_sizes={1: 100, 2: 200},
        value_counts={1: rows, 2: rows},
        null_value_counts={1: 0, 2: 1},
        nan_value_counts=None,
        lower_bounds={1: b"\x01\x00\x00\x00\x00\x00\x00\x00", 2: b"a"},
        upper_bounds={1: b"\x09\x00\x00\x00\x00\x00\x00\x00", 2: b"z\xff"},
        key_metadata=None,
        split_offsets=(4,),
        sort_order_id=0,
    )


def examples() -> list[msg.Message]:
    keys = pa.table({"id": pa.array([3, 1, 2], pa.int64())})
    partition = (
        decimal.Decimal("12.50"),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        b"\x00\xff",
        19000,
        None,
    )
    return [
        msg.DataFileWritten(_file("s3://b/t/data/p=1/a.parquet", partition, 3), keys),
        msg.DataFileWritten(_file("file:///t/data/b.parquet", (), 7), None),
        msg.KeysDeleted(pa.table({"id": pa.array([9], pa.int64()), "k": pa.array(["x"])})),
        msg.RangeSeen("orders", 0, 100, 250, 1_700_000_000_000, 1_700_000_009_999),
        msg.RangeSeen("orders", 1, 0, 1, 0, 0),
        msg.RangeSeen("päyments", 3, 5, 6),
        msg.DeadLetterFileWritten(_file("file:///dlq/data/c.parquet", (), 2)),
        msg.DeadLettersSent((("orders", 0, 120), ("orders", 1, 0))),
        msg.DeadLettersSent(()),
        msg.UnknownFields({"extra": frozenset({"long", "null"}), "a.b": frozenset({"string"})}),
        msg.UnknownFields({}),
        msg.RowsSeen(42),
    ]


def ipc_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


if __name__ == "__main__":
    VECTOR.write_bytes(ipc_bytes(msg.encode(examples())))
    print(f"wrote {VECTOR}")
