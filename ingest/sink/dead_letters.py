"""Where records that cannot be decoded go: an Iceberg table (committed under the same
ledger claim as the batch, so exactly once), a Kafka topic (at least once: a replayed
batch sends again; each record carries its coordinates in headers), or both.

With neither, the first dead letter stops the stream with a typed error naming its
topic, partition and offset: nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from commit.errors import CorruptRecordError
from commit.io import FileIO
from commit.spec.metadata import parse_metadata
from commit.spec.schema import Schema
from commit.spec.types import NestedField, PrimitiveType
from ingest.sink.messages import data_file_to_json
from ingest.write.task_writer import TaskWriter


def _column(field_id: int, name: str, type_name: str, required: bool = False) -> NestedField:
    return NestedField(field_id, name, PrimitiveType(type_name), required)


#: The dead-letter table's schema (the Arrow ``ingest.decode.DEAD_LETTER_SCHEMA``).
DEAD_LETTER_TABLE_SCHEMA = Schema(
    (
        _column(1, "topic", "string", True),
        _column(2, "partition", "int", True),
        _column(3, "offset", "long", True),
        _column(4, "timestamp", "timestamptz"),
        _column(5, "key", "binary"),
        _column(6, "value", "binary"),
        _column(7, "error", "string"),
        _column(8, "error_type", "string"),
        _column(9, "decoder", "string"),
    )
)


@dataclass(frozen=True)
class DeadLetterTarget:
    table_metadata_json: bytes | None = None
    table_metadata_location: str | None = None
    topic: str | None = None
    kafka_config: Mapping[str, str] = field(default_factory=dict)

    @property
    def configured(self) -> bool:
        return self.table_metadata_json is not None or self.topic is not None

    def write(self, io: FileIO, dead: pa.Table, file_prefix: str) -> list[dict[str, Any]]:
        if not self.configured:
            raise _first_error(dead)
        if self.topic is not None:
            send_to_topic(self.topic, self.kafka_config, dead)
        if self.table_metadata_json is None:
            return [
                {"kind": "deadletter-count", "payload": "", "keys": None, "count": dead.num_rows}
            ]
        m = parse_metadata(self.table_metadata_json, self.table_metadata_location or "dead-letters")
        writer = TaskWriter(io, m.location, m.schema, m.spec, file_prefix=f"{file_prefix}-dlq")
        writer.write(dead)
        return [
            {
                "kind": "deadletter",
                "payload": data_file_to_json(w.data_file),
                "keys": None,
                "count": w.data_file.record_count,
            }
            for w in writer.close()
        ]


def _first_error(dead: pa.Table) -> CorruptRecordError:
    row = dead.slice(0, 1).to_pylist()[0]
    where = f"{row['topic']}/{row['partition']}@{row['offset']}: "
    reason = str(row["error"]).removeprefix(where)
    more = f" (and {dead.num_rows - 1} more in this task)" if dead.num_rows > 1 else ""
    return CorruptRecordError(
        row["topic"],
        row["partition"],
        row["offset"],
        f"{row['error_type']}: {reason}{more}; configure a dead-letter table or topic "
        "to keep the stream going",
    )


def send_to_topic(topic: str, config: Mapping[str, str], dead: pa.Table) -> None:
    from ingest.kafka.producer import produce

    bootstrap = config["bootstrap.servers"]
    rest = {k: v for k, v in config.items() if k != "bootstrap.servers"}
    records = []
    for row in dead.to_pylist():
        headers = [
            ("calving.topic", str(row["topic"]).encode()),
            ("calving.partition", str(row["partition"]).encode()),
            ("calving.offset", str(row["offset"]).encode()),
            ("calving.error_type", str(row["error_type"]).encode()),
            ("calving.error", str(row["error"]).encode()),
            ("calving.decoder", str(row["decoder"]).encode()),
        ]
        if row["timestamp"] is not None:
            millis = int(row["timestamp"].timestamp() * 1000)
            headers.append(("calving.timestamp", str(millis).encode()))
        records.append((-1, row["key"], row["value"], headers))
    produce(bootstrap, topic, records, config=rest)
