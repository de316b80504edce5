"""Options of the ``calving-kafka`` streaming source, named and valued as Spark's built-in
Kafka source names them, parsed once into a typed value.

Unknown options are refused (a misspelt ``startingOffset`` would otherwise silently read
from the wrong place); every error is a ``ConfigError`` naming the option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from calving.commit.errors import ConfigError
from calving.ingest.kafka.offsets import (
    Offsets,
    TopicPartition,
    parse_assign_option,
    parse_offsets_option,
)

#: The option naming calving's exactly-once ledger: next uncommitted offset per partition.
STARTING_LEDGER = "calving.startingLedger"
#: How long (ms) the driver keeps asking an unreachable cluster for metadata or offsets,
#: all retries included, before the query fails with ``KafkaUnavailableError``.
CONNECT_TIMEOUT = "calving.connectTimeoutMs"
DEFAULT_CONNECT_TIMEOUT_MS = 30_000
#: ``records`` (default): one row per Kafka record, Spark's Kafka columns. ``ranges``: one
#: row per planned offset range (``RANGE_COLUMNS``), for sinks that read the records
#: themselves in the same task (calving's fused path): record bytes never enter the JVM.
EMIT = "calving.emit"
#: ``false`` keeps each topic-partition's range in one task whatever ``minPartitions``
#: says (a keyed table's fused path: every key of a partition stays in one task).
SPLIT_RANGES = "calving.splitRanges"
#: With ``calving.emit = ranges``: the range rows in at most this many Spark tasks
#: (default: a task per range). A sink that collects the rows on the driver (the
#: many-table sink) asks for one: a task per range cost 17 s for 500 ranges here.
RANGE_TASKS = "calving.rangeTasks"
#: With ``calving.emit = ranges`` and no ``calving.rangeTasks`` or ``minPartitions``: small
#: ranges share a task until it holds this many records (``group_small_ranges``), so a
#: small batch writes one file per table partition, not one per Kafka partition too.
#: 1 keeps a task per range. No effect with ``calving.emit = records``.
TASK_RECORDS = "calving.taskRecords"
DEFAULT_TASK_RECORDS = 10_000

_KAFKA_PREFIX = "kafka."
_SUBSCRIPTION_KINDS = ("subscribe", "subscribePattern", "assign")
_KNOWN = {
    name.lower(): name
    for name in (
        *_SUBSCRIPTION_KINDS,
        "startingOffsets",
        "maxOffsetsPerTrigger",
        "failOnDataLoss",
        "includeHeaders",
        "minPartitions",
        "groupIdPrefix",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        STARTING_LEDGER,
        CONNECT_TIMEOUT,
        EMIT,
        SPLIT_RANGES,
        RANGE_TASKS,
        TASK_RECORDS,
    )
}
#: Consumer settings the source owns; Spark refuses the same ones.
_FORBIDDEN_KAFKA = {
    "auto.offset.reset": "use the startingOffsets option",
    "enable.auto.commit": "offsets live in Spark's checkpoint and calving's table ledger",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "interceptor.classes": "not supported by the source",
}
#: Kafka's own topics, never matched by subscribePattern (like Kafka's consumer).
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions the source reads: exactly one of the three Spark forms."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def select(self, partition_counts: Mapping[str, int]) -> list[TopicPartition]:
        """The topic-partitions to read now, given the broker's topics and partition
        counts. Topics that do not exist (yet) contribute nothing."""
        if self.kind == "assign":
            return [(t, p) for t, p in self.assigned if p < partition_counts.get(t, 0)]
        if self.kind == "subscribe":
            topics = [t for t in self.topics if t in partition_counts]
        else:
            assert self.pattern is not None
            regex = re.compile(self.pattern)
            topics = [
                t for t in partition_counts if t not in _INTERNAL_TOPICS and regex.fullmatch(t)
            ]
        return sorted((t, p) for t in topics for p in range(partition_counts[t]))


@dataclass(frozen=True)
class KafkaSourceOptions:
    bootstrap_servers: str
    #: librdkafka settings from every ``kafka.*`` option, prefix removed.
    client_config: dict[str, str]
    subscription: Subscription
    #: "earliest", "latest", or explicit offsets (-2 earliest / -1 latest markers allowed).
    starting_offsets: Literal["earliest", "latest"] | Offsets
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    starting_ledger: Offsets = field(default_factory=dict)
    group_id_prefix: str = "calving-kafka-source"
    poll_timeout_s: float = 120.0
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_s: float = 0.01
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_MS / 1000
    emit: Literal["records", "ranges"] = "records"
    split_ranges: bool = True
    #: ``RANGE_TASKS`` (None: a task per range).
    range_tasks: int | None = None
    #: ``TASK_RECORDS``.
    task_records: int = DEFAULT_TASK_RECORDS

    @property
    def read_committed(self) -> bool:
        return self.client_config.get("isolation.level", "").lower() == "read_committed"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaSourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        for key in opts:
            if not key.startswith(_KAFKA_PREFIX) and key not in _KNOWN:
                raise ConfigError(
                    f"option {key!r} is not supported by calving-kafka; known options: "
                    f"kafka.*, {', '.join(sorted(_KNOWN.values()))}"
                )
        client_config = {
            k[len(_KAFKA_PREFIX) :]: v for k, v in opts.items() if k.startswith(_KAFKA_PREFIX)
        }
        for key, why in _FORBIDDEN_KAFKA.items():
            if key in client_config:
                raise ConfigError(f"option 'kafka.{key}' is not allowed: {why}")
        bootstrap = client_config.get("bootstrap.servers", "").strip()
        if not bootstrap:
            raise ConfigError("option 'kafka.bootstrap.servers' is required")

        return cls(
            bootstrap_servers=bootstrap,
            client_config=client_config,
            subscription=_parse_subscription(opts),
            starting_offsets=_parse_starting_offsets(opts.get("startingoffsets", "latest")),
            max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            include_headers=_bool(opts, "includeHeaders", False),
            min_partitions=_positive_int(opts, "minPartitions"),
            starting_ledger=parse_offsets_option(
                opts[STARTING_LEDGER.lower()], STARTING_LEDGER, allow_markers=False
            )
            if STARTING_LEDGER.lower() in opts
            else {},
            group_id_prefix=opts.get("groupidprefix", "calving-kafka-source"),
            poll_timeout_s=(_positive_int(opts, "kafkaConsumer.pollTimeoutMs") or 120_000) / 1000,
            fetch_offset_retries=_non_negative_int(opts, "fetchOffset.numRetries", 3),
            fetch_offset_retry_interval_s=_non_negative_int(opts, "fetchOffset.retryIntervalMs", 10)
            / 1000,
            connect_timeout_s=(_positive_int(opts, CONNECT_TIMEOUT) or DEFAULT_CONNECT_TIMEOUT_MS)
            / 1000,
            emit=_emit(opts),
            split_ranges=_bool(opts, SPLIT_RANGES, True),
            range_tasks=_range_tasks(opts),
            task_records=_task_records(opts),
        )


def _range_tasks(opts: Mapping[str, str]) -> int | None:
    tasks = _positive_int(opts, RANGE_TASKS)
    if tasks is not None and _emit(opts) != "ranges":
        raise ConfigError(f"option {RANGE_TASKS!r} applies only with {EMIT} = ranges")
    return tasks


def _task_records(opts: Mapping[str, str]) -> int:
    records = _positive_int(opts, TASK_RECORDS)  # no effect on records (the shuffle path)
    return DEFAULT_TASK_RECORDS if records is None else records


def _emit(opts: Mapping[str, str]) -> Literal["records", "ranges"]:
    raw = opts.get(EMIT.lower(), "records").strip().lower()
    if raw == "records":
        return "records"
    if raw == "ranges":
        return "ranges"
    raise ConfigError(f"option {EMIT!r} must be records or ranges, got {raw!r}")


def _parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [kind for kind in _SUBSCRIPTION_KINDS if kind.lower() in opts]
    if len(given) != 1:
        found = ", ".join(given) if given else "none"
        raise ConfigError(
            "exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be "
            f"set (found: {found})"
        )
    kind = given[0]
    value = opts[kind.lower()]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigError("option 'subscribe' names no topic")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribePattern":
        if not value.strip():
            raise ConfigError("option 'subscribePattern' is empty")
        try:
            re.compile(value)
        except re.error as error:
            raise ConfigError(f"option 'subscribePattern': invalid regex ({error})") from None
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", assigned=tuple(parse_assign_option(value)))


def _parse_starting_offsets(text: str) -> Literal["earliest", "latest"] | Offsets:
    word = text.strip().lower()
    if word == "earliest":
        return "earliest"
    if word == "latest":
        return "latest"
    return parse_offsets_option(text, "startingOffsets", allow_markers=True)


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ConfigError(f"option {name!r} must be true or false, got {raw!r}")


def _int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {name!r} must be an integer, got {raw!r}") from None


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    value = _int(opts, name)
    if value is not None and value < 1:
        raise ConfigError(f"option {name!r} must be positive, got {value}")
    return value


def _non_negative_int(opts: Mapping[str, str], name: str, default: int) -> int:
    value = _int(opts, name)
    if value is None:
        return default
    if value < 0:
        raise ConfigError(f"option {name!r} must not be negative, got {value}")
    return value
