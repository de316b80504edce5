"""The index and a real table (SQLite catalog): rebuilt from data files minus deletion
vectors, saved and loaded with validation, caught up to newer snapshots."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap64

from calving.commit.errors import CorruptFileError
from calving.commit.index import store
from calving.commit.index.keys import IntKeys
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.store import (
    INDEX_LOCATION_PROPERTY,
    IndexMismatchError,
    StaleIndexError,
    build_from_table,
    catch_up,
    load,
    load_current,
    open_index,
    save,
)
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import NestedField
from calving.commit.table.actions.expire_snapshots import ExpireSnapshots
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.rewrite_files import RewriteFiles
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.table import Table, create_table
from calving.ingest.write.parquet_writer import write_data_file
from tests.support.tables import EVENTS, events_spec, make_table, row, write_partitioned

pytestmark = pytest.mark.integration

Row = dict[str, Any]


class LiveTable:
    """A table plus what its live rows are: path -> rows in file order, minus deletes."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.rows: dict[str, list[Row]] = {}
        self.deleted: dict[str, set[int]] = {}

    def append(self, rows: list[Row]) -> None:
        files = write_partitioned(self.table, rows)
        self.table.commit_or_raise(FastAppend(tuple(f for f, _ in files)))
        self._added(files)

    def _added(self, files: list) -> None:
        for df, members in files:
            self.rows[df.file_path] = members
            self.deleted[df.file_path] = set()

    def upsert(self, doomed: Callable[[Row], bool], new_rows: list[Row]) -> None:
        """Delete live rows matching ``doomed`` and add ``new_rows`` in one row delta."""
        deletes = {}
        for path, members in self.rows.items():
            hit = {i for i, r in enumerate(members) if doomed(r) and i not in self.deleted[path]}
            if hit:
                deletes[path] = BitMap64(hit)
                self.deleted[path] |= hit
        files = write_partitioned(self.table, new_rows) if new_rows else []
        self.table.commit_or_raise(RowDelta(tuple(f for f, _ in files), deletes))
        self._added(files)

    def compact(self, paths: list[str]) -> None:
        """Rewrite each file's live rows into a new file (same partition)."""
        added, seen = [], {}
        for path in paths:
            live = self.live_rows(path)
            old = self.table.live_files().data[path].data_file
            location = path.replace(".parquet", "-compacted.parquet")
            new = write_data_file(
                self.table.io,
                location,
                pa.Table.from_pylist(live),
                self.table.metadata.schema,
                partition=old.partition,
            )
            added.append((new, live))
            if self.deleted[path]:
                seen[path] = len(self.deleted[path])
        self.table.commit_or_raise(RewriteFiles(tuple(paths), tuple(f for f, _ in added), seen))
        for path in paths:
            del self.rows[path], self.deleted[path]
        self._added(added)

    def live_rows(self, path: str) -> list[Row]:
        return [r for i, r in enumerate(self.rows[path]) if i not in self.deleted[path]]

    def expected(self, key: Callable[[Row], Any]) -> dict[Any, list[tuple[str, int]]]:
        out: dict[Any, list[tuple[str, int]]] = {}
        for path, members in self.rows.items():
            for i, r in enumerate(members):
                if i not in self.deleted[path]:
                    out.setdefault(key(r), []).append((path, i))
        return {k: sorted(v) for k, v in out.items()}


def _found(index: PrimaryKeyIndex, keys: pa.Table, key_values: list[Any]) -> dict[Any, list]:
    matches = index.lookup(keys)
    out: dict[Any, list[tuple[str, int]]] = {}
    for r, f, p in zip(matches.key_rows, matches.file_ids, matches.positions):
        out.setdefault(key_values[r], []).append((matches.file_path(f), int(p)))
    return {k: sorted(v) for k, v in out.items()}


