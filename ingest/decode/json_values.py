"""JSON record values -> table rows.

Each value must be one UTF-8 JSON object; its fields are matched to the table's columns
by name (case-sensitive unless ``case_insensitive``), unknown fields are reported, and
values are converted by ``coerce`` rules (lossless only; binary columns take base64).

Two paths with the same results:

* Vectorized: values that are plainly one-line objects of bounded nesting are joined
  with newlines and read by ``pyarrow.json.read_json`` against the table schema (temporal,
  binary and uuid columns read as strings and finished by the same ``coerce`` functions
  the per-record path uses). A chunk Arrow refuses is split in halves until the bad
  records are isolated; rows Arrow accepts but that break a rule (a null in a required
  field, a string that is not a valid timestamp) go to the per-record path.
* Per record: ``json.loads`` + ``RowConverter``; the source of truth for every error.

Measured on this project's 2-core machine (100k records of ~105 bytes with a long, a
string, a double, a boolean and a timestamptz; best of 3): vectorized ~625k records/s,
per record ~110k records/s; with one bad record among the 100k, ~400k records/s.
The vectorized path is skipped for schemas with map columns (Arrow's JSON reader cannot
read objects into maps) and with ``case_insensitive`` (Arrow matches names exactly).
Shared by both paths: a value that is not valid UTF-8 is a dead letter (Arrow's reader
does not check strings, so such values never take the vectorized path); non-finite
numbers follow ``parse_json``'s rule (a record Arrow read with a non-finite float
anywhere, in a column or in a field the table lacks, goes per record, which decides);
a duplicated key keeps its last value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from calving.commit.spec.schema import Schema
from calving.commit.spec.types import IcebergType, ListType, StructType
from calving.ingest.decode.batch import (
    OP_UPSERT,
    BatchAssembler,
    DecodedBatch,
    KafkaBatch,
    MalformedRecordError,
    NullValueError,
    Reject,
    RowConverter,
)
from calving.ingest.decode.coerce import (
    CoercionError,
    CoercionOptions,
    EpochTime,
    EpochUnit,
    JsonFraction,
    TimeUnit,
    json_type_name,
    primitive_converter,
)

# Arrow's JSON reader recurses per nesting level (a 20k-deep value crashes the process)
# and Python's json refuses about 1000 levels, so only values that are short (depth <=
# length) or have few brackets take the vectorized path: both paths then agree.
_ALWAYS_SHALLOW_BYTES = 512
_MAX_BRACKETS = 512
_MAX_VECTOR_VALUE_BYTES = 256 * 1024
_CHUNK_RECORDS = 16384
_MIN_BISECT = 8


@dataclass(frozen=True)
class JsonOptions:
    case_insensitive: bool = False
    epoch_unit: EpochUnit | None = None
    naive_timestamps_as_utc: bool = False
    vectorized: bool = True

    def coercion(self) -> CoercionOptions:
        return CoercionOptions(
            case_insensitive=self.case_insensitive,
            epoch_unit=self.epoch_unit,
            naive_timestamps_as_utc=self.naive_timestamps_as_utc,
        )


def _reject_constant(name: str) -> Any:
    raise Reject(MalformedRecordError, f"non-finite number {name} (not JSON; see format rules)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise Reject(MalformedRecordError, f"number {_short(text)} is beyond the double range")
    return value


def _finite_fraction(text: str) -> JsonFraction:
    _finite_float(text)
    return JsonFraction(text)


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def parse_json_object(raw: bytes, exact_decimals: bool = False) -> dict[str, Any]:
    """One record's bytes -> a dict, or ``Reject(MalformedRecordError)``.

    ``exact_decimals`` reads JSON fractions as ``Decimal`` so decimal columns get the
    exact digits written (double columns convert them with ``float``).
    """
    value = parse_json(raw, exact_decimals)
    if not isinstance(value, dict):
        raise Reject(MalformedRecordError, f"expected a JSON object, got {json_type_name(value)}")
    return value


def parse_json(raw: bytes, exact_decimals: bool = False) -> Any:
    """One record's bytes -> its JSON value, or ``Reject(MalformedRecordError)``.

    The rule for numbers that are not finite doubles (the same for every column type,
    and for fields the table does not have): the literals ``NaN``, ``Infinity`` and
    ``-Infinity`` (not JSON) and numbers beyond the double range (``1e400``) make the
    record a dead letter; a number that underflows (``1e-400``) reads as 0.0.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Reject(MalformedRecordError, f"invalid UTF-8 at byte {exc.start}") from None
    try:
        return json.loads(
            text,
            parse_float=_finite_fraction if exact_decimals else _finite_float,
            parse_constant=_reject_constant,
        )
    except json.JSONDecodeError as exc:
        # Some messages end in "at" ("Unterminated string starting at"): no "at at".
        msg = exc.msg.removesuffix(" at")
        raise Reject(
            MalformedRecordError, f"invalid JSON: {msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise Reject(MalformedRecordError, "JSON nested too deeply to decode") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise Reject(MalformedRecordError, f"invalid JSON number: {exc}") from None


class JsonValueDecoder:
    """Plain append mode: every record's value is one row; a null value is a dead letter."""

    name = "json"

    def __init__(self, schema: Schema, options: JsonOptions | None = None) -> None:
        self.options = options or JsonOptions()
        self.converter = RowConverter(schema, self.options.coercion())
        self._vector = (
            VectorReader(self.converter)
            if self.options.vectorized and not self.options.case_insensitive
            else None
        )
        if self._vector is not None and not self._vector.supported:
            self._vector = None

    def __reduce__(self) -> tuple[Any, ...]:
        # Compiled converters are closures; executors rebuild them from schema + options.
        return (type(self), (self.converter.schema, self.options))

    def decode(self, data: pa.Table | pa.RecordBatch) -> DecodedBatch:
        batch = KafkaBatch(data)
        out = BatchAssembler(batch, self.converter, self.name)
        remaining: np.ndarray = np.arange(batch.num_rows, dtype=np.int64)
        if self._vector is not None and batch.num_rows:
            remaining = self._vector.read(batch, out)
        values = batch.values
        exact = self.converter.has_decimal
        for i in remaining.tolist():
            raw = values[i]
            try:
                if raw is None:
                    raise Reject(
                        NullValueError, "record has no value (null); append mode needs one"
                    )
                obj = parse_json_object(raw, exact)
                out.add_row(i, OP_UPSERT, self.converter.convert(obj, out.unknown))
            except (Reject, CoercionError) as problem:
                out.reject(i, problem)
        return out.finish()


# ---------------------------------------------------------------- vectorized path


class VectorReader:
    """Reads the plainly well-formed values of a batch with Arrow's JSON reader."""

    def __init__(self, converter: RowConverter) -> None:
        self.converter = converter
        self.target = converter.arrow_schema
        # Arrow's reader cannot tell an absent field from a null one: a table with
        # write-defaults (absent: the default) decodes per record.
        self.supported = not any(f.write_default is not None for f in converter.schema.all_fields())
        try:
            self.reader_schema = pa.schema([self._reader_field(f) for f in self.target])
        except _NotVectorizable:
            self.supported = False

    # -- schema plumbing

    def _reader_field(self, field: pa.Field) -> pa.Field:
        return pa.field(field.name, self._reader_type(field.type))

    def _reader_type(self, t: pa.DataType) -> pa.DataType:
        if pa.types.is_map(t):
            raise _NotVectorizable()
        if pa.types.is_struct(t):
            return pa.struct([self._reader_field(t.field(i)) for i in range(t.num_fields)])
        if pa.types.is_large_list(t) or pa.types.is_list(t):
            return pa.list_(self._reader_field(t.value_field))
        if pa.types.is_float32(t):
            return pa.float64()
        if _needs_python(t):
            return pa.large_string()
        return t

    # -- reading

    def read(self, batch: KafkaBatch, out: BatchAssembler) -> np.ndarray:
        """Decodes what it can into ``out``; returns the batch rows left for per-record."""
        values = batch.value_array
        mask = candidate_mask(values)
        candidates = np.flatnonzero(mask)
        leftover: list[np.ndarray] = [np.flatnonzero(~mask)]
        for start in range(0, len(candidates), _CHUNK_RECORDS):
            leftover.extend(
                self._read_chunk(values, candidates[start : start + _CHUNK_RECORDS], out)
            )
        return np.sort(np.concatenate(leftover)) if leftover else np.zeros(0, np.int64)

    def _read_chunk(
        self, values: pa.Array, idx: np.ndarray, out: BatchAssembler
    ) -> list[np.ndarray]:
        if len(idx) <= _MIN_BISECT:
            return [idx]
        text = newline_joined(values.take(pa.array(idx)))
        table = read_json_buffer(text, self.reader_schema, "infer")
        scan_unknown = False
        if table is None:
            table = read_json_buffer(text, self.reader_schema, "ignore")
            scan_unknown = table is not None
        if table is None or table.num_rows != len(idx):
            half = len(idx) // 2
            return self._read_chunk(values, idx[:half], out) + self._read_chunk(
                values, idx[half:], out
            )
        refused = nonfinite_rows(table)
        if scan_unknown:
            refused |= self._scan_unknown(values, idx, out)
        else:
            collect_unknown(table.schema, self.reader_schema, "", out.unknown)
        columns, bad = self.finish(table)
        bad |= refused
        good = ~bad
        if good.all():
            out.add_arrow_rows(idx, columns)
            return []
        if out.unknown:  # gathered over the whole chunk: keep only the good rows' fields
            out.unknown = {}
            self._scan_unknown(values, idx[good], out)
        keep = pa.array(good)
        out.add_arrow_rows(idx[good], [c.filter(keep) for c in columns])
        return [idx[bad]]

    def _scan_unknown(self, values: pa.Array, idx: np.ndarray, out: BatchAssembler) -> np.ndarray:
        """Arrow could not infer one type per unknown field; collect names record by
        record (not those of records the converter refuses: they become dead letters).
        Returns the mask of the records refused (left to the per-record path)."""
        refused = np.zeros(len(idx), dtype=bool)
        for i, raw in enumerate(values.take(pa.array(idx)).to_pylist()):
            fields: dict[str, set[str]] = {}
            try:
                self.converter.convert(parse_json_object(raw), fields)
            except (Reject, CoercionError):
                refused[i] = True
                continue
            for path, kinds in fields.items():
                out.unknown.setdefault(path, set()).update(kinds)
        return refused

    def finish(
        self, table: pa.Table, epoch_units: Mapping[str, TimeUnit] | None = None
    ) -> tuple[list[pa.Array], np.ndarray]:
        """The read columns -> target columns and the rows a conversion refused.
        ``epoch_units``: columns whose integers are epoch values of a known unit (a
        Connect schema's temporal annotation), by column name."""
        bad = np.zeros(table.num_rows, dtype=bool)
        columns = []
        options = self.converter.options
        units = epoch_units or {}
        for field, ice in zip(self.target, self.converter.schema.fields):
            col = table.column(field.name).combine_chunks()
            unit = units.get(field.name)
            if unit is not None:
                arr = epoch_target(col, field.type, ice.field_type, options, unit, bad)
            else:
                arr = to_target(col, field.type, ice.field_type, options, bad)
            bad |= required_violations(arr, field)
            columns.append(arr)
        return columns, bad


class _NotVectorizable(Exception):
    pass


def _needs_python(t: pa.DataType) -> bool:
    needs: bool = (  # pyarrow is untyped: pa.types.is_* return bools
        pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
    )
    return needs


def to_target(
    arr: pa.Array, t: pa.DataType, ice: IcebergType, options: CoercionOptions, bad: np.ndarray
) -> pa.Array:
    """Reader array -> target-typed array; marks rows whose values break a rule in ``bad``.

    ``ice`` is the column's Iceberg type: leaves read as strings are finished by the same
    ``coerce`` converter the per-record path uses, so both paths accept the same strings.
    """
    if isinstance(ice, StructType):
        children = []
        for f, child_ice in zip(t, ice.fields):
            children.append(
                to_target(arr.field(f.name), f.type, child_ice.field_type, options, bad)
            )
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, fields=list(t), mask=mask)
    if isinstance(ice, ListType):
        flat = arr.flatten()
        child_bad = np.zeros(len(flat), dtype=bool)
        child = to_target(flat, t.value_type, ice.element_type, options, child_bad)
        if child_bad.any():
            parents = pc.list_parent_indices(arr).to_numpy()
            bad[parents[child_bad]] = True
        offsets = arr.offsets.to_numpy().astype(np.int64)
        if len(offsets):
            offsets -= offsets[0]
        mask = arr.is_null() if arr.null_count else None
        return pa.LargeListArray.from_arrays(pa.array(offsets), child, type=t, mask=mask)
    if pa.types.is_float32(t):
        narrowed = arr.cast(pa.float32(), safe=False)
        overflow = pc.and_(pc.is_inf(narrowed), pc.invert(pc.is_inf(arr)))
        bad |= overflow.fill_null(False).to_numpy(zero_copy_only=False)
        return narrowed
    if _needs_python(t):
        convert = primitive_converter(ice, options)  # type: ignore[arg-type]
        fast = _arrow_temporal(arr, t, options, convert, bad)
        if fast is not None:
            return fast
        return _per_value(arr, t, convert, bad)
    return arr if arr.type == t else arr.cast(t)


