"""Issue 10 part 3: a bad value that came from ``${env:NAME}`` is never echoed. For
every config key that can hold a string, a bad value carrying a planted secret is set
through the environment; the error (at load, or in the pre-create stage) names the key
and never contains the secret."""

from __future__ import annotations

import re

import pytest

from calving.commit.errors import ConfigError
from calving.ingest.config.format import KEYS as FORMAT_KEYS
from calving.ingest.config.loader import parse_config
from calving.ingest.config.maintenance import MAINTENANCE_KEYS
from calving.ingest.config.metrics import METRICS_KEYS
from calving.ingest.config.preflight import validate_before_create
from calving.ingest.config.runtime import SINK_KEYS, SPARK_KEYS
from calving.ingest.config.source import KEYS as SOURCE_KEYS
from calving.ingest.config.table import COLUMN_KEYS
from calving.ingest.config.table import KEYS as TABLE_KEYS

from .documents import cdc, edit

S = "PLANTED_Secret_4711"

# (key edited, bad value holding the secret, key the error must name)
CASES = [
    ("source.bootstrap_servers", "   ", "source.bootstrap_servers"),
    ("source.topics", [f"{S}", ""], "source.topics[1]"),
    ("source.topic_pattern", f"({S}", "source.topic_pattern"),
    ("source.assign", f'{{"{S}": [0, "x"]}}', "source.assign"),
    ("source.starting_offsets", f'{{"{S}": {{"0": "x"}}}}', "source.starting_offsets"),
    ("source.starting_offsets", f"earliest-{S}", "source.starting_offsets"),
    ("source.max_offsets_per_trigger", S, "source.max_offsets_per_trigger"),
    ("source.fail_on_data_loss", S, "source.fail_on_data_loss"),
    ("source.include_headers", S, "source.include_headers"),
    ("source.wait_for_topics", S, "source.wait_for_topics"),
    ("source.min_partitions", S, "source.min_partitions"),
    ("source.task_records", S, "source.task_records"),
    ("source.group_id_prefix", "   ", "source.group_id_prefix"),
    ("source.poll_timeout_ms", S, "source.poll_timeout_ms"),
    ("source.fetch_offset_retries", S, "source.fetch_offset_retries"),
    ("source.fetch_offset_retry_interval_ms", S, "source.fetch_offset_retry_interval_ms"),
    ("source.connect_timeout_ms", S, "source.connect_timeout_ms"),
    ("source.kafka", {"security.protocol": S}, 'source.kafka."security.protocol"'),
    ("format.type", S, "format.type"),
    ("format.key_format", S, "format.key_format"),
    ("format.epoch_unit", S, "format.epoch_unit"),
    ("format.decimal_handling_mode", S, "format.decimal_handling_mode"),
    ("format.case_insensitive", S, "format.case_insensitive"),
    ("format.naive_timestamps_as_utc", S, "format.naive_timestamps_as_utc"),
    ("format.vectorized", S, "format.vectorized"),
    ("format.schema_registry_url", f"ftp://{S}", "format.schema_registry_url"),
    ("format.schema_dir", "   ", "format.schema_dir"),
    ("table.catalog", f"mysql://calving:{S}@db/catalog", "table.catalog"),
    ("table.catalog", f"{S}", "table.catalog"),
    ("table.catalog", f"rest+http://{S}:port", "table.catalog"),
    ("table.catalog", {"type": "rest", "uri": f"ftp://{S}"}, "table.catalog.uri"),
    ("table.catalog", {"type": S, "uri": "http://h"}, "table.catalog.type"),
    ("table.catalog", {"type": "rest", "uri": "http://h", "timeout": S}, "table.catalog.timeout"),
    (
        "table.catalog",
        {"type": "rest", "uri": "http://h", "oauth2_server_uri": f"ftp://{S}"},
        "table.catalog.oauth2_server_uri",
    ),
    ("table.catalog", {"type": "rest", "uri": "http://h", "scope": "  "}, "table.catalog.scope"),
    (
        "table.catalog",
        {"type": "rest", "uri": "http://h", "headers": {"X": [S]}},
        "table.catalog.headers.X",
    ),
    ("table.catalog", {"type": "sql", "uri": f"mysql://{S}@db/c"}, "table.catalog.uri"),
    ("table.catalog_name", "   ", "table.catalog_name"),
    ("table.warehouse", f"s3://[{S}", "table.warehouse"),
    ("table.name", S, "table.name"),
    ("table.identifier_fields", [S], "table.identifier_fields[0]"),
    ("table.partition", [f"bucket(16, {S})"], "table.partition[0]"),
    ("table.partition", [f"nonsense({S})"], "table.partition[0]"),
    ("table.partition", [f"bucket(99999999999, {S})"], "table.partition[0]"),
    (
        "table.properties",
        {"commit.retry.num-retries": S},
        'table.properties."commit.retry.num-retries"',
    ),
    ("table.columns.1.type", f"list<{S}>", "table.columns[1].type"),
    ("table.columns.1.type", f"struct<a: map<string, {S}>>", "table.columns[1].type"),
    ("table.columns.1.name", f"{S}\x00", "table.columns[1].name"),
    ("table.columns.1.required", S, "table.columns[1].required"),
    ("table.columns.1.doc", "   ", "table.columns[1].doc"),
    ("table.infer_schema", S, "table.infer_schema"),
    ("table.infer_temporal", S, "table.infer_temporal"),
    ("table.io", {"s3.endpoint": [S]}, 'table.io."s3.endpoint"'),
    ("table.topic_map", {"db.orders": S}, 'table.topic_map."db.orders"'),
    ("table.name_case", S, "table.name_case"),
    ("table.invalid_characters", S, "table.invalid_characters"),
    ("sink.writer_id", f"a {S}", "sink.writer_id"),
    ("sink.checkpoint", f"/etc/hostname/{S}", "sink.checkpoint"),
    ("sink.trigger_interval", S, "sink.trigger_interval"),
    ("sink.dead_letter_table", f"{S}.", "sink.dead_letter_table"),
    ("sink.dead_letter_topic", "   ", "sink.dead_letter_topic"),
    ("sink.dead_letter_max_bytes", S, "sink.dead_letter_max_bytes"),
    ("sink.key_partitions", S, "sink.key_partitions"),
    ("sink.index_save_every", S, "sink.index_save_every"),
    ("sink.index_memory_bytes", S, "sink.index_memory_bytes"),
    ("sink.evolve_schema", S, "sink.evolve_schema"),
    ("sink.path", S, "sink.path"),
    ("sink.transaction_topic", "   ", "sink.transaction_topic"),
    ("sink.transaction_timeout", S, "sink.transaction_timeout"),
    ("sink.topic_prefix", f"{S}.", "sink.topic_prefix"),
    ("spark", {"master": S}, "spark.master"),
    ("spark", {"app_name": "   "}, "spark.app_name"),
    ("spark", {"conf": {"spark.executor.cores": S}}, 'spark.conf."spark.executor.cores"'),
    ("metrics", {"port": S}, "metrics.port"),
    ("metrics", {"enabled": S}, "metrics.enabled"),
    ("metrics", {"host": "   "}, "metrics.host"),
    ("metrics", {"log_batches": S}, "metrics.log_batches"),
    ("metrics", {"lag": S}, "metrics.lag"),
    ("maintenance", {"inline": S}, "maintenance.inline"),
    ("maintenance", {"inline_interval": S}, "maintenance.inline_interval"),
    ("maintenance", {"inline_budget": S}, "maintenance.inline_budget"),
    ("maintenance", {"inline_compact_files": S}, "maintenance.inline_compact_files"),
    ("maintenance", {"rewrite_on": S}, "maintenance.rewrite_on"),
    ("maintenance", {"jobs": ["compact", S]}, "maintenance.jobs[1]"),
    ("maintenance", {"target_file_size_bytes": S}, "maintenance.target_file_size_bytes"),
    ("maintenance", {"min_input_files": S}, "maintenance.min_input_files"),
    ("maintenance", {"delete_ratio": S}, "maintenance.delete_ratio"),
    ("maintenance", {"max_group_bytes": S}, "maintenance.max_group_bytes"),
    ("maintenance", {"snapshot_retention_count": S}, "maintenance.snapshot_retention_count"),
    ("maintenance", {"snapshot_retention_age": S}, "maintenance.snapshot_retention_age"),
    ("maintenance", {"orphan_safety_age": S}, "maintenance.orphan_safety_age"),
    (
        "maintenance",
        {"manifest_target_size_bytes": S},
        "maintenance.manifest_target_size_bytes",
    ),
    ("maintenance", {"statistics_interval": S}, "maintenance.statistics_interval"),
    ("maintenance", {"max_commits": S}, "maintenance.max_commits"),
    ("maintenance", {"commit_pause": S}, "maintenance.commit_pause"),
]


