"""JSON-converter events (``{"schema": ..., "payload": ...}``) are decoded with their
schema parsed once per distinct schema text: the rows equal a whole-record parse, and
records not in that shape still decode (or are rejected) as before. The bulk path for
them (payloads read by Arrow, epoch units from each event's schema) gives exactly the
per-event result over a matrix of shapes."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from calving.ingest.decode.connect_schema import table_schema_from_json
from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from calving.ingest.demo.database import Column, SourceTable
from tests.ingest.decode import assert_partitioned, data_rows, kafka_batch

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


# -- the bulk path for wrapped events: exactly the per-event result, over a matrix of shapes

_ZONED = "io.debezium.time.ZonedTimestamp"


def _connect_schema(at_unit: str, extra: tuple[str, ...] = (), decimal: bool = False) -> dict:
    """A JSON-converter envelope schema for ``WIDE`` (``at`` named by ``at_unit``)."""
    names = {"ms": "io.debezium.time.Timestamp", "us": "io.debezium.time.MicroTimestamp",
             "ns": "io.debezium.time.NanoTimestamp"}  # fmt: skip
    fields = [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "int32", "optional": True, "field": "qty"},
        {"type": "float64", "optional": True, "field": "ratio"},
        {"type": "boolean", "optional": True, "field": "ok"},
        {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "day"},
        {"type": "int64", "optional": True, "name": names[at_unit], "field": "at"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "field": "t"},
        {"type": "string", "optional": True, "name": _ZONED, "field": "seen"},
        {"type": "string", "optional": True, "field": "note"},
    ]
    fields += [{"type": "int64", "optional": True, "field": name} for name in extra]
    if decimal:
        fields.append({"type": "bytes", "optional": True, "field": "qty",
                       "name": "org.apache.kafka.connect.data.Decimal",
                       "parameters": {"scale": "2"}})  # fmt: skip
    row = {"type": "struct", "optional": True, "name": "p.shop.wide.Value", "fields": fields}
    return {"type": "struct", "optional": False, "name": "p.shop.wide.Envelope", "fields": [
        {**row, "field": "before"}, {**row, "field": "after"},
        {"type": "string", "optional": False, "field": "op"},
    ]}  # fmt: skip


def _wide_schema():
    from calving.commit.spec.schema import Schema
    from calving.commit.spec.types import (
        BOOLEAN,
        DATE,
        DOUBLE,
        INT,
        LONG,
        STRING,
        TIME,
        TIMESTAMP,
        TIMESTAMPTZ,
        NestedField,
    )  # fmt: skip

    types = [("id", LONG), ("qty", INT), ("ratio", DOUBLE), ("ok", BOOLEAN), ("day", DATE),
             ("at", TIMESTAMP), ("t", TIME), ("seen", TIMESTAMPTZ), ("note", STRING)]  # fmt: skip
    fields = [NestedField(i + 1, n, t, required=n == "id") for i, (n, t) in enumerate(types)]
    return Schema(tuple(fields), identifier_field_ids=(1,))


def _wide_row(rng, i: int) -> dict:
    return {
        "id": i,
        "qty": rng.choice([None, 7, -(2**31), 2**31 - 1]),
        "ratio": rng.choice([None, 0.5, -1e6]),
        "ok": rng.choice([None, True, False]),
        "day": rng.choice([None, 19000, -1, 0]),
        "at": rng.choice([None, 1_700_000_000_123, 5, 1_700_000_000_123_456]),
        "t": rng.choice([None, 5, 86_399_000_000, 86_400_000_001]),  # the last: poison
        "seen": rng.choice([None, "2024-01-02T03:04:05Z", "2024-01-02T03:04:05.5+02:00"]),
        "note": rng.choice([None, "", "héllo ☃", 'has "payload": in it', "x" * 40]),
    }


def _wide_stream(seed: int, n: int, odd: float) -> tuple[list[bytes | None], list[bytes | None]]:
    """Wrapped events of two schemas (``at`` in micro- and milliseconds), and with share
    ``odd``: deletes, tombstones, a schema with a new field, a decimal schema, poison
    values, trailing blanks, null and tiny payloads, a bare envelope, broken JSON."""
    rng = random.Random(seed)
    schemas = {unit: _connect_schema(unit) for unit in ("us", "ms", "ns")}
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    for _ in range(n):
        k = rng.randrange(300)
        key = json.dumps({"id": k}).encode()
        schema = schemas[rng.choice(["us", "us", "ms", "ns"])]
        after = _wide_row(rng, k)
        payload: Any = {"before": None, "after": after, "op": rng.choice("cru"),
                           "source": {"lsn": k}}  # fmt: skip
        tail = ""
        if rng.random() < odd:
            kind = rng.randrange(10)
            if kind == 0:
                payload = {"before": {"id": k}, "after": None, "op": "d"}
            elif kind == 1:
                values.append(None)
                keys.append(key)
                continue
            elif kind == 2:
                schema = _connect_schema("us", extra=("brand_new",))
                after["brand_new"] = 3
            elif kind == 3:
                schema = _connect_schema("us", decimal=True)
            elif kind == 4:
                after["id"] = "not-a-number"
            elif kind == 5:
                tail = "  "
            elif kind == 6:
                payload = rng.choice([None, {}])
            elif kind == 7:
                values.append(json.dumps(payload).encode())  # a bare envelope
                keys.append(key)
                continue
            elif kind == 8:
                payload = {"op": rng.choice(["t", "m", "x"]), "after": after}
            else:
                values.append(b'{"schema":{"type":"struct"},"payload":{"op":"c",')
                keys.append(key)
                continue
        doc = json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"))
        values.append((doc + tail).encode())
        keys.append(key)
    return values, keys


@pytest.mark.parametrize(("seed", "odd"), [(1, 0.0), (2, 0.1), (3, 0.4)])
def test_the_bulk_path_for_wrapped_events_equals_the_per_event_path(seed, odd):
    values, keys = _wide_stream(seed, 3000, odd)
    batch = kafka_batch(values, keys)
    fast = DebeziumDecoder(_wide_schema())
    slow = DebeziumDecoder(_wide_schema(), DebeziumOptions(vectorized=False))
    got, want = fast.decode(batch), slow.decode(batch)
    assert_partitioned(batch, got)
    assert got.rows.schema == want.rows.schema
    assert _as_ints(got.rows).to_pylist() == _as_ints(want.rows).to_pylist()
    assert got.dead_letters.to_pylist() == want.dead_letters.to_pylist()
    assert got.unknown_fields == want.unknown_fields
    assert want.rows.num_rows > 0.5 * len(values) and got.dead_letters.num_rows > 0
    assert fast.vector is not None
    if odd == 0.0:  # every event of a clean stream is read in bulk
        assert fast.vector.decoded == got.rows.num_rows
    elif odd <= 0.1:  # (poison ids every few events split chunks down to per event)
        assert fast.vector.decoded >= 0.6 * got.rows.num_rows


def test_epoch_units_come_from_each_events_schema():
    """The same integer in ``at`` is a micro- or nanosecond timestamp as the event's own
    schema says, in one batch."""
    values = []
    for i, unit in enumerate(["ns", "us", "ns"] * 10):  # chunks of a few go per event
        payload = {"before": None, "after": {"id": i, "at": 1_700_000_000_123_000}, "op": "c"}
        doc = {"schema": _connect_schema(unit), "payload": payload}
        values.append(json.dumps(doc, separators=(",", ":")).encode())
    decoder = DebeziumDecoder(_wide_schema())
    decoder.min_vector_rows = 0  # a small batch, on the bulk path all the same
    out = decoder.decode(kafka_batch(values))
    assert decoder.vector is not None and decoder.vector.decoded == 30
    micros = _as_ints(out.rows).column("at").to_pylist()
    assert micros == [1_700_000_000_123, 1_700_000_000_123_000, 1_700_000_000_123] * 10


def _as_ints(table: pa.Table) -> pa.Table:
    """Temporal columns as their integers (values past year 9999 have no ``datetime``)."""
    columns = []
    for col in table.columns:
        t = col.type
        if pa.types.is_timestamp(t) or pa.types.is_time64(t):
            col = col.cast(pa.int64())
        elif pa.types.is_date32(t):
            col = col.cast(pa.int32())
        columns.append(col)
    return pa.Table.from_arrays(columns, names=table.column_names)
