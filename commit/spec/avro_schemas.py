"""Avro schemas of manifests and manifest lists, as data keyed by format version.

Every field carries its Iceberg id as ``field-id``; list arrays carry ``element-id``;
maps with int keys are arrays of ``k<key-id>_v<value-id>`` records with the map
logical type. Record names are the ones Java writes: ``manifest_entry``, ``r2``
(data_file), ``r102`` (partition), ``manifest_file`` and ``r508`` (field summary).
Readers find fields by id, so only the ids and types are load-bearing.
"""

from __future__ import annotations

from typing import Any

from calving.commit.errors import SchemaError
from calving.commit.spec.types import PrimitiveType, StructType, decimal, fixed

AvroType = Any  # str | list | dict, as in Avro schema JSON

FORMAT_VERSIONS = (1, 2, 3)

PARTITION_FIELD_ID = 102
DATA_FILE_FIELD_ID = 2
PARTITIONS_FIELD_ID = 507
# v1 manifests must carry a block size; Java writes this default and nobody reads it.
V1_BLOCK_SIZE = 64 * 1024 * 1024


def _int_map(key_id: int, value_id: int, value: str) -> AvroType:
    return {
        "type": "array",
        "items": {
            "type": "record",
            "name": f"k{key_id}_v{value_id}",
            "fields": [
                {"name": "key", "type": "int", "field-id": key_id},
                {"name": "value", "type": value, "field-id": value_id},
            ],
        },
        "logicalType": "map",
    }


def _list(element_id: int, item: AvroType) -> AvroType:
    return {"type": "array", "items": item, "element-id": element_id}


FIELD_SUMMARY_RECORD: dict[str, Any] = {
    "type": "record",
    "name": "r508",
    "fields": [
        {"name": "contains_null", "type": "boolean", "field-id": 509},
        {"name": "contains_nan", "type": ["null", "boolean"], "default": None, "field-id": 518},
        {"name": "lower_bound", "type": ["null", "bytes"], "default": None, "field-id": 510},
        {"name": "upper_bound", "type": ["null", "bytes"], "default": None, "field-id": 511},
    ],
}

FIELD_SUMMARY_FIELDS: dict[int, tuple[str, AvroType]] = {
    f["field-id"]: (f["name"], f["type"]) for f in FIELD_SUMMARY_RECORD["fields"]
}

# Field id -> (name, Avro type). The partition struct (102) is per manifest.
DATA_FILE_FIELDS: dict[int, tuple[str, AvroType]] = {
    134: ("content", "int"),
    100: ("file_path", "string"),
    101: ("file_format", "string"),
    PARTITION_FIELD_ID: ("partition", None),
    103: ("record_count", "long"),
    104: ("file_size_in_bytes", "long"),
    105: ("block_size_in_bytes", "long"),
    108: ("column_sizes", _int_map(117, 118, "long")),
    109: ("value_counts", _int_map(119, 120, "long")),
    110: ("null_value_counts", _int_map(121, 122, "long")),
    137: ("nan_value_counts", _int_map(138, 139, "long")),
    125: ("lower_bounds", _int_map(126, 127, "bytes")),
    128: ("upper_bounds", _int_map(129, 130, "bytes")),
    131: ("key_metadata", "bytes"),
    132: ("split_offsets", _list(133, "long")),
    135: ("equality_ids", _list(136, "int")),
    140: ("sort_order_id", "int"),
    142: ("first_row_id", "long"),
    143: ("referenced_data_file", "string"),
    144: ("content_offset", "long"),
    145: ("content_size_in_bytes", "long"),
}

ENTRY_FIELDS: dict[int, tuple[str, AvroType]] = {
    0: ("status", "int"),
    1: ("snapshot_id", "long"),
    3: ("sequence_number", "long"),
    4: ("file_sequence_number", "long"),
    DATA_FILE_FIELD_ID: ("data_file", None),
}

