"""Where records that cannot be decoded go: an Iceberg table (committed under the same
ledger claim as the batch, so exactly once), a Kafka topic (at least once: a replayed
batch sends again; each record carries its coordinates in headers), or both.

With neither, the first dead letter stops the stream with a typed error naming its
topic, partition and offset: nothing is dropped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from calving.commit.errors import CorruptRecordError, Terminal
from calving.commit.io import FileIO
from calving.commit.spec.metadata import parse_metadata, task_metadata_json
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import NestedField, PrimitiveType
from calving.commit.table.table import Table
from calving.ingest.config.runtime import DEFAULT_DEAD_LETTER_MAX_BYTES
from calving.ingest.kafka.producer import Header, Record
from calving.ingest.sink.messages import (
    Coordinates,
    DeadLetterFileWritten,
    DeadLettersSent,
    Message,
)
from calving.ingest.write.task_writer import TaskWriter


def _column(field_id: int, name: str, type_name: str, required: bool = False) -> NestedField:
    return NestedField(field_id, name, PrimitiveType(type_name), required)


#: The dead-letter table's schema (the Arrow ``calving.ingest.decode.DEAD_LETTER_SCHEMA``).
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


#: Default cap on a dead letter's Kafka copy (key + value + headers), below Kafka's
#: default 1 MB ``message.max.bytes``.
DEFAULT_TOPIC_MAX_BYTES = DEFAULT_DEAD_LETTER_MAX_BYTES
_RECORD_OVERHEAD = 512  # record framing and header names, with room to spare
_FALLBACK_KEY_BYTES = 1024

log = logging.getLogger("calving.dead_letters")


class DeadLetterTooLargeError(Terminal):
    """The dead-letter topic refused a record even without its value, and no
    dead-letter table keeps it; names the record's coordinates."""


@dataclass(frozen=True)
class DeadLetterTarget:
    """Where a task's dead letters go.

    The topic gets each record with its coordinates in headers. A copy larger than
    ``topic_max_bytes`` has its value (and if need be its key) cut to fit, with headers
    ``calving.truncated=true`` and ``calving.value_size`` / ``calving.key_size`` (the
    original sizes); if the topic still refuses it (a lower producer or broker
    ``message.max.bytes``), it is sent once more with no value. The dead-letter table
    always keeps the whole record. ``already_sent``: coordinates an earlier attempt of
    the same batch sent (a batch decoded again after a schema change) are not sent again.
    """

    table_metadata_json: bytes | None = None
    table_metadata_location: str | None = None
    topic: str | None = None
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    topic_max_bytes: int = DEFAULT_TOPIC_MAX_BYTES
    already_sent: frozenset[Coordinates] = frozenset()

    @classmethod
    def of(
        cls,
        table: Table | None,
        topic: str | None,
        kafka_config: Mapping[str, str],
        topic_max_bytes: int,
        already_sent: frozenset[Coordinates] = frozenset(),
    ) -> DeadLetterTarget:
        """The target for one write: the dead-letter table as it is now (refreshed)."""
        if table is not None:
            table.refresh()
        return cls(
            table_metadata_json=task_metadata_json(table.metadata) if table else None,
            table_metadata_location=table.metadata_location if table else None,
            topic=topic,
            kafka_config=kafka_config,
            topic_max_bytes=topic_max_bytes,
            already_sent=already_sent,
        )

    @property
    def configured(self) -> bool:
        return self.table_metadata_json is not None or self.topic is not None

    def check_configured(self, dead: pa.Table) -> None:
        """With no destination, the first of ``dead`` stops the stream (typed, naming its
        topic, partition and offset)."""
        if not self.configured and dead.num_rows:
            raise _first_error(dead)

    def write(self, io: FileIO, dead: pa.Table, file_prefix: str) -> list[Message]:
        self.check_configured(dead)
        out: list[Message] = []
        if self.topic is not None:
            sent = send_to_topic(
                self.topic,
                self.kafka_config,
                dead,
                max_bytes=self.topic_max_bytes,
                skip=self.already_sent,
                table_keeps_them=self.table_metadata_json is not None,
            )
            out.append(DeadLettersSent(sent))
        if self.table_metadata_json is None:
            return out
        m = parse_metadata(self.table_metadata_json, self.table_metadata_location or "dead-letters")
        writer = TaskWriter(io, m.location, m.schema, m.spec, file_prefix=f"{file_prefix}-dlq")
        writer.write(dead)
        return out + [DeadLetterFileWritten(w.data_file) for w in writer.close()]


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


