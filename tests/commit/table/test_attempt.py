"""The steps of a commit attempt against a real SQLite catalog, with swap faults from
``calving.commit.catalog.faults`` and crash points from ``calving.commit.faults``:
cleanup deletes exactly the files the failed tries wrote, and nothing after an unknown
outcome or a crash; every crash point fires at its step (before or after the swap)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pyroaring import BitMap64

from calving.commit import faults
from calving.commit.catalog.faults import FaultPlan, SwapFault
from calving.commit.errors import CommitConflictError, RetriesExhaustedError
from calving.commit.io import FileIO
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.attempt import Attempt, Base, Retry, certainly_not_committed
from calving.commit.table.changes import SnapshotChanges
from calving.commit.table.committer import Committed, Conflicted, Unknown, commit_action
from calving.commit.table.deletes import plan_deletes
from calving.commit.table.loading import load_metadata
from calving.commit.table.producer import SnapshotProducer
from calving.commit.table.scan import live_files, manifest_files
from calving.commit.table.summary import SummaryCounters
from calving.commit.table.table import Table
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import make_table, row, write_partitioned

pytestmark = pytest.mark.integration


class RecordingIO(FileIO):
    """The real local FileIO, remembering every file it wrote and deleted, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[str] = []
        self.deleted: list[str] = []

    def write(self, location: str, data: bytes) -> None:
        super().write(location, data)
        self.written.append(location)

    def write_many(self, files: Sequence[tuple[str, bytes]]) -> None:
        super().write_many(files)
        self.written.extend(location for location, _ in files)

    def delete(self, location: str) -> None:
        self.deleted.append(location)
        super().delete(location)


def _files(table: Table, ids: Sequence[int]):
    return tuple(f for f, _ in write_partitioned(table, [row(i) for i in ids]))


FAST_RETRIES = {"commit.retry.min-wait-ms": "1", "commit.retry.max-wait-ms": "2"}


def test_lost_tries_clean_up_exactly_the_files_each_wrote(sqlite_catalog):
    table = make_table(sqlite_catalog, properties={**FAST_RETRIES, "commit.retry.num-retries": "1"})
    table.commit(FastAppend(_files(table, [1, 2])))  # a base snapshot to carry
    sqlite_catalog.fault_plan = FaultPlan(SwapFault.UNAVAILABLE, SwapFault.UNAVAILABLE)
    io = RecordingIO()
    out = commit_action(sqlite_catalog, table.ident, FastAppend(_files(table, [3])), io=io)

    assert isinstance(out, Conflicted) and isinstance(out.error, RetriesExhaustedError)
    assert out.attempts == 2
    # Two tries, each wrote a manifest and a manifest list; both were cleaned, each
    # file once, and nothing else (no data file, no file of the base snapshot).
    assert len(io.written) == 4 and len(set(io.written)) == 4
    assert sorted(io.deleted) == sorted(io.written)
    assert not any(io.exists(f) for f in io.written)
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    for mf in manifest_files(io, table.metadata.current_snapshot):
        assert io.exists(mf.manifest_path)


def test_a_conflict_after_a_rebuild_cleans_only_the_lost_try(sqlite_catalog):
    """Try 1 loses the swap to a competitor; while it backs off, the table is dropped and
    recreated: try 2 is refused at build (nothing written), try 1's files are gone."""
    table = make_table(sqlite_catalog)
    stale = (table.metadata_location, table.metadata)
    competitor = Table.load(sqlite_catalog, table.ident)
    assert isinstance(competitor.commit(FastAppend(_files(competitor, [1]))), Committed)

    def recreate_while_backing_off(seconds: float) -> None:
        sqlite_catalog.drop_table(table.ident)
        make_table(sqlite_catalog)

    io = RecordingIO()
    out = commit_action(
        sqlite_catalog,
        table.ident,
        FastAppend(_files(table, [2])),
        io=io,
        base=stale,
        sleep=recreate_while_backing_off,
    )
    assert isinstance(out, Conflicted) and isinstance(out.error, CommitConflictError)
    assert "uuid" in str(out.error).lower()
    assert out.attempts == 2
    assert len(io.written) == 2  # try 1: one manifest and the manifest list
    assert io.deleted == io.written


