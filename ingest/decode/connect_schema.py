"""Kafka Connect / Debezium schemas -> Iceberg table schemas.

A change event's value schema (the JSON converter's ``schema`` wrapper, or the Avro
writer schema; both read by ``connect_types``) gives the columns: of a Debezium envelope
(a struct with ``op`` and an ``after`` or ``before`` struct) the row struct, ``after``
first; any other struct (e.g. after ``ExtractNewRecordState``) is the row itself. The
key schema's fields are the identifier fields (the primary key). Field ids are fresh from
``assign_fresh_ids`` (top-level columns 1..n, then each nested level), as for every
other schema calving builds; evolving an existing table renumbers added columns there.

Types (``LOGICAL_TYPES`` is the table; ``EPOCH_UNITS`` in ``debezium`` must agree with it
on the temporal names, which a test checks):

* ``int8``/``int16``/``int32`` -> int, ``int64`` -> long, ``float32`` -> float,
  ``float64`` -> double, ``boolean``, ``string``, ``bytes`` -> binary; arrays -> list,
  maps -> map, structs -> struct. ``optional: false`` -> required (nested too).
* ``io.debezium.time.Date`` and Connect's ``Date`` -> date; ``Time``/``MicroTime``/
  ``NanoTime`` and Connect's ``Time`` -> time (microseconds: a nanosecond time that is
  not a whole microsecond becomes a dead letter); ``Timestamp``/``MicroTimestamp`` and
  Connect's ``Timestamp`` -> timestamp; ``NanoTimestamp`` -> timestamp_ns (a v3 type);
  ``ZonedTimestamp`` (an ISO-8601 string) -> timestamptz, or timestamptz_ns when the
  source column's scale (``__debezium.source.column.scale``, sent with Debezium's
  ``column.propagate.source.type``) is above 6; ``ZonedTime`` and ``Interval``
  (strings) -> string; ``Year`` -> int; ``MicroDuration`` -> long.
* Connect's ``Decimal`` -> decimal(P, S) from its ``scale`` and
  ``connect.decimal.precision`` parameters (Avro: the ``precision``/``scale``
  attributes). Without a precision, P is 38 (Iceberg's largest) and a note says so;
  P above 38 is capped at 38 (values needing more digits become dead letters); a
  negative scale S gives decimal(P - S, 0), exact for such values.
* ``VariableScaleDecimal`` (a struct of ``scale`` and ``value``; PostgreSQL ``NUMERIC``
  without precision, Oracle ``NUMBER``) -> ``options.variable_scale_decimal``, default
  decimal(38, 10): the Debezium decoder turns these structs into exact ``Decimal``
  values, and a value with more than 10 decimal places (or 28 integer digits) becomes a
  dead letter naming the column rather than being rounded. A string column would not
  accept those ``Decimal`` values, so string is not offered.
* ``Json``, ``Xml``, ``Enum``, ``EnumSet``, ``Ltree`` -> string; ``Uuid`` -> uuid;
  ``Bits`` -> binary.
* ``io.debezium.data.geometry.Geometry``/``Geography``/``Point`` keep Debezium's struct
  shape: struct<wkb: binary, srid: int> (``Point`` also x, y): the decoder passes the
  struct through, the WKB bytes stay intact, and the SRID is not lost.
* Avro logical types without a Connect name: ``date``, ``time-millis``/``-micros`` ->
  date/time, ``timestamp-*`` -> timestamptz(_ns), ``local-timestamp-*`` ->
  timestamp(_ns), ``uuid`` -> uuid, ``decimal`` as above.

A logical name this table does not know (or one on an unexpected physical type) maps by
its physical type, with a ``SchemaNote`` saying so. A column no type fits (a union of
several types, a recursive record, an empty struct, a decimal with a scale over 38) is
left out of the schema with a note (``omitted``); the caller decides whether to log or
refuse. A field's default (Connect's ``default``, Avro's ``default`` or
``connect.default``) is kept in ``defaults`` (decoded like its values): a column added
to an existing table takes it as initial-default and write-default. A key column that is missing, optional, floating-point or not a primitive is a
``ConnectSchemaError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import SchemaError
from calving.commit.spec.json_values import value_to_json
from calving.commit.spec.schema import FieldIds, Schema, assign_fresh_ids
from calving.commit.spec.types import (
    BINARY,
    BOOLEAN,
    DATE,
    DOUBLE,
    FLOAT,
    INT,
    LONG,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    TIMESTAMPTZ_NS,
    UUID,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    decimal,
    same_shape,
)
from calving.ingest.decode.connect_envelope import CONNECT_DECIMAL, VARIABLE_SCALE_DECIMAL
from calving.ingest.decode.connect_types import (
    ConnectNode,
    ConnectSchemaError,
    node_from_avro,
    node_from_json,
)

ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
#: Debezium's parameter (``column.propagate.source.type``) with the source column's scale.
SOURCE_COLUMN_SCALE = "__debezium.source.column.scale"
#: Iceberg's largest decimal precision, assumed when a Decimal schema gives none.
MAX_PRECISION = 38
#: The default type of VariableScaleDecimal columns (see the module docstring).
VARIABLE_SCALE_DEFAULT = decimal(MAX_PRECISION, 10)
#: Debezium's geometry types: structs (wkb bytes, srid int; Point also x, y), kept as such.
GEOMETRY_TYPES = frozenset(
    {
        "io.debezium.data.geometry.Geometry",
        "io.debezium.data.geometry.Geography",
        "io.debezium.data.geometry.Point",
    }
)


@dataclass(frozen=True)
class LogicalType:
    """What a Connect schema name means: the Iceberg type, and the Connect types it
    arrives as (anything else maps by its physical type, with a note)."""

    iceberg: PrimitiveType
    physical: frozenset[str]


def _on(iceberg: PrimitiveType, *physical: str) -> LogicalType:
    return LogicalType(iceberg, frozenset(physical))


_DBZ_TIME = "io.debezium.time."
_DBZ_DATA = "io.debezium.data."
_CONNECT = "org.apache.kafka.connect.data."
LOGICAL_TYPES: dict[str, LogicalType] = {
    _DBZ_TIME + "Date": _on(DATE, "int32"),
    _DBZ_TIME + "Time": _on(TIME, "int32"),
    _DBZ_TIME + "MicroTime": _on(TIME, "int64"),
    _DBZ_TIME + "NanoTime": _on(TIME, "int64"),
    _DBZ_TIME + "Timestamp": _on(TIMESTAMP, "int64"),
    _DBZ_TIME + "MicroTimestamp": _on(TIMESTAMP, "int64"),
    _DBZ_TIME + "NanoTimestamp": _on(TIMESTAMP_NS, "int64"),
    _DBZ_TIME + "ZonedTimestamp": _on(TIMESTAMPTZ, "string"),
    _DBZ_TIME + "ZonedTime": _on(STRING, "string"),
    _DBZ_TIME + "Year": _on(INT, "int32"),
    _DBZ_TIME + "MicroDuration": _on(LONG, "int64"),
    _DBZ_TIME + "Interval": _on(STRING, "string"),
    _DBZ_DATA + "Json": _on(STRING, "string"),
    _DBZ_DATA + "Xml": _on(STRING, "string"),
    _DBZ_DATA + "Uuid": _on(UUID, "string"),
    _DBZ_DATA + "Enum": _on(STRING, "string"),
    _DBZ_DATA + "EnumSet": _on(STRING, "string"),
    _DBZ_DATA + "Ltree": _on(STRING, "string"),
    _DBZ_DATA + "Bits": _on(BINARY, "bytes"),
    _CONNECT + "Date": _on(DATE, "int32"),
    _CONNECT + "Time": _on(TIME, "int32"),
    _CONNECT + "Timestamp": _on(TIMESTAMP, "int64"),
}
#: Avro logical types met without a Connect name (plain Avro producers).
AVRO_LOGICAL_TYPES: dict[str, LogicalType] = {
    "date": _on(DATE, "int32"),
    "time-millis": _on(TIME, "int32"),
    "time-micros": _on(TIME, "int64"),
    "timestamp-millis": _on(TIMESTAMPTZ, "int64"),
    "timestamp-micros": _on(TIMESTAMPTZ, "int64"),
    "timestamp-nanos": _on(TIMESTAMPTZ_NS, "int64"),
    "local-timestamp-millis": _on(TIMESTAMP, "int64"),
    "local-timestamp-micros": _on(TIMESTAMP, "int64"),
    "local-timestamp-nanos": _on(TIMESTAMP_NS, "int64"),
    "uuid": _on(UUID, "string"),
}
_PHYSICAL: dict[str, PrimitiveType] = {
    "int8": INT,
    "int16": INT,
    "int32": INT,
    "int64": LONG,
    "float32": FLOAT,
    "float64": DOUBLE,
    "boolean": BOOLEAN,
    "string": STRING,
    "bytes": BINARY,
}


@dataclass(frozen=True)
class ConnectSchemaOptions:
    #: The type of ``VariableScaleDecimal`` columns (no fixed scale travels with them).
    variable_scale_decimal: PrimitiveType = VARIABLE_SCALE_DEFAULT


@dataclass(frozen=True)
class SchemaNote:
    """Something the caller should know about one column (dotted path): a fallback, an
    assumption, or (``omitted``) why the column is not in the schema."""

    column: str
    message: str
    omitted: bool = False

    def __str__(self) -> str:
        return f"{self.column}: {self.message}" + (" (column left out)" if self.omitted else "")


@dataclass(frozen=True)
class ConnectTableSchema:
    schema: Schema
    notes: tuple[SchemaNote, ...] = ()
    #: The row record's Connect name (``dbserver1.inventory.customers.Value``), if any.
    record: str | None = None
    #: Column path -> its source default in Iceberg's JSON single-value form: what a
    #: column added by schema evolution takes as initial-default and write-default.
    defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def identifier_fields(self) -> tuple[str, ...]:
        return self.schema.identifier_field_names


# ---------------------------------------------------------------- entry points


def table_schema_from_json(
    value_schema: Any, key_schema: Any = None, options: ConnectSchemaOptions | None = None
) -> ConnectTableSchema:
    """The JSON converter's value ``schema`` (and the key's, for identifier fields)."""
    key = node_from_json(key_schema) if key_schema is not None else None
    return table_schema(node_from_json(value_schema), key, options)


def table_schema_from_avro(
    value_schema: Any, key_schema: Any = None, options: ConnectSchemaOptions | None = None
) -> ConnectTableSchema:
    """The Avro writer schemas of value (and key) as a Debezium Avro converter registers them."""
    key = node_from_avro(key_schema) if key_schema is not None else None
    return table_schema(node_from_avro(value_schema), key, options)


def table_schema(
    value: ConnectNode, key: ConnectNode | None, options: ConnectSchemaOptions | None = None
) -> ConnectTableSchema:
    row = row_struct(value)
    label = row.name or value.name or "the value schema"
    notes: list[SchemaNote] = []
    mapper = _Mapper(options or ConnectSchemaOptions(), notes)
    fields = assign_fresh_ids(mapper.fields(row, ""), FieldIds())
    identifiers = _identifier_ids(fields, key, label) if key is not None else ()
    schema = Schema(fields, 0, identifiers)
    return ConnectTableSchema(schema, tuple(notes), row.name, dict(mapper.defaults))


def iceberg_type(
    node: ConnectNode, options: ConnectSchemaOptions | None = None, path: str = "value"
) -> tuple[IcebergType | None, tuple[SchemaNote, ...]]:
    """One Connect schema's Iceberg type (nested ids 0: number them with
    ``assign_fresh_type_ids``), or None when it has none; and the notes."""
    notes: list[SchemaNote] = []
    t = _Mapper(options or ConnectSchemaOptions(), notes).type(node, path)
    return t, tuple(notes)


def row_struct(value: ConnectNode) -> ConnectNode:
    """The struct whose fields are the table's columns: a Debezium envelope's ``after``
    (or ``before``) record, else the value struct itself."""
    label = value.name or "the value schema"
    if value.kind != "struct":
        raise ConnectSchemaError(f"{label} is {value.kind}, not a struct of columns")
    op = value.child("op")
    if op is None or op.kind != "string":
        return value
    for part in ("after", "before"):
        row = value.child(part)
        if row is not None and row.kind == "struct":
            return row
    raise ConnectSchemaError(f"{label} is a Debezium envelope without an after or before struct")


# ---------------------------------------------------------------- identifier fields


def _identifier_ids(
    fields: tuple[NestedField, ...], key: ConnectNode, label: str
) -> tuple[int, ...]:
    if key.kind != "struct":
        raise ConnectSchemaError(
            f"{label}: the key schema is {key.kind}, not a struct of primary-key columns"
        )
    by_name = {f.name: f for f in fields}
    ids = []
    for name, node in key.fields:
        column = by_name.get(name)
        if column is None:
            raise ConnectSchemaError(f"{label}: key column {name!r} is not a column of the row")
        t = column.field_type
        why = ""
        if not isinstance(t, PrimitiveType):
            why = "is not a primitive"
        elif t.name in ("float", "double"):
            why = f"is {t}, which Iceberg does not allow in identifier fields"
        elif not column.required:
            why = "is optional in the row schema; identifier fields must be required"
        else:
            key_type, _ = iceberg_type(node, path=name)
            if key_type is not None and not same_shape(key_type, t):
                why = f"is {key_type} in the key but {t} in the row"
        if why:
            raise ConnectSchemaError(f"{label}: key column {name!r} {why}")
        ids.append(column.field_id)
    return tuple(ids)


# ---------------------------------------------------------------- the mapping


class _Mapper:
    def __init__(self, options: ConnectSchemaOptions, notes: list[SchemaNote]) -> None:
        self.options = options
        self.notes = notes
        self.defaults: dict[str, Any] = {}

    def note(self, path: str, message: str, omitted: bool = False) -> None:
        self.notes.append(SchemaNote(path, message, omitted))

    def fields(self, struct: ConnectNode, prefix: str) -> tuple[NestedField, ...]:
        out = []
        for name, node in struct.fields:
            t = self.type(node, prefix + name)
            if t is not None:
                default = self.default(node, t, prefix + name)
                if default is not None:
                    self.defaults[prefix + name] = default
                out.append(NestedField(0, name, t, required=not node.optional))
        return tuple(out)

    def default(self, node: ConnectNode, t: IcebergType, path: str) -> Any:
        """The field's Connect default as an Iceberg default (JSON single-value form),
        decoded the way its values are; None without one (or one that does not fit)."""
        if node.default is None or not isinstance(t, PrimitiveType):
            return None
        from calving.ingest.decode.coerce import CoercionError, CoercionOptions, build_converter
        from calving.ingest.decode.debezium import connect_value

        try:
            value = connect_value(node.default, node.name, node.parameters, node.logical_type)
            return value_to_json(t, build_converter(t, CoercionOptions())(value))
        except (CoercionError, SchemaError, ValueError, TypeError) as err:
            self.note(path, f"default {node.default!r:.40} not usable as {t}: {err}")
            return None

    def type(self, node: ConnectNode, path: str) -> IcebergType | None:
        if node.kind == "unsupported":
            self.note(path, node.reason, omitted=True)
            return None
        is_decimal = node.name == CONNECT_DECIMAL or (
            node.name is None and node.logical_type == "decimal"
        )
        if is_decimal and node.kind == "bytes":
            return self.decimal(node, path)
        if node.name == VARIABLE_SCALE_DECIMAL and node.kind == "struct":
            return self.options.variable_scale_decimal
        logical = LOGICAL_TYPES.get(node.name or "")
        if logical is None and node.name is None and node.logical_type is not None:
            logical = AVRO_LOGICAL_TYPES.get(node.logical_type)
        if logical is not None and node.kind in logical.physical:
            if node.name == ZONED_TIMESTAMP and _source_scale(node) > 6:
                return TIMESTAMPTZ_NS
            return logical.iceberg
        if logical is not None or is_decimal or node.name == VARIABLE_SCALE_DECIMAL:
            self.note(
                path,
                f"{_named(node)} with physical type {node.kind} is not a known encoding; "
                f"mapped as {node.kind}",
            )
        elif node.kind in _PHYSICAL and (node.name or node.logical_type):
            self.note(path, f"unknown logical type {_named(node)}; mapped as {node.kind}")
        if node.kind in _PHYSICAL:
            return _PHYSICAL[node.kind]
        return self.nested(node, path)

    def nested(self, node: ConnectNode, path: str) -> IcebergType | None:
        if node.kind == "struct":
            fields = self.fields(node, path + ".")
            if not fields:
                self.note(path, "a struct without (mappable) fields", omitted=True)
                return None
            return StructType(fields)
        if node.kind == "array":
            assert node.items is not None
            element = self.type(node.items, path + ".element")
            return None if element is None else ListType(0, element, not node.items.optional)
        assert node.kind == "map" and node.keys is not None and node.values is not None
        key = self.type(node.keys, path + ".key")
        value = self.type(node.values, path + ".value")
        if key is None or value is None:
            return None
        return MapType(0, key, 0, value, not node.values.optional)

    def decimal(self, node: ConnectNode, path: str) -> PrimitiveType | None:
        scale = _int(node.parameter("scale"), node.scale)
        precision = _int(node.parameter("connect.decimal.precision"), node.precision)
        if scale is None:
            self.note(path, "Decimal without a scale parameter", omitted=True)
            return None
        if precision is None or precision < 1:
            given = "without a precision" if precision is None else f"with precision {precision}"
            self.note(path, f"Decimal {given}; assumed {MAX_PRECISION}")
            precision = MAX_PRECISION
        if scale < 0:  # Oracle NUMBER(P, -S): whole numbers with up to P - S digits
            precision, scale = precision - scale, 0
        precision = max(precision, scale)  # e.g. Oracle NUMBER(2, 5): 0.000dd
        if scale > MAX_PRECISION:
            self.note(
                path, f"Decimal scale {scale} exceeds Iceberg's {MAX_PRECISION}", omitted=True
            )
            return None
        if precision > MAX_PRECISION:
            self.note(
                path,
                f"Decimal precision {precision} capped at {MAX_PRECISION}; larger "
                "values become dead letters",
            )
            precision = MAX_PRECISION
        return decimal(precision, scale)


def _source_scale(node: ConnectNode) -> int:
    """The source column's fractional-second digits, when Debezium sends them."""
    return _int(node.parameter(SOURCE_COLUMN_SCALE), None) or 0


def _named(node: ConnectNode) -> str:
    return node.name or f"logicalType {node.logical_type}"


def _int(text: str | None, fallback: int | None) -> int | None:
    if text is not None:
        try:
            return int(text)
        except ValueError:
            return None
    return fallback
