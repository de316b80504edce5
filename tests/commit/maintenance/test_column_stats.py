"""Column statistics maintenance: theta sketches over live rows, published in the table
metadata's statistics list, read back by pyiceberg (metadata and Puffin file) and checked
with the DataSketches library against exact distinct counts of the live rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import datasketches as ds
import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.table import StaticTable
from pyiceberg.table.puffin import PuffinFile

from calving.commit.maintenance.column_stats import collect_statistics
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.spec.properties import TableProperties
from calving.commit.spec.types import INT, primitive_from_string
from calving.commit.spec.values import arrow_to_bytes, to_bytes
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.actions.update_schema import AddColumn, UpdateSchema
from calving.commit.table.table import Table
from calving.ingest.write.arrow_schema import primitive_to_arrow
from calving.ingest.write.parquet_writer import write_data_file
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import COLUMNS, make_table


def _write(table: Table, name: str, ids: Sequence[int], rng: np.random.Generator) -> Any:
    n = len(ids)
    regions = [f"r{int(x)}" for x in rng.integers(0, 40, size=n)]
    seconds = rng.integers(0, 5_000, size=n) * 1_000_000
    payload = [None if x % 7 == 0 else f"p{x % 900}" for x in ids]
    data = pa.table(
        {
            "id": pa.array(np.asarray(ids, dtype=np.int64)),
            "region": pa.array(regions),
            "ts": pa.array(seconds, pa.timestamp("us", tz="UTC")),
            "payload": pa.array(payload, pa.string()),
        }
    )
    location = f"{table.metadata.location}/data/{name}.parquet"
    return write_data_file(table.io, location, data, table.metadata.schema)


def _published(table: Table) -> tuple[dict[int, ds.compact_theta_sketch], dict[int, int]]:
    """Sketches and ndv properties of the current snapshot's statistics file, read with
    pyiceberg (metadata + Puffin reader) and DataSketches."""
    metadata = StaticTable.from_metadata(table.metadata_location).metadata
    (stats,) = [s for s in metadata.statistics if s.snapshot_id == metadata.current_snapshot_id]
    data = table.io.read(stats.statistics_path)
    assert stats.file_size_in_bytes == len(data)
    puffin = PuffinFile(data)
    sketches, ndv = {}, {}
    for blob in puffin.footer.blobs:
        assert blob.type == "apache-datasketches-theta-v1"
        (fid,) = blob.fields
        sketches[fid] = ds.compact_theta_sketch.deserialize(puffin.get_blob_payload(blob))
        ndv[fid] = int(blob.properties["ndv"])
    return sketches, ndv


def _exact(table: Table) -> dict[int, int]:
    rows = pyiceberg_rows(table.metadata_location, COLUMNS)
    return {i + 1: len({r[i] for r in rows if r[i] is not None}) for i in range(len(COLUMNS))}


def _check(table: Table) -> None:
    sketches, ndv = _published(table)
    exact = _exact(table)
    assert set(sketches) == set(exact)
    for fid, sketch in sketches.items():
        assert sketch.get_lower_bound(3) <= exact[fid] <= sketch.get_upper_bound(3), fid
        assert ndv[fid] == round(sketch.get_estimate())


def test_statistics_over_live_rows_reuse_unchanged_files(sqlite_catalog) -> None:
    rng = np.random.default_rng(11)
    table = make_table(sqlite_catalog, "stats", spec=UNPARTITIONED)
    files = [_write(table, f"f{n}", range(n * 9_000, (n + 1) * 9_000), rng) for n in range(3)]
    table.commit_or_raise(FastAppend(tuple(files)))
    # Deleted rows must not count: drop every other row of the first file.
    table.commit_or_raise(RowDelta(deletes={files[0].file_path: range(0, 9_000, 2)}))

    first = collect_statistics(table)
    assert (first.files_sketched, first.files_reused) == (3, 0)
    _check(table)
    assert first.ndv["id"] > 4096  # estimation mode, not an exact count
    cache = TableProperties(table.metadata.properties).file_sketches
    assert cache and table.io.exists(cache)

    # A new file: only it is sketched; the union equals a fresh computation.
    table.commit_or_raise(FastAppend((_write(table, "f3", range(27_000, 30_000), rng),)))
    second = collect_statistics(table)
    assert (second.files_sketched, second.files_reused) == (1, 3)
    _check(table)
    assert not table.io.exists(cache)  # the previous cache is no longer referenced
    cached_blobs = _published(table)[0]

    table.commit_or_raise(UpdateProperties(remove=("calving.statistics.file-sketches",)))
    fresh = collect_statistics(table)
    assert (fresh.files_sketched, fresh.files_reused) == (4, 0)
    assert {f: s.serialize() for f, s in _published(table)[0].items()} == {
        f: s.serialize() for f, s in cached_blobs.items()
    }
    # One statistics entry per snapshot: recomputing replaced the entry and its file.
    assert fresh.snapshot_id == second.snapshot_id
    assert len([s for s in table.metadata.statistics if s.snapshot_id == fresh.snapshot_id]) == 1
    assert second.statistics_path and not table.io.exists(second.statistics_path)
    assert fresh.statistics_path and table.io.exists(fresh.statistics_path)


def test_a_dv_change_and_an_added_column_resketch_only_what_changed(sqlite_catalog) -> None:
    rng = np.random.default_rng(3)
    table = make_table(sqlite_catalog, "stats2", spec=UNPARTITIONED)
    files = [_write(table, f"g{n}", range(n * 500, (n + 1) * 500), rng) for n in range(2)]
    table.commit_or_raise(FastAppend(tuple(files)))
    collect_statistics(table)
    table.commit_or_raise(RowDelta(deletes={files[1].file_path: range(400)}))
    table.commit_or_raise(UpdateSchema((AddColumn("extra", INT),)))
    again = collect_statistics(table)
    assert (again.files_sketched, again.files_reused) == (1, 1)
    sketches, _ = _published(table)
    assert 5 not in sketches or sketches[5].get_estimate() == 0  # no values yet
    exact = _exact(table)
    for fid in range(1, 5):
        assert sketches[fid].get_lower_bound(3) <= exact[fid] <= sketches[fid].get_upper_bound(3)


@pytest.mark.parametrize(
    ("type_name", "values"),
    [
        ("int", [1, -2, 2**31 - 1, None]),
        ("date", [dt.date(2026, 1, 1), dt.date(1969, 12, 31)]),
        ("float", [1.5, -0.25]),
        ("double", [3.25, -1e300]),
        ("long", [2**62, -1]),
        ("timestamptz", [dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)]),
        ("string", ["é", "", None]),
        ("binary", [b"\x00\xff", b""]),
        ("boolean", [True, False, None]),
        ("decimal(9, 2)", [Decimal("-12.34"), Decimal("0.01")]),
    ],
)
def test_column_serialization_is_the_single_value_serialization(
    type_name: str, values: list[Any]
) -> None:
    """The column-at-a-time bytes equal ``to_bytes`` of each value's internal form."""
    ptype = primitive_from_string(type_name)
    array = pa.array(values, primitive_to_arrow(ptype))
    internal = [v for v in _internal(array) if v is not None]
    assert arrow_to_bytes(ptype, array) == [to_bytes(ptype, v) for v in internal]


def _internal(array: pa.Array) -> list[Any]:
    if pa.types.is_date(array.type):
        return array.cast(pa.int32()).to_pylist()
    if pa.types.is_timestamp(array.type):
        return array.cast(pa.int64()).to_pylist()
    return array.to_pylist()
