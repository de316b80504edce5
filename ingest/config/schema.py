"""The schema of a new table from its ``[table]`` config: the declared columns, or those
inferred from sampled Kafka records (``table.infer_schema``), numbered afresh.

Used where a table is created: ``calving.ingest.catalogs.ensure_table`` and the many-table
sink's discovery of new tables.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from calving.commit.errors import ConfigError, SchemaError
from calving.commit.spec.schema import FieldIds, Schema, assign_fresh_ids
from calving.commit.spec.types import IcebergType, NestedField
from calving.ingest.config.format import FormatConfig
from calving.ingest.config.table import TableConfig
from calving.ingest.decode import infer_schema
from calving.ingest.decode.connect_envelope import is_connect_envelope

log = logging.getLogger("calving.catalogs")


def config_schema(cfg: TableConfig, sample: pa.Table | None, fmt: FormatConfig | None) -> Schema:
    if not cfg.infer_schema:
        return _checked(cfg.schema)
    if sample is None:
        raise ConfigError(
            f"table.infer_schema: table {cfg.name} does not exist yet and no sample records "
            "were given to infer its schema from"
        )
    envelope = fmt.envelope if fmt is not None else "plain"
    inferred = infer_schema(
        sample_objects(sample, envelope, cfg.identifier_fields), detect_temporal=cfg.infer_temporal
    )
    if inferred.disagreeing:
        log.warning(
            "schema inference left out %d of %d sampled record(s) that disagree with the "
            "others (the stream dead-letters them)",
            inferred.disagreeing,
            inferred.records_read,
        )
    if inferred.conflicts:
        log.warning(
            "schema inference left out %d field(s): %s",
            len(inferred.conflicts),
            "; ".join(f"{k}: {v}" for k, v in sorted(inferred.conflicts.items())),
        )
    columns = [(c.name, c.iceberg_type(), c.required, c.doc) for c in cfg.columns]
    declared = {c.name for c in cfg.columns}
    for f in inferred.schema.fields:
        if f.name not in declared:
            columns.append((f.name, f.field_type, f.name in cfg.identifier_fields, None))
    names = {name for name, *_ in columns}
    for i, ident in enumerate(cfg.identifier_fields):
        if ident not in names:
            why = inferred.conflicts.get(ident, "not present")
            raise SchemaError(
                f"table.identifier_fields[{i}]: {ident!r} is not declared and not inferable from "
                f"the {inferred.records_read} sampled record(s) ({why})"
            )
    if not columns:
        raise SchemaError(
            f"table.infer_schema: the {inferred.records_read} sampled record(s) gave no columns"
            + (f" ({len(inferred.conflicts)} field(s) left out)" if inferred.conflicts else "")
        )
    return _checked(lambda: _numbered_schema(columns, cfg.identifier_fields))


def _checked(build: Callable[[], Schema]) -> Schema:
    try:
        return build()
    except SchemaError as exc:
        raise SchemaError(f"table: {exc}") from None


def _numbered_schema(
    columns: Sequence[tuple[str, IcebergType, bool, str | None]], identifiers: Sequence[str]
) -> Schema:
    """Fresh ids: top-level columns 1..n, nested fields after them."""
    unnumbered = [NestedField(0, name, t, required, doc) for name, t, required, doc in columns]
    fields = assign_fresh_ids(unnumbered, FieldIds())
    ids = {f.name: f.field_id for f in fields}
    return Schema(fields, identifier_field_ids=tuple(ids[n] for n in identifiers))


def sample_objects(
    sample: pa.Table, envelope: str = "plain", identifier_fields: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The row objects in sampled Kafka records: plain JSON values as they are, the
    ``after`` image of Debezium create/read/update events, upsert values with the key's
    fields filled in. Records that are not JSON objects (or are deletes) are skipped."""
    if "value" not in sample.column_names:
        raise ConfigError(
            "table.infer_schema: the sample must be Kafka records (a table with a 'value' column)"
        )
    values = sample.column("value").to_pylist()
    keys = (
        sample.column("key").to_pylist() if "key" in sample.column_names else [None] * len(values)
    )
    out = []
    for raw, key in zip(values, keys):
        obj = json_or_none(raw)
        if envelope == "debezium" and isinstance(obj, dict):
            if is_connect_envelope(obj):
                obj = obj["payload"]
            op = obj.get("op") if isinstance(obj, dict) else None
            obj = obj.get("after") if op in ("c", "r", "u") and isinstance(obj, dict) else None
        elif envelope == "upsert" and isinstance(obj, dict):
            key_obj = json_or_none(key)
            if isinstance(key_obj, dict):
                obj = {**key_obj, **obj}
            elif key_obj is not None and len(identifier_fields) == 1:
                obj = {identifier_fields[0]: key_obj, **obj}
        if isinstance(obj, dict):
            out.append(obj)
    return out


def json_or_none(raw: Any) -> Any:
    """Kafka bytes parsed as JSON, or None (absent, not JSON, not UTF-8)."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