@pytest.mark.parametrize(
    "plan",
    [
        (SwapFault.APPLIED_REPLY_LOST,),  # landed: found on refresh
        (SwapFault.NOT_APPLIED_REPLY_LOST,),  # absent: retried, second try lands
    ],
    ids=["applied", "not-applied"],
)
def test_nothing_is_deleted_after_an_unknown_swap(sqlite_catalog, plan):
    table = make_table(sqlite_catalog)
    sqlite_catalog.fault_plan = FaultPlan(*plan)
    io = RecordingIO()
    out = commit_action(
        sqlite_catalog, table.ident, FastAppend(_files(table, [1])), io=io, sleep=lambda s: None
    )
    assert isinstance(out, Committed)
    assert out.found_on_refresh == (plan[0] is SwapFault.APPLIED_REPLY_LOST)
    assert io.deleted == []
    assert all(io.exists(f) for f in io.written)  # the unknown try's files stay
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    assert table.metadata.current_snapshot_id == out.snapshot_id


def test_unknown_swap_with_an_unreadable_catalog_is_unknown_and_keeps_files(
    sqlite_catalog, monkeypatch
):
    from calving.commit.errors import CatalogUnavailableError

    table = make_table(sqlite_catalog)
    sqlite_catalog.fault_plan = FaultPlan(SwapFault.APPLIED_REPLY_LOST)
    base = (table.metadata_location, table.metadata)

    def down(ident):
        raise CatalogUnavailableError("injected: catalog down")

    monkeypatch.setattr(sqlite_catalog, "load_metadata_location", down)
    io = RecordingIO()
    out = commit_action(
        sqlite_catalog,
        table.ident,
        FastAppend(_files(table, [1])),
        io=io,
        base=base,
        sleep=lambda s: None,
    )
    assert isinstance(out, Unknown)
    assert out.attempted_location is not None
    assert io.deleted == []
    assert io.written and all(io.exists(f) for f in io.written)


@pytest.mark.parametrize(
    ("point", "lands"),
    [
        ("after-puffin", False),
        ("after-manifests", False),
        ("after-manifest-list", False),
        ("after-metadata-file", False),
        ("before-swap", False),
        ("after-swap", True),
    ],
)
def test_crash_points_fire_at_their_step_and_nothing_is_cleaned(sqlite_catalog, point, lands):
    table = make_table(sqlite_catalog)
    written = write_partitioned(table, [row(i) for i in range(4)])
    table.commit(FastAppend(tuple(f for f, _ in written)))
    target = written[0][0]
    action = RowDelta(
        added_data_files=_files(table, [10]), deletes={target.file_path: BitMap64([0])}
    )
    io = RecordingIO()
    faults.arm(point, "raise")
    try:
        with pytest.raises(faults.InjectedFault, match=point):
            commit_action(sqlite_catalog, table.ident, action, io=io)
    finally:
        faults.disarm_all()
    assert io.deleted == []  # a crash is not a known failure: nothing is cleaned
    assert any(f.endswith(".puffin") for f in io.written)
    assert all(io.exists(f) for f in io.written)
    before = table.metadata.current_snapshot_id
    table.refresh()
    assert (table.metadata.current_snapshot_id != before) == lands


def test_steps_return_values_and_resolve_reads_back_bytes(sqlite_catalog):
    """Driving the steps by hand: a lost swap is a Retry on the refreshed base; the
    rebuilt try lands; ``resolve`` finds it by its snapshot id, not by location."""
    table = make_table(sqlite_catalog)
    stale = Base(table.metadata_location, table.metadata)
    competitor = Table.load(sqlite_catalog, table.ident)
    competitor.commit(FastAppend(_files(competitor, [1])))
    io = RecordingIO()
    attempt = Attempt(
        sqlite_catalog,
        table.ident,
        FastAppend(_files(table, [2])),
        io=io,
        base=stale,
        table_uuid=stale.metadata.table_uuid,
        sleep=lambda s: None,
    )
    assert attempt.begin(stale) is None
    plan = attempt.build(stale)
    assert isinstance(plan, SnapshotChanges) and attempt.own_snapshot_id == attempt.snapshot_id
    staged = attempt.write(stale, plan)
    assert staged.files == tuple(io.written) and staged.base == stale
    from calving.commit.errors import CommitSwapLostError

    with pytest.raises(CommitSwapLostError) as lost:
        attempt.swap(staged)
    assert certainly_not_committed(lost.value)
    after = attempt.recover(lost.value)
    assert isinstance(after, Retry)
    assert after.base.location == sqlite_catalog.load_metadata_location(table.ident)
    assert io.deleted == list(staged.files)
    assert attempt.resolve(after.base) is None  # the competitor's commit is not ours

    assert attempt.begin(after.base) is None
    rebuilt = attempt.write(after.base, attempt.build(after.base))
    attempt.swap(rebuilt)
    done = attempt.finish(rebuilt)
    assert done.attempts == 2 and done.snapshot_id == attempt.snapshot_id
    location, metadata = load_metadata(sqlite_catalog, io, table.ident)
    found = attempt.resolve(Base(location, metadata))
    assert found is not None and found.found_on_refresh


