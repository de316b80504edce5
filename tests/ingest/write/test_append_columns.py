"""Columns appended to a Parquet file as bytes: over a matrix of writer options and row
groups the result reads (pyarrow, DuckDB) as the two tables side by side and stores the
same Arrow schema pyarrow would; files that cannot be put side by side are refused."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calving.ingest.write.append_columns import (
    ARROW_SCHEMA_KEY,
    SpliceError,
    append_columns,
    footer,
    row_group_rows,
)
from tests.support.oracles import duckdb_connection

ROWS = 1_000


def _base() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(ROWS), pa.int64()),
            "name": [f"n{i}" if i % 7 else None for i in range(ROWS)],
            "tags": [[i, i + 1] for i in range(ROWS)],
            "point": [{"x": float(i), "y": None} for i in range(ROWS)],
        }
    )


def _extra() -> pa.Table:
    ids = pa.array([i * 10 if i % 3 else None for i in range(ROWS)], pa.int64())
    return pa.table({"_row_id": ids, "_seq": pa.nulls(ROWS, pa.int64())})


def _write(table: pa.Table, **options: object) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)  # type: ignore[arg-type]  # pyarrow's keywords
    return buf.getvalue()


def _side_by_side(a: pa.Table, b: pa.Table) -> pa.Table:
    for name in b.column_names:
        a = a.append_column(b.schema.field(name), b.column(name))
    return a


@pytest.mark.parametrize("row_group_size", [ROWS, 300, 64])
@pytest.mark.parametrize(
    "options",
    [
        {"compression": "zstd"},
        {"compression": "none", "use_dictionary": False},
        {"write_page_index": True, "compression": "snappy"},
        {"data_page_version": "2.0", "write_statistics": False},
    ],
)
def test_the_spliced_file_reads_as_both_tables(
    tmp_path: Path, row_group_size: int, options: dict[str, object]
) -> None:
    base, extra = _base(), _extra()
    spliced = append_columns(
        _write(base, row_group_size=row_group_size, **options),
        _write(extra, row_group_size=row_group_size, **options),
    )
    want = _side_by_side(base, extra)
    assert pq.read_table(pa.BufferReader(spliced)).equals(want)
    # Row groups kept, and the stored Arrow schema is what pyarrow writes for both.
    meta, _ = footer(spliced)
    assert row_group_rows(meta) == row_group_rows(
        footer(_write(base, row_group_size=row_group_size))[0]
    )
    ref_meta, _ = footer(_write(want, row_group_size=row_group_size, **options))
    stored = {kv.get(1): kv.get(2) for kv in meta.get(5).items}
    ref = {kv.get(1): kv.get(2) for kv in ref_meta.get(5).items}
    assert stored[ARROW_SCHEMA_KEY] == ref[ARROW_SCHEMA_KEY]
    # Every row group's statistics and a second reader.
    pf = pq.ParquetFile(pa.BufferReader(spliced))
    for g in range(pf.metadata.num_row_groups):
        assert pf.read_row_group(g).equals(want.slice(*_group_span(pf, g)))
    path = tmp_path / "spliced.parquet"
    path.write_bytes(spliced)
    con = duckdb_connection()
    try:
        got = con.execute(
            f"SELECT count(*), sum(id), count(_row_id), sum(_row_id), count(_seq), "
            f"count(name), sum(len(tags)) FROM read_parquet('{path}')"
        ).fetchone()
        pruned = con.execute(
            f"SELECT count(*) FROM read_parquet('{path}') WHERE _row_id >= 9000"
        ).fetchone()
    finally:
        con.close()
    ids = extra.column("_row_id").drop_null()
    assert got == (
        ROWS,
        sum(range(ROWS)),
        len(ids),
        sum(ids.to_pylist()),
        0,
        base.column("name").drop_null().__len__(),
        2 * ROWS,
    )
    assert pruned == (sum(1 for v in ids.to_pylist() if v >= 9000),)


def _group_span(pf: pq.ParquetFile, group: int) -> tuple[int, int]:
    start = sum(pf.metadata.row_group(g).num_rows for g in range(group))
    return start, pf.metadata.row_group(group).num_rows


def test_files_that_do_not_line_up_are_refused() -> None:
    base = _write(_base(), row_group_size=500)
    with pytest.raises(SpliceError, match=r"row groups differ: \[500, 500\] rows vs \[1000\]"):
        append_columns(base, _write(_extra()))
    with pytest.raises(SpliceError, match=r"columns in both files: \['id'\]"):
        append_columns(base, _write(_base().select(["id"]), row_group_size=500))
    with pytest.raises(SpliceError, match="not a Parquet file"):
        append_columns(base[:-1], _write(_extra(), row_group_size=500))
