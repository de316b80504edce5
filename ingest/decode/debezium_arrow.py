"""The Debezium decoder's vectorized path: schemaless JSON change events read in bulk
with Arrow's JSON reader (as the ``json`` format's ``VectorReader`` reads plain values).

A chunk of values is newline-joined and read against ``{before, after: <the table's row
type>, op}``; every create, snapshot read and update (``op`` c, r, u with an ``after``
object) becomes an upsert row through the same per-column conversion the JSON format's
vectorized path uses, and every delete with a ``before`` object a delete row of its
identifier columns. Everything else goes back to the per-event path, which keeps its
exact behaviour and dead letters: tombstones, deletes without a usable ``before`` key
(the per-event path then reads the Kafka key), truncate and message events,
malformed or non-object values, schema-wrapped events (``{"schema", "payload"}``: their
Connect annotations need the per-event path), rows a column conversion refuses, and any
record with fields the table does not have (the per-event path reports them for schema
evolution). A chunk Arrow cannot read, or one holding such fields, is split in halves,
down to a few records, so one odd value does not send thousands of records the slow way.

The decoder uses this path only for JSON values, without ``case_insensitive``, for tables
without decimal columns (Debezium's ``precise`` decimals are base64 bytes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from calving.ingest.decode.batch import (
    OP_DELETE,
    OP_UPSERT,
    BatchAssembler,
    KafkaBatch,
    RowConverter,
)
from calving.ingest.decode.coerce import TimeUnit
from calving.ingest.decode.json_values import (
    VectorReader,
    candidate_mask,
    collect_unknown,
    epoch_target,
    newline_joined,
    nonfinite_rows,
    read_json_buffer,
    to_target,
)

CHUNK_RECORDS = 16384
MIN_BISECT = 8
UPSERT_OPS = pa.array(["c", "r", "u"])


@dataclass(frozen=True)
class EnvelopeSource:
    """Where a reader's values come from: ``rows[i]`` is the batch row of value ``i``;
    ``units``: columns whose integers are epoch values of a known unit (from the
    events' Connect schema), by name."""

    rows: np.ndarray
    units: Mapping[str, TimeUnit]


class DebeziumVectorReader:
    def __init__(self, converter: RowConverter) -> None:
        self.rows = VectorReader(converter)
        self.supported = self.rows.supported
        if not self.supported:
            return
        as_text = pa.struct(list(self.rows.reader_schema))
        # Debezium writes dates, times and zone-less timestamps as epoch integers (unless
        # told otherwise): a second reading reads those as int64 (converted by ``coerce``,
        # per value); zoned timestamps stay ISO strings.
        as_ints = pa.struct(
            [
                pa.field(f.name, pa.int64()) if _temporal(target.type) else f
                for f, target in zip(self.rows.reader_schema, self.rows.target)
            ]
        )
        self.row_types = [as_text] if as_ints == as_text else [as_text, as_ints]
        self.row_type = as_text
        #: Which reading worked last (tried first next time).
        self.preferred = 0
        #: Records this reader decoded (the rest went to the per-event path).
        self.decoded = 0

    def read(self, batch: KafkaBatch, out: BatchAssembler) -> np.ndarray:
        """Decodes the plain create/read/update events into ``out``; returns the batch
        rows left for the per-event path, in order."""
        return self.read_values(
            batch.value_array, EnvelopeSource(np.arange(batch.num_rows), {}), out
        )

    def read_values(
        self, values: pa.Array, source: EnvelopeSource, out: BatchAssembler
    ) -> np.ndarray:
        """``read`` for envelopes that are not the batch's values as they are (the
        payloads of schema-wrapped events): ``values[i]`` is batch row ``source.rows[i]``.
        Returns the batch rows left for the per-event path, in order."""
        mask = candidate_mask(values)
        candidates = np.flatnonzero(mask)
        leftover: list[np.ndarray] = [np.flatnonzero(~mask)]
        for start in range(0, len(candidates), CHUNK_RECORDS):
            chunk = candidates[start : start + CHUNK_RECORDS]
            leftover += self._chunk(values, chunk, out, source)
        return np.sort(source.rows[np.concatenate(leftover)])

    def _chunk(
        self, values: pa.Array, idx: np.ndarray, out: BatchAssembler, source: EnvelopeSource
    ) -> list[np.ndarray]:
        if len(idx) <= MIN_BISECT:
            return [idx]
        table, kinds = self._read(newline_joined(values.take(pa.array(idx))), len(idx))
        if table is None or kinds is None:  # unreadable, or fields the table lacks
            half = len(idx) // 2
            return self._chunk(values, idx[:half], out, source) + self._chunk(
                values, idx[half:], out, source
            )
        upserts, deletes = kinds
        done = [
            self._add(out, idx, table, "after", upserts, source),
            self._add(out, idx, table, "before", deletes, source),
        ]
        taken = np.concatenate(done)
        self.decoded += len(taken)
        return [np.setdiff1d(idx, taken, assume_unique=True)]

    def _read(
        self, text: pa.Buffer, n: int
    ) -> tuple[pa.Table | None, tuple[np.ndarray, np.ndarray] | None]:
        """The chunk read with temporal columns as text, or as epoch integers (the
        reading that worked last first); the table and its upsert / delete masks."""
        order = [self.preferred] + [k for k in range(len(self.row_types)) if k != self.preferred]
        for k in order:
            row = self.row_types[k]
            schema = pa.schema([("before", row), ("after", row), ("op", pa.string())])
            table = read_json_buffer(text, schema, "infer")
            if table is not None and table.num_rows == n:
                self.preferred = k
                events = self._events(table, row)
                if events is None:
                    return table, None
                # A non-finite float anywhere in the event: the per-event path decides.
                finite = ~nonfinite_rows(table)
                return table, (events[0] & finite, events[1] & finite)
        return None, None

    def _add(
        self, out: BatchAssembler, idx: np.ndarray, table: pa.Table, image: str,
        which: np.ndarray, source: EnvelopeSource,
    ) -> np.ndarray:  # fmt: skip
        """Rows of ``image`` (after: upserts, before: deletes' keys) for the chosen events;
        the positions added (the others stay for the per-event path)."""
        chosen = np.flatnonzero(which)
        if len(chosen) == 0:
            return np.zeros(0, np.int64)
        struct = table.column(image).combine_chunks().take(pa.array(chosen))
        op = OP_UPSERT if image == "after" else OP_DELETE
        if op == OP_UPSERT:
            rows = pa.Table.from_arrays(
                [struct.field(f.name) for f in self.row_type], names=[f.name for f in self.row_type]
            )
            columns, bad = self.rows.finish(rows, source.units)
        else:
            columns, bad = self._keys(struct, source.units)
        good = ~bad
        keep = pa.array(good)
        done: np.ndarray = idx[chosen[good]]  # bad came from pyarrow (Any): an int64 array
        out.add_arrow_rows(source.rows[done], [c.filter(keep) for c in columns], op)
        return done

    def _keys(
        self, before: pa.StructArray, units: Mapping[str, TimeUnit]
    ) -> tuple[list[pa.Array], np.ndarray]:
        """A delete row per event: the identifier columns from ``before`` (converted as
        the upsert columns are), the other columns null. A missing or unconvertible key
        leaves the event to the per-event path (which then tries the Kafka key)."""
        converter = self.rows.converter
        keys = set(converter.key_names)
        options = converter.options
        bad = np.zeros(len(before), dtype=bool)
        columns = []
        for field, ice in zip(self.rows.target, converter.schema.fields):
            if field.name not in keys:
                columns.append(pa.nulls(len(before), field.type))
                continue
            col = before.field(field.name)
            unit = units.get(field.name)
            if unit is not None:
                arr = epoch_target(col, field.type, ice.field_type, options, unit, bad)
            else:
                arr = to_target(col, field.type, ice.field_type, options, bad)
            bad |= arr.is_null().to_numpy(zero_copy_only=False)
            columns.append(arr)
        return columns, bad

    def _events(
        self, table: pa.Table, row_type: pa.StructType
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Which rows are plain c/r/u events with an ``after`` object, and which are
        deletes with a ``before`` object; None if an ``after`` holds fields the table
        does not have (the per-event path names them)."""
        after_type = table.schema.field("after").type
        if not pa.types.is_struct(after_type):
            return None
        unknown: dict[str, set[str]] = {}
        collect_unknown(after_type, row_type, "", unknown)
        if unknown:
            return None
        op = table.column("op")
        upsert = pc.and_(
            pc.is_in(op, value_set=UPSERT_OPS).fill_null(False), table.column("after").is_valid()
        )
        delete = pc.and_(pc.equal(op, "d").fill_null(False), table.column("before").is_valid())
        if not pa.types.is_struct(table.schema.field("before").type):
            delete = pc.and_(delete, False)
        names = set(table.column_names)
        if {"schema", "payload"} <= names:  # a wrapped event: its payload is the envelope
            wrapped = pc.and_(table.column("schema").is_valid(), table.column("payload").is_valid())
            upsert = pc.and_(upsert, pc.invert(wrapped))
            delete = pc.and_(delete, pc.invert(wrapped))
        return as_mask(upsert), as_mask(delete)


def as_mask(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A boolean Arrow array (no nulls) as a numpy mask."""
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)


def _temporal(t: pa.DataType) -> bool:
    """Columns Debezium writes as epoch integers (dates, times, zone-less timestamps);
    zoned ones (``ZonedTimestamp``) are ISO strings."""
    return pa.types.is_date(t) or pa.types.is_time(t) or (pa.types.is_timestamp(t) and t.tz is None)