MANIFEST_FILE_FIELDS: dict[int, tuple[str, AvroType]] = {
    500: ("manifest_path", "string"),
    501: ("manifest_length", "long"),
    502: ("partition_spec_id", "int"),
    517: ("content", "int"),
    515: ("sequence_number", "long"),
    516: ("min_sequence_number", "long"),
    503: ("added_snapshot_id", "long"),
    504: ("added_files_count", "int"),
    505: ("existing_files_count", "int"),
    506: ("deleted_files_count", "int"),
    512: ("added_rows_count", "long"),
    513: ("existing_rows_count", "long"),
    514: ("deleted_rows_count", "long"),
    PARTITIONS_FIELD_ID: ("partitions", _list(508, FIELD_SUMMARY_RECORD)),
    519: ("key_metadata", "bytes"),
    520: ("first_row_id", "long"),
}

# Per format version: the field ids in the order Java writes them, and which are required.
_METRICS = (108, 109, 110, 137, 125, 128, 131, 132)
DATA_FILE_LAYOUT: dict[int, tuple[int, ...]] = {
    1: (100, 101, 102, 103, 104, 105, *_METRICS, 140),
    2: (134, 100, 101, 102, 103, 104, *_METRICS, 135, 140, 143),
    3: (134, 100, 101, 102, 103, 104, *_METRICS, 135, 140, 142, 143, 144, 145),
}
DATA_FILE_REQUIRED = frozenset({134, 100, 101, 102, 103, 104, 105})
ENTRY_LAYOUT: dict[int, tuple[int, ...]] = {1: (0, 1, 2), 2: (0, 1, 3, 4, 2), 3: (0, 1, 3, 4, 2)}
ENTRY_REQUIRED: dict[int, frozenset[int]] = {
    1: frozenset({0, 1, 2}),
    2: frozenset({0, 2}),
    3: frozenset({0, 2}),
}
_V2_LIST = (500, 501, 502, 517, 515, 516, 503, 504, 505, 506, 512, 513, 514, 507, 519)
MANIFEST_FILE_LAYOUT: dict[int, tuple[int, ...]] = {
    1: (500, 501, 502, 503, 504, 505, 506, 507, 512, 513, 514, 519),
    2: _V2_LIST,
    3: (*_V2_LIST, 520),
}
_V2_LIST_REQUIRED = frozenset(_V2_LIST) - {507, 519}
MANIFEST_FILE_REQUIRED: dict[int, frozenset[int]] = {
    1: frozenset({500, 501, 502, 503}),
    2: _V2_LIST_REQUIRED,
    3: _V2_LIST_REQUIRED,
}


def _field(field_id: int, name: str, avro_type: AvroType, required: bool) -> dict[str, Any]:
    if required:
        return {"name": name, "type": avro_type, "field-id": field_id}
    return {"name": name, "type": ["null", avro_type], "default": None, "field-id": field_id}


def _check_version(format_version: int) -> None:
    if format_version not in FORMAT_VERSIONS:
        raise ValueError(f"no Avro schema for format version {format_version}")


def manifest_entry_schema(format_version: int, partition_type: StructType) -> dict[str, Any]:
    """The ``manifest_entry`` record schema of a manifest for ``partition_type``."""
    _check_version(format_version)
    data_file_fields = []
    for field_id in DATA_FILE_LAYOUT[format_version]:
        name, avro_type = DATA_FILE_FIELDS[field_id]
        if field_id == PARTITION_FIELD_ID:
            avro_type = partition_record(partition_type)
        data_file_fields.append(_field(field_id, name, avro_type, field_id in DATA_FILE_REQUIRED))
    data_file = {"type": "record", "name": "r2", "fields": data_file_fields}
    fields = []
    for field_id in ENTRY_LAYOUT[format_version]:
        name, avro_type = ENTRY_FIELDS[field_id]
        required = field_id in ENTRY_REQUIRED[format_version]
        fields.append(
            _field(field_id, name, data_file if avro_type is None else avro_type, required)
        )
    return {"type": "record", "name": "manifest_entry", "fields": fields}


def manifest_file_schema(format_version: int) -> dict[str, Any]:
    """The ``manifest_file`` record schema of a manifest list."""
    _check_version(format_version)
    required = MANIFEST_FILE_REQUIRED[format_version]
    fields = [
        _field(field_id, *MANIFEST_FILE_FIELDS[field_id], field_id in required)
        for field_id in MANIFEST_FILE_LAYOUT[format_version]
    ]
    return {"type": "record", "name": "manifest_file", "fields": fields}


