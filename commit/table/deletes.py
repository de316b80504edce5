"""Planning an attempt's row deletes and file removals against the base snapshot.

Requested deletes are unioned with each data file's current deletion vector (one DV
per data file: the old DV's entry goes, the union replaces it); removed data files take
their DVs with them. A live data file all of whose rows end up deleted is removed
instead of getting a DV (as Trino does): no dead weight for readers to open and
filter, nothing for maintenance to rewrite. A file added by the same commit keeps its
DV (the writer's row bookkeeping, e.g. the primary-key index, already names it). Nothing is written here: the plan says which DVs to write and which
base entries the carried manifests must drop.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroaring import BitMap64

from calving.commit.errors import CommitConflictError
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.table.changes import SnapshotChanges
from calving.commit.table.scan import LiveFiles
from calving.commit.table.summary import SummaryCounters


@dataclass(frozen=True)
class DeletePlan:
    # (target data file, every position now deleted in it), in data file path order.
    new_dvs: tuple[tuple[DataFile, BitMap64], ...] = ()
    # Data file paths whose current DV entry the new snapshot drops.
    replaced_dv_paths: frozenset[str] = frozenset()
    # Data file paths the new snapshot drops.
    removed_data: frozenset[str] = frozenset()


def needs_live_files(changes: SnapshotChanges) -> bool:
    return bool(changes.removed_data_files or changes.deletes)


def plan_deletes(
    io: FileIO, live: LiveFiles | None, changes: SnapshotChanges, counters: SummaryCounters
) -> DeletePlan:
    """The DVs to write and the entries to drop; counts the removals in ``counters``.

    ``live`` is the base snapshot's live files (``None`` when ``changes`` neither
    deletes nor removes anything). Raises ``CommitConflictError`` naming the file when
    a delete or removal targets a file that is not live, or a position past its end."""
    removed_data = frozenset(changes.removed_data_files)
    if live is None:
        return DeletePlan(removed_data=removed_data)
    added_by_path = {f.file_path: f for f in changes.added_data_files}
    replaced_dv_paths: set[str] = set()
    new_dvs: list[tuple[DataFile, BitMap64]] = []
    emptied: set[str] = set()
    for path in sorted(changes.deletes):
        positions = changes.deletes[path]
        if len(positions) == 0 or path in removed_data:
            continue
        target = added_by_path.get(path)
        if target is None:
            live_entry = live.data.get(path)
            if live_entry is None:
                raise CommitConflictError(
                    f"cannot delete rows of {path}: it is not a live data file"
                )
            target = live_entry.data_file
        merged = BitMap64(positions)
        if path in live.dvs:
            old = live.positions_deleted(io, path)
            if len(merged - old) == 0:
                continue  # nothing new for this file
            merged |= old
            replaced_dv_paths.add(path)
            counters.removed_dv(live.dvs[path].data_file)
        if merged.max() >= target.record_count:
            raise CommitConflictError(
                f"deletion vector for {path} has position {merged.max()} but the file "
                f"has {target.record_count} rows"
            )
        if path not in added_by_path and len(merged) == target.record_count:
            # Every row of the file is deleted: the file goes (a DELETED entry, its old
            # DV with it) instead of getting a DV that hides all of it.
            emptied.add(path)
            counters.removed_data(target)
            continue
        new_dvs.append((target, merged))
    for path in sorted(removed_data):
        if path in live.dvs:
            replaced_dv_paths.add(path)
            counters.removed_dv(live.dvs[path].data_file)
        removed_entry = live.data.get(path)
        if removed_entry is None:
            raise CommitConflictError(f"cannot remove {path}: it is not a live data file")
        counters.removed_data(removed_entry.data_file)
    return DeletePlan(tuple(new_dvs), frozenset(replaced_dv_paths), removed_data | emptied)
