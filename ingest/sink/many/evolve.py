"""Source schema changes -> what happens to the table (``schema_changes`` classifies).

* added columns and fields inside existing structs, widened types and columns made
  optional: one ``UpdateSchema`` (added columns are optional; existing rows read the
  source column's default when its schema has one, else null);
* a dropped source column stays in the table; a required one becomes optional so new
  rows can leave it null; the columns the source no longer sends are recorded in the
  table (``Evolution.record``, a table property ``calving table show`` reports): those
  a schema first seen in the batch lacks (the batch's schemas carry no order), cleared
  by a later new schema that has them;
* anything incompatible stops the table (``Evolution.stopped``): its records go to the
  dead-letter destination with a message naming table and column.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from calving.commit.errors import CalvingError
from calving.commit.spec.schema import Schema
from calving.commit.table.actions.update_schema import AddColumn, UpdateSchema
from calving.ingest.decode.connect_schema import (
    ConnectTableSchema,
    table_schema_from_avro,
    table_schema_from_json,
)
from calving.ingest.decode.connect_types import ConnectSchemaError
from calving.ingest.decode.schema_changes import (
    AddedColumn,
    DroppedColumn,
    MadeOptional,
    SchemaChange,
    WidenedType,
    classify_changes,
)
from calving.ingest.decode.schema_registry import SchemaSource
from calving.ingest.sink.many.tasks import AVRO_SCHEMA_ID

log = logging.getLogger("calving.many.evolve")


@dataclass(frozen=True)
class Evolution:
    update: UpdateSchema | None = None
    #: Why the table stops (an incompatible change, or a schema that cannot be read).
    stopped: str | None = None
    #: Metadata only (nothing to write again): the columns the source no longer sends.
    record: UpdateSchema | None = None


def evolution(
    table: str, current: Schema, schema_texts: list[str], source: SchemaSource | None = None
) -> Evolution:
    """What ``table`` (now ``current``) must do for the value schemas seen, in order:
    JSON-converter schemas, or Avro writer schema ids (read from ``source``)."""
    add: dict[str, AddColumn] = {}
    promote: dict[str, WidenedType] = {}
    optional: list[str] = []
    dropped: set[str] = set()  # missing from a schema of the batch (their order is unknown)
    for text in schema_texts:
        try:
            seen = _seen_schema(text, source)
        except (ConnectSchemaError, ValueError, CalvingError) as err:
            return Evolution(stopped=f"table {table}: unreadable change-event schema: {err}")
        changes = classify_changes(table, current, _with_keys(seen.schema, current))
        if changes.incompatible:
            return Evolution(stopped=changes.incompatible[0].message)
        for change in changes.changes:
            _gather(change, add, promote, optional, seen.defaults)
        dropped.update(c.column for c in changes.changes if isinstance(c, DroppedColumn))
    if not (add or promote or optional):
        return Evolution(record=UpdateSchema(dropped_at_source=tuple(sorted(dropped))))
    update = UpdateSchema(
        add=tuple(add.values()),
        promote=tuple((c.column, c.new) for c in promote.values()),
        make_optional=tuple(dict.fromkeys(optional)),
        dropped_at_source=tuple(sorted(dropped)),
    )
    return Evolution(update=update)


def _seen_schema(text: str, source: SchemaSource | None) -> ConnectTableSchema:
    if text.startswith(AVRO_SCHEMA_ID):
        if source is None:
            raise ConnectSchemaError("an Avro event, and the format has no schema source")
        writer = source.schema_text(int(text[len(AVRO_SCHEMA_ID) :]))
        return table_schema_from_avro(json.loads(writer))
    return table_schema_from_json(json.loads(text))


def _with_keys(seen: Schema, current: Schema) -> Schema:
    """``seen`` with the table's identifier fields (the value schema alone has none)."""
    names = current.identifier_field_names
    ids = tuple(f.field_id for f in seen.fields if f.name in names)
    return Schema(seen.fields, seen.schema_id, ids if len(ids) == len(names) else ())


#: Path parts naming a list's element or a map's key or value (not struct fields).
_COLLECTION_PARTS = frozenset({"element", "key", "value"})


def _gather(
    change: SchemaChange,
    add: dict[str, AddColumn],
    promote: dict[str, WidenedType],
    optional: list[str],
    defaults: Mapping[str, Any],
) -> None:
    if change.column.rsplit(".", 1)[-1] in _COLLECTION_PARTS and not isinstance(
        change, AddedColumn
    ):
        log.warning(
            "table %s: %s of %r (a list element or map part) is not followed",
            change.table,
            type(change).__name__,
            change.column,
        )
        return
    if isinstance(change, AddedColumn):
        default = defaults.get(change.column)
        add[change.column] = AddColumn(change.column, change.field_type, default=default)
    elif isinstance(change, WidenedType):
        promote[change.column] = change
    elif isinstance(change, MadeOptional) or (
        isinstance(change, DroppedColumn) and change.make_optional
    ):
        optional.append(change.column)
