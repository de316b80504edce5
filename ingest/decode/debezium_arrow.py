"""The Debezium decoder's vectorized path: schemaless JSON change events read in bulk
with Arrow's JSON reader (as the ``json`` format's ``VectorReader`` reads plain values).

A chunk of values is newline-joined and read against ``{before, after: <the table's row
type>, op}``; every create, snapshot read and update (``op`` c, r, u with an ``after``
object) becomes an upsert row through the same per-column conversion the JSON format's
vectorized path uses. Everything else goes back to the per-event path, which keeps its
exact behaviour and dead letters: tombstones, deletes, truncate and message events,
malformed or non-object values, schema-wrapped events (``{"schema", "payload"}``: their
Connect annotations need the per-event path), rows a column conversion refuses, and any
record with fields the table does not have (the per-event path reports them for schema
evolution). A chunk Arrow cannot read, or one holding such fields, is split in halves,
down to a few records, so one odd value does not send thousands of records the slow way.

The decoder uses this path only for JSON values, without ``case_insensitive``, for tables
without decimal columns (Debezium's ``precise`` decimals are base64 bytes).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.ingest.decode.batch import BatchAssembler, KafkaBatch, RowConverter
from calving.ingest.decode.json_values import (
    VectorReader,
    candidate_mask,
    collect_unknown,
    newline_joined,
    read_json_buffer,
)

CHUNK_RECORDS = 16384
MIN_BISECT = 8
UPSERT_OPS = pa.array(["c", "r", "u"])


class DebeziumVectorReader:
    def __init__(self, converter: RowConverter) -> None:
        self.rows = VectorReader(converter)
        self.supported = self.rows.supported
        if not self.supported:
            return
        self.row_type = pa.struct(list(self.rows.reader_schema))
        self.reader_schema = pa.schema(
            [("before", self.row_type), ("after", self.row_type), ("op", pa.string())]
        )
        #: Records this reader decoded (the rest went to the per-event path).
        self.decoded = 0

    def read(self, batch: KafkaBatch, out: BatchAssembler) -> np.ndarray:
        """Decodes the plain create/read/update events into ``out``; returns the batch
        rows left for the per-event path, in order."""
        values = batch.value_array
        mask = candidate_mask(values)
        candidates = np.flatnonzero(mask)
        leftover: list[np.ndarray] = [np.flatnonzero(~mask)]
        for start in range(0, len(candidates), CHUNK_RECORDS):
            leftover += self._chunk(values, candidates[start : start + CHUNK_RECORDS], out)
        return np.sort(np.concatenate(leftover))

    def _chunk(self, values: pa.Array, idx: np.ndarray, out: BatchAssembler) -> list[np.ndarray]:
        if len(idx) <= MIN_BISECT:
            return [idx]
        text = newline_joined(values.take(pa.array(idx)))
        table = read_json_buffer(text, self.reader_schema, "infer")
        upserts = None if table is None or table.num_rows != len(idx) else self._upserts(table)
        if table is None or upserts is None:  # unreadable, or fields the table lacks
            half = len(idx) // 2
            return self._chunk(values, idx[:half], out) + self._chunk(values, idx[half:], out)
        if not upserts.any():
            return [idx]
        chosen = np.flatnonzero(upserts)
        after = table.column("after").combine_chunks().take(pa.array(chosen))
        rows = pa.Table.from_arrays(
            [after.field(f.name) for f in self.row_type], names=[f.name for f in self.row_type]
        )
        columns, bad = self.rows.finish(rows)
        good = ~bad
        keep = pa.array(good)
        done = idx[chosen[good]]
        out.add_arrow_rows(done, [c.filter(keep) for c in columns])
        self.decoded += len(done)
        return [np.setdiff1d(idx, done, assume_unique=True)]

    def _upserts(self, table: pa.Table) -> np.ndarray | None:
        """Which rows are plain c/r/u events with an ``after`` object; None if the chunk
        holds fields the table does not have (the per-event path names them)."""
        after_type = table.schema.field("after").type
        if not pa.types.is_struct(after_type):
            return None
        unknown: dict[str, set[str]] = {}
        collect_unknown(after_type, self.row_type, "", unknown)
        if unknown:
            return None
        upsert = pc.and_(
            pc.is_in(table.column("op"), value_set=UPSERT_OPS).fill_null(False),
            table.column("after").is_valid(),
        )
        names = set(table.column_names)
        if {"schema", "payload"} <= names:  # a wrapped event: its payload is the envelope
            wrapped = pc.and_(table.column("schema").is_valid(), table.column("payload").is_valid())
            upsert = pc.and_(upsert, pc.invert(wrapped))
        return np.asarray(upsert.to_numpy(zero_copy_only=False), dtype=bool)
