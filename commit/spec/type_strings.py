"""Iceberg type strings as a config file writes them -> Iceberg types.

Grammar (whitespace allowed between tokens)::

    type      := primitive | list | map | struct
    primitive := boolean | int | long | float | double | date | time | timestamp
               | timestamptz | timestamp_ns | timestamptz_ns | string | uuid | binary
               | decimal(P, S) | fixed[L]
    list      := list<type>
    map       := map<type, type>
    struct    := struct<name: type, name: type, ...>

Nested fields, list elements and map values are optional (nullable); only top-level
columns have a ``required`` flag in the config. Field ids inside nested types come from
the caller's counter (the table's schema numbering).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable

from calving.commit.errors import ConfigError, SchemaError
from calving.commit.spec.schema import FieldIds, assign_fresh_type_ids
from calving.commit.spec.types import (
    PRIMITIVE_NAMES,
    IcebergType,
    ListType,
    MapType,
    NestedField,
    PrimitiveType,
    StructType,
    primitive_from_string,
)

EXAMPLES = '"long", "string", "timestamptz", "decimal(10, 2)", "list<string>" or "struct<a: long>"'
_TOKEN = re.compile(
    r"\s*(decimal\s*\(\s*\d+\s*,\s*\d+\s*\)|fixed\s*\[\s*\d+\s*\]|[A-Za-z_][A-Za-z0-9_]*|[<>,:]|\S)"
)
_WRITABLE = tuple(n for n in PRIMITIVE_NAMES if n != "unknown")
#: Deepest nesting of list/map/struct accepted: deeper types are refused with an error
#: instead of exhausting Python's recursion limit here or in any later schema walk.
MAX_DEPTH = 64


def parse_type(text: str, next_id: Callable[[], int]) -> IcebergType:
    """Parse ``text``; nested ids from ``next_id``, numbered by ``assign_fresh_type_ids``.
    Raises ``ConfigError`` (without the key: the caller adds it)."""
    parser = _Parser(text, FieldIds())  # placeholder ids, renumbered below
    result = parser.type()
    parser.expect_end()
    return assign_fresh_type_ids(result, next_id)


def check_type(text: str) -> IcebergType:
    """Parse with throwaway ids (for validating a config before a schema is built)."""
    counter = iter(range(1, 1_000_000))
    return parse_type(text, lambda: next(counter))


def type_text(t: IcebergType) -> str:
    """The config spelling of a type (inverse of ``parse_type`` up to whitespace)."""
    if isinstance(t, PrimitiveType):
        return str(t)
    if isinstance(t, ListType):
        return f"list<{type_text(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{type_text(t.key_type)}, {type_text(t.value_type)}>"
    return "struct<" + ", ".join(f"{f.name}: {type_text(f.field_type)}" for f in t.fields) + ">"


class _Parser:
    def __init__(self, text: str, next_id: Callable[[], int]) -> None:
        self.text = text
        self.tokens = [(m.group(1), m.start(1)) for m in _TOKEN.finditer(text)]
        self.pos = 0
        self.next_id = next_id
        self.depth = 0

    def error(self, message: str, hint: str = "") -> ConfigError:
        where = self.tokens[self.pos][1] if self.pos < len(self.tokens) else len(self.text)
        shown = repr(self.text) if len(self.text) <= 80 else repr(self.text[:77]) + "..."
        return ConfigError(
            f"expected a type such as {EXAMPLES}, got {shown}: {message} at "
            f"character {where + 1}{hint}"
        )

    def peek(self) -> str | None:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise self.error(f"missing {expected!r}" if expected else "unexpected end")
        if expected is not None and token != expected:
            raise self.error(f"expected {expected!r} but found {token!r}")
        self.pos += 1
        return token

    def expect_end(self) -> None:
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()!r}")

    def type(self) -> IcebergType:
        if self.depth >= MAX_DEPTH:
            raise self.error(f"types nest more than {MAX_DEPTH} levels deep")
        self.depth += 1
        try:
            return self.nested_or_primitive()
        finally:
            self.depth -= 1

    def nested_or_primitive(self) -> IcebergType:
        token = self.take()
        if token == "list":
            self.take("<")
            element_id = self.next_id()
            element = self.type()
            self.take(">")
            return ListType(element_id, element, element_required=False)
        if token == "map":
            self.take("<")
            key_id, value_id = self.next_id(), self.next_id()
            key = self.type()
            self.take(",")
            value = self.type()
            self.take(">")
            return MapType(key_id, key, value_id, value, value_required=False)
        if token == "struct":
            return self.struct()
        if token == "unknown" or not (token in _WRITABLE or token.startswith(("decimal", "fixed"))):
            self.pos -= 1
            close = difflib.get_close_matches(token.lower(), (*_WRITABLE, "list", "map"), 1, 0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise self.error(f"unknown type {token!r}", hint)
        try:
            return primitive_from_string(token.replace(" ", ""))
        except SchemaError as exc:
            self.pos -= 1
            raise self.error(str(exc)) from None

    def struct(self) -> StructType:
        self.take("<")
        names: list[str] = []
        ids: list[int] = []
        types: list[IcebergType] = []
        while True:
            name = self.take()
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                self.pos -= 1
                raise self.error(f"expected a field name but found {name!r}")
            if name in names:
                self.pos -= 1
                raise self.error(f"field {name!r} appears twice")
            self.take(":")
            names.append(name)
            ids.append(self.next_id())
            types.append(self.type())
            if self.peek() == ",":
                self.take(",")
                continue
            self.take(">")
            break
        return StructType(
            tuple(NestedField(i, n, t, required=False) for i, n, t in zip(ids, names, types))
        )
