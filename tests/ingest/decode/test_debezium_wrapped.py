"""JSON-converter events (``{"schema": ..., "payload": ...}``) are decoded with their
schema parsed once per distinct schema text: the rows equal a whole-record parse, and
records not in that shape still decode (or are rejected) as before."""

from __future__ import annotations

import json
from decimal import Decimal

from calving.ingest.decode.connect_schema import table_schema_from_json
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from calving.ingest.demo.database import Column, SourceTable
from tests.ingest.decode import data_rows, kafka_batch

TABLE = SourceTable("shop", "orders", [
    Column("id", "int32", optional=False), Column("total", "decimal"),
    Column("created_at", "timestamp"), Column("note", "string"),
])  # fmt: skip


def _event(i: int, op: str = "c", note: str = "x") -> tuple[bytes, bytes]:
    import datetime as dt

    row = {"id": i, "total": Decimal("12.50") * i, "created_at": dt.datetime(2026, 1, 2, 3, 4, 5),
           "note": note}  # fmt: skip
    payload = {"before": None, "after": TABLE.payload(row), "op": op, "source": {}}
    value = {"schema": TABLE.value_schema("p"), "payload": payload}
    key = {"schema": TABLE.key_schema("p"), "payload": {"id": i}}
    return json.dumps(value).encode(), json.dumps(key).encode()


def _decoder(vectorized: bool = False) -> DebeziumDecoder:
    schema = table_schema_from_json(TABLE.value_schema("p"), TABLE.key_schema("p")).schema
    return DebeziumDecoder(schema, DebeziumOptions(vectorized=vectorized))


def test_wrapped_events_decode_with_their_logical_types_and_one_parsed_schema():
    events = [_event(i, note='has "payload": inside') for i in range(1, 4)]
    decoder = _decoder()
    out = decoder.decode(kafka_batch([v for v, _ in events], [k for _, k in events]))
    assert out.dead_letters.num_rows == 0, out.dead_letters.to_pylist()
    rows = data_rows(out)
    assert [r["total"] for r in rows] == [Decimal("12.50"), Decimal("25.00"), Decimal("37.50")]
    assert str(rows[0]["created_at"]) == "2026-01-02 03:04:05"
    assert rows[2]["note"] == 'has "payload": inside'
    assert len(decoder._json_notes) == 1


def test_other_shapes_and_broken_payloads_take_the_whole_record_path():
    value, key = _event(1)
    doc = json.loads(value)
    reordered = json.dumps({"payload": doc["payload"], "schema": doc["schema"]}).encode()
    broken = value[: value.rfind(b"}") - 3] + b"}"
    out = _decoder().decode(kafka_batch([reordered, broken], [key, key]))
    assert len(data_rows(out)) == 1 and data_rows(out)[0]["total"] == Decimal("12.50")
    dead = out.dead_letters.to_pylist()
    assert len(dead) == 1 and "invalid JSON" in dead[0]["error"]


def test_the_vectorized_decoder_hands_wrapped_events_to_the_schema_cache():
    events = [_event(i) for i in range(1, 30)]
    batch = kafka_batch([v for v, _ in events], [k for _, k in events])
    fast, slow = _decoder(vectorized=True), _decoder()
    assert data_rows(fast.decode(batch)) == data_rows(slow.decode(batch))
    assert len(fast._json_notes) == 1
