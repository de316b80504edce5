"""``calving.sink(...)``: a ``foreachBatch`` sink for your own PySpark job.

    import calving
    with calving.sink(config="pipeline.toml") as sink:           # or keyword arguments
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ...).start()

The sink is built through the same config path as ``calving run`` (``parse_config`` then
``build_sink``), so a bad argument is the same one-line ``ConfigError`` naming the key.
Keyword arguments become the config document: ``catalog``, ``table``, ``warehouse``
and the other ``table`` keys under ``[table]``, ``writer_id`` and the other ``sink``
keys under ``[sink]``, ``format`` under ``[format]``. Your query owns its source and
checkpoint, so ``[source]`` and ``sink.checkpoint`` are optional here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from calving.commit.errors import ConfigError
from calving.ingest.config.loader import CalvingConfig, parse_config, read_toml
from calving.ingest.sink.coordinator import BatchStats
from calving.ingest.sink.path_choice import SourcePlan
from calving.ingest.sink.rows import RowsOptions, RowsSink
from calving.ingest.worker_python import use_this_python

#: Stand-ins for the sections a foreachBatch sink never reads (the job has its own
#: source and checkpoint); the Kafka source's schema inference does need a real [source].
_UNUSED_SOURCE = {"bootstrap_servers": "unused.invalid:9092", "topics": ["unused"]}
_UNUSED_CHECKPOINT = "unused://the-query-checkpointLocation"  # a URI: never probed

_TABLE_ARGS = (
    "catalog",
    "warehouse",
    "identifier_fields",
    "partition",
    "properties",
    "columns",
    "infer_schema",
    "catalog_name",
    "io",
)
_SINK_ARGS = (
    "dead_letter_table",
    "key_partitions",
    "index_save_every",
    "evolve_schema",
)


def sink(
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    *,
    table: str | None = None,
    writer_id: str | None = None,
    format: str | Mapping[str, Any] | None = None,
    op_column: str | None = None,
    order_column: str | None = None,
    input: str = "auto",
    source: Mapping[str, Any] | None = None,
    on_batch: Callable[[BatchStats], None] | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> RowsSink:
    """A ``(df, batch_id) -> None`` callable for ``df.writeStream.foreachBatch``, also a
    context manager (``close()`` saves the primary-key index).

    ``config``: a TOML file path (as for ``calving run``) or an already parsed document.
    Otherwise keyword arguments: ``catalog`` (``sqlite:///...``, ``postgresql+psycopg://``
    or ``file:///``), ``table`` (``namespace.name``), ``writer_id``, ``format`` (a type
    such as ``"debezium-json"`` or a ``[format]`` mapping; default ``"json"``), and any
    other ``[table]`` / ``[sink]`` key (``warehouse``, ``columns``, ``identifier_fields``,
    ``partition``, ``properties``, ``dead_letter_table``, ``key_partitions`` ...).

    ``op_column`` / ``order_column`` / ``input`` shape DataFrames of decoded rows (see
    ``calving.ingest.sink.rows``). Every error is a ``calving.ConfigError``.

    ``source``: a ``[source]`` mapping (Kafka brokers, topics ...): ``calving.kafka_stream
    (spark, sink)`` then reads it the way ``calving run`` does.

    Spark's Python workers need calving: unless ``PYSPARK_PYTHON`` is set, they are
    made to run this interpreter (also in a SparkContext that already runs; see
    ``calving.ingest.worker_python``).
    """
    use_this_python()
    rows = RowsOptions(op_column=op_column, order_column=order_column, input=input)
    cfg = sink_config(
        config,
        table=table,
        writer_id=writer_id,
        format=format,
        source=source,
        environ=environ,
        **options,
    )
    from calving.ingest.pipeline import build_sink, path_for

    built = build_sink(cfg, on_batch=on_batch, sink_class=RowsSink, rows=rows)
    assert isinstance(built, RowsSink)
    if has_source(cfg):
        built.source_plan = SourcePlan(cfg.source, path_for(cfg, built.table))
    return built


def has_source(cfg: CalvingConfig) -> bool:
    """Whether ``cfg`` came with a real ``[source]`` (not the stand-in ``_parse`` adds)."""
    return cfg.source.bootstrap_servers != _UNUSED_SOURCE["bootstrap_servers"]


def sink_config(
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    *,
    table: str | None = None,
    writer_id: str | None = None,
    format: str | Mapping[str, Any] | None = None,
    source: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    **options: Any,
) -> CalvingConfig:
    """The checked ``CalvingConfig`` ``sink()`` builds from (see there)."""
    if config is not None:
        named = {"table": table, "writer_id": writer_id, "format": format, "source": source}
        given = [k for k, v in named.items() if v is not None] + sorted(options)
        if given:
            raise ConfigError(
                f"calving.sink: pass either config= or keyword arguments, not both "
                f"(also got {', '.join(given)})"
            )
        return _from_document(config, environ)
    unknown = sorted(set(options) - set(_TABLE_ARGS) - set(_SINK_ARGS))
    if unknown:
        known = ", ".join(("table", "writer_id", "format", *_TABLE_ARGS, *_SINK_ARGS))
        raise ConfigError(f"calving.sink: unknown argument {unknown[0]!r} (known: {known})")
    doc: dict[str, Any] = {
        "table": {"name": table} if table is not None else {},
        "sink": {"writer_id": writer_id} if writer_id is not None else {},
        "format": dict(format) if isinstance(format, Mapping) else {"type": format or "json"},
    }
    for key, value in options.items():
        if value is not None:
            doc["table" if key in _TABLE_ARGS else "sink"][key] = _plain(value)
    if source is not None:
        doc["source"] = dict(source)
    return _parse(doc, "calving.sink()", None, environ)


def _from_document(
    config: str | os.PathLike[str] | Mapping[str, Any], environ: Mapping[str, str] | None
) -> CalvingConfig:
    if isinstance(config, Mapping):
        return _parse(dict(config), "calving.sink(config=...)", None, environ)
    path = os.fspath(config)
    doc = read_toml(path)
    return _parse(doc, path, os.path.dirname(os.path.abspath(path)), environ)


def _parse(
    doc: dict[str, Any], origin: str, base_dir: str | None, environ: Mapping[str, str] | None
) -> CalvingConfig:
    """``parse_config`` with the sections a foreachBatch sink does not read filled in."""
    doc = {k: dict(v) if isinstance(v, Mapping) else v for k, v in doc.items()}
    if "source" not in doc:
        doc["source"] = dict(_UNUSED_SOURCE)
        metrics = doc.setdefault("metrics", {})
        if isinstance(metrics, dict):
            metrics.setdefault("lag", False)  # no broker to ask
    sink_section = doc.setdefault("sink", {})
    if isinstance(sink_section, dict):
        sink_section.setdefault("checkpoint", _UNUSED_CHECKPOINT)
    return parse_config(doc, origin, base_dir=base_dir, environ=environ)


def _plain(value: Any) -> Any:
    """Keyword values as TOML would give them (tuples as lists, mappings as dicts)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes))
    ):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


__all__ = ["has_source", "sink", "sink_config"]
