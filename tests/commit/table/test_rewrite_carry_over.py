"""Compaction beside a live stream, forced interleavings (issue 11): a rewrite that finds
new deletes on the files it replaces carries them through its position map; a row delta
aimed at a file a rewrite removed follows the map (through chains of rewrites). Neither
fails, no delete is lost and no row comes back: pyiceberg, DuckDB and DataFusion agree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from pyroaring import BitMap64

from calving.commit.errors import CommitConflictError
from calving.commit.spec import position_map as pm
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.rewrite_files import RewriteFiles
from calving.commit.table.actions.row_delta import DeletesOnRewrittenFilesError, RowDelta
from calving.commit.table.table import Table
from calving.ingest.write.parquet_writer import write_data_file
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned


def _rewrite(
    table: Table, paths: Sequence[str], name: str, *, with_map: bool = True
) -> RewriteFiles:
    """Read the live rows of ``paths`` (as of now) into one new file, as a compaction
    task does, and return the (not yet committed) rewrite."""
    live = table.live_files()
    parts, old_f, old_p = [], [], []
    for i, path in enumerate(paths):
        data = pq.read_table(path.removeprefix("file://"))
        gone = live.positions_deleted(table.io, path)
        keep = np.ones(data.num_rows, dtype=bool)
        keep[np.fromiter(gone, dtype=np.int64, count=len(gone))] = False
        parts.append(data.filter(keep))
        survivors = np.flatnonzero(keep)
        old_f.append(np.full(len(survivors), i)), old_p.append(survivors)
    import pyarrow as pa

    merged = pa.concat_tables(parts)
    location = f"{table.metadata.location}/data/{name}.parquet"
    new = write_data_file(table.io, location, merged, table.metadata.schema)
    seen = {p: len(live.positions_deleted(table.io, p)) for p in paths}
    if not with_map:
        return RewriteFiles(tuple(paths), (new,), seen)
    pmap = pm.PositionMap.from_rows(
        tuple(paths), (new.file_path,), np.concatenate(old_f), np.concatenate(old_p),
        np.zeros(merged.num_rows, dtype=np.int64), np.arange(merged.num_rows),
    )  # fmt: skip
    map_location = f"{table.metadata.location}/metadata/{name}.pmap"
    table.io.write(map_location, pm.serialize(pmap))
    return RewriteFiles(tuple(paths), (new,), seen, pmap, map_location)


def _setup(catalog: Any, name: str) -> tuple[Table, list[tuple[Any, list[dict[str, Any]]]]]:
    table = make_table(catalog, name, spec=UNPARTITIONED)
    files = [
        write_partitioned(table, [row(i) for i in range(n * 50, n * 50 + 50)])[0] for n in range(3)
    ]
    table.commit_or_raise(FastAppend(tuple(f for f, _ in files)))
    return table, files


def _delete(
    table: Table, target: Any, rows: list[dict[str, Any]], picks: Sequence[int]
) -> list[dict[str, Any]]:
    table.commit_or_raise(RowDelta(deletes={target.file_path: BitMap64(picks)}))
    return [rows[i] for i in picks]


def _check(table: Table, expected: list[dict[str, Any]]) -> None:
    want = rows_as_tuples(expected)
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == want, name
    live = table.live_files()
    assert not set(live.dvs) - set(live.data)  # no DV on a removed file


def test_deletes_after_planning_are_carried_onto_the_new_file(sqlite_catalog) -> None:
    table, files = _setup(sqlite_catalog, "carry")
    (f0, r0), (f1, r1), (f2, r2) = files
    gone = _delete(table, f0, r0, [3, 4])  # before planning: not copied
    rewrite = _rewrite(table, [f0.file_path, f1.file_path], "compacted")
    gone += _delete(table, f0, r0, [10, 11, 49])  # after planning: must be carried
    gone += _delete(table, f1, r1, [0, 25])
    table.commit_or_raise(rewrite)
    snap = table.metadata.current_snapshot
    assert snap is not None and snap.summary["operation"] == "replace"
    live = table.live_files()
    assert set(live.data) == {f2.file_path, rewrite.added[0].file_path}
    assert len(live.positions_deleted(table.io, rewrite.added[0].file_path)) == 5
    _check(table, [r for r in r0 + r1 + r2 if r not in gone])


def test_without_a_map_the_rewrite_conflicts_and_the_stream_wins(sqlite_catalog) -> None:
    table, files = _setup(sqlite_catalog, "nomap")
    (f0, r0), (_, r1), (_, r2) = files
    rewrite = _rewrite(table, [f0.file_path], "compacted", with_map=False)
    gone = _delete(table, f0, r0, [7])
    with pytest.raises(CommitConflictError, match="no position map"):
        table.commit_or_raise(rewrite)
    _check(table, [r for r in r0 + r1 + r2 if r not in gone])


def test_a_row_delta_after_a_rewrite_follows_the_map_through_a_chain(sqlite_catalog) -> None:
    table, files = _setup(sqlite_catalog, "follow")
    (f0, r0), (f1, r1), (f2, r2) = files
    gone = _delete(table, f0, r0, [1])
    table.commit_or_raise(_rewrite(table, [f0.file_path, f1.file_path], "first"))
    first = table.live_files()
    second_input = [p for p in first.data if p.endswith("first.parquet")]
    table.commit_or_raise(_rewrite(table, [*second_input, f2.file_path], "second"))
    # A writer that resolved its keys before both rewrites deletes by the old positions;
    # position 1 of f0 was already deleted (not copied): deleting it again changes nothing.
    stale = RowDelta(deletes={f0.file_path: BitMap64([1, 2, 30]), f1.file_path: BitMap64([5])})
    table.commit_or_raise(stale)
    gone += [r0[2], r0[30], r1[5]]
    (only,) = table.live_files().data
    assert only.endswith("second.parquet")
    _check(table, [r for r in r0 + r1 + r2 if r not in gone])


def test_deletes_no_map_covers_still_fail_typed(sqlite_catalog) -> None:
    table, files = _setup(sqlite_catalog, "lost")
    (f0, _), _, _ = files
    table.commit_or_raise(_rewrite(table, [f0.file_path], "plain", with_map=False))
    with pytest.raises(DeletesOnRewrittenFilesError):
        table.commit_or_raise(RowDelta(deletes={f0.file_path: BitMap64([0])}))
