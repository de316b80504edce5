"""The change feed against two oracles over random CDC histories (issue 23, part 3).

Histories (``tests.support.cdc_history``): upserts, deletes, re-inserts, compactions and
commit conflicts through calving's real commit path, lineage checked after each commit.

1. The model: for every range of the history, ``read_changes`` gives exactly the
   changes the model says each data commit made, in order, with each change's
   ``_row_id`` that of the model identity (as the reference lineage reader saw it);
   compactions (``replace``) are seen through.
2. A full-scan diff: for the net changes, the table read whole at both ends of the
   range (the reference reader, its values checked against pyiceberg's scan of the
   same snapshot) and diffed by ``_row_id``.

Every data file the feed opens is one the range added, or one whose rows it deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.changelog import read_changes
from calving.commit.io import FileIO
from calving.commit.table.table import Table
from tests.support import lineage as ref
from tests.support.cdc_history import (
    COLUMNS,
    UPDATES_KEEP_ROW_ID,
    History,
    IdentityBook,
    postgres_catalog,
    run_history,
    sqlite_catalog,
    steps_strategy,
)

RANK = {"DELETE": 0, "UPDATE_BEFORE": 1, "UPDATE_AFTER": 2, "INSERT": 3}
Row = tuple[Any, ...]

_SETTINGS = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class RecordingIO(FileIO):
    """A FileIO that remembers every location opened through ``resolve``."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[str] = []

    def resolve(self, location: str) -> Any:
        self.opened.append(location)
        return super().resolve(location)


def _feed(history: History, start: int | None, end: int, net: bool = False) -> pa.Table:
    table = Table.load(history.table.catalog, history.table.ident)
    io = RecordingIO()
    out = read_changes(io, table.metadata, start, end, net=net)
    _check_files_opened(io.opened, history.metadata_location(), start, end)
    return out


def _check_files_opened(opened: Sequence[str], location: str, start: int | None, end: int) -> None:
    """Data files the feed read: added in the range, or deleted from by it."""
    metadata = ref.read_metadata(location)
    by_id = {s["snapshot-id"]: s for s in metadata["snapshots"]}
    allowed: set[str] = set()
    at: int | None = end
    while at is not None and at != start:
        snap = by_id[at]
        for m in ref.manifest_list(snap):
            if m["added_snapshot_id"] != at:
                continue
            for e in ref._avro(m["manifest_path"]):
                if e["snapshot_id"] in (None, at) and e["status"] != 0:
                    df = e["data_file"]
                    allowed.add(df.get("referenced_data_file") or df["file_path"])
        at = snap.get("parent-snapshot-id")
    data = [p for p in opened if p.endswith(".parquet")]
    assert set(data) <= allowed, set(data) - allowed
    assert len(data) == len(set(data)), "a data file was read twice"


def _feed_rows(out: pa.Table) -> list[Row]:
    cols = [
        out.column(c).to_pylist()
        for c in (*COLUMNS, *("_change_ordinal", "_commit_snapshot_id", "_change_type", "_row_id"))
    ]
    return [(o, s, t, rid, tuple(vals)) for *vals, o, s, t, rid in zip(*cols)]


def _expected(history: History, book: IdentityBook, start: int, end: int) -> list[Row]:
    """Model changes of commits ``start+1 .. end`` (indices into history.commits;
    ``start`` -1: from the beginning), as feed rows."""
    in_range = history.commits[start + 1 : end + 1]
    by_snapshot = {}
    data_commits = [c for c in history.commits if c.kind == "data"]
    for commit, changes in zip(data_commits, history.model.changes):
        by_snapshot[commit.snapshot_id] = changes
    rows = []
    for ordinal, commit in enumerate(in_range):
        for ch in by_snapshot.get(commit.snapshot_id, []):
            row_id = book.by_identity[ch.identity]
            rows.append((ordinal, commit.snapshot_id, ch.change_type, row_id, ch.values))
    return sorted(rows, key=lambda r: (r[0], r[3], RANK[r[2]]))


