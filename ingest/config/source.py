"""``[source]``: which Kafka records to read, as options of the ``calving-kafka`` source.

The keys are snake_case forms of Spark's Kafka source options; ``spark_options()`` gives
the exact option map ``calving.ingest.kafka.options.KafkaSourceOptions`` parses, and parsing it
once here means a bad offsets JSON or a forbidden ``kafka.*`` setting is reported when
the config is loaded, with the config key named.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from calving.commit.errors import ConfigError
from calving.ingest.config.kafka_settings import bad_kafka_setting
from calving.ingest.config.reader import Section
from calving.ingest.config.secrets import join_key, masked_repr
from calving.ingest.kafka.offsets import parse_assign_option, parse_offsets_option
from calving.ingest.kafka.options import KafkaSourceOptions

KEYS = (
    "bootstrap_servers",
    "topics",
    "topic_pattern",
    "assign",
    "starting_offsets",
    "max_offsets_per_trigger",
    "fail_on_data_loss",
    "include_headers",
    "min_partitions",
    "task_records",
    "group_id_prefix",
    "poll_timeout_ms",
    "fetch_offset_retries",
    "fetch_offset_retry_interval_ms",
    "connect_timeout_ms",
    "wait_for_topics",
    "kafka",
)
_SUBSCRIPTIONS = ("topics", "topic_pattern", "assign")
# Config key -> Spark option, for naming the config key in the source's own errors.
_OPTION_KEYS = {
    "subscribe": "topics",
    "subscribePattern": "topic_pattern",
    "assign": "assign",
    "startingOffsets": "starting_offsets",
}


@dataclass(frozen=True, repr=False)
class SourceConfig:
    """Where records come from. Exactly one of ``topics``, ``topic_pattern``, ``assign``
    is set. ``kafka`` holds librdkafka settings passed through unchanged
    (``security.protocol``, ``sasl.*``, ``ssl.*``, ``group.id`` ...)."""

    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    #: Spark's ``assign`` JSON, e.g. ``{"orders": [0, 1]}``.
    assign: str | None = None
    #: ``"earliest"``, ``"latest"`` or offsets JSON ``{"orders": {"0": 42}}``.
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    #: The fused path: small ranges share a task up to this many records (default 10,000).
    task_records: int | None = None
    group_id_prefix: str | None = None
    poll_timeout_ms: int | None = None
    fetch_offset_retries: int | None = None
    fetch_offset_retry_interval_ms: int | None = None
    #: Bound on the driver's metadata/offset requests, retries included (default 30 s).
    connect_timeout_ms: int | None = None
    #: A configured topic (``topics`` or ``assign``) that does not exist at start:
    #: false (default) refuses to start, naming it; true waits until it exists.
    wait_for_topics: bool = False
    kafka: dict[str, str] = field(default_factory=dict)
    #: Keys (relative to ``[source]``) whose values came from ``${env:...}``: masked.
    env_keys: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)

    def __repr__(self) -> str:
        return masked_repr(self)

    def spark_options(self) -> dict[str, str]:
        """Options for ``spark.readStream.format("calving-kafka")`` (Spark's names).

        The pipeline adds ``calving.startingLedger`` from the table's ledger itself.
        """
        out = {"kafka.bootstrap.servers": self.bootstrap_servers}
        if self.topics:
            out["subscribe"] = ",".join(self.topics)
        elif self.topic_pattern is not None:
            out["subscribePattern"] = self.topic_pattern
        elif self.assign is not None:
            out["assign"] = self.assign
        out["startingOffsets"] = self.starting_offsets
        out["failOnDataLoss"] = "true" if self.fail_on_data_loss else "false"
        out["includeHeaders"] = "true" if self.include_headers else "false"
        optional = {
            "maxOffsetsPerTrigger": self.max_offsets_per_trigger,
            "minPartitions": self.min_partitions,
            "calving.taskRecords": self.task_records,
            "groupIdPrefix": self.group_id_prefix,
            "kafkaConsumer.pollTimeoutMs": self.poll_timeout_ms,
            "fetchOffset.numRetries": self.fetch_offset_retries,
            "fetchOffset.retryIntervalMs": self.fetch_offset_retry_interval_ms,
            "calving.connectTimeoutMs": self.connect_timeout_ms,
        }
        out.update({k: str(v) for k, v in optional.items() if v is not None})
        out.update({f"kafka.{k}": v for k, v in self.kafka.items()})
        return out

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka settings for other clients of the same cluster (e.g. the sink's
        dead-letter producer): ``bootstrap.servers`` plus the passthrough settings."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka}

    def source_options(self) -> KafkaSourceOptions:
        return KafkaSourceOptions.parse(self.spark_options())


def parse_source(s: Section) -> SourceConfig:
    servers = s.raw("bootstrap_servers")
    if isinstance(servers, list) and servers and all(isinstance(x, str) for x in servers):
        servers = ",".join(servers)
    if servers is None:
        s.fail("bootstrap_servers", 'is required (a string such as "broker1:9092,broker2:9092")')
    if not isinstance(servers, str) or not servers.strip():
        s.wrong("bootstrap_servers", 'a string such as "broker1:9092,broker2:9092"', servers)

    given = [k for k in _SUBSCRIPTIONS if s.has(k)]
    if len(given) != 1:
        found = ", ".join(s.key(k) for k in given) if given else "none"
        raise ConfigError(
            f"{s.path}: exactly one of topics, topic_pattern, assign must be set (found: {found})"
        )
    topics = s.string_list("topics", what='a list of topic names such as ["orders"]') or ()
    if "topics" in given and not topics:
        s.fail("topics", 'names no topic; expected a list such as ["orders"]')
    pattern = s.string("topic_pattern", what="a regular expression over topic names")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            s.fail("topic_pattern", f"invalid regular expression ({exc})")
    assign = _json_option(s, "assign", 'JSON such as {"orders": [0, 1]} (a string or a table)')
    if assign is not None:
        _reword(s, "assign", lambda: parse_assign_option(assign))

    starting = _json_option(
        s, "starting_offsets", '"earliest", "latest" or offsets JSON such as {"orders": {"0": 42}}'
    )
    if starting is None:
        starting = "earliest"
    elif starting.strip().lower() in ("earliest", "latest"):
        starting = starting.strip().lower()
    else:
        _reword(s, "starting_offsets", lambda: parse_offsets_option(starting, "x", True))

    kafka = s.passthrough("kafka")
    if "bootstrap.servers" in kafka:
        raise ConfigError(
            f"{join_key(s.key('kafka'), 'bootstrap.servers')}: set source.bootstrap_servers instead"
        )
    refused = bad_kafka_setting(kafka)
    if refused is not None:
        raise ConfigError(f"{join_key(s.key('kafka'), refused[0])}: {refused[1]}")
    config = SourceConfig(
        bootstrap_servers=servers.strip(),
        topics=tuple(t.strip() for t in topics),
        topic_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        max_offsets_per_trigger=s.integer("max_offsets_per_trigger", minimum=1),
        fail_on_data_loss=s.boolean("fail_on_data_loss", True),
        include_headers=s.boolean("include_headers", False),
        min_partitions=s.integer("min_partitions", minimum=1),
        task_records=s.integer("task_records", minimum=1),
        group_id_prefix=s.string("group_id_prefix"),
        poll_timeout_ms=s.integer("poll_timeout_ms", minimum=1),
        fetch_offset_retries=s.integer("fetch_offset_retries", minimum=0),
        fetch_offset_retry_interval_ms=s.integer("fetch_offset_retry_interval_ms", minimum=0),
        connect_timeout_ms=s.integer("connect_timeout_ms", minimum=1),
        wait_for_topics=s.boolean("wait_for_topics", False),
        kafka=kafka,
        env_keys=s.env_names(),
    )
    s.finish()
    _check_with_source(s, config)
    return config


def _json_option(s: Section, name: str, what: str) -> str | None:
    """A string option that may also be written as a TOML table (turned into JSON)."""
    value = s.raw(name)
    if value is None:
        return None
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    if not isinstance(value, str) or not value.strip():
        s.wrong(name, what, value)
    return value


def _reword(s: Section, name: str, check: Any) -> None:
    # The offsets parser names Spark's option; say which config key holds the value.
    try:
        check()
    except ConfigError as exc:
        detail = str(exc).split(": ", 1)[-1]
        if s.is_env(name):
            # The parser quotes parts of the value (topics, offsets): say only where from.
            detail = f"not valid here, got {s.shown(s.key(name), None)}"
        raise ConfigError(f"{s.key(name)}: {detail}") from None


def _check_with_source(s: Section, config: SourceConfig) -> None:
    """Let the Kafka source parse its options now, so its refusals (e.g. a
    ``kafka.enable.auto.commit`` the source owns) surface at load time."""
    try:
        config.source_options()
    except ConfigError as exc:
        text = str(exc)
        kafka_key = re.search(r"'kafka\.([^']+)'", text)
        if kafka_key:
            raise ConfigError(f"{join_key(s.key('kafka'), kafka_key.group(1))}: {text}") from None
        option = re.search(r"'([A-Za-z.]+)'", text)
        key = _OPTION_KEYS.get(option.group(1), "") if option else ""
        raise ConfigError(f"{s.key(key) if key else s.path}: {text}") from None
