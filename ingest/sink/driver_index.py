"""The driver-resident primary-key index through a stream's batches: opened or caught
up before a batch (``current_index``), moved on after its commit (``advance_index``),
saved with the table (``save_index``), and the rebase step a commit takes when a
concurrent rewrite removed files its deletes aimed at (``Rebase``). Sharded mode's
counterpart is ``calving.commit.index.sharded``."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from pyroaring import BitMap64

from calving.commit import index as pk
from calving.commit.errors import CalvingError, FileNotFoundInTableError
from calving.commit.index.shard_chain import merge_chains
from calving.commit.index.sharded import names_shards
from calving.commit.index.shards import read_manifest
from calving.commit.index.store import Rebuild
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.committer import Committed, Conflicted, Skipped
from calving.commit.table.table import Table

log = logging.getLogger("calving.coordinator")


@dataclass(frozen=True)
class IndexState:
    """The coordinator's primary-key index, as a value each step takes and returns.

    ``index`` reflects the table at ``index.snapshot_id`` (None: not opened yet);
    ``unsaved_commits`` counts our commits applied since it was last saved with the table.
    The index object itself is updated in place by ``advance_index`` (it is large);
    the state returned is the one to use next.
    """

    index: pk.PrimaryKeyIndex | None = None
    unsaved_commits: int = 0


def current_index(
    io: FileIO, state: IndexState, metadata: TableMetadata, rebuild: Rebuild | None = None
) -> IndexState:
    """The index at ``metadata``'s current snapshot: opened (a full rebuild by
    ``rebuild`` when given), or caught up. A table whose index was sharded has its
    shards merged and caught up (the switch back to driver mode)."""
    if state.index is None and names_shards(metadata):
        location = metadata.properties[pk.INDEX_LOCATION_PROPERTY]
        try:
            merged = merge_chains(io, read_manifest(io, location))
        except (pk.UnreadableIndexError, FileNotFoundInTableError) as err:
            log.warning("index shards not used, rebuilding the index: %s", err)
        else:
            log.info("primary-key index: the shards of %s merged into the driver", location)
            return replace(state, index=pk.catch_up(io, merged, metadata, rebuild=rebuild))
    if state.index is None:
        return replace(state, index=pk.open_index(io, metadata, rebuild=rebuild))
    if state.index.snapshot_id != metadata.current_snapshot_id:
        return replace(state, index=pk.catch_up(io, state.index, metadata, rebuild=rebuild))
    return state


class Rebase:
    """``RowDelta``'s rebase step for one batch: deletes aimed at files a concurrent
    rewrite removed are found again in the rewritten table. The index it rebuilt for
    that (``rebuilt``) is the commit's output, for ``advance_index``."""

    def __init__(self, io: FileIO, key_field_ids: tuple[int, ...], keys: pa.Table | None) -> None:
        self.io = io
        self.key_field_ids = key_field_ids
        self.keys = keys
        self.rebuilt: pk.PrimaryKeyIndex | None = None

    def __call__(self, base: TableMetadata, gone: Mapping[str, BitMap64]) -> dict[str, BitMap64]:
        """Positions already requested are unioned, so returning every live match of
        the batch's keys is exact and idempotent."""
        self.rebuilt = pk.build_from_table(self.io, base, self.key_field_ids)
        pk.count_full_rebuild()
        log.info("rebuilt the primary-key index after a rewrite of %d file(s)", len(gone))
        if self.keys is None:
            return {}
        return self.rebuilt.lookup(self.keys).deletes()


