"""Kafka Connect schemas as they travel -> one neutral tree, ``ConnectNode``.

Two front ends read the two ways a Debezium schema reaches Kafka:

* ``node_from_json``: the JSON converter's ``schema`` wrapper (``schemas.enable=true``):
  ``{"type": "struct", "fields": [{"field": "id", "type": "int32", "optional": false,
  "name": ..., "parameters": {...}}, ...], "name": "...Envelope"}``; arrays carry
  ``items``, maps ``keys`` and ``values``. A missing ``optional`` means required, as in
  Kafka Connect's ``JsonConverter``.
* ``node_from_avro``: the Avro writer schema the Confluent Avro converter registers.
  Records are structs, ``["null", T]`` unions are optional ``T``, ``int`` with
  ``connect.type`` ``int8``/``int16`` is that Connect type, enums are strings, ``fixed``
  is bytes, and named types referenced by name (Debezium's ``after`` is
  ``["null", "Value"]``, a reference to ``before``'s record) are resolved.

Both keep the semantic annotations the mapping needs: the Connect schema name
(``name`` in JSON, ``connect.name`` in Avro), its ``parameters`` (``connect.parameters``),
and Avro's ``logicalType`` with its ``precision``/``scale``. A schema neither front end
can express (an unknown type, a union of several non-null types, a recursive record)
becomes a node of kind ``"unsupported"`` carrying the reason, so the mapping can leave
that one column out and say why instead of failing the whole table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from calving.commit.errors import SchemaError
from calving.commit.spec.type_strings import MAX_DEPTH
from calving.ingest.decode.connect_envelope import is_connect_envelope

#: Kafka Connect's schema types (the JSON converter spells them like this).
PRIMITIVE_KINDS = frozenset(
    {"int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string", "bytes"}
)
NESTED_KINDS = frozenset({"array", "map", "struct"})
_AVRO_PRIMITIVES = {
    "boolean": "boolean",
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "bytes": "bytes",
    "string": "string",
}


class ConnectSchemaError(SchemaError):
    """A Connect/Avro schema that cannot give a table schema at all (not a struct, an
    envelope without a row, a key column the row lacks); names the record and column."""


@dataclass(frozen=True)
class ConnectNode:
    """One Connect schema: ``kind`` is a Connect type (``int32``, ``struct`` ...) or
    ``"unsupported"`` (then ``reason`` says why)."""

    kind: str
    optional: bool = False
    #: Connect schema name: a logical type (``io.debezium.time.MicroTimestamp``) or a
    #: record's name (``dbserver1.inventory.customers.Value``).
    name: str | None = None
    parameters: tuple[tuple[str, str], ...] = ()
    #: Avro ``logicalType`` (``decimal``, ``timestamp-micros`` ...), when the schema has one.
    logical_type: str | None = None
    #: Avro ``precision``/``scale`` attributes of a ``decimal`` logical type.
    precision: int | None = None
    scale: int | None = None
    fields: tuple[tuple[str, ConnectNode], ...] = ()
    items: ConnectNode | None = None
    keys: ConnectNode | None = None
    values: ConnectNode | None = None
    reason: str = ""
    #: The field's default as its schema writes it (Connect's ``default``; Avro's
    #: ``default`` or ``connect.default``, bytes decoded): the column's write-default.
    default: Any = field(default=None, compare=False)

    def parameter(self, key: str) -> str | None:
        return dict(self.parameters).get(key)

    def child(self, name: str) -> ConnectNode | None:
        return next((n for f, n in self.fields if f == name), None)


def unsupported(reason: str, optional: bool = True) -> ConnectNode:
    return ConnectNode("unsupported", optional=optional, reason=reason)


def _parameters(raw: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, Mapping):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in raw.items()))


def _int_or_none(value: Any) -> int | None:
    return value if type(value) is int else None


# ---------------------------------------------------------------- JSON converter schemas


def node_from_json(schema: Any) -> ConnectNode:
    """The JSON converter's ``schema`` object -> a node. A whole record
    (``{"schema": ..., "payload": ...}``) is accepted too."""
    if is_connect_envelope(schema):
        schema = schema["schema"]
    if not isinstance(schema, Mapping):
        raise ConnectSchemaError(f"a Connect schema must be a JSON object, got {schema!r:.60}")
    return _json_node(schema, 0)


def _json_node(schema: Mapping[str, Any], depth: int) -> ConnectNode:
    optional = schema.get("optional") is True
    kind = schema.get("type")
    if depth > MAX_DEPTH:
        return unsupported(f"nested more than {MAX_DEPTH} levels deep", optional)
    common: dict[str, Any] = {
        "optional": optional,
        "name": schema.get("name") if isinstance(schema.get("name"), str) else None,
        "parameters": _parameters(schema.get("parameters")),
        "default": schema.get("default"),
    }
    if kind in PRIMITIVE_KINDS:
        return ConnectNode(kind, **common)
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            return unsupported("array schema without items", optional)
        return ConnectNode("array", items=_json_node(items, depth + 1), **common)
    if kind == "map":
        keys, values = schema.get("keys"), schema.get("values")
        if not isinstance(keys, Mapping) or not isinstance(values, Mapping):
            return unsupported("map schema without keys or values", optional)
        return ConnectNode(
            "map", keys=_json_node(keys, depth + 1), values=_json_node(values, depth + 1), **common
        )
    if kind == "struct":
        fields = []
        for f in schema.get("fields") or ():
            if not isinstance(f, Mapping) or not isinstance(f.get("field"), str):
                raise ConnectSchemaError(
                    f"struct {common['name'] or ''} has a field without a name"
                )
            fields.append((f["field"], _json_node(f, depth + 1)))
        return ConnectNode("struct", fields=_unique(fields, common["name"]), **common)
    return unsupported(f"unknown Connect schema type {kind!r}", optional)


def _unique(
    fields: list[tuple[str, ConnectNode]], record: str | None
) -> tuple[tuple[str, ConnectNode], ...]:
    seen: set[str] = set()
    for name, _ in fields:
        if name in seen:
            raise ConnectSchemaError(f"record {record or '(unnamed)'} has field {name!r} twice")
        seen.add(name)
    return tuple(fields)


# ---------------------------------------------------------------- Avro writer schemas


def node_from_avro(schema: Any) -> ConnectNode:
    """An Avro writer schema (parsed JSON, or its text) -> a node."""
    if isinstance(schema, (str, bytes)):
        text = schema.decode() if isinstance(schema, bytes) else schema
        try:
            schema = json.loads(text)
        except ValueError:
            schema = text  # a bare primitive name such as "long"
    reader = _AvroReader()
    return reader.node(schema, None, False, 0)


class _AvroReader:
    def __init__(self) -> None:
        #: Full name -> the named type's JSON; registered as each definition is met.
        self.named: dict[str, Mapping[str, Any]] = {}
        self.active: list[str] = []

    def node(self, t: Any, namespace: str | None, optional: bool, depth: int) -> ConnectNode:
        if depth > MAX_DEPTH:
            return unsupported(f"nested more than {MAX_DEPTH} levels deep", optional)
        if isinstance(t, list):
            return self.union(t, namespace, optional, depth)
        if isinstance(t, str):
            if t in _AVRO_PRIMITIVES:
                return ConnectNode(_AVRO_PRIMITIVES[t], optional=optional)
            if t == "null":
                return unsupported("a field that is always null", True)
            return self.reference(t, namespace, optional, depth)
        if not isinstance(t, Mapping):
            return unsupported(f"not an Avro schema: {t!r:.60}", optional)
        kind = t.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            self.define(t, namespace)
        if kind in ("record", "error"):
            return self.record(t, namespace, optional, depth)
        note: dict[str, Any] = {
            "optional": optional,
            "name": t.get("connect.name") if isinstance(t.get("connect.name"), str) else None,
            "parameters": _parameters(t.get("connect.parameters")),
            "logical_type": t.get("logicalType") if isinstance(t.get("logicalType"), str) else None,
            "precision": _int_or_none(t.get("precision")),
            "scale": _int_or_none(t.get("scale")),
        }
        if kind == "array":
            items = self.node(t.get("items"), namespace, False, depth + 1)
            return ConnectNode("array", items=items, **note)
        if kind == "map":
            values = self.node(t.get("values"), namespace, False, depth + 1)
            return ConnectNode("map", keys=ConnectNode("string"), values=values, **note)
        if kind == "enum":
            return ConnectNode("string", **note)
        if kind == "fixed":
            return ConnectNode("bytes", **note)
        if isinstance(kind, str) and kind in _AVRO_PRIMITIVES:
            connect_type = t.get("connect.type")
            physical = _AVRO_PRIMITIVES[kind]
            if kind == "int" and connect_type in ("int8", "int16"):
                physical = connect_type
            return ConnectNode(physical, **note)
        if isinstance(kind, (list, Mapping)):  # {"type": {"type": "long", ...}}
            return self.node(kind, namespace, optional, depth + 1)
        if isinstance(kind, str):
            return self.reference(kind, namespace, optional, depth)
        return unsupported(f"Avro schema without a type: {dict(t)!r:.60}", optional)

    def union(
        self, branches: list[Any], namespace: str | None, optional: bool, depth: int
    ) -> ConnectNode:
        rest = [b for b in branches if b != "null"]
        nullable = optional or len(rest) < len(branches)
        if len(rest) != 1:
            shown = ", ".join(_avro_type_name(b) for b in rest) or "null"
            return unsupported(f"an Avro union of {shown} has no single Iceberg type", nullable)
        return self.node(rest[0], namespace, nullable, depth)

    def define(self, t: Mapping[str, Any], namespace: str | None) -> None:
        full = _full_name(t.get("name"), t.get("namespace", namespace))
        if full is not None:
            self.named[full] = t

    def reference(
        self, name: str, namespace: str | None, optional: bool, depth: int
    ) -> ConnectNode:
        full = name if "." in name else _full_name(name, namespace)
        found = self.named.get(full or name) or self.named.get(name)
        if found is None:
            return unsupported(f"Avro type {name!r} is not defined before its use", optional)
        return self.node(found, _namespace_of(found, namespace), optional, depth + 1)

    def record(
        self, t: Mapping[str, Any], namespace: str | None, optional: bool, depth: int
    ) -> ConnectNode:
        full = _full_name(t.get("name"), t.get("namespace", namespace)) or "(unnamed)"
        if full in self.active:
            return unsupported(f"record {full} contains itself", optional)
        inner = _namespace_of(t, namespace)
        self.active.append(full)
        try:
            fields = [
                (
                    str(f.get("name")),
                    _with_default(self.node(f.get("type"), inner, False, depth + 1), f),
                )
                for f in t.get("fields") or ()
                if isinstance(f, Mapping)
            ]
        finally:
            self.active.pop()
        connect_name = t.get("connect.name")
        return ConnectNode(
            "struct",
            optional=optional,
            name=connect_name if isinstance(connect_name, str) else full,
            parameters=_parameters(t.get("connect.parameters")),
            fields=_unique(fields, full),
        )


def _with_default(node: ConnectNode, avro_field: Mapping[str, Any]) -> ConnectNode:
    """The field's default: Avro's ``default`` (bytes as Avro's JSON writes them, one
    character per byte), else Kafka Connect's ``connect.default`` on its type."""
    value = avro_field.get("default")
    if value is None:
        t = avro_field.get("type")
        branches = t if isinstance(t, list) else [t]
        value = next(
            (
                b["connect.default"]
                for b in branches
                if isinstance(b, Mapping) and "connect.default" in b
            ),
            None,
        )
    if value is None:
        return node
    if node.kind == "bytes" and isinstance(value, str):
        try:
            value = value.encode("latin-1")
        except UnicodeEncodeError:
            return node
    return replace(node, default=value)


def _full_name(name: Any, namespace: Any) -> str | None:
    if not isinstance(name, str):
        return None
    if "." in name or not isinstance(namespace, str) or not namespace:
        return name
    return f"{namespace}.{name}"


def _namespace_of(t: Mapping[str, Any], outer: str | None) -> str | None:
    name = t.get("name")
    if isinstance(name, str) and "." in name:
        return name.rsplit(".", 1)[0]
    ns = t.get("namespace", outer)
    return ns if isinstance(ns, str) else outer


def _avro_type_name(t: Any) -> str:
    if isinstance(t, Mapping):
        return str(t.get("name") or t.get("type"))
    return str(t)
