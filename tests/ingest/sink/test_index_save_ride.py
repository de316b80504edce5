"""A many-table pipeline's index saves ride on batch commits (``Coordinator``'s
``save_with_next_commit``): a due save writes the index file, and the table's next
batch commit names it (one commit behind), so no table ever makes a commit of its own
to save its index; tables' first saves spread over batches; a restart catches the
saved index up instead of rebuilding; a save that waits at the stop is named then, and
one whose batch did not commit is deleted (SQLite catalog, pyiceberg reads back)."""

from __future__ import annotations

import zlib
from typing import Any

import pyarrow as pa
import pytest

from calving.commit import index as pk
from calving.commit.index.store import INDEX_DIRECTORY
from calving.commit.table.ledger import OffsetRange
from calving.commit.table.table import Table, create_table
from calving.ingest.sink.coordinator import Coordinator, ParsedMessages
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import EVENTS, row, write_partitioned

pytestmark = pytest.mark.integration

TOPIC = "events"
EVERY = 3


class Writer:
    def __init__(self, table: Table) -> None:
        self.table = table
        self.coordinator = self._coordinator()
        self.expected: dict[int, str] = {}
        self.offset = 0

    def _coordinator(self) -> Coordinator:
        return Coordinator(
            self.table, "writer-1", index_save_every=EVERY, save_with_next_commit=True
        )

    def restart(self) -> None:
        self.table.refresh()
        self.coordinator = self._coordinator()

    def parsed(self, upserts: dict[int, str], start: int | None = None) -> ParsedMessages:
        parsed = ParsedMessages()
        rows = [row(i, payload=p) for i, p in upserts.items()]
        for data_file, members in write_partitioned(self.table, rows):
            keys = pa.table({"id": pa.array([m["id"] for m in members], pa.int64())})
            parsed.files.append((data_file, keys))
        first = self.offset if start is None else start
        parsed.ranges[(TOPIC, 0)] = OffsetRange(first, first + len(upserts))
        return parsed

    def batch(self, batch_id: int, upserts: dict[int, str]) -> str:
        stats = self.coordinator.commit_batch(batch_id, self.parsed(upserts))
        self.offset += len(upserts)
        self.expected.update(upserts)
        return stats.outcome


def _index_files(table: Table) -> list[str]:
    return table.io.list_prefix(f"{table.metadata.location}/{INDEX_DIRECTORY}/")


def _first_save_after(name: str) -> int:
    return EVERY - zlib.crc32(name.encode()) % EVERY


def test_a_due_save_is_named_by_the_next_batch_commit_never_by_a_commit_of_its_own(
    sqlite_catalog: Any,
) -> None:
    table = create_table(sqlite_catalog, ("db", "keyed"), EVENTS)
    writer = Writer(table)
    named_at: list[int] = []  # batches whose commit changed the index location
    location = None
    for b in range(10):
        assert writer.batch(b, {b % 4: f"v{b}", 10 + b: f"n{b}"}) == "committed"
        now = table.metadata.properties.get(pk.INDEX_LOCATION_PROPERTY)
        if now != location:
            named_at.append(b)
            location = now
            # The named index is the table one commit before: a restart catches it up.
            current = table.metadata.current_snapshot
            assert current is not None
            with pytest.raises(pk.StaleIndexError) as stale:
                pk.load(table.io, now, table.metadata)
            assert stale.value.index_snapshot_id == current.parent_snapshot_id
    # Every metadata version is a batch's snapshot: no metadata-only save commits.
    assert len(table.metadata.snapshots) == 10
    assert len(table.metadata.metadata_log) == 10  # created + 10 commits, the last current
    first = _first_save_after(table.name)
    assert named_at == list(range(first, 10, EVERY))  # saved after commit `first`, named next
    assert _index_files(table) == [location]  # each replaced file deleted once unnamed

    rebuilds = pk.full_rebuilds()
    writer.restart()
    for b in range(10, 13):
        writer.batch(b, {b % 4: f"v{b}", 20 + b: f"n{b}"})
    assert pk.full_rebuilds() == rebuilds  # caught up from the saved index
    rows = pyiceberg_rows(table.metadata_location, ["id", "payload"])
    assert rows == sorted(writer.expected.items())


def test_tables_committing_every_batch_save_on_different_batches(sqlite_catalog: Any) -> None:
    """Twelve tables of one pipeline: their first saves fall on different batches, each
    within ``index_save_every`` commits of the start."""
    first: dict[str, int] = {}
    writers = [Writer(create_table(sqlite_catalog, ("db", f"t{i:02d}"), EVENTS)) for i in range(12)]
    for b in range(EVERY + 1):
        for w in writers:
            w.batch(b, {b: f"v{b}"})
            if pk.INDEX_LOCATION_PROPERTY in w.table.metadata.properties:
                first.setdefault(w.table.name, b)
    assert set(first) == {w.table.name for w in writers}
    assert len(set(first.values())) > 1
    assert first == {w.table.name: _first_save_after(w.table.name) for w in writers}


def test_a_save_waiting_at_the_stop_is_named_then_and_one_whose_batch_did_not_commit_goes(
    sqlite_catalog: Any,
) -> None:
    table = create_table(sqlite_catalog, ("db", "waits"), EVENTS)
    writer = Writer(table)
    b = 0
    while not _index_files(table):  # a save is due: its file is written, not yet named
        writer.batch(b, {b: f"v{b}"})
        b += 1
    [waiting] = _index_files(table)
    assert pk.INDEX_LOCATION_PROPERTY not in table.metadata.properties

    # A batch the ledger already holds is skipped: the save riding on it is not named,
    # and its file goes (the index is saved again, after the next commit).
    replay = writer.parsed({0: "v0"}, start=0)
    assert writer.coordinator.commit_batch(b, replay).outcome == "skipped"
    assert _index_files(table) == [] and pk.INDEX_LOCATION_PROPERTY not in table.metadata.properties

    while not _index_files(table):
        writer.batch(b, {b: f"v{b}"})
        b += 1
    [waiting] = _index_files(table)
    assert writer.coordinator.save_index() == waiting  # the stop names it, writes no other
    assert table.metadata.properties[pk.INDEX_LOCATION_PROPERTY] == waiting
    assert _index_files(table) == [waiting]