def test_plan_deletes_unions_with_the_current_dv(sqlite_catalog):
    table = make_table(sqlite_catalog)
    same = [dict(row(7), payload=f"x{j}") for j in range(5)]  # one partition, one file
    ((f, _),) = write_partitioned(table, same)
    table.commit(FastAppend((f,)))
    table.commit(RowDelta(deletes={f.file_path: BitMap64([1])}))
    live = live_files(table.io, table.metadata, table.metadata.current_snapshot)

    counters = SummaryCounters()
    again = SnapshotChanges("delete", deletes={f.file_path: BitMap64([1])})
    plan = plan_deletes(table.io, live, again, counters)
    assert plan.new_dvs == () and counters.summary() == {}  # nothing new

    counters = SummaryCounters()
    more = SnapshotChanges("delete", deletes={f.file_path: BitMap64([3])})
    plan = plan_deletes(table.io, live, more, counters)
    ((target, positions),) = plan.new_dvs
    assert target.file_path == f.file_path and set(positions) == {1, 3}
    assert plan.replaced_dv_paths == {f.file_path}
    assert counters.summary() == {
        "removed-delete-files": "1",
        "removed-dvs": "1",
        "removed-position-deletes": "1",
    }

    past_end = SnapshotChanges("delete", deletes={f.file_path: BitMap64([5])})
    with pytest.raises(CommitConflictError, match="position 5 but the file has 5 rows"):
        plan_deletes(table.io, live, past_end, SummaryCounters())
    gone = SnapshotChanges("delete", removed_data_files=("file:///nowhere.parquet",))
    with pytest.raises(CommitConflictError, match="nowhere.parquet: it is not a live"):
        plan_deletes(table.io, live, gone, SummaryCounters())


def test_producer_names_exactly_the_new_files_of_the_snapshot(sqlite_catalog):
    """``written`` (what cleanup deletes) holds every new file the snapshot references
    and nothing of the base, data files excluded; an intermediate manifest written to be
    read back by the merge is deleted before the swap, so nothing unreferenced stays."""
    table = make_table(
        sqlite_catalog,
        properties={"commit.manifest.min-count-to-merge": "2", "calving.dv.blobs-per-puffin": "2"},
    )
    written = []
    for k in range(3):
        # Two rows per file: deleting one makes a DV (deleting a file's only row would
        # remove the file instead).
        rows = [row(k * 10 + i, day=i) for i in range(3) for _ in range(2)]
        files = write_partitioned(table, rows)
        written += files
        table.commit(FastAppend(tuple(f for f, _ in files)))
    base = table.metadata
    base_files = {mf.manifest_path for mf in manifest_files(table.io, base.current_snapshot)}
    changes = SnapshotChanges(
        "overwrite",
        added_data_files=_files(table, [100]),
        deletes={f.file_path: BitMap64([0]) for f, _ in written[:3]},
        removed_data_files=(written[4][0].file_path,),
    )
    io = RecordingIO()
    producer = SnapshotProducer(io, base, 4242)
    produced = producer.produce(changes)

    assert io.deleted, "the merge read back an intermediate manifest of this attempt"
    assert sorted(producer.written) == sorted(set(io.written) - set(io.deleted))
    assert not set(producer.written) & base_files
    assert not any(f.endswith(".parquet") for f in producer.written)
    snapshot = produced.snapshot
    listed = manifest_files(io, snapshot)
    new = {mf.manifest_path for mf in listed if mf.added_snapshot_id == 4242}
    puffins = {f for f in producer.written if f.endswith(".puffin")}
    assert len(puffins) == 2  # three DVs, two per Puffin file
    assert new | puffins | {snapshot.manifest_list} == set(producer.written)
    assert {mf.manifest_path for mf in listed} - new <= base_files
    assert snapshot.summary["added-dvs"] == "3" and snapshot.summary["removed-data-files"] == "1"


