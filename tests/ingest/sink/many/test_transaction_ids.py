"""Source-transaction boundaries read Debezium's Avro converter too (found by the
200-table acceptance stream): change events' ``transaction.id`` and the transaction
topic's END markers in Confluent Avro. Before, only JSON was parsed, so every Avro event
counted as outside any transaction and batches committed half transactions."""

from __future__ import annotations

from pathlib import Path

from calving.ingest.decode.avro_confluent import ConfluentAvroReader
from calving.ingest.decode.schema_registry import open_schema_source
from calving.ingest.demo.database import SourceDatabase, plain_table
from calving.ingest.sink.many.transactions import end_marker, transaction_ids


def _database(tmp_path: Path, avro: bool) -> SourceDatabase:
    db = SourceDatabase(prefix="p", schema_dir=tmp_path / "schemas" if avro else None)
    db.add_table(plain_table("a"))
    db.add_table(plain_table("b"))
    txn = db.begin()
    txn.upsert("a", {"id": 1, "code": "x", "amount": 1, "active": True})
    txn.upsert("b", {"id": 2, "code": "y", "amount": 2, "active": False})
    txn.upsert("a", {"id": 3, "code": "z", "amount": 3, "active": True})
    db.commit(txn)
    txn = db.begin()
    txn.delete("a", (1,))
    db.commit(txn)
    return db


def test_avro_and_json_events_and_markers_read_alike(tmp_path: Path) -> None:
    seen = {}
    for avro in (False, True):
        db = _database(tmp_path, avro)
        reader = ConfluentAvroReader(open_schema_source(str(db.schema_dir))) if avro else None
        records = db.take_records()
        ids = transaction_ids([v for _, _, v, _ in records["p.inventory.a"]], reader)
        markers = [
            end_marker(i, v, reader) for i, (_, _, v, _) in enumerate(records["p.transaction"])
        ]
        ends = [(m.txid, m.offset, dict(m.counts)) for m in markers if m is not None]
        seen[avro] = (ids, ends)
    assert seen[True] == seen[False]
    ids, ends = seen[True]
    assert ids == ["1:1000", "1:1000", "2:1003", None]  # the delete's tombstone has none
    assert ends == [
        ("1:1000", 1, {"inventory.a": 2, "inventory.b": 1}),
        ("2:1003", 3, {"inventory.a": 1}),
    ]


def test_avro_events_without_a_reader_have_no_transaction(tmp_path: Path) -> None:
    db = _database(tmp_path, avro=True)
    values = [v for _, _, v, _ in db.take_records()["p.inventory.a"]]
    assert transaction_ids(values) == [None] * len(values)  # the JSON reading of Avro bytes


def test_json_events_read_with_a_schema_source_configured(tmp_path: Path) -> None:
    """``debezium-json`` values with a schema source (for Avro keys): still JSON."""
    avro_db = _database(tmp_path, avro=True)
    reader = ConfluentAvroReader(open_schema_source(str(avro_db.schema_dir)))
    values = [v for _, _, v, _ in _database(tmp_path, avro=False).take_records()["p.inventory.a"]]
    assert transaction_ids(values, reader) == ["1:1000", "1:1000", "2:1003", None]