# ---------------------------------------------------------------- partition tuples


def avro_name(name: str) -> str:
    """A valid Avro name for ``name``, sanitized as Java's Iceberg does it: per UTF-16
    unit, a character that is not a letter, ``_`` or (past the first) a digit becomes
    ``_`` + the digit, or ``_x`` + its upper-case hex code."""
    raw = name.encode("utf-16-be", "surrogatepass")
    out = []
    for i in range(0, len(raw), 2):
        unit = int.from_bytes(raw[i : i + 2], "big")
        ch = chr(unit)
        surrogate = 0xD800 <= unit <= 0xDFFF
        if not surrogate and (ch.isalpha() or ch == "_" or (i > 0 and ch.isdecimal())):
            out.append(ch)
        elif not surrogate and ch.isdecimal():
            out.append("_" + ch)
        else:
            out.append(f"_x{unit:X}")
    return "".join(out) or "_"


def decimal_required_bytes(precision: int) -> int:
    """Fewest bytes whose two's complement holds every unscaled value of ``precision``."""
    size = 1
    while 2 ** (8 * size - 1) <= 10**precision - 1:
        size += 1
    return size


def _avro_primitive(ptype: PrimitiveType) -> AvroType:
    name = ptype.name
    plain = {
        "boolean": "boolean",
        "int": "int",
        "long": "long",
        "float": "float",
        "double": "double",
        "string": "string",
        "binary": "bytes",
    }
    if name in plain:
        return plain[name]
    if name == "date":
        return {"type": "int", "logicalType": "date"}
    if name == "time":
        return {"type": "long", "logicalType": "time-micros"}
    if name in ("timestamp", "timestamptz"):
        return {
            "type": "long",
            "logicalType": "timestamp-micros",
            "adjust-to-utc": name == "timestamptz",
        }
    if name in ("timestamp_ns", "timestamptz_ns"):
        return {
            "type": "long",
            "logicalType": "timestamp-nanos",
            "adjust-to-utc": name == "timestamptz_ns",
        }
    if name == "uuid":
        return {"type": "fixed", "name": "uuid_fixed", "size": 16, "logicalType": "uuid"}
    if name == "fixed":
        return {"type": "fixed", "name": f"fixed_{ptype.length}", "size": ptype.length}
    if name == "decimal":
        return {
            "type": "fixed",
            "name": f"decimal_{ptype.precision}_{ptype.scale}",
            "size": decimal_required_bytes(ptype.precision),
            "logicalType": "decimal",
            "precision": ptype.precision,
            "scale": ptype.scale,
        }
    raise SchemaError(f"partition values of type {ptype} have no Avro form")


def partition_record(partition_type: StructType) -> dict[str, Any]:
    """The ``r102`` record of partition values; every field optional.

    Java writes a named Avro type (fixed, decimal, uuid) used twice by name the second
    time; pyiceberg cannot read such a reference, so a repeat is defined again under
    a name made unique with the field id (readers go by type, not name).
    """
    defined: set[str] = set()
    fields = []
    for field in partition_type.fields:
        if not isinstance(field.field_type, PrimitiveType):
            raise SchemaError(f"partition field {field.name!r} is not a primitive type")
        avro_type = _avro_primitive(field.field_type)
        if isinstance(avro_type, dict) and "name" in avro_type:
            if avro_type["name"] in defined:
                avro_type = {**avro_type, "name": f"{avro_type['name']}_{field.field_id}"}
            defined.add(avro_type["name"])
        fields.append(_field(field.field_id, avro_name(field.name), avro_type, False))
    return {"type": "record", "name": "r102", "fields": fields}