def _per_value(arr: pa.Array, t: pa.DataType, convert: Any, bad: np.ndarray) -> pa.Array:
    """``arr`` converted value by value (nulls stay null); a value ``convert`` refuses
    marks its row in ``bad``."""
    out: list[Any] = []
    for i, v in enumerate(arr.to_pylist()):
        if v is None:
            out.append(None)
            continue
        try:
            out.append(convert(v))
        except CoercionError:
            bad[i] = True
            out.append(None)
    return pa.array(out, type=t)


def epoch_target(
    arr: pa.Array,
    t: pa.DataType,
    ice: IcebergType,
    options: CoercionOptions,
    unit: TimeUnit,
    bad: np.ndarray,
) -> pa.Array:
    """``to_target`` for a column whose integers are epoch values in ``unit`` (as a
    Connect schema's ``io.debezium.time.*`` name says): each integer is converted as
    ``EpochTime(value, unit)``, exactly as the per-record path converts it; a column
    read as strings is an ordinary column."""
    if not pa.types.is_integer(arr.type):
        return to_target(arr, t, ice, options, bad)
    convert = primitive_converter(ice, options)  # type: ignore[arg-type]
    return _per_value(arr, t, lambda v: convert(EpochTime(v, unit)), bad)


# Strings these patterns match are parsed by Arrow's cast exactly as ``coerce`` parses them
# (tests/ingest/decode/test_json_values.py checks it); the rest go through ``coerce``.
_GATE_YEAR = r"(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d{3})"  # 0001-9999, as coerce
_GATE_DATE = _GATE_YEAR + r"-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
_GATE_TIME = r"(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d{1,%d})?)?"
_GATE_OFFSET = r"(?:Z|[+-](?:[01]\d|2[0-3])(?::?[0-5]\d)?)"


