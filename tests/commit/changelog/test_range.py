"""Which ranges the change feed reads and which it refuses, with the words it uses:
snapshot ids and times as ends, a start that was expired while its child was kept, a
range crossing expired history, a start that is not an ancestor, a rewrite that did not
keep row lineage (refused; the range after it reads), and a column named like a
change-feed column."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pyarrow as pa
import pytest

from calving.commit.changelog import read_changes, resolve_range
from calving.commit.errors import ChangeFeedError, SchemaError
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import LONG, STRING, NestedField
from calving.commit.table.actions.expire_snapshots import ExpireSnapshots
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.rewrite_files import RewriteFiles
from calving.commit.table.table import Table, create_table
from calving.ingest.write.parquet_writer import write_data_file
from tests.support.cdc_history import History, Model, Step

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _history(catalog: Any, batches: int) -> History:
    history = History(catalog, partitioned=False, model=Model(updates_keep_identity=False))
    history.run(Step("batch", tuple(("u", k) for k in range(6))))
    for i in range(batches - 1):
        history.run(Step("batch", (("u", i % 6), ("d", (i + 3) % 6))))
    return history


def _table(history: History) -> Table:
    return Table.load(history.table.catalog, history.table.ident)


def _ids(history: History) -> list[int]:
    return [c.snapshot_id for c in history.commits]


def test_snapshot_ids_and_times_pick_the_same_range(sqlite_catalog: Any) -> None:
    history = _history(sqlite_catalog, 2)
    time.sleep(0.02)
    middle = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.02)
    history.run(Step("batch", (("u", 1),)))
    history.run(Step("batch", (("d", 2),)))
    table = _table(history)
    ids = _ids(history)
    by_id = resolve_range(table.metadata, ids[1], ids[3])
    by_time = resolve_range(table.metadata, middle, None)
    assert [s.snapshot_id for s in by_id.snapshots] == ids[2:]
    assert by_time == by_id
    naive = middle.replace(tzinfo=None)  # read as UTC
    assert resolve_range(table.metadata, naive) == by_id
    everything = resolve_range(table.metadata, None)
    assert [s.snapshot_id for s in everything.snapshots] == ids
    assert resolve_range(table.metadata, ids[3]).snapshots == ()
    out = read_changes(table.io, table.metadata, middle)
    assert set(out.column("_commit_snapshot_id").to_pylist()) == set(ids[2:])


def test_a_range_crossing_expired_history_is_refused(sqlite_catalog: Any) -> None:
    history = _history(sqlite_catalog, 4)
    ids = _ids(history)
    table = _table(history)
    table.commit_or_raise(ExpireSnapshots(retain_last=2, delete_files=False))
    assert [s.snapshot_id for s in table.metadata.snapshots] == ids[2:]
    # The start (ids[1]) is gone, but its child is kept: nothing is missing.
    assert read_changes(table.io, table.metadata, ids[1]).num_rows == 6  # 2 x (u, u, d)
    with pytest.raises(ChangeFeedError, match=rf"crosses snapshot {ids[1]}, which was expired"):
        read_changes(table.io, table.metadata, ids[0])
    with pytest.raises(ChangeFeedError, match="crosses snapshot .* expired"):
        read_changes(table.io, table.metadata, None)
    old = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)
    with pytest.raises(ChangeFeedError, match="before the oldest snapshot still in the table"):
        read_changes(table.io, table.metadata, old)
    with pytest.raises(ChangeFeedError, match=f"snapshot {ids[0]} is not in the table"):
        read_changes(table.io, table.metadata, ids[2], ids[0])


def test_a_start_that_is_not_an_ancestor_is_refused(sqlite_catalog: Any) -> None:
    history = _history(sqlite_catalog, 3)
    ids = _ids(history)
    table = _table(history)
    with pytest.raises(ChangeFeedError, match=rf"snapshot {ids[2]} is not an ancestor of"):
        read_changes(table.io, table.metadata, ids[2], ids[1])


def test_a_rewrite_that_loses_row_lineage_is_refused(sqlite_catalog: Any) -> None:
    """Another engine's compaction writes the live rows anew without the lineage
    columns: they get new ``_row_id``s, so a consumer could no longer follow them."""
    history = _history(sqlite_catalog, 3)
    table = _table(history)
    live = table.live_files()
    from pyiceberg.table import StaticTable

    rows = StaticTable.from_metadata(table.metadata_location).scan().to_arrow()
    location = f"{table.metadata.location}/data/foreign-rewrite.parquet"
    new = write_data_file(table.io, location, rows, table.metadata.schema)
    seen = {p: e.data_file.record_count for p, e in live.dvs.items()}
    table.commit_or_raise(RewriteFiles(tuple(live.data), (new,), deletes_seen=seen))
    rewrite_id = table.metadata.current_snapshot_id
    history.run(Step("batch", (("d", 0),)))
    table.refresh()
    with pytest.raises(ChangeFeedError, match=rf"snapshot {rewrite_id} \(replace\) rewrote"):
        read_changes(table.io, table.metadata, None)
    after = read_changes(table.io, table.metadata, rewrite_id)
    assert after.column("_change_type").to_pylist() == ["DELETE"]
    assert after.column("id").to_pylist() == [0]


def test_a_column_named_like_a_change_column_is_refused(sqlite_catalog: Any) -> None:
    schema = Schema((NestedField(1, "id", LONG, True), NestedField(2, "_change_type", STRING)))
    table = create_table(sqlite_catalog, ("db", "clash"), schema)
    data = pa.table({"id": pa.array([1], pa.int64()), "_change_type": ["x"]})
    f = write_data_file(table.io, f"{table.metadata.location}/data/a.parquet", data, schema)
    table.commit_or_raise(FastAppend((f,)))
    with pytest.raises(SchemaError, match="'_change_type' has the name of a change-feed column"):
        read_changes(table.io, table.metadata, None)