def _with_env(value, names):
    """``value`` with every string replaced by a ``${env:...}`` reference."""
    if isinstance(value, str):
        name = f"BAD_{len(names)}"
        names[name] = value
        return "${env:" + name + "}"
    if isinstance(value, list):
        return [_with_env(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _with_env(v, names) for k, v in value.items()}
    return value


def _error(key, value):
    env: dict[str, str] = {}
    doc = edit(cdc(), key, _with_env(value, env))
    if key in ("source.topic_pattern", "source.assign"):
        doc = edit(doc, "source.topics")  # exactly one subscription
    if key.startswith("format.") and key != "format.type":
        doc = edit(doc, "format.type", "debezium-avro" if "schema" in key else "debezium-json")
        if "schema" not in key:
            doc = edit(doc, "format.key_format", "json") if key != "format.key_format" else doc
    with pytest.raises(ConfigError) as info:
        config = parse_config(doc, "pipeline.toml", base_dir="/tmp", environ=env)
        validate_before_create(config)
    return str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "named"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_env_value_is_never_echoed(key, value, named):
    message = _error(key, value)
    assert f"{named}:" in message or f"{named} " in message, message
    assert S.lower() not in message.lower(), message
    assert "\n" not in message


def test_every_string_key_is_covered():
    """Every key of every section is in CASES (the list grows with the config)."""
    covered = {re.sub(r"\[\d+\]", "", c[2]).split('."')[0] for c in CASES}
    sections = {
        "source": SOURCE_KEYS,
        "format": FORMAT_KEYS,
        "table": TABLE_KEYS,
        "sink": SINK_KEYS,
        "spark": SPARK_KEYS,
        "metrics": METRICS_KEYS,
        "maintenance": MAINTENANCE_KEYS,
    }
    wanted = {f"{s}.{k}" for s, keys in sections.items() for k in keys}
    wanted |= {f"table.columns.{k}" for k in COLUMN_KEYS} - {"table.columns"}
    covered |= {"table.columns"}  # the array itself: its entries' keys are listed
    missing = sorted(wanted - covered)
    assert not missing, f"keys without a masking case: {missing}"
