"""A widened source column through a many-table pipeline (Spark, the embedded broker,
Debezium JSON and Avro, no dead-letter destination): int32 -> int64, float32 -> float64
and a decimal's precision widened, with values only the wider type holds in the batch
where the wider schema first appears. The table evolves before any record of that batch
is judged, so the stream goes on (it failed with ``CorruptRecordError ... out of range``:
tasks decoded against the old type and the evolution came after), and the three readers
read the widened values back.

Two shapes: ``t01`` is created by one run and widened in the next run's first batch;
``t02`` is created and widened within one batch.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from calving.ingest.demo.database import Column, SourceDatabase, SourceTable
from calving.ingest.pipeline import build_pipeline
from calving.ingest.sink.many.sink import ManyTablesSink
from tests.ingest.conftest import unique_name
from tests.support.database import create_topics, many_config, produce_pending, read_back

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COLUMNS = ("id", "amount", "ratio", "price")


def _table(name: str) -> SourceTable:
    return SourceTable("inventory", name, [
        Column("id", "int32", optional=False), Column("amount", "int32"),
        Column("ratio", "float32"), Column("price", "decimal", precision=9, scale=2),
    ])  # fmt: skip


def _widen(db: SourceDatabase, name: str) -> None:
    wider = {"amount": Column("amount", "int64"), "ratio": Column("ratio", "float64"),
             "price": Column("price", "decimal", precision=20, scale=2)}  # fmt: skip
    table = db.tables[name]
    table.columns = [wider.get(c.name, c) for c in table.columns]


def _rows(db: SourceDatabase, name: str, ids: range, big: bool) -> None:
    txn = db.begin()
    for i in ids:
        if big:  # only the wider types hold these
            row = {
                "id": i,
                "amount": 2**41 + i,
                "ratio": 1e300,
                "price": Decimal("1234567890123.45"),
            }
        else:
            row = {"id": i, "amount": i, "ratio": 0.5, "price": Decimal("12.34")}
        txn.upsert(name, row)
    db.commit(txn)


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_a_widened_column_evolves_before_its_batch_is_judged(
    spark: Any, broker: Any, tmp_path: Path, fmt: str
) -> None:
    db = SourceDatabase(
        prefix=unique_name("widened"), schema_dir=tmp_path / "schemas" if fmt == "avro" else None
    )
    db.add_table(_table("t01"))
    db.add_table(_table("t02"))
    create_topics(broker, db)
    _rows(db, "t01", range(5), big=False)
    _rows(db, "t02", range(5), big=False)
    _widen(db, "t02")  # t02: created and widened in one batch
    _rows(db, "t02", range(3, 9), big=True)
    produce_pending(broker.bootstrap_servers, db)
    config = many_config(
        db, broker.bootstrap_servers, f"sqlite:///{tmp_path}/c.db", tmp_path, dead_letter_table=None
    )
    build_pipeline(config, spark).run(available_now=True, timeout=300)

    _widen(db, "t01")  # t01: widened in the first batch of the next run
    _rows(db, "t01", range(3, 9), big=True)
    _rows(db, "t02", range(20, 22), big=True)
    produce_pending(broker.bootstrap_servers, db)
    pipeline = build_pipeline(config, spark)
    pipeline.run(available_now=True, timeout=300)

    sink = pipeline.sink
    assert isinstance(sink, ManyTablesSink)
    for name in ("t01", "t02"):
        table = sink.tables[f"inventory.{name}"].table.refresh()
        schema = table.metadata.schema
        types = {c: str(schema.find_field_by_name(c).field_type) for c in COLUMNS[1:]}  # type: ignore[union-attr]  # find_field_by_name is Optional; the columns exist
        assert types == {"amount": "long", "ratio": "double", "price": "decimal(20, 2)"}, name
        want = db.expected(name)
        assert (8, 2**41 + 8, 1e300, Decimal("1234567890123.45")) in want
        for reader, rows in read_back(table.metadata_location, COLUMNS).items():
            assert rows == want, f"{name} read by {reader}"
    assert all(not s.stopped and not s.dead_letters for s in sink.history)
