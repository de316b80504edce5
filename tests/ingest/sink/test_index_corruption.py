"""A corrupt persisted primary-key index never steers a batch's deletes: the coordinator
of a restarted writer finds the recorded index file unusable, rebuilds the index from
the table (logged), and the upserts and deletes it commits leave exactly one live row
per key and no deleted row back, as pyiceberg reads the table."""

from __future__ import annotations

import logging
import struct
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from calving.commit.index import INDEX_LOCATION_PROPERTY, store
from calving.commit.table.ledger import OffsetRange
from calving.commit.table.table import Table, create_table
from calving.ingest.sink.coordinator import Coordinator, ParsedMessages
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import EVENTS, row, write_partitioned

pytestmark = pytest.mark.integration

TOPIC = "events"


class Writer:
    """Batches through a coordinator, and the rows the table should hold afterwards."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.coordinator = Coordinator(table, "writer-1", index_save_every=1)
        self.expected: dict[int, str] = {}
        self.offset = 0

    def restart(self) -> None:
        self.table.refresh()
        self.coordinator = Coordinator(self.table, "writer-1", index_save_every=1)

    def batch(self, batch_id: int, upserts: dict[int, str], deletes: list[int]) -> None:
        parsed = ParsedMessages()
        rows = [row(i, payload=p) for i, p in upserts.items()]
        for data_file, members in write_partitioned(self.table, rows) if rows else []:
            keys = pa.table({"id": pa.array([m["id"] for m in members], pa.int64())})
            parsed.files.append((data_file, keys))
        if deletes:
            parsed.delete_keys.append(pa.table({"id": pa.array(deletes, pa.int64())}))
        records = len(upserts) + len(deletes)
        parsed.ranges[(TOPIC, 0)] = OffsetRange(self.offset, self.offset + records)
        self.offset += records
        stats = self.coordinator.commit_batch(batch_id, parsed)
        assert stats.outcome == "committed"
        self.expected.update(upserts)
        for key in deletes:
            self.expected.pop(key, None)


def _tampered_payload(table: Table, location: str, format_version: str) -> bytes:
    """The index's Arrow payload with entries pointing at the wrong rows, yet with the
    same number of entries per file: key 7 and key 9 swap positions, and key 10 points
    at the (deleted) row of key 3. Every structural check short of a checksum passes."""
    payload = store.read_index_table(table.io, location)
    keys = payload.column("key").to_pylist()
    positions = payload.column("position").to_pylist()
    at = {k: positions[keys.index(k)] for k in (7, 9, 10)}
    swap = {7: at[9], 9: at[7], 10: 3}
    positions = [swap.get(k, p) for k, p in zip(keys, positions)]
    md = dict(payload.schema.metadata)
    md[b"calving.index.format"] = format_version.encode()
    column = payload.schema.get_field_index("position")
    payload = payload.set_column(column, "position", pa.array(positions, pa.uint32()))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, payload.schema.with_metadata(md)) as writer:
        writer.write_table(payload)
    return sink.getvalue().to_pybytes()


def _corrupt(table: Table, location: str, how: str) -> None:
    original = table.io.read(location)
    if how == "stale checksum":  # a format 2 file whose payload changed under its CRC
        payload = _tampered_payload(table, location, "2")
        data = original[:12] + struct.pack("<Q", len(payload)) + payload + original[-4:]
    else:  # a format 1 file (bare Arrow IPC), as an older calving wrote it
        data = _tampered_payload(table, location, "1")
    table.io.write(location, data)


@pytest.mark.parametrize("how", ["stale checksum", "format 1"])
def test_a_corrupt_index_is_rebuilt_and_the_next_batch_stays_exact(
    sqlite_catalog: Any, caplog: Any, how: str
) -> None:
    table = create_table(sqlite_catalog, ("db", "keyed"), EVENTS)
    writer = Writer(table)
    writer.batch(0, {i: f"v1-{i}" for i in range(12)}, [])
    writer.batch(1, {2: "v2-2", 5: "v2-5"}, [3])
    location = table.metadata.properties[INDEX_LOCATION_PROPERTY]
    _corrupt(table, location, how)

    writer.restart()  # a new coordinator: it loads the recorded index file
    with caplog.at_level(logging.WARNING, logger="calving.commit.index.store"):
        writer.batch(2, {7: "v3-7", 10: "v3-10", 3: "v3-3"}, [4])
        writer.batch(3, {9: "v4-9"}, [5])

    table.refresh()
    rows = pyiceberg_rows(table.metadata_location, ["id", "payload"])
    duplicates = [k for k, n in Counter(k for k, _ in rows).items() if n > 1]
    assert duplicates == []
    assert rows == sorted(writer.expected.items())
    assert 4 not in dict(rows) and 5 not in dict(rows)  # deleted rows stay deleted
    [warning] = [r for r in caplog.records if r.name == "calving.commit.index.store"]
    reason = "checksum mismatch" if how == "stale checksum" else "format 1"
    assert location in warning.getMessage() and reason in warning.getMessage()
