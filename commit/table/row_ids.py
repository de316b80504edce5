"""The ``_row_id`` of live rows, by (data file, position): what an update stores so the
row it replaces keeps its identity (v3 row lineage through updates).

A row's ``_row_id`` is the value its data file stores in the reserved ``_row_id`` column
(``calving.commit.spec.row_lineage``) when non-null, else the file's ``first_row_id``
(inherited from its manifest) plus its position. ``RowIdReader`` answers that for the
positions the primary-key index found: a file's ``first_row_id`` comes from the table's
manifests and its stored column from its Parquet file; both never change once the file
is committed, so both are cached by path (the stored columns within a row budget),
for as long as the file is live.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from calving.commit.errors import CorruptFileError, FileIOError, FileNotFoundInTableError
from calving.commit.io import FileIO
from calving.commit.spec import row_lineage as rl
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan
from calving.commit.table.data_files import top_level_field_ids

#: A row whose ``_row_id`` is unknown (a file without ``first_row_id`` storing none).
UNKNOWN = -1


class RowIdReader:
    """Resolves positions of live data files to their rows' ``_row_id`` (``UNKNOWN``
    where the table assigns none). Caches per path; ``max_cached_rows`` bounds the
    stored ``_row_id`` values kept (least recently used files go first)."""

    def __init__(self, io: FileIO, *, max_cached_rows: int = 1 << 24) -> None:
        self.io = io
        self.max_cached_rows = max_cached_rows
        self._first: dict[str, int | None] = {}
        self._stored: OrderedDict[str, np.ndarray | None] = OrderedDict()
        self._stored_rows = 0

    @property
    def cached_files(self) -> frozenset[str]:
        """The data files something is cached for."""
        return frozenset(self._first) | frozenset(self._stored)

    def row_ids(
        self, metadata: TableMetadata, positions: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """For each live data file path, the ``_row_id`` (int64) of each position."""
        missing = [p for p in positions if p not in self._first]
        if missing:
            self._learn_first_row_ids(metadata, missing)
        out: dict[str, np.ndarray] = {}
        for path, pos in positions.items():
            pos = np.asarray(pos, np.int64)
            first = self._first.get(path)
            ids = pos + first if first is not None else np.full(len(pos), UNKNOWN, np.int64)
            stored = self._stored_column(path)
            if stored is not None and len(pos):
                values = stored[pos]
                ids = np.where(values != UNKNOWN, values, ids)
            out[path] = ids
        return out

    def _learn_first_row_ids(self, metadata: TableMetadata, paths: list[str]) -> None:
        live = scan.live_files(self.io, metadata, metadata.current_snapshot)
        for path in paths:
            entry = live.data.get(path)
            if entry is None:
                raise FileNotFoundInTableError(path)
            self._first[path] = entry.data_file.first_row_id
        self._forget_all_but(live.data)

    def _forget_all_but(self, live: Mapping[str, object]) -> None:
        """Forget the files that are no longer live: the index only points at live rows,
        so they are never asked for again, and a stream whose files maintenance rewrites
        would otherwise keep every file it ever read (each stored column's Arrow buffer
        with it) until the row budget filled."""
        for path in [p for p in self._first if p not in live]:
            del self._first[path]
        for path in [p for p in self._stored if p not in live]:
            values = self._stored.pop(path)
            self._stored_rows -= 0 if values is None else len(values)

    def remember_stored(self, path: str, values: np.ndarray) -> None:
        """Cache ``values`` as the ``_row_id`` column stored in the data file ``path``
        (``UNKNOWN`` for nulls): for a file the caller has just written, so a later
        update of its rows need not read it back. A file that is never committed is
        never asked for, and is forgotten with the files that left the table."""
        self._cache(path, np.asarray(values, np.int64))

    def _stored_column(self, path: str) -> np.ndarray | None:
        if path in self._stored:
            self._stored.move_to_end(path)
            return self._stored[path]
        values = read_stored_row_ids(self.io, path)
        self._cache(path, values)
        return values

    def _cache(self, path: str, values: np.ndarray | None) -> None:
        previous = self._stored.pop(path, None)
        self._stored_rows -= 0 if previous is None else len(previous)
        self._stored[path] = values
        self._stored_rows += 0 if values is None else len(values)
        while self._stored_rows > self.max_cached_rows and len(self._stored) > 1:
            _, dropped = self._stored.popitem(last=False)
            self._stored_rows -= 0 if dropped is None else len(dropped)


def read_stored_row_ids(io: FileIO, location: str) -> np.ndarray | None:
    """A data file's stored ``_row_id`` column (int64, ``UNKNOWN`` for nulls), or None
    when the file has no such column (only its footer is read then)."""
    fs, path = io.resolve(location)
    try:
        with fs.open_input_file(path) as f:
            parquet = pq.ParquetFile(f)
            name = top_level_field_ids(parquet.schema_arrow).get(rl.ROW_ID_FIELD_ID)
            if name is None:
                return None
            column = parquet.read(columns=[name], use_threads=False).column(0)
    except FileNotFoundError:
        raise FileNotFoundInTableError(location) from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise CorruptFileError(location, f"cannot read its _row_id column: {err}") from None
    except (OSError, pa.ArrowException) as err:
        raise FileIOError(f"{location}: reading its _row_id column failed: {err}") from err
    values = column.cast(pa.int64()).fill_null(UNKNOWN)
    return np.asarray(values.to_numpy(), np.int64)