def send_to_topic(
    topic: str,
    config: Mapping[str, str],
    dead: pa.Table,
    *,
    max_bytes: int = DEFAULT_TOPIC_MAX_BYTES,
    skip: frozenset[Coordinates] = frozenset(),
    table_keeps_them: bool = False,
) -> tuple[Coordinates, ...]:
    """Send the dead letters (but those in ``skip``); returns the coordinates of every
    dead letter now on the topic (``skip`` included). A record the topic refuses even
    without its value is logged and left out when the table keeps it; otherwise
    ``DeadLetterTooLargeError``."""
    from calving.ingest.kafka.producer import produce

    bootstrap = config["bootstrap.servers"]
    rest = {k: v for k, v in config.items() if k != "bootstrap.servers"}
    records: list[Record] = []
    source: dict[int, tuple[Record, Coordinates]] = {}  # id(record sent) -> original
    on_topic: list[Coordinates] = []
    for row in dead.to_pylist():
        at = (str(row["topic"]), int(row["partition"]), int(row["offset"]))
        on_topic.append(at)
        if at in skip:
            continue
        original = _record(row)
        record = _fit(original, max_bytes)
        source[id(record)] = (original, at)
        records.append(record)
    if not records:
        return tuple(on_topic)
    too_large: list[Record] = []
    produce(bootstrap, topic, records, config=rest, too_large=too_large)
    if too_large:  # a producer or broker limit below max_bytes: send without the value
        refused: list[Record] = []
        retry = []
        for r in too_large:
            original, at = source[id(r)]
            retry.append(_fit(original, 0))
            source[id(retry[-1])] = (original, at)
        produce(bootstrap, topic, retry, config=rest, too_large=refused)
        lost = {source[id(r)][1] for r in refused}
        for at in sorted(lost):
            _refused(topic, at, table_keeps_them)
        on_topic = [at for at in on_topic if at not in lost]
    return tuple(on_topic)


def _refused(topic: str, at: Coordinates, table_keeps_it: bool) -> None:
    what = f"dead letter {at[0]}/{at[1]}@{at[2]}: topic {topic} refused it as too large"
    if not table_keeps_it:
        raise DeadLetterTooLargeError(
            f"{what} even without its value, and no dead-letter table keeps it; raise the "
            "topic's max.message.bytes or configure a dead-letter table"
        )
    log.warning("%s even without its value; the dead-letter table keeps it", what)


def _record(row: Mapping[str, Any]) -> Record:
    headers: list[Header] = [
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
    return (-1, row["key"], row["value"], headers)


def _size(value: str | bytes | None) -> int:
    return 0 if value is None else len(value)


def _fit(record: Record, max_bytes: int) -> Record:
    """``record`` cut to ``max_bytes`` (key + value + headers + framing), flagged as
    truncated with the original sizes; ``max_bytes`` 0: no value, key cut to 1 KiB."""
    partition, key, value, headers = record
    headers = list(headers or [])
    size = _size(key) + _size(value) + sum(len(n) + _size(v) for n, v in headers)
    if max_bytes and size + _RECORD_OVERHEAD <= max_bytes:
        return record
    headers += [
        ("calving.truncated", b"true"),
        ("calving.value_size", str(_size(value)).encode()),
    ]
    budget = max_bytes - _RECORD_OVERHEAD - sum(len(n) + _size(v) for n, v in headers)
    key_budget = max(budget // 2, 0) if max_bytes else _FALLBACK_KEY_BYTES
    if key is not None and len(key) > key_budget:
        headers.append(("calving.key_size", str(len(key)).encode()))
        key = key[:key_budget]
    value_budget = max(budget - _size(key), 0) if max_bytes else 0
    if value is not None:
        value = value[:value_budget]
    return (partition, key, value, headers)
