"""Avro schemas of manifests and manifest lists, as data keyed by format version.

Field ids ride on every field as ``field-id`` (and ``element-id`` / key and value
ids inside the map records), which is how readers map Avro columns to Iceberg ids.
"""

from __future__ import annotations

from typing import Any

from commit.spec.types import PrimitiveType, StructType

Avro = dict[str, Any]


def _f(name: str, fid: int, typ: Any, optional: bool = False) -> Avro:
    if optional:
        return {"name": name, "type": ["null", typ], "default": None, "field-id": fid}
    return {"name": name, "type": typ, "field-id": fid}


def _int_map(fid: int, kid: int, vid: int, value: str) -> Avro:
    rec = {
        "type": "array",
        "logicalType": "map",
        "items": {
            "type": "record",
            "name": f"k{kid}_v{vid}",
            "fields": [
                {"name": "key", "type": "int", "field-id": kid},
                {"name": "value", "type": value, "field-id": vid},
            ],
        },
    }
    return rec


def _list(eid: int, item: str) -> Avro:
    return {"type": "array", "items": item, "element-id": eid}


def partition_avro_type(ptype: StructType) -> Avro:
    return {
        "type": "record",
        "name": "r102",
        "fields": [_f(f.name, f.field_id, iceberg_to_avro(f.field_type), optional=True)
                   for f in ptype.fields],
    }


def decimal_fixed_size(precision: int) -> int:
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def iceberg_to_avro(t: Any) -> Any:
    if not isinstance(t, PrimitiveType):
        raise TypeError(f"partition values must be primitives, got {t}")
    n = t.name
    simple = {"boolean": "boolean", "int": "int", "long": "long", "float": "float",
              "double": "double", "string": "string", "binary": "bytes"}
    if n in simple:
        return simple[n]
    if n == "date":
        return {"type": "int", "logicalType": "date"}
    if n == "time":
        return {"type": "long", "logicalType": "time-micros"}
    if n in ("timestamp", "timestamptz"):
        return {"type": "long", "logicalType": "timestamp-micros",
                "adjust-to-utc": n == "timestamptz"}
    if n in ("timestamp_ns", "timestamptz_ns"):
        return {"type": "long", "logicalType": "timestamp-nanos",
                "adjust-to-utc": n == "timestamptz_ns"}
    if n == "uuid":
        return {"type": "fixed", "name": "uuid_fixed", "size": 16, "logicalType": "uuid"}
    if n == "fixed":
        return {"type": "fixed", "name": f"fixed_{t.length}", "size": t.length}
    if n == "decimal":
        return {"type": "fixed", "name": f"decimal_{t.precision}_{t.scale}",
                "size": decimal_fixed_size(t.precision), "logicalType": "decimal",
                "precision": t.precision, "scale": t.scale}
    raise TypeError(f"no Avro form for {t}")


def data_file_fields(version: int, partition: Avro) -> list[Avro]:
    fields: list[Avro] = []
    if version >= 2:
        fields.append(_f("content", 134, "int"))
    fields += [
        _f("file_path", 100, "string"),
        _f("file_format", 101, "string"),
        _f("partition", 102, partition),
        _f("record_count", 103, "long"),
        _f("file_size_in_bytes", 104, "long"),
    ]
    if version == 1:
        fields.append(_f("block_size_in_bytes", 105, "long"))
    fields += [
        _f("column_sizes", 108, _int_map(108, 117, 118, "long"), True),
        _f("value_counts", 109, _int_map(109, 119, 120, "long"), True),
        _f("null_value_counts", 110, _int_map(110, 121, 122, "long"), True),
        _f("nan_value_counts", 137, _int_map(137, 138, 139, "long"), True),
        _f("lower_bounds", 125, _int_map(125, 126, 127, "bytes"), True),
        _f("upper_bounds", 128, _int_map(128, 129, 130, "bytes"), True),
        _f("key_metadata", 131, "bytes", True),
        _f("split_offsets", 132, _list(133, "long"), True),
    ]
    if version >= 2:
        fields.append(_f("equality_ids", 135, _list(136, "int"), True))
    fields.append(_f("sort_order_id", 140, "int", True))
    if version >= 3:
        fields += [
            _f("first_row_id", 142, "long", True),
            _f("referenced_data_file", 143, "string", True),
            _f("content_offset", 144, "long", True),
            _f("content_size_in_bytes", 145, "long", True),
        ]
    return fields


def manifest_entry_schema(version: int, partition: Avro) -> Avro:
    data_file = {"type": "record", "name": "r2", "fields": data_file_fields(version, partition)}
    fields = [_f("status", 0, "int")]
    if version == 1:
        fields += [_f("snapshot_id", 1, "long"), _f("data_file", 2, data_file)]
    else:
        fields += [
            _f("snapshot_id", 1, "long", True),
            _f("sequence_number", 3, "long", True),
            _f("file_sequence_number", 4, "long", True),
            _f("data_file", 2, data_file),
        ]
    return {"type": "record", "name": "manifest_entry", "fields": fields}


_FIELD_SUMMARY = {
    "type": "record",
    "name": "r508",
    "fields": [
        _f("contains_null", 509, "boolean"),
        _f("contains_nan", 518, "boolean", True),
        _f("lower_bound", 510, "bytes", True),
        _f("upper_bound", 511, "bytes", True),
    ],
}


def manifest_file_schema(version: int) -> Avro:
    partitions = _f("partitions", 507, {"type": "array", "items": _FIELD_SUMMARY,
                                        "element-id": 508}, True)
    if version == 1:
        fields = [
            _f("manifest_path", 500, "string"),
            _f("manifest_length", 501, "long"),
            _f("partition_spec_id", 502, "int"),
            _f("added_snapshot_id", 503, "long", True),
            _f("added_data_files_count", 504, "int", True),
            _f("existing_data_files_count", 505, "int", True),
            _f("deleted_data_files_count", 506, "int", True),
            partitions,
            _f("added_rows_count", 512, "long", True),
            _f("existing_rows_count", 513, "long", True),
            _f("deleted_rows_count", 514, "long", True),
        ]
    else:
        fields = [
            _f("manifest_path", 500, "string"),
            _f("manifest_length", 501, "long"),
            _f("partition_spec_id", 502, "int"),
            _f("content", 517, "int"),
            _f("sequence_number", 515, "long"),
            _f("min_sequence_number", 516, "long"),
            _f("added_snapshot_id", 503, "long"),
            _f("added_files_count", 504, "int"),
            _f("existing_files_count", 505, "int"),
            _f("deleted_files_count", 506, "int"),
            _f("added_rows_count", 512, "long"),
            _f("existing_rows_count", 513, "long"),
            _f("deleted_rows_count", 514, "long"),
            partitions,
            _f("key_metadata", 519, "bytes", True),
        ]
        if version >= 3:
            fields.append(_f("first_row_id", 520, "long", True))
    return {"type": "record", "name": "manifest_file", "fields": fields}