def arrow_gate_pattern(t: pa.DataType, naive_as_utc: bool) -> str | None:
    """The regular expression of the strings Arrow's cast may convert for target ``t``."""
    if pa.types.is_date32(t):
        return f"^{_GATE_DATE}$"
    if not pa.types.is_timestamp(t):
        return None
    digits = 6 if t.unit == "us" else 9
    if t.tz is None:
        offset = ""
    elif naive_as_utc:
        offset = f"{_GATE_OFFSET}?"
    else:
        offset = _GATE_OFFSET
    return f"^{_GATE_DATE}[T ]{_GATE_TIME % digits}{offset}$"


def _arrow_temporal(
    arr: pa.Array, t: pa.DataType, options: CoercionOptions, convert: Any, bad: np.ndarray
) -> pa.Array | None:
    """Dates and timestamps by Arrow's cast where the gate pattern matches; ``coerce`` for
    the remaining strings. None when Arrow refuses the column (e.g. 2023-02-30)."""
    pattern = arrow_gate_pattern(t, options.naive_timestamps_as_utc)
    if pattern is None or not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return None  # epoch integers (Debezium's encoding) go through ``coerce``
    matched = pc.match_substring_regex(arr, pattern).fill_null(False)
    try:
        cast = pc.if_else(matched, arr, pa.scalar(None, arr.type)).cast(t)
    except (pa.ArrowException, ValueError):
        return None
    unmatched = np.flatnonzero(
        arr.is_valid().to_numpy(zero_copy_only=False) & ~matched.to_numpy(zero_copy_only=False)
    )
    if len(unmatched) == 0:
        return cast
    rest: list[Any] = [None] * len(arr)
    for i in unmatched.tolist():
        try:
            rest[i] = convert(arr[i].as_py())
        except CoercionError:
            bad[i] = True
    return pc.if_else(matched, cast, pa.array(rest, type=t))