def test_a_commit_from_the_cached_state_skips_the_catalog_read(sqlite_catalog, monkeypatch):
    """``Table.commit(from_cache=True)``: no catalog read before the check-and-put while
    nobody else committed; after a competitor's commit the stale try loses the swap, its
    files are deleted and it is retried at once (no back-off) on a fresh read."""
    table = make_table(sqlite_catalog)
    reads: list[tuple[str, ...]] = []
    real_load = sqlite_catalog.load_metadata_location

    def counting_load(ident):
        reads.append(ident)
        return real_load(ident)

    monkeypatch.setattr(sqlite_catalog, "load_metadata_location", counting_load)
    out = table.commit(FastAppend(_files(table, [1])), from_cache=True)
    assert isinstance(out, Committed) and out.attempts == 1
    assert reads == []

    competitor = Table.load(sqlite_catalog, table.ident)
    assert isinstance(competitor.commit(FastAppend(_files(competitor, [2]))), Committed)
    reads.clear()
    slept: list[float] = []
    io = RecordingIO()
    out = commit_action(
        sqlite_catalog,
        table.ident,
        FastAppend(_files(table, [3])),
        io=io,
        base=(table.metadata_location, table.metadata),  # stale now
        cached_base=True,
        sleep=slept.append,
    )
    assert isinstance(out, Committed) and out.attempts == 2
    assert slept == [] and len(reads) == 1  # no back-off; one fresh read, after the loss
    assert io.deleted and io.deleted == io.written[: len(io.deleted)]  # the stale try's
    assert all(not io.exists(f) for f in io.deleted)
    table.refresh()
    assert sorted(r[0] for r in pyiceberg_rows(table.metadata_location, ["id"])) == [1, 2, 3]

    # The same stale base without ``cached_base`` backs off before its retry.
    table2 = Table.load(sqlite_catalog, table.ident)
    stale = (table2.metadata_location, table2.metadata)
    assert isinstance(competitor.refresh().commit(FastAppend(_files(competitor, [4]))), Committed)
    out = commit_action(
        sqlite_catalog, table.ident, FastAppend(_files(table, [5])), io=io, base=stale,
        sleep=slept.append,
    )  # fmt: skip
    assert isinstance(out, Committed) and out.attempts == 2 and len(slept) == 1


def test_deletion_vectors_this_process_wrote_are_merged_from_memory(sqlite_catalog, monkeypatch):
    """A second delete on a file merges with the DV the first commit wrote, taken from
    memory (the Puffin file is not read), and the result on disk is the union; callers
    get copies, so changing one does not change the remembered DV."""
    from calving.commit.table import scan

    table = make_table(sqlite_catalog)
    # Each id twice: the file keeps live rows after two deletes (an emptied file goes).
    table.commit(FastAppend(_files(table, [1, 2, 3, 1, 2, 3])))
    path = next(iter(live_files(table.io, table.metadata, table.metadata.current_snapshot).data))
    table.commit(RowDelta(deletes={path: BitMap64([0])}))
    ranges: list[str] = []
    real_read_range = FileIO.read_range

    def recording_read_range(self, location, offset, length):
        ranges.append(location)
        return real_read_range(self, location, offset, length)

    monkeypatch.setattr(FileIO, "read_range", recording_read_range)
    table.commit(RowDelta(deletes={path: BitMap64([1])}))
    assert not any(r.endswith(".puffin") for r in ranges)
    live = live_files(table.io, table.metadata, table.metadata.current_snapshot)
    got = live.positions_deleted(table.io, path)
    assert set(got) == {0, 1}
    got.add(2)  # the caller's copy
    assert set(live.positions_deleted(table.io, path)) == {0, 1}
    monkeypatch.setattr(scan, "_DVS", scan._Lru(8))  # forget: read the file itself
    ranges.clear()
    assert set(live.positions_deleted(table.io, path)) == {0, 1}
    assert any(r.endswith(".puffin") for r in ranges)