def iceberg_primitive(avro_type: AvroType, named: dict[str, Any]) -> PrimitiveType:
    """The Iceberg type of a partition value stored as ``avro_type``.

    ``named`` collects named types as they are defined so later references resolve.
    Raises ``SchemaError`` for anything that is not an Iceberg primitive.
    """
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        if len(branches) != 1:
            raise SchemaError(f"union {avro_type!r} is not an optional value")
        return iceberg_primitive(branches[0], named)
    if isinstance(avro_type, str):
        plain = {
            "boolean": "boolean",
            "int": "int",
            "long": "long",
            "float": "float",
            "double": "double",
            "string": "string",
            "bytes": "binary",
        }
        if avro_type in plain:
            return PrimitiveType(plain[avro_type])
        if avro_type in named:
            return iceberg_primitive(named[avro_type], named)
        raise SchemaError(f"unknown Avro type {avro_type!r} for a partition value")
    if not isinstance(avro_type, dict):
        raise SchemaError(f"unusable Avro type {avro_type!r} for a partition value")
    base = avro_type.get("type")
    logical = avro_type.get("logicalType")
    if base == "fixed" and isinstance(avro_type.get("name"), str):
        named[avro_type["name"]] = avro_type
    if logical == "decimal" and base in ("fixed", "bytes"):
        return decimal(int(avro_type["precision"]), int(avro_type.get("scale", 0)))
    if logical == "uuid" and base in ("fixed", "string"):
        return PrimitiveType("uuid")
    if logical == "date" and base == "int":
        return PrimitiveType("date")
    if logical == "time-micros" and base == "long":
        return PrimitiveType("time")
    if logical in ("timestamp-micros", "timestamp-nanos") and base == "long":
        # Java reads a timestamp without adjust-to-utc as timestamptz.
        utc = avro_type.get("adjust-to-utc", True) in (True, "true")
        unit = "" if logical == "timestamp-micros" else "_ns"
        return PrimitiveType(("timestamptz" if utc else "timestamp") + unit)
    if base == "fixed":
        return fixed(int(avro_type["size"]))
    if isinstance(base, str):  # an unknown logical type reads as its base type
        return iceberg_primitive(base, named)
    raise SchemaError(f"unusable Avro type {avro_type!r} for a partition value")


# ---------------------------------------------------------------- reading by field id


def non_null(avro_type: AvroType) -> AvroType:
    """The value branch of an optional ``["null", T]`` union (other types unchanged)."""
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        if len(branches) == 1:
            return branches[0]
    return avro_type


class RecordFields:
    """Where each Iceberg field id of one Avro record schema lives, so values are read
    by id whatever the writer named them. Fields without a ``field-id`` fall back to
    the standard name for their id (``known``). Raises ``SchemaError`` if ``schema``
    is not a record."""

    def __init__(self, schema: AvroType, what: str, known: dict[int, tuple[str, Any]]) -> None:
        schema = non_null(schema)
        if not isinstance(schema, dict) or not isinstance(schema.get("fields"), list):
            raise SchemaError(f"{what} is not an Avro record: {schema!r}")
        self.what = what
        self.names: dict[int, str] = {}
        self.types: dict[int, AvroType] = {}
        by_name = {name: field_id for field_id, (name, _) in known.items()}
        for field in schema["fields"]:
            if not isinstance(field, dict) or not isinstance(field.get("name"), str):
                raise SchemaError(f"{what} has a malformed field: {field!r}")
            field_id = field.get("field-id", by_name.get(field["name"]))
            if isinstance(field_id, int) and not isinstance(field_id, bool):
                self.names[field_id] = field["name"]
                self.types[field_id] = field.get("type")

    def has(self, field_id: int) -> bool:
        return field_id in self.names

    def get(self, record: dict[str, Any], field_id: int) -> Any:
        """The value of ``field_id`` in ``record``; None when the file lacks the field."""
        name = self.names.get(field_id)
        return None if name is None else record.get(name)

    def type_of(self, field_id: int) -> AvroType:
        return non_null(self.types.get(field_id))

    def value(self, record: dict[str, Any], field_id: int, kind: type, required: bool) -> Any:
        """The value of ``field_id`` checked to be a ``kind`` (None allowed unless
        ``required``). Raises ``SchemaError`` naming the field otherwise."""
        value = self.get(record, field_id)
        if value is None:
            if required:
                raise SchemaError(f"{self.what} lacks required field {field_id}")
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise SchemaError(
                f"{self.what} field {field_id} holds {type(value).__name__}, "
                f"expected {kind.__name__}"
            )
        return value