def candidate_mask(values: pa.Array) -> np.ndarray:
    """Values that are one line, start with '{', and nest shallowly enough for Arrow."""
    if len(values) == 0:
        return np.zeros(0, dtype=bool)
    first = pc.binary_slice(values, 0, 1)
    starts = pc.equal(first, pa.scalar(b"{", pa.binary()))
    one_line = pc.invert(pc.or_(pc.match_substring(values, "\n"), pc.match_substring(values, "\r")))
    lengths = pc.binary_length(values)
    mask = pc.and_(pc.and_(starts, one_line), pc.less_equal(lengths, _MAX_VECTOR_VALUE_BYTES))
    mask = pc.and_(mask, pa.array(valid_utf8_mask(values)))
    if (pc.max(lengths).as_py() or 0) > _ALWAYS_SHALLOW_BYTES:
        brackets = pc.add(pc.count_substring(values, "{"), pc.count_substring(values, "["))
        shallow = pc.or_(
            pc.less_equal(lengths, _ALWAYS_SHALLOW_BYTES), pc.less_equal(brackets, _MAX_BRACKETS)
        )
        mask = pc.and_(mask, shallow)
    rows: np.ndarray = mask.fill_null(False).to_numpy(zero_copy_only=False)  # pyarrow: Any
    return rows