def _snapshot_state(history: History, snapshot_id: int | None) -> dict[int, Row]:
    """``_row_id`` -> values of a snapshot, read whole by the reference reader; its
    values are checked against pyiceberg's scan of the same snapshot."""
    if snapshot_id is None:
        return {}
    location = history.metadata_location()
    rows = ref.snapshot_rows(location, snapshot_id)
    from pyiceberg.table import StaticTable

    scan = StaticTable.from_metadata(location).scan(snapshot_id=snapshot_id).to_arrow()
    pyiceberg_rows = sorted(zip(*(scan.column(c).to_pylist() for c in COLUMNS)))
    mine = sorted(tuple(r.values[c] for c in COLUMNS) for r in rows)
    assert mine == pyiceberg_rows, "the reference reader and pyiceberg disagree"
    state = {}
    for r in rows:
        assert r.row_id is not None
        state[r.row_id] = tuple(r.values[c] for c in COLUMNS)
    return state


def _diff(before: dict[int, Row], after: dict[int, Row]) -> set[tuple[str, int, Row]]:
    out: set[tuple[str, int, Row]] = set()
    for rid, values in before.items():
        if rid not in after:
            out.add(("DELETE", rid, values))
        elif after[rid] != values:
            out.add(("UPDATE_BEFORE", rid, values))
            out.add(("UPDATE_AFTER", rid, after[rid]))
    out |= {("INSERT", rid, v) for rid, v in after.items() if rid not in before}
    return out


def check_range(history: History, book: IdentityBook, start: int, end: int) -> None:
    commits = history.commits
    start_id = commits[start].snapshot_id if start >= 0 else None
    end_id = commits[end].snapshot_id
    got = _feed_rows(_feed(history, start_id, end_id))
    assert got == _expected(history, book, start, end), (start, end)

    net = _feed(history, start_id, end_id, net=True)
    snaps = {c.snapshot_id for c in commits[start + 1 : end + 1]}
    assert set(net.column("_commit_snapshot_id").to_pylist()) <= snaps
    got_net = {(t, rid, vals) for _, _, t, rid, vals in _feed_rows(net)}
    want = _diff(_snapshot_state(history, start_id), _snapshot_state(history, end_id))
    assert got_net == want, (start, end)


def run_and_check_ranges(catalog: Any, steps: Any, partitioned: bool, data: st.DataObject) -> None:
    history, book = run_history(catalog, steps, partitioned=partitioned, keep=UPDATES_KEEP_ROW_ID)
    table = Table.load(history.table.catalog, history.table.ident)
    chain = [s.snapshot_id for s in reversed(table.metadata.ancestors())]
    assert chain == [c.snapshot_id for c in history.commits]  # every snapshot is known
    n = len(history.commits)
    check_range(history, book, -1, n - 1)
    for _ in range(2):
        end = data.draw(st.integers(0, n - 1), label="end")
        start = data.draw(st.integers(-1, end), label="start")
        check_range(history, book, start, end)


_steps = steps_strategy(10, max_steps=6)


@_SETTINGS
@given(steps=_steps, partitioned=st.booleans(), data=st.data())
def test_feed_matches_the_model_and_the_full_scan_diff_sqlite(
    steps: Any, partitioned: bool, data: st.DataObject
) -> None:
    with sqlite_catalog() as catalog:
        run_and_check_ranges(catalog, steps, partitioned, data)


@pytest.mark.integration
@pytest.mark.postgres
@_SETTINGS
@given(steps=_steps, partitioned=st.booleans(), data=st.data())
def test_feed_matches_the_model_and_the_full_scan_diff_postgres(
    pg_url: str, steps: Any, partitioned: bool, data: st.DataObject
) -> None:
    with postgres_catalog(pg_url) as catalog:
        run_and_check_ranges(catalog, steps, partitioned, data)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, data=st.data())
def test_remote_storage_reads_by_threads_give_the_same_feed(
    steps: Any, data: st.DataObject
) -> None:
    """Remote storage reads manifests and deletion vectors on threads, a share of the
    files each; local files are read in turn. The threaded path on this history."""
    from calving.commit.changelog import feed

    assert feed._threads(["/tmp/a", "file:///tmp/b"]) == 1
    assert feed._threads(["/tmp/a", "s3://bucket/b"]) == feed._READ_THREADS
    with pytest.MonkeyPatch.context() as mp, sqlite_catalog() as catalog:
        mp.setattr(feed, "_threads", lambda locations: feed._READ_THREADS)
        run_and_check_ranges(catalog, steps, True, data)
