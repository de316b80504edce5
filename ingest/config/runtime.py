"""``[sink]`` (the streaming write: identity, checkpoint, trigger, dead letters) and
``[spark]`` (the session)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from calving.commit.catalog.base import check_ident
from calving.commit.errors import CalvingError, ConfigError
from calving.ingest.config.reader import Section
from calving.ingest.config.secrets import join_key, masked_repr
from calving.ingest.config.spark_settings import MASTER_FORMS, bad_settings, master_ok

SINK_KEYS = (
    "writer_id",
    "checkpoint",
    "trigger_interval",
    "dead_letter_table",
    "dead_letter_topic",
    "dead_letter_max_bytes",
    "key_partitions",
    "index_save_every",
    "index_memory_bytes",
    "evolve_schema",
    "path",
    "transaction_topic",
    "transaction_timeout",
    "topic_prefix",
)
#: ``[sink] index_memory_bytes`` unless set: 2 GiB.
DEFAULT_INDEX_MEMORY_BYTES = 2 * 2**30
#: ``[sink] path``: how records reach the writers (see ``calving.ingest.sink.path_choice``).
SINK_PATHS = ("auto", "fused", "shuffle")
SPARK_KEYS = ("master", "app_name", "conf")
#: Below Kafka's default 1 MB message.max.bytes, with room for headers.
DEFAULT_DEAD_LETTER_MAX_BYTES = 900_000
_INTERVAL = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|millis|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?)\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True, repr=False)
class SinkConfig:
    #: The exactly-once ledger identity (``calving.ledger.<writer_id>``): stable across
    #: restarts and unique per pipeline writing the table.
    writer_id: str
    #: Spark checkpoint location (absolute path or URI).
    checkpoint: str
    #: Spark's processing-time trigger, e.g. ``"5 seconds"``.
    trigger_interval: str = "2 seconds"
    #: Full name (``namespace.table``) of the dead-letter table in the same catalog.
    dead_letter_table: str | None = None
    dead_letter_topic: str | None = None
    #: Largest dead-letter copy sent to the topic (key + value + headers); bigger ones
    #: are cut and flagged ``calving.truncated`` (the dead-letter table keeps them whole).
    dead_letter_max_bytes: int = DEFAULT_DEAD_LETTER_MAX_BYTES
    #: Number of key-hash partitions for keyed (CDC) writes; None lets the sink choose.
    key_partitions: int | None = None
    #: Save the primary-key index with the table every N batches.
    index_save_every: int = 20
    #: Many tables: the primary-key indexes kept in the driver between batches, in
    #: bytes; past it the least recently used are saved with their tables and dropped.
    index_memory_bytes: int = DEFAULT_INDEX_MEMORY_BYTES
    #: Add optional columns for unknown JSON fields of a single scalar kind.
    evolve_schema: bool = True
    #: ``auto`` (fused read-decode-write tasks unless a key may span Kafka partitions),
    #: ``fused`` or ``shuffle`` (records through Spark, keyed tables repartitioned by key).
    path: str = "auto"
    #: Many tables: Debezium's transaction topic (``<prefix>.transaction``); with it,
    #: every commit holds whole source transactions only.
    transaction_topic: str | None = None
    #: How long an incomplete source transaction may hold its events back before they
    #: are committed anyway (``"5 minutes"``).
    transaction_timeout: str = "5 minutes"
    #: With ``transaction_topic``: Debezium's ``topic.prefix``; an END marker's data
    #: collection ``X`` no event has named yet is topic ``<topic_prefix>.X``. Default:
    #: ``transaction_topic`` without its ``.transaction`` suffix.
    topic_prefix: str | None = None
    env_keys: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)

    def __repr__(self) -> str:
        return masked_repr(self)

    @property
    def trigger_seconds(self) -> float:
        return interval_seconds(self.trigger_interval)

    @property
    def transaction_timeout_seconds(self) -> float:
        return interval_seconds(self.transaction_timeout)


@dataclass(frozen=True, repr=False)
class SparkConfig:
    master: str = "local[2]"
    app_name: str = "calving"
    #: Spark settings passed to the session builder (``spark.sql.shuffle.partitions`` ...).
    conf: dict[str, str] = field(default_factory=dict)
    env_keys: frozenset[str] = field(default_factory=frozenset, compare=False, repr=False)

    def __repr__(self) -> str:
        return masked_repr(self)


def interval_seconds(text: str) -> float:
    """``"5 seconds"`` -> 5.0 (Spark's interval spellings; ``ValueError`` otherwise)."""
    m = _INTERVAL.match(text)
    if m is None:
        raise ValueError(text)
    return float(m.group(1)) * _interval_factor(m.group(2))


def _interval_factor(unit: str) -> float:
    u = unit.lower()
    if u.startswith(("ms", "milli")):
        return 0.001
    if u.startswith("h"):
        return 3600.0
    if u.startswith("d"):
        return 86400.0
    if u.startswith("m"):
        return 60.0
    return 1.0


def parse_sink(s: Section, table_name: str) -> SinkConfig:
    writer_id = s.required_string("writer_id", what="a stable name for this pipeline")
    if any(c.isspace() for c in writer_id):
        shown = s.shown(s.key("writer_id"), writer_id)
        s.fail("writer_id", f"must not contain spaces, got {shown}")
    if any(ord(c) < 32 or ord(c) == 127 for c in writer_id):
        s.fail("writer_id", "must not contain NUL or other control characters")
    checkpoint = s.ctx.resolve_path(
        s.required_string("checkpoint", what="a directory or URI for Spark's checkpoint")
    )
    interval = _duration(s, "trigger_interval", "2 seconds")
    txn_timeout = _duration(s, "transaction_timeout", "5 minutes")
    transaction_topic = s.string("transaction_topic", what="a Kafka topic name")
    dead_table = s.string("dead_letter_table", what='a table name ("namespace.table" or "table")')
    if dead_table is not None:
        if "." not in dead_table:
            # A bare name lives in the main table's namespace; a template has none.
            namespace = table_name.rsplit(".", 1)[0]
            if "{" in namespace:
                s.fail(
                    "dead_letter_table",
                    f"a bare name has no namespace when table.name is a template "
                    f'({table_name!r}); give "namespace.{dead_table}"',
                )
            dead_table = namespace + "." + dead_table
        try:
            check_ident(tuple(dead_table.split(".")))
        except CalvingError:
            shown = s.shown(s.key("dead_letter_table"), dead_table)
            s.fail("dead_letter_table", f'expected "namespace.table", got {shown}')
        if any(ord(c) < 32 or ord(c) == 127 for c in dead_table) or any(
            not part.strip() for part in dead_table.split(".")
        ):
            shown = s.shown(s.key("dead_letter_table"), dead_table)
            s.fail("dead_letter_table", f"expected non-empty names without NUL, got {shown}")
        if dead_table == table_name:
            s.fail("dead_letter_table", "must differ from table.name")
    config = SinkConfig(
        writer_id=writer_id,
        checkpoint=checkpoint,
        trigger_interval=interval.strip(),
        dead_letter_table=dead_table,
        dead_letter_topic=s.string("dead_letter_topic", what="a Kafka topic name"),
        dead_letter_max_bytes=s.integer(
            "dead_letter_max_bytes", DEFAULT_DEAD_LETTER_MAX_BYTES, minimum=1024
        )
        or DEFAULT_DEAD_LETTER_MAX_BYTES,
        key_partitions=s.integer("key_partitions", minimum=1),
        index_save_every=s.integer("index_save_every", 20, minimum=1) or 20,
        index_memory_bytes=s.integer(
            "index_memory_bytes", DEFAULT_INDEX_MEMORY_BYTES, minimum=2**20
        )
        or DEFAULT_INDEX_MEMORY_BYTES,
        evolve_schema=s.boolean("evolve_schema", True),
        path=_path(s),
        transaction_topic=transaction_topic,
        transaction_timeout=txn_timeout.strip(),
        topic_prefix=_topic_prefix(s, transaction_topic),
        env_keys=s.env_names(),
    )
    s.finish()
    return config


#: The suffix of Debezium's default transaction topic name (``<topic.prefix>.transaction``).
TRANSACTION_SUFFIX = ".transaction"


def _topic_prefix(s: Section, transaction_topic: str | None) -> str | None:
    """``topic_prefix``, or the one ``transaction_topic`` is named after; refused when
    neither tells how END markers' data collections name topics."""
    prefix = s.string("topic_prefix", what="Debezium's topic.prefix")
    if prefix is not None and transaction_topic is None:
        s.fail("topic_prefix", "maps transaction END markers to topics: set transaction_topic")
    if prefix is not None:
        if not prefix.strip() or prefix.endswith("."):
            shown = s.shown(s.key("topic_prefix"), prefix)
            s.fail(
                "topic_prefix",
                f'expected Debezium\'s topic.prefix such as "dbserver1", got {shown}',
            )
        return prefix
    if transaction_topic is None:
        return None
    if (
        not transaction_topic.endswith(TRANSACTION_SUFFIX)
        or transaction_topic == TRANSACTION_SUFFIX
    ):
        shown = s.shown(s.key("transaction_topic"), transaction_topic)
        s.fail(
            "transaction_topic",
            f"{shown} is not named <topic.prefix>.transaction, so END markers' data "
            "collections cannot be mapped to topics; set sink.topic_prefix to Debezium's "
            "topic.prefix",
        )
    return transaction_topic[: -len(TRANSACTION_SUFFIX)]


def _duration(s: Section, name: str, default: str) -> str:
    value = s.string(name, default, what='a duration such as "5 seconds"')
    assert value is not None
    if _INTERVAL.match(value) is None:
        s.fail(
            name,
            f'expected a duration such as "500 milliseconds", "5 seconds" or "1 minute", '
            f"got {s.shown(s.key(name), value)}",
        )
    return value


def _path(s: Section) -> str:
    path = s.string("path", "auto", choices=SINK_PATHS, what="how records reach the writers")
    assert path is not None
    return path


def parse_spark(s: Section | None) -> SparkConfig:
    if s is None:
        return SparkConfig()
    master = s.string("master", "local[2]", what="a Spark master URL") or "local[2]"
    if not master_ok(master):
        s.fail("master", f"expected {MASTER_FORMS}, got {s.shown(s.key('master'), master)}")
    config = SparkConfig(
        master=master.strip(),
        app_name=s.string("app_name", "calving") or "calving",
        conf=s.passthrough("conf"),
        env_keys=s.env_names(),
    )
    s.finish()
    if "spark.master" in config.conf or "spark.app.name" in config.conf:
        raise ConfigError("spark.conf: set spark.master / spark.app_name instead of the conf keys")
    bad = bad_settings(config.conf)
    if bad is not None:
        key = join_key(s.key("conf"), bad[0])
        shown = s.shown(key, config.conf[bad[0]])
        raise ConfigError(f"{key}: Spark reads this setting as {bad[1]}, got {shown}")
    return config


__all__ = ["SinkConfig", "SparkConfig", "interval_seconds", "parse_sink", "parse_spark"]
