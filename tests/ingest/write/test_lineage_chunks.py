"""The row-lineage columns encoded by hand (``lineage_chunks``) and appended to a task's
file: over row-group splits and null patterns (none, all, mixed, runs that end inside
a byte), pyarrow reads the ids and nulls back with their field ids, the chunk
statistics (null count, min, max) are what pyarrow states for the same column, DuckDB
reads and prunes on them, and the stored Arrow schema is the one pyarrow writes."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calving.commit.spec import row_lineage as rl
from calving.commit.table.row_ids import UNKNOWN
from calving.ingest.write.append_columns import ARROW_SCHEMA_KEY, append_chunks, footer
from calving.ingest.write.lineage_chunks import lineage_arrow_schema, lineage_columns
from tests.support.oracles import duckdb_connection

pytestmark = pytest.mark.integration


def _ids(pattern: str, rows: int) -> np.ndarray:
    rng = np.random.default_rng(rows)
    values = rng.integers(0, 1 << 40, rows)
    if pattern == "none null":
        return values
    if pattern == "all null":
        return np.full(rows, UNKNOWN, np.int64)
    keep = rng.random(rows) < (0.5 if pattern == "mixed" else 0.97)
    return np.where(keep, values, UNKNOWN)


def _task_file(rows: int, group: int) -> bytes:
    buf = io.BytesIO()
    table = pa.table(
        {"id": pa.array(range(rows), pa.int64()), "name": [f"n{i}" for i in range(rows)]}
    )
    pq.write_table(table, buf, row_group_size=group, compression="zstd")
    return buf.getvalue()


@pytest.mark.parametrize("pattern", ["none null", "all null", "mixed", "few null"])
@pytest.mark.parametrize(("rows", "group"), [(1, 1), (9, 9), (300, 300), (1000, 128)])
def test_appended_lineage_columns_read_back_with_their_statistics(
    tmp_path: Path, pattern: str, rows: int, group: int
) -> None:
    ids = _ids(pattern, rows)
    original = _task_file(rows, group)
    decoded = footer(original)
    groups = [int(rg.get(3)) for rg in decoded[0].get(4).items]
    spliced = append_chunks(original, lineage_columns(ids, groups), decoded)
    # The file's own chunks kept as bytes (as ``store_row_ids`` reads the footer): the
    # same file, byte for byte.
    kept = footer(original, raw_chunks=True)
    assert append_chunks(original, lineage_columns(ids, groups), kept) == spliced

    pf = pq.ParquetFile(pa.BufferReader(spliced))
    table = pf.read()
    want = [None if v == UNKNOWN else int(v) for v in ids]
    assert table.column("id").to_pylist() == list(range(rows))
    assert table.column(rl.ROW_ID.name).to_pylist() == want
    assert table.column(rl.LAST_UPDATED_SEQUENCE_NUMBER.name).null_count == rows
    field_ids = {f.name: f.metadata[b"PARQUET:field_id"] for f in table.schema if f.metadata}
    assert field_ids[rl.ROW_ID.name] == str(rl.ROW_ID_FIELD_ID).encode()
    assert (
        field_ids[rl.LAST_UPDATED_SEQUENCE_NUMBER.name]
        == str(rl.LAST_UPDATED_SEQUENCE_NUMBER_FIELD_ID).encode()
    )

    # Statistics as pyarrow states them for the same column and row groups.
    ref_buf = io.BytesIO()
    ref_table = pa.table(
        [pa.array(ids, pa.int64(), mask=ids == UNKNOWN), pa.nulls(rows, pa.int64())],
        schema=lineage_arrow_schema(),
    )
    pq.write_table(ref_table, ref_buf, row_group_size=group)
    ref = pq.ParquetFile(pa.BufferReader(ref_buf.getvalue()))
    for g in range(pf.metadata.num_row_groups):
        for c, name in ((2, rl.ROW_ID.name), (3, rl.LAST_UPDATED_SEQUENCE_NUMBER.name)):
            got = pf.metadata.row_group(g).column(c).statistics
            expected = ref.metadata.row_group(g).column(c - 2).statistics
            assert pf.metadata.row_group(g).column(c).path_in_schema == name
            assert got.null_count == expected.null_count
            assert got.has_min_max == expected.has_min_max
            if got.has_min_max:
                assert (got.min, got.max) == (expected.min, expected.max)
    stored = {kv.get(1): kv.get(2) for kv in footer(spliced)[0].get(5).items}
    both = pa.table({"id": pa.array([0], pa.int64()), "name": ["n"]}).schema
    for f in lineage_arrow_schema():
        both = both.append(f)
    arrow = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(stored[ARROW_SCHEMA_KEY])))
    assert arrow.equals(both)

    path = tmp_path / "task.parquet"
    path.write_bytes(spliced)
    present = [v for v in want if v is not None]
    con = duckdb_connection()
    try:
        got = con.execute(
            f"SELECT count(*), count(_row_id), sum(_row_id), count(_last_updated_sequence_number) "
            f"FROM read_parquet('{path}')"
        ).fetchone()
        high = con.execute(
            f"SELECT count(*) FROM read_parquet('{path}') WHERE _row_id >= {1 << 39}"
        ).fetchone()
    finally:
        con.close()
    assert got == (rows, len(present), sum(present) if present else None, 0)
    assert high == (sum(1 for v in present if v >= 1 << 39),)


def test_row_groups_must_add_up_to_the_ids() -> None:
    with pytest.raises(ValueError, match="3 row ids for row groups of 4 rows"):
        lineage_columns(np.arange(3), [2, 2])