def advance_index(
    io: FileIO,
    state: IndexState,
    files: Sequence[tuple[DataFile, pa.Table | None]],
    deletes: Mapping[str, BitMap64],
    metadata: TableMetadata,
    rebuilt: pk.PrimaryKeyIndex | None,
    removed: frozenset[str] | None = None,
    rebuild: Rebuild | None = None,
) -> IndexState:
    """The index after our commit (``metadata``): applied in memory when the commit sits
    right on the index's snapshot; otherwise (other writers committed in between, or a
    rebase rebuilt it) caught up from the table. ``removed``: the data files the commit
    dropped, all of whose rows it deleted (the plan decided on the merged deletion
    vectors; ``Committed.removed_data_files``), None if not known."""
    index = rebuilt or state.index
    assert index is not None
    snapshot = metadata.current_snapshot
    unsaved = state.unsaved_commits + 1
    if (
        rebuilt is not None
        or snapshot is None
        or snapshot.parent_snapshot_id != index.snapshot_id
        or not _knows_removed(snapshot.summary, removed, index)
    ):
        # Caught up from the table: others committed in between, a rebase rebuilt the
        # index, or the files the commit removed are not known.
        return IndexState(pk.catch_up(io, index, metadata, rebuild=rebuild), unsaved)
    assert removed is not None
    for path, positions in deletes.items():
        if path not in removed:
            index.delete_positions(path, positions)
    for path in removed:
        index.remove_file(path)
    for f, keys in files:
        if keys is not None:
            index.add_file(f.file_path, keys, row_count=f.record_count)
    index.snapshot_id = snapshot.snapshot_id
    return IndexState(index, unsaved)


def _knows_removed(
    summary: Mapping[str, str], removed: frozenset[str] | None, index: pk.PrimaryKeyIndex
) -> bool:
    """Whether ``removed`` is exactly the indexed files the snapshot removed: as many as
    its summary counts, each of them indexed."""
    try:
        count = int(summary.get("removed-data-files", "0"))
    except ValueError:
        return False  # unreadable: the catch-up finds out
    if removed is None:
        return count == 0
    return len(removed) == count and all(index.has_file(p) for p in removed)


@dataclass(frozen=True)
class IndexSave:
    """An index save under way: the metadata-only commit that names the saved index in
    its table, and the index file written for it (None in sharded mode, whose tasks
    wrote the files) with the one it replaces."""

    action: UpdateProperties
    location: str | None = None
    previous: str | None = None


def write_index(table: Table, state: IndexState) -> IndexSave | None:
    """Write the index to a new file and return the commit that names it (None: nothing
    to save, or the table moved on)."""
    index = state.index
    if index is None or index.snapshot_id is None:
        return None
    if index.snapshot_id != table.metadata.current_snapshot_id:
        return None  # someone committed since; the next batch catches up first
    previous = table.metadata.properties.get(pk.INDEX_LOCATION_PROPERTY)
    location = pk.save(table.io, index, table.metadata.location)
    return IndexSave(UpdateProperties({pk.INDEX_LOCATION_PROPERTY: location}), location, previous)


def index_saved(
    table: Table, state: IndexState, save: IndexSave, outcome: object, since: int = 0
) -> IndexState:
    """After ``save``'s commit: the old index file goes once the table no longer names
    it; a refused save's own file goes. Returns the new state, ``since`` of our commits
    not in the saved index (1 when the save rode on a batch commit)."""
    if save.location is None:
        return state
    if isinstance(outcome, Committed | Skipped):
        state = replace(state, unsaved_commits=since)
        if save.previous and save.previous != save.location:
            _delete_quietly(table, save.previous)
    elif isinstance(outcome, Conflicted):
        _delete_quietly(table, save.location)
    return state


def discard_index_file(table: Table, save: IndexSave) -> None:
    """Delete the index file ``save`` wrote, for a save whose commit was never made."""
    if save.location is not None:
        _delete_quietly(table, save.location)


def save_index(table: Table, state: IndexState) -> tuple[IndexState, str | None]:
    """Write the index and point the table at it (a metadata-only commit). An old
    index file stays until the property no longer names it, then goes. Returns the new
    state and the file written (None: nothing to save, or the table moved on)."""
    save = write_index(table, state)
    if save is None:
        return state, None
    return index_saved(table, state, save, table.commit(save.action)), save.location


def _delete_quietly(table: Table, location: str) -> None:
    try:
        table.io.delete(location)
    except CalvingError as err:  # an orphan index file is harmless
        log.warning("could not delete %s: %s", location, err)
