"""``write_data_file``'s encodings: a stored ``_row_id`` column (a rewrite keeps its
rows' ids) is delta-encoded without a dictionary, every other column (nested ones too)
keeps dictionary encoding, and pyarrow and DuckDB read the file back as written."""

from __future__ import annotations

import io
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from calving.commit.io import FileIO
from calving.commit.spec import row_lineage as rl
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    LONG,
    STRING,
    ListType,
    MapType,
    NestedField,
    StructType,
)
from calving.ingest.write.parquet_writer import write_data_file
from calving.ingest.write.rewrite import with_lineage

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING),
        NestedField(3, "s", StructType((NestedField(4, "p", STRING),))),
        NestedField(5, "l", ListType(6, STRING)),
        NestedField(7, "m", MapType(8, STRING, 9, LONG)),
    )
)
ROWS = 5_000


def _rows() -> pa.Table:
    rng = random.Random(7)
    ids = sorted(rng.sample(range(4 * ROWS), ROWS))  # a rewrite's rows: ascending, gaps
    return pa.table(
        {
            "id": pa.array(range(ROWS), pa.int64()),
            "name": [rng.choice(["new", "paid", "sent"]) for _ in range(ROWS)],
            "s": [{"p": rng.choice("xyz")} for _ in range(ROWS)],
            "l": [[rng.choice("ab")] for _ in range(ROWS)],
            "m": pa.array([[("k", i % 3)] for i in range(ROWS)], pa.map_(pa.string(), pa.int64())),
            rl.ROW_ID.name: pa.array(ids, pa.int64()),
            rl.LAST_UPDATED_SEQUENCE_NUMBER.name: pa.array(
                [rng.randrange(50) for _ in range(ROWS)], pa.int64()
            ),
        }
    )


def test_row_ids_are_delta_encoded_and_the_rest_keeps_its_dictionary(tmp_path: Path) -> None:
    rows = _rows()
    location = f"file://{tmp_path}/rewrite.parquet"
    written = write_data_file(
        FileIO.for_location(str(tmp_path)), location, rows, with_lineage(SCHEMA)
    )
    path = str(tmp_path / "rewrite.parquet")
    group = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {
        group.column(i).path_in_schema: set(group.column(i).encodings)
        for i in range(group.num_columns)
    }
    assert "DELTA_BINARY_PACKED" in encodings["_row_id"]
    assert not encodings["_row_id"] & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}
    others = {p: e for p, e in encodings.items() if p != "_row_id"}
    assert set(others) == {
        "id", "name", "s.p", "l.list.element", "m.key_value.key", "m.key_value.value",
        "_last_updated_sequence_number",
    }  # fmt: skip
    assert all(e & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"} for e in others.values()), others

    assert pq.read_table(path).equals(rows.cast(pq.read_table(path).schema))
    got = duckdb.sql(f"SELECT _row_id, id FROM read_parquet('{path}') ORDER BY id").fetchall()
    assert got == list(zip(rows.column("_row_id").to_pylist(), range(ROWS), strict=True))

    # What it is for: the ids take less room than with the default dictionary.
    default = io.BytesIO()
    pq.write_table(rows.select(["_row_id"]), default, compression="zstd")
    baseline = pq.ParquetFile(io.BytesIO(default.getvalue())).metadata.row_group(0).column(0)
    assert written.column_sizes[rl.ROW_ID_FIELD_ID] < baseline.total_compressed_size / 2


def test_a_file_without_row_ids_is_written_as_before(tmp_path: Path) -> None:
    rows = _rows().drop_columns(["_row_id", "_last_updated_sequence_number"])
    location = f"file://{tmp_path}/plain.parquet"
    write_data_file(FileIO.for_location(str(tmp_path)), location, rows, SCHEMA)
    group = pq.ParquetFile(str(tmp_path / "plain.parquet")).metadata.row_group(0)
    for i in range(group.num_columns):
        assert "DELTA_BINARY_PACKED" not in group.column(i).encodings
        assert set(group.column(i).encodings) & {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}
