"""The driver's first sight of a topic: which table it feeds, and that table.

``first_event`` reads the topic's records in the batch's ranges until one has a value
(a change event, not a tombstone) and returns it parsed: the JSON converter's value and
key ``schema`` (when they travel) and the ``source`` block. ``open_routed_table`` loads the
routed table, or creates it: the schema from the change event's schema with Debezium's
logical types (``connect_schema``), the primary key from the key's fields (or the
``[tables."..."]`` section's ``identifier_fields``), partitioning and properties from the
section; with no schema in the events, the schema is inferred from the records read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from calving.commit.catalog.base import Catalog
from calving.commit.errors import (
    NoSuchNamespaceError,
    NoSuchTableError,
    SchemaError,
    TableAlreadyExistsError,
)
from calving.commit.io import FileIO
from calving.commit.spec.schema import Schema
from calving.commit.table.table import Table, create_table
from calving.ingest.config.format import FormatConfig
from calving.ingest.config.router import Route
from calving.ingest.config.schema import config_schema, json_or_none
from calving.ingest.config.table import TableConfig, build_spec
from calving.ingest.decode.avro_confluent import ConfluentAvroReader
from calving.ingest.decode.batch import Reject
from calving.ingest.decode.connect_envelope import is_connect_envelope
from calving.ingest.decode.connect_schema import (
    table_schema_from_avro,
    table_schema_from_json,
)
from calving.ingest.decode.connect_types import ConnectSchemaError
from calving.ingest.decode.schema_registry import SchemaSource
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.kafka.prefetch import BUDGET
from calving.ingest.kafka.range_reader import RangeReader, read_range
from calving.ingest.kafka.source import kafka_arrow_schema
from calving.ingest.sink.many.recorded import route_source_property

log = logging.getLogger("calving.many.discover")

#: Records read (at most) from a new topic to find its first change event.
FIRST_EVENT_LIMIT = 500
#: Offsets of each new topic read together first: a change event with its schema needs
#: one (a schemaless topic's sample, for inference, is read whole up to the limit).
PROBE_OFFSETS = 16


@dataclass(frozen=True)
class FirstEvent:
    topic: str
    value_schema: Any
    key_schema: Any
    source: Mapping[str, Any] | None
    #: The records read (key and value), for inference when no schema travels.
    sample: pa.Table
    #: How the schemas are written: the JSON converter's (json) or Avro writer schemas.
    schema_kind: str = "json"


def first_event(
    options: KafkaSourceOptions,
    ranges: Iterable[OffsetRange],
    schemas: SchemaSource | None = None,
    limit: int = FIRST_EVENT_LIMIT,
    reader: RangeReader | None = None,
) -> FirstEvent | None:
    """The first change event (a JSON value, or Confluent Avro read with ``schemas``) in
    ``ranges``, parsed; None if there is none (only tombstones so far) within ``limit``
    records. Read on ``reader``'s consumer when given, else on a consumer of its own."""
    schema = kafka_arrow_schema(options.include_headers)
    seen: list[pa.RecordBatch] = []
    for span in ranges:
        batches = (
            reader.read(span, schema) if reader is not None else read_range(options, span, schema)
        )
        for rb in batches:
            seen.append(rb.select(["key", "value"]))
            event = _event_in(span.topic, rb, seen, schemas)
            if event is not None:
                return event
            if sum(b.num_rows for b in seen) >= limit:
                return None
    return None


def first_events(
    options: KafkaSourceOptions,
    spans: Mapping[str, Sequence[OffsetRange]],
    schemas: SchemaSource | None = None,
    limit: int = FIRST_EVENT_LIMIT,
) -> dict[str, FirstEvent | None]:
    """``first_event`` of each topic of ``spans``, on one consumer: the first
    ``PROBE_OFFSETS`` offsets of every topic's first range are fetched together
    (``RangeReader.prefetch``, up to its budget at a time), so routing 500 new topics
    costs a few fetches instead of a consumer and a fetch each. A topic whose probe
    holds no change event, or one without a schema (whose sample is for inference), is
    read as ``first_event`` reads it."""
    probes = {
        topic: OffsetRange(r.topic, r.partition, r.start, min(r.end, r.start + PROBE_OFFSETS))
        for topic, ranges in spans.items()
        for r in ranges[:1]
    }
    out: dict[str, FirstEvent | None] = {}
    with RangeReader(options) as reader:
        for chunk in _budgeted(list(probes.items())):
            reader.prefetch([probe for _, probe in chunk])
            for topic, probe in chunk:
                out[topic] = first_event(options, [probe], schemas, limit, reader)
        for topic, ranges in spans.items():
            event = out.get(topic)
            probed = probes[topic].size if topic in probes else 0
            unread = event is None and sum(r.size for r in ranges) > probed
            schemaless = event is not None and event.value_schema is None
            if unread or schemaless:
                out[topic] = first_event(options, ranges, schemas, limit, reader)
            out.setdefault(topic, None)
    return out


def _budgeted(
    probes: list[tuple[str, OffsetRange]],
) -> Iterator[list[tuple[str, OffsetRange]]]:
    """``probes`` in chunks of at most ``prefetch.BUDGET`` offsets."""
    chunk: list[tuple[str, OffsetRange]] = []
    total = 0
    for item in probes:
        if chunk and total + item[1].size > BUDGET:
            yield chunk
            chunk, total = [], 0
        chunk.append(item)
        total += item[1].size
    if chunk:
        yield chunk