def nonfinite_rows(table: pa.Table) -> np.ndarray:
    """Rows of a table Arrow's JSON reader read that hold a NaN or infinite float at any
    depth, in any column (a field the table lacks included)."""
    bad = np.zeros(table.num_rows, dtype=bool)
    for column in table.columns:
        bad |= _nonfinite(column.combine_chunks())
    return bad


def _nonfinite(arr: pa.Array) -> np.ndarray:
    t = arr.type
    if pa.types.is_floating(t):
        nonfinite: np.ndarray = (  # pyarrow is untyped: a bool array
            pc.invert(pc.is_finite(arr)).fill_null(False).to_numpy(zero_copy_only=False)
        )
        return nonfinite
    bad = np.zeros(len(arr), dtype=bool)
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            bad |= _nonfinite(arr.field(i))
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        child = _nonfinite(arr.flatten())
        if child.any():
            parents = pc.list_parent_indices(arr).to_numpy()
            bad[parents[child]] = True
    return bad


def valid_utf8_mask(values: pa.Array) -> np.ndarray:
    """Values that are valid UTF-8 (nulls count as valid).

    Arrow's JSON reader does not check the UTF-8 inside strings: a value it reads must
    be known valid, or an invalid string would reach the Parquet writer (and fail the
    task there) instead of being a dead letter. One cast checks the whole array (it
    validates); only when it fails is each value checked on its own.
    """
    try:
        values.cast(pa.string())
        return np.ones(len(values), dtype=bool)
    except (pa.ArrowInvalid, UnicodeError):
        pass
    out = np.ones(len(values), dtype=bool)
    for i, raw in enumerate(values.to_pylist()):
        if raw is None:
            continue
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            out[i] = False
    return out


def newline_joined(values: pa.Array) -> pa.Buffer:
    lines = pc.binary_join_element_wise(values, pa.scalar(b"", pa.binary()), b"\n")
    _, offset_buffer, data = lines.buffers()
    offsets = np.frombuffer(offset_buffer, dtype=np.int32)[
        lines.offset : lines.offset + len(lines) + 1
    ]
    return data.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def read_json_buffer(text: pa.Buffer, schema: pa.Schema, unexpected: str) -> pa.Table | None:
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior=unexpected)
    try:
        return pajson.read_json(pa.BufferReader(text), parse_options=options)
    except (pa.ArrowException, UnicodeError, ValueError):
        return None


def collect_unknown(
    got: pa.Schema | pa.StructType,
    want: pa.Schema | pa.StructType,
    prefix: str,
    unknown: dict[str, set[str]],
) -> None:
    """Fields Arrow inferred beyond the reader schema (top level and inside structs)."""
    wanted = {f.name: f for f in want}
    for f in got:
        w = wanted.get(f.name)
        if w is None:
            unknown.setdefault(prefix + f.name, set()).add(arrow_type_name(f.type))
        elif pa.types.is_struct(f.type) and pa.types.is_struct(w.type):
            collect_unknown(f.type, w.type, f"{prefix}{f.name}.", unknown)


def arrow_type_name(t: pa.DataType) -> str:
    """Arrow type of an unknown field (as Arrow's JSON reader inferred it) -> a type name
    matching ``json_type_name`` (inferred timestamps stay strings: conservative)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "long"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list"
    return "string"


def required_violations(array: pa.Array, field: pa.Field) -> Any:
    """Rows of ``array`` where a required (non-nullable) field, at any depth, is null.

    Returns a numpy bool mask, one entry per row of ``array``. (Maps never reach the
    vectorized path, so they are not walked.)
    """
    n = len(array)
    bad = np.zeros(n, dtype=bool)
    if not field.nullable and array.null_count:
        bad |= array.is_null().to_numpy(zero_copy_only=False)
    t = field.type
    if pa.types.is_struct(t):
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        for i in range(t.num_fields):
            child = array.field(i)
            bad |= required_violations(child, t.field(i)) & valid
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        values = array.flatten()
        child_bad = required_violations(values, t.value_field)
        if child_bad.any():
            parents = pc.list_parent_indices(array).to_numpy()
            bad[parents[child_bad]] = True
    return bad
