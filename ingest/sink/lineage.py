"""Row lineage through updates, on the driver: a batch's upserts of keys the table holds
keep the ``_row_id`` of the rows they replace.

The primary-key index lookup that finds the rows a batch deletes also says, for every
upserted key the table holds, where its old row is; ``RowIdReader`` turns that (file,
position) into the old row's ``_row_id``. Each new data file holding such updates is
copied with the ids appended as columns (``calving.ingest.write.row_ids``); the rows of
keys the batch deleted before upserting them again (``renewed_keys``) are new rows and
store none, as are inserts. A key with several live rows (a table other tools wrote)
keeps the id of the first one the index returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from calving.commit import index as pk
from calving.commit.io import FileIO
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.sorted_sets import distinct_ids
from calving.commit.table.row_ids import UNKNOWN, RowIdReader
from calving.commit.thread_pools import shared_pool
from calving.ingest.write.row_ids import store_row_ids

if TYPE_CHECKING:
    from calving.ingest.sink.coordinator import ParsedMessages

#: Files copied at once (a batch's files, one per task and partition).
COPY_THREADS = 4


def keep_row_ids(
    io: FileIO,
    metadata: TableMetadata,
    parsed: ParsedMessages,
    keys: pa.Table,
    matches: pk.Matches,
    reader: RowIdReader,
) -> ParsedMessages:
    """``parsed`` with every new data file that updates live rows replaced by a copy
    storing their old ``_row_id`` (copied in parallel). ``keys`` are the batch's touched keys (the files'
    keys first, in file order, then the deleted keys) and ``matches`` their lookup."""
    offsets = _file_offsets(parsed.files)
    file_rows = offsets[-1]
    rows, old_files, old_positions = _first_match_per_key(matches, file_rows)
    if not len(rows):
        return parsed
    fresh = _renewed(keys, rows, parsed.renewed_keys)
    rows, old_files, old_positions = rows[~fresh], old_files[~fresh], old_positions[~fresh]
    ids = _old_row_ids(metadata, matches, old_files, old_positions, reader)
    known = ids != UNKNOWN
    rows, ids = rows[known], ids[known]
    if not len(rows):
        return parsed
    which = np.searchsorted(offsets, rows, side="right") - 1  # the file of each row
    files = list(parsed.files)
    jobs: dict[int, tuple[DataFile, np.ndarray]] = {}
    for j in (int(j) for j in distinct_ids(which)):
        f = files[j][0]
        here = which == j
        stored = np.full(f.record_count, UNKNOWN, np.int64)
        stored[rows[here] - offsets[j]] = ids[here]
        jobs[j] = (f, stored)

    def copy(job: tuple[DataFile, np.ndarray]) -> DataFile:
        return store_row_ids(io, metadata.schema, *job)

    if len(jobs) == 1:
        copies = [copy(job) for job in jobs.values()]
    else:
        pool = shared_pool("calving-lineage", COPY_THREADS)
        copies = list(pool.map(copy, jobs.values()))  # file I/O releases the GIL
    for j, copied in zip(jobs, copies):
        files[j] = (copied, files[j][1])
        reader.remember_stored(copied.file_path, jobs[j][1])  # the next update reads it
    return replace(parsed, files=files)


def _file_offsets(files: Sequence[tuple[DataFile, pa.Table | None]]) -> np.ndarray:
    """Where each file's keys start among the touched keys (the last: their end)."""
    sizes = [0 if k is None or not k.num_rows else k.num_rows for _, k in files]
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


def _first_match_per_key(
    matches: pk.Matches, file_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(key row, old file id, old position) of the first live match of each upserted
    key (key rows below ``file_rows``; matches are in key order)."""
    upserted = matches.key_rows < file_rows
    key_rows = matches.key_rows[upserted]
    rows, first = np.unique(key_rows, return_index=True)
    file_ids = matches.file_ids[upserted][first]
    positions = matches.positions[upserted][first]
    return rows.astype(np.int64), file_ids, positions.astype(np.int64)


def _renewed(keys: pa.Table, rows: np.ndarray, renewed: Sequence[pa.Table]) -> np.ndarray:
    """Which of ``rows`` (of ``keys``) the batch deleted before upserting them again."""
    out = np.zeros(len(rows), bool)
    if not renewed:
        return out
    gone = {tuple(r.values()) for t in renewed for r in t.to_pylist()}
    candidates = keys.take(pa.array(rows, pa.int64())).to_pylist()
    for i, r in enumerate(candidates):
        out[i] = tuple(r.values()) in gone
    return out


def _old_row_ids(
    metadata: TableMetadata,
    matches: pk.Matches,
    file_ids: np.ndarray,
    positions: np.ndarray,
    reader: RowIdReader,
) -> np.ndarray:
    """The ``_row_id`` at each (old file id, position)."""
    out = np.full(len(file_ids), UNKNOWN, np.int64)
    groups = {int(fid): np.flatnonzero(file_ids == fid) for fid in distinct_ids(file_ids)}
    by_path = {matches.file_path(fid): positions[at] for fid, at in groups.items()}
    resolved = reader.row_ids(metadata, by_path)
    for fid, at in groups.items():
        out[at] = resolved[matches.file_path(fid)]
    return out
