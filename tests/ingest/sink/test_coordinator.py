"""The coordinator's primary-key index follows a commit that removes the files it
emptied (a keyed update or delete of every row of a file removes the file instead of
giving it a full DV): the index drops them too, so the saved index loads against the
table and the next batch's lookups find only live rows. Real SQLite catalog."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from calving.commit import index as pk
from calving.commit.io import FileIO
from calving.commit.table import row_ids
from calving.commit.table.table import Table
from tests.support.cdc_history import (
    History,
    IdentityBook,
    Model,
    Step,
    check_lineage,
    sqlite_catalog,
)


def _live_paths(h: History) -> set[str]:
    return set(Table.load(h.table.catalog, h.table.ident).live_files().data)


def test_files_a_batch_empties_leave_the_index_with_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commit says which files it removed (``Committed.removed_data_files``), so the
    index drops them in memory: no catch-up from the table's manifests and files."""
    catch_ups: list[int] = []
    real_catch_up = pk.catch_up

    def counting(*args: Any, **kwargs: Any) -> Any:
        catch_ups.append(1)
        return real_catch_up(*args, **kwargs)

    monkeypatch.setattr(pk, "catch_up", counting)
    with sqlite_catalog() as catalog:
        h = History(catalog, partitioned=False, model=Model(updates_keep_identity=True))
        book = IdentityBook()
        steps = [
            Step("batch", (("u", 0), ("u", 1))),  # file A: keys 0, 1
            Step("batch", (("u", 2),)),  # file B: key 2
            Step("batch", (("u", 0), ("u", 1), ("d", 2))),  # empties A and B
            Step("batch", (("u", 0), ("u", 3))),  # looks key 0 up again (file C keeps 1)
        ]
        removed = []
        for step in steps:
            before = _live_paths(h)
            h.run(step, after=lambda hh: check_lineage(hh, book))
            removed.append(before - _live_paths(h))
        assert [len(r) for r in removed] == [0, 0, 2, 0]  # the third batch empties A and B
        assert catch_ups == []

        index = h.coordinator.index
        assert index is not None
        assert set(index.file_paths) == _live_paths(h)
        location = h.coordinator.save_index()
        assert location is not None
        table = Table.load(h.table.catalog, h.table.ident)
        loaded = pk.load(table.io, location, table.metadata)  # verifies files against the table
        assert set(loaded.file_paths) == set(table.live_files().data)
        assert len(loaded) == 3  # keys 0, 1, 3


def test_a_keyed_commit_times_its_phases() -> None:
    """``commit_batch`` reports how long each phase took (the batch line's
    ``commit_phases``): the index lookup, the updated rows' ``_row_id``, the commit and
    the index moving on."""
    with sqlite_catalog() as catalog:
        h = History(catalog, partitioned=True, model=Model(updates_keep_identity=True))
        stats = []
        for events in ((("u", 0), ("u", 1), ("u", 2)), (("u", 0), ("d", 1), ("u", 5))):
            _, parsed = h.written(events)
            started = time.monotonic()
            stats.append(h.coordinator.commit_batch(len(stats), parsed))
            elapsed = time.monotonic() - started
            assert stats[-1].outcome == "committed"
            phases = stats[-1].phases
            assert all(v >= 0 for v in phases.values()) and sum(phases.values()) <= elapsed
        assert set(stats[1].phases) == {"lookup", "lineage", "commit", "finish"}
        assert {"commit", "finish"} <= set(stats[0].phases)


def test_an_update_of_a_row_the_coordinator_stored_ids_for_reads_no_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The file a batch's updates were copied into stores ids the coordinator just wrote:
    it keeps them, so the next update of those rows reads none of that file back (hot
    keys are updated batch after batch). Inherited ids need no read either; lineage
    stays what the spec's reference derivation says."""
    reads: list[str] = []  # files whose stored ids were read
    real = row_ids.read_stored_row_ids

    def counting(io: FileIO, location: str) -> np.ndarray | None:
        reads.append(location)
        return real(io, location)

    monkeypatch.setattr(row_ids, "read_stored_row_ids", counting)
    with sqlite_catalog() as catalog:
        h = History(catalog, partitioned=False, model=Model(updates_keep_identity=True))
        book = IdentityBook()
        h.run(
            Step("batch", (("u", 0), ("u", 1), ("u", 2))), after=lambda hh: check_lineage(hh, book)
        )
        for _ in range(3):  # each batch updates rows the previous one stored ids for
            h.run(Step("batch", (("u", 0), ("u", 1))), after=lambda hh: check_lineage(hh, book))
        live = _live_paths(h)
        assert len(live) == 2  # the first batch's file (key 2) and the last copy (keys 0, 1)
        # Only the first batch's file was read (its footer: it stores no ids; a task's
        # file is read at most once); neither of the copies before the last one was.
        assert len(reads) == 1 and reads[0] in live and "rowid" not in reads[0], reads