def _ids(values: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def _entries(index: PrimaryKeyIndex) -> list[tuple[Any, str, int]]:
    keys, file_index, positions, files = index.export_entries()
    assert isinstance(keys, IntKeys)
    return sorted(zip(keys.values.tolist(), [files[i][0] for i in file_index], positions.tolist()))


def _history(table: Table) -> LiveTable:
    """Two appends, an upsert that spreads DVs over several files, a second delete on a
    file that already has a DV (its DV grows), and a duplicate key from another tool."""
    live = LiveTable(table)
    live.append([row(i, region=("eu" if i % 3 else "us"), day=i % 2) for i in range(60)])
    live.append([row(100 + i, region="apac", day=2) for i in range(20)])
    live.upsert(
        lambda r: r["id"] % 7 == 0,
        [row(i, region="eu", day=3, payload="v2") for i in range(0, 60, 7)],
    )
    live.upsert(lambda r: r["id"] % 5 == 1 and r["id"] < 60, [])
    live.append([row(106, region="eu", day=4)])  # a second live row for key 106
    return live


ALL_IDS = list(range(60)) + list(range(100, 120)) + [999]


def test_build_from_table_indexes_exactly_the_live_rows(sqlite_catalog) -> None:
    live = _history(make_table(sqlite_catalog))
    index = build_from_table(live.table.io, live.table.metadata)
    expected = live.expected(lambda r: r["id"])
    assert _found(index, _ids(ALL_IDS), ALL_IDS) == expected
    assert len(expected[106]) == 2  # both versions, so an update deletes both
    assert index.snapshot_id == live.table.metadata.current_snapshot_id
    assert index.table_uuid == live.table.metadata.table_uuid
    assert store.mismatch_with_table(live.table.io, index, live.table.metadata) == ""


def test_build_maps_key_columns_by_field_id_for_composite_keys(sqlite_catalog) -> None:
    schema = Schema(EVENTS.fields, identifier_field_ids=(2, 1))  # (region, id)
    table = create_table(sqlite_catalog, ("db", "composite"), schema, spec=events_spec(schema))
    live = LiveTable(table)
    live.append([row(i, region=r) for i in range(10) for r in ("eu", "us")])
    live.upsert(lambda r: r["id"] == 3 and r["region"] == "us", [])
    index = build_from_table(table.io, table.metadata)
    wanted = [(r, i) for i in range(12) for r in ("eu", "us", "apac")]
    keys = pa.table({"region": [w[0] for w in wanted], "id": [w[1] for w in wanted]})
    assert _found(index, keys, wanted) == live.expected(lambda r: (r["region"], r["id"]))
    assert ("us", 3) not in _found(index, keys, wanted)


def test_save_and_load_round_trip(sqlite_catalog) -> None:
    live = _history(make_table(sqlite_catalog))
    table = live.table
    index = build_from_table(table.io, table.metadata)
    location = save(table.io, index, table.metadata.location)
    assert location.startswith(
        f"{table.metadata.location}/metadata/calving-index/{table.metadata.current_snapshot_id}-"
    )
    assert location.endswith(".calvidx")
    loaded = load(table.io, location, table.metadata)
    assert _entries(loaded) == _entries(index)
    assert (loaded.snapshot_id, loaded.table_uuid) == (index.snapshot_id, index.table_uuid)
    assert loaded.file_paths and sorted(loaded.file_paths) == sorted(index.file_paths)

    md = store.read_index_table(table.io, location).schema.metadata
    assert md[b"calving.table-uuid"].decode() == table.metadata.table_uuid
    assert md[b"calving.snapshot-id"].decode() == str(table.metadata.current_snapshot_id)
    assert md[b"calving.key-field-ids"] == b"[1]"


def test_string_keys_round_trip(sqlite_catalog) -> None:
    fields = tuple(NestedField(f.field_id, f.name, f.field_type, True) for f in EVENTS.fields)
    schema = Schema(fields, identifier_field_ids=(4,))  # payload (required) as a string key
    table = create_table(sqlite_catalog, ("db", "by_payload"), schema, spec=events_spec(schema))
    live = LiveTable(table)
    live.append([row(i, payload=f"payload-{i}-{'x' * (i % 11)}") for i in range(30)])
    index = build_from_table(table.io, table.metadata)
    loaded = load(table.io, save(table.io, index, table.metadata.location), table.metadata)
    values = [f"payload-{i}-{'x' * (i % 11)}" for i in range(32)]
    got = _found(loaded, pa.table({"p": values}), values)
    assert got == live.expected(lambda r: r["payload"])


def test_an_index_of_an_older_snapshot_is_stale_and_catches_up(sqlite_catalog) -> None:
    live = _history(make_table(sqlite_catalog))
    table = live.table
    location = save(table.io, build_from_table(table.io, table.metadata), table.metadata.location)
    live.append([row(200 + i) for i in range(5)])
    live.upsert(lambda r: r["id"] in (1, 2, 200), [row(1, payload="v3")])

    with pytest.raises(StaleIndexError) as info:
        load(table.io, location, table.metadata)
    stale = info.value
    assert stale.table_snapshot_id == table.metadata.current_snapshot_id
    assert stale.index_snapshot_id != stale.table_snapshot_id
    caught = catch_up(table.io, stale.index, table.metadata)
    assert caught is stale.index  # applied in place, no rebuild
    assert _entries(caught) == _entries(build_from_table(table.io, table.metadata))
    assert caught.snapshot_id == table.metadata.current_snapshot_id


def test_catch_up_equals_rebuild_across_deletes_upserts_and_compaction(sqlite_catalog) -> None:
    table = make_table(sqlite_catalog)
    live = LiveTable(table)
    index = build_from_table(table.io, table.metadata)  # empty table: no snapshot yet
    assert index.snapshot_id is None and len(index) == 0
    steps: list[Callable[[], None]] = [
        lambda: live.append([row(i, region=("eu" if i % 2 else "us")) for i in range(40)]),
        lambda: live.upsert(
            lambda r: r["id"] % 4 == 0, [row(i, payload="v2") for i in range(0, 40, 4)]
        ),
        lambda: live.upsert(lambda r: r["id"] % 6 == 1, []),
        lambda: live.compact(sorted(live.rows)[:3]),
        lambda: live.upsert(lambda r: r["id"] in (5, 9), [row(5, payload="v3")]),
    ]
    for i, step in enumerate(steps):
        step()
        if i % 2 == 0:  # sometimes one snapshot at a time, sometimes two at once
            continue
        assert catch_up(table.io, index, table.metadata) is index  # in place, no rebuild
        assert _entries(index) == _entries(build_from_table(table.io, table.metadata))
    assert catch_up(table.io, index, table.metadata) is index
    rebuilt = build_from_table(table.io, table.metadata)
    assert _entries(index) == _entries(rebuilt)
    ids = list(range(45))
    assert _found(index, _ids(ids), ids) == live.expected(lambda r: r["id"])


def test_catch_up_rebuilds_when_history_is_gone(sqlite_catalog) -> None:
    live = _history(make_table(sqlite_catalog))
    table = live.table
    index = build_from_table(table.io, table.metadata)
    old_snapshot = index.snapshot_id
    live.append([row(300)])
    table.commit_or_raise(ExpireSnapshots(retain_last=1))
    table.refresh()
    assert table.metadata.snapshot_by_id(old_snapshot) is None
    caught = catch_up(table.io, index, table.metadata)
    assert caught is not index
    assert _entries(caught) == _entries(build_from_table(table.io, table.metadata))


def test_load_rejects_other_tables_keys_and_content(sqlite_catalog) -> None:
    live = _history(make_table(sqlite_catalog))
    table = live.table
    index = build_from_table(table.io, table.metadata)
    location = save(table.io, index, table.metadata.location)

    other = make_table(sqlite_catalog, "other")
    other_rows = LiveTable(other)
    other_rows.append([row(1)])
    with pytest.raises(IndexMismatchError, match="table"):
        load(table.io, location, other.metadata)
    with pytest.raises(IndexMismatchError, match="key"):
        load(table.io, location, table.metadata, key_field_ids=[2])

    # An index saved for a snapshot id whose content is another state (as when a commit
    # lands on a different parent than the index was computed on) is caught.
    live.append([row(400)])
    index.snapshot_id = table.metadata.current_snapshot_id
    wrong = save(table.io, index, table.metadata.location)
    with pytest.raises(IndexMismatchError, match="differ"):
        load(table.io, wrong, table.metadata)

    junk = f"{table.metadata.location}/metadata/calving-index/junk.calvidx"
    table.io.write(junk, b"not an arrow file")
    with pytest.raises(CorruptFileError):
        load(table.io, junk, table.metadata)


def test_open_index_uses_the_recorded_file_and_falls_back(sqlite_catalog, monkeypatch) -> None:
    live = _history(make_table(sqlite_catalog))
    table = live.table
    assert load_current(table.io, table.metadata) is None
    location = save(table.io, build_from_table(table.io, table.metadata), table.metadata.location)
    table.commit_or_raise(UpdateProperties({INDEX_LOCATION_PROPERTY: location}))
    expected = _entries(build_from_table(table.io, table.metadata))

    def no_rebuild(*args: Any, **kwargs: Any) -> PrimaryKeyIndex:
        raise AssertionError("rebuilt although a current index was recorded")

    with monkeypatch.context() as patch:
        patch.setattr(store, "build_from_table", no_rebuild)
        assert _entries(open_index(table.io, table.metadata)) == expected
        live.append([row(500)])  # now stale: caught up, still no rebuild
        assert _entries(open_index(table.io, table.metadata)) == _entries(
            build_from_table(table.io, table.metadata)
        )

    table.io.delete(location)  # recorded but missing: rebuilt
    assert _entries(open_index(table.io, table.metadata)) == _entries(
        build_from_table(table.io, table.metadata)
    )


def test_build_reads_only_key_columns_and_checks_row_counts(sqlite_catalog) -> None:
    live = LiveTable(make_table(sqlite_catalog))
    live.append([row(i) for i in range(5)])
    data_file = next(iter(live.table.live_files().data.values())).data_file
    keys = store.read_key_columns(live.table.io, data_file, [1, 2])
    assert keys.column_names == ["1", "2"] and keys.num_rows == data_file.record_count
    with pytest.raises(CorruptFileError, match="rows"):
        store.read_key_columns(live.table.io, replace(data_file, record_count=99), [1])
    assert np.all(
        np.sort(keys.column("1").to_numpy())
        == np.sort([r["id"] for r in live.rows[data_file.file_path]])
    )


def test_catch_up_to_an_older_snapshot_brings_deleted_rows_back(sqlite_catalog) -> None:
    live = _history(make_table(sqlite_catalog))
    table = live.table
    index = build_from_table(table.io, table.metadata)
    first_upsert = table.metadata.ancestors()[2]  # DVs there are smaller than now
    rolled_back = table.metadata.with_changes(current_snapshot_id=first_upsert.snapshot_id)
    assert catch_up(table.io, index, rolled_back) is index
    assert _entries(index) == _entries(build_from_table(table.io, rolled_back))
    assert store.mismatch_with_table(table.io, index, rolled_back) == ""


def test_catch_up_follows_rewrites_through_their_position_maps(sqlite_catalog, monkeypatch) -> None:
    """Compactions with position maps (calving's own): the index moves the rewritten
    rows' entries instead of reading the new files' keys, across two rewrites in one
    catch-up (the second rewriting the first's output), deletes the stream carried onto
    a rewrite and deletes after it, and a file all of whose rows were deleted since.
    The result equals a rebuild from the data files, and no rewritten file is read."""
    from calving.commit.maintenance.compaction import compact
    from calving.commit.maintenance.compaction_plan import CompactionPolicy
    from calving.commit.spec.partition import UNPARTITIONED
    from calving.ingest.write.rewrite import local_rewrite

    table = make_table(sqlite_catalog, "remap", spec=UNPARTITIONED)
    live = LiveTable(table)
    for start in (0, 100, 200):
        live.append([row(start + i) for i in range(30)])
    live.upsert(lambda r: r["id"] % 7 == 0, [row(i, payload="v2") for i in range(0, 30, 7)])
    index = build_from_table(table.io, table.metadata)
    before = set(index.file_paths)
    policy = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2, max_group_bytes=1 << 24)
    rewrite = local_rewrite(table.io, 1 << 20)
    assert compact(table.refresh(), policy, rewrite).groups_committed == 1
    table = table.refresh()
    (merged,) = table.live_files().data
    deletes = {merged: BitMap64([0, 5, 6])}  # rows of the compacted file, after it
    table.commit_or_raise(RowDelta(deletes=deletes))
    table = table.refresh()
    policy = replace(policy, min_input_files=1, delete_ratio=0.01)  # the output alone
    assert compact(table, policy, rewrite).groups_committed == 1
    table = table.refresh()
    (again,) = table.live_files().data  # its rows deleted after it: its DV is applied
    table.commit_or_raise(RowDelta(deletes={again: BitMap64([1, 2])}))
    table = table.refresh()
    more = write_partitioned(table, [row(300 + i) for i in range(10)])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in more)))
    table = table.refresh()
    maps = [s for s in table.metadata.snapshots if "calving.rewrite.position-map" in s.summary]
    assert len(maps) == 2
    read: list[str] = []
    real = store.read_live_keys

    def spy(io, live_files, paths, ids, workers):
        read.extend(paths)
        return real(io, live_files, paths, ids, workers)

    monkeypatch.setattr(store, "read_live_keys", spy)
    assert catch_up(table.io, index, table.metadata) is index
    assert read == [f.file_path for f, _ in more]  # only the file no rewrite made
    assert _entries(index) == _entries(build_from_table(table.io, table.metadata))
    assert not before & set(table.live_files().data)
    ids = list(range(310))
    rebuilt = build_from_table(table.io, table.metadata)
    assert _found(index, _ids(ids), ids) == _found(rebuilt, _ids(ids), ids)