def _event_in(
    topic: str, rb: pa.RecordBatch, seen: list[pa.RecordBatch], schemas: SchemaSource | None
) -> FirstEvent | None:
    """The first change event of ``rb``, parsed with the records ``seen`` so far (up to
    and including ``rb``) as its sample."""
    for key, value in zip(rb.column("key").to_pylist(), rb.column("value").to_pylist()):
        if schemas is not None and value is not None and value[:1] == b"\x00":
            return _avro_event(topic, value, key, schemas, pa.Table.from_batches(seen))
        doc = json_or_none(value)
        if isinstance(doc, dict):
            return _parsed(topic, doc, json_or_none(key), pa.Table.from_batches(seen))
    return None


def _parsed(topic: str, value: dict[str, Any], key: Any, sample: pa.Table) -> FirstEvent:
    wrapped = is_connect_envelope(value)
    payload = value.get("payload") if wrapped else value
    key_wrapped = is_connect_envelope(key)
    source = payload.get("source") if isinstance(payload, dict) else None
    return FirstEvent(
        topic,
        value.get("schema") if wrapped else None,
        key.get("schema") if key_wrapped else None,
        source if isinstance(source, dict) else None,
        sample,
    )


def _avro_event(
    topic: str, value: bytes, key: bytes | None, schemas: SchemaSource, sample: pa.Table
) -> FirstEvent:
    reader = ConfluentAvroReader(schemas)
    try:
        writer, obj = reader.read(value)
        key_writer = reader.read(key, "key")[0] if key and key[:1] == b"\x00" else None
    except Reject as err:
        raise SchemaError(f"topic {topic}: its first change event does not decode: {err}") from None
    source = obj.get("source") if isinstance(obj, dict) else None
    return FirstEvent(
        topic,
        writer.raw,
        key_writer.raw if key_writer is not None else None,
        source if isinstance(source, dict) else None,
        sample,
        "avro",
    )


def load_routed_table(catalog: Catalog, io: FileIO, route: Route) -> Table | None:
    """The routed table if it exists (None if it, or its namespace, does not)."""
    try:
        return Table.load(catalog, route.ident, io)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def open_routed_table(
    catalog: Catalog,
    io: FileIO,
    route: Route,
    event: FirstEvent,
    template: TableConfig,
    fmt: FormatConfig,
    namespaces: set[tuple[str, ...]] | None = None,
    route_fields: tuple[str, ...] = (),
) -> Table:
    """The routed table, loaded, or created from ``event`` (see the module doc); its
    namespace is made if missing, unless ``namespaces`` names it already (it is added).
    A created table records the event's source fields it was routed by (with
    ``route_fields``, the name template's: ``recorded``)."""
    ident = route.ident
    if namespaces is None or ident[:-1] not in namespaces:
        catalog.create_namespace_if_missing(ident[:-1])
        if namespaces is not None:
            namespaces.add(ident[:-1])
    try:
        return Table.load(catalog, ident, io)
    except NoSuchTableError:
        pass
    schema = new_table_schema(route, event, template, fmt)
    spec = build_spec(schema, route.settings.partition)
    properties = {
        **template.properties,
        **route.settings.properties,
        **route_source_property(route.topic, event.source, route_fields),
    }
    try:
        table = create_table(catalog, ident, schema, spec=spec, properties=properties, io=io)
    except TableAlreadyExistsError:
        return Table.load(catalog, ident, io)
    log.info("created table %s for topic %s (key %s)", route.name, route.topic, _keys(schema))
    return table


def new_table_schema(
    route: Route, event: FirstEvent, template: TableConfig, fmt: FormatConfig
) -> Schema:
    override = route.settings.identifier_fields
    if event.value_schema is None:
        keys = override or _key_fields(event)
        cfg = replace(
            template, name=route.name, infer_schema=True, identifier_fields=keys, columns=()
        )
        log.info(
            "topic %s carries no schema: inferring table %s's columns", route.topic, route.name
        )
        return config_schema(cfg, event.sample, fmt)
    try:
        if event.schema_kind == "avro":
            derived = table_schema_from_avro(event.value_schema, event.key_schema)
        else:
            derived = table_schema_from_json(event.value_schema, event.key_schema)
    except ConnectSchemaError as err:
        raise SchemaError(f"table {route.name} (topic {route.topic}): {err}") from None
    for note in derived.notes:
        log.info("table %s: %s", route.name, note)
    schema = derived.schema
    if override:
        schema = with_identifier_fields(route.name, schema, override)
    if not schema.identifier_field_ids:
        raise SchemaError(
            f"table {route.name} (topic {route.topic}): the change events carry no key schema; "
            f'give identifier_fields in a [tables."{route.name}"] section'
        )
    return schema


def with_identifier_fields(table: str, schema: Schema, names: tuple[str, ...]) -> Schema:
    fields = list(schema.fields)
    ids = []
    for name in names:
        i = next((i for i, f in enumerate(fields) if f.name == name), None)
        if i is None:
            raise SchemaError(f'[tables."{table}"].identifier_fields: {name!r} is not a column')
        fields[i] = replace(fields[i], required=True)
        ids.append(fields[i].field_id)
    return Schema(tuple(fields), schema.schema_id, tuple(ids))


def _key_fields(event: FirstEvent) -> tuple[str, ...]:
    keys = event.sample.column("key").to_pylist()
    for raw in keys:
        doc = json_or_none(raw)
        if isinstance(doc, dict):
            payload = doc["payload"] if is_connect_envelope(doc) else doc
            if isinstance(payload, dict):
                return tuple(payload)
    raise SchemaError(f"topic {event.topic}: no JSON key to take the table's primary key from")


def _keys(schema: Schema) -> str:
    return ", ".join(schema.identifier_field_names) or "none"
