"""Shared machinery of the streaming benchmarks (``throughput``, ``freshness``).

One embedded Kafka broker (Tansu) and one ``local[2]`` Spark session per process, both
started on first use and warmed up once (a tiny run of every kind of stream, so Python
workers, imports and the JVM's first-use costs are paid before anything is timed);
``shutdown()`` stops them. The broker is started from the calling thread, which must
live as long as the broker (the main thread: ``python -m tests.bench`` runs benchmarks
one after another in it).

The peer stream, ``PyIcebergAppend``, is the straightforward way to feed Iceberg from
Spark in Python: a ``foreachBatch`` that decodes on the executors (with calving's own
decoder, so decoding costs the same on both sides), collects the decoded Arrow rows to
the driver (``DataFrame.toArrow``) and commits them with pyiceberg's ``Table.append``
into a format-v2 table of a pyiceberg ``SqlCatalog`` on SQLite. It has no exactly-once
ledger and, for change streams, appends the change rows as a log (no merge by key).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from calving.commit.catalog import SqlCatalog
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import NestedField, PrimitiveType
from calving.commit.table.table import Table, create_table
from calving.ingest.decode import DebeziumDecoder, JsonValueDecoder
from calving.ingest.decode.avro_confluent import ConfluentAvroDecoder
from calving.ingest.decode.schema_registry import LocalSchemaDirectory
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.coordinator import BatchStats
from calving.ingest.sink.foreach_batch import CalvingSink
from tests.support.cdc import SCHEMA as CDC_SCHEMA
from tests.support.cdc import cdc_events
from tests.support.streams import kafka_stream

REPO_ROOT = Path(__file__).resolve().parents[2]
TopicPartition = tuple[str, int]

#: The append benchmarks' table: ~110-byte JSON values of five fields.
JSON_SCHEMA = Schema(
    (
        NestedField(1, "id", PrimitiveType("long"), True),
        NestedField(2, "name", PrimitiveType("string"), False),
        NestedField(3, "amount", PrimitiveType("double"), False),
        NestedField(4, "active", PrimitiveType("boolean"), False),
        NestedField(5, "produced_at", PrimitiveType("double"), False),
    )
)
JSON_COLUMNS = ["id", "name", "amount", "active", "produced_at"]
CDC_COLUMNS = ["id", "status", "version"]


def json_value(i: int, produced_at: float = 0.0) -> bytes:
    return json.dumps(
        {
            "id": i,
            "name": f"customer-{i % 10_007:06d}",
            "amount": (i % 100_000) * 0.25,
            "active": i % 3 == 0,
            "produced_at": produced_at,
        }
    ).encode()


#: The Avro append benchmarks' writer schema (id 1): the JSON values' five fields.
AVRO_SCHEMA = {
    "type": "record",
    "name": "BenchRow",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
        {"name": "amount", "type": ["null", "double"]},
        {"name": "active", "type": ["null", "boolean"]},
        {"name": "produced_at", "type": ["null", "double"]},
    ],
}
AVRO_SCHEMA_ID = 1
_PARSED_AVRO: Any = None


def avro_value(i: int, produced_at: float = 0.0) -> bytes:
    """The Confluent-framed Avro form of ``json_value(i)``."""
    import io as _io
    import struct

    import fastavro

    global _PARSED_AVRO
    if _PARSED_AVRO is None:
        _PARSED_AVRO = fastavro.parse_schema(AVRO_SCHEMA)
    out = _io.BytesIO()
    out.write(b"\x00" + struct.pack(">I", AVRO_SCHEMA_ID))
    row = {
        "id": i,
        "name": f"customer-{i % 10_007:06d}",
        "amount": (i % 100_000) * 0.25,
        "active": i % 3 == 0,
        "produced_at": produced_at,
    }
    fastavro.schemaless_writer(out, _PARSED_AVRO, row)
    return out.getvalue()


def schema_dir(root: Path) -> Path:
    """A schema directory holding ``AVRO_SCHEMA`` as ``1.avsc``."""
    path = root / "schemas"
    path.mkdir(exist_ok=True)
    (path / f"{AVRO_SCHEMA_ID}.avsc").write_text(json.dumps(AVRO_SCHEMA))
    return path


def appends(kind: str) -> bool:
    """``json`` and ``avro`` append into ``JSON_SCHEMA``; ``debezium`` upserts into the
    keyed ``CDC_SCHEMA``."""
    return kind in ("json", "avro")


def table_schema(kind: str) -> Schema:
    return JSON_SCHEMA if appends(kind) else CDC_SCHEMA


def decoder_factory(kind: str, root: Path) -> Callable[[Schema], Any]:
    """Schema -> the benchmark's decoder of ``kind`` (picklable)."""
    if kind == "json":
        return JsonValueDecoder
    if kind == "avro":
        return functools.partial(
            ConfluentAvroDecoder, source=LocalSchemaDirectory(schema_dir(root))
        )
    return DebeziumDecoder


def log(what: str, msg: str) -> None:
    print(f"  [{what}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- broker + Spark


@dataclass
class Env:
    broker: Any
    spark: Any
    root: Path


_env: Env | None = None


def environment() -> Env:
    """The broker and Spark session of this process, started and warmed up once."""
    global _env
    if _env is None:
        root = Path(tempfile.mkdtemp(prefix="calving-bench-stream-"))
        broker = _start_broker(root)
        try:
            spark = _start_spark()
        except BaseException:
            broker.stop()
            raise
        _env = Env(broker, spark, root)
        started = time.perf_counter()
        _warm_up(_env)
        log("streaming", f"Spark and broker warmed up in {time.perf_counter() - started:.1f} s")
    return _env


def shutdown() -> None:
    global _env
    if _env is None:
        return
    env, _env = _env, None
    try:
        env.spark.stop()
    finally:
        env.broker.stop()
        shutil.rmtree(env.root, ignore_errors=True)


def _start_broker(root: Path) -> Any:
    from calving.ingest.kafka.broker import EmbeddedBroker

    return EmbeddedBroker(log_path=root / "tansu.log").start()


#: The benchmarks' Spark master: ``local[2]`` unless ``CALVING_BENCH_MASTER`` says otherwise
#: (``local[1]``, or a standalone cluster's ``spark://`` URL, as ``tests.bench.cost`` sets).
MASTER_ENV = "CALVING_BENCH_MASTER"
#: Pids of a standalone cluster's daemons (comma-separated): their executors and Python
#: workers are counted in the CPU figures.
CLUSTER_PIDS_ENV = "CALVING_BENCH_CLUSTER_PIDS"


def master() -> str:
    return os.environ.get(MASTER_ENV, "local[2]")


def _start_spark() -> Any:
    from tests.support.spark import local_session

    url = master()
    conf: dict[str, str] = {}
    if url.startswith("spark://"):
        # One single-core executor per worker; executors import the checkout (the peer's
        # foreachBatch code lives in tests/).
        conf = {
            "spark.executor.cores": "1",
            "spark.executor.memory": "768m",
            "spark.executorEnv.PYTHONPATH": str(REPO_ROOT),
        }
    return local_session("calving-bench", url, conf)


def new_topic(env: Env, partitions: int, prefix: str = "bench") -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    env.broker.create_topic(name, partitions)
    return name


def workdir(env: Env, prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=env.root))
    (path / "warehouse").mkdir()
    return path


# ---------------------------------------------------------------- tables


@dataclass
class Catalogs:
    """calving's and pyiceberg's SQL catalogs on one SQLite database."""

    calving: SqlCatalog
    pyiceberg: Any

    @classmethod
    def at(cls, path: Path) -> Catalogs:
        from pyiceberg.catalog.sql import SqlCatalog as PyCatalog

        uri = f"sqlite:///{path}/catalog.db"
        calving = SqlCatalog("bench", uri, str(path / "warehouse"))
        calving.create_namespace(("bench",))
        py = PyCatalog("bench", uri=uri, warehouse=f"file://{path}/warehouse")
        return cls(calving, py)

    def calving_table(self, schema: Schema) -> Table:
        return create_table(self.calving, ("bench", f"calving_{uuid.uuid4().hex[:8]}"), schema)

    def pyiceberg_table(self, schema: pa.Schema) -> Any:
        # All columns optional: the decoded rows' nullability then never blocks an append.
        schema = pa.schema([f.with_nullable(True) for f in schema])
        return self.pyiceberg.create_table(f"bench.py_{uuid.uuid4().hex[:8]}", schema=schema)


# ---------------------------------------------------------------- commit progress


@dataclass
class CommitLog:
    """Each committed batch's wall-clock time (``time.time()``) and offset ranges, from
    the sink's callback; ``done`` is set once the commits cover ``ends``."""

    ends: dict[TopicPartition, int] = field(default_factory=dict)
    commits: list[tuple[float, dict[TopicPartition, tuple[int, int]]]] = field(default_factory=list)
    covered: dict[TopicPartition, int] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    done_at: float | None = None
    first_batch_at: float | None = None
    #: CPU seconds by process group when the sink was first called (``drain``).
    cpu_at_first_batch: CpuSample | None = None
    started_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def expect(self, ends: Mapping[TopicPartition, int]) -> None:
        with self.lock:
            self.ends = dict(ends)
            self._check(time.time())

    def record(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> None:
        now = time.time()
        with self.lock:
            self.commits.append((now, dict(ranges)))
            for tp, (_, end) in ranges.items():
                self.covered[tp] = max(end, self.covered.get(tp, 0))
            self._check(now)

    def _check(self, now: float) -> None:
        if self.done.is_set() or not self.ends:
            return
        if all(self.covered.get(tp, 0) >= end for tp, end in self.ends.items()):
            self.done_at = now
            self.done.set()

    def on_calving_batch(self, stats: BatchStats) -> None:
        if stats.outcome == "committed":
            self.record({tp: (r.start, r.end) for tp, r in stats.ranges.items()})


def calving_sink(table: Table, kind: str, commits: CommitLog, root: Path) -> CalvingSink:
    return CalvingSink(
        table,
        decoder_factory(kind, root),
        f"bench-{uuid.uuid4().hex[:6]}",
        on_batch=commits.on_calving_batch,
    )


class PyIcebergAppend:
    """``foreachBatch`` peer: decode on executors, ``toArrow()``, pyiceberg ``append``."""

    def __init__(self, table: Any, kind: str, commits: CommitLog, topic: str, root: Path) -> None:
        self.table = table
        self.kind = kind
        self.topic = topic
        self.commits = commits
        self.decoder = decoder_factory(kind, root)(table_schema(kind))
        self.table_schema = table.schema().as_arrow()
        self.columns = list(self.table_schema.names)

    def __call__(self, df: Any, batch_id: int) -> None:
        from calving.ingest.sink.spark_types import spark_schema

        decoder, columns, kind = self.decoder, self.columns, self.kind
        stage = pa.schema(
            [*(self.table_schema.field(c) for c in columns if c != "op")]
            + ([] if appends(kind) else [pa.field("op", pa.int32())])
            + [pa.field("_partition", pa.int32()), pa.field("_offset", pa.int64())]
        )

        def decode(batches: Any) -> Any:
            for rb in batches:
                rows = decoder.decode(rb).rows
                if not appends(kind):
                    rows = rows.append_column("op", pc.cast(rows.column("_op"), pa.int32()))
                yield from rows.select(stage.names).cast(stage).to_batches()

        arrow = df.mapInArrow(decode, spark_schema(stage)).toArrow()
        if arrow.num_rows:
            self.table.append(arrow.select(columns).cast(self.table_schema))
            spans = arrow.group_by("_partition").aggregate([("_offset", "min"), ("_offset", "max")])
            topic = self.topic
            self.commits.record(
                {
                    (topic, p): (lo, hi + 1)
                    for p, lo, hi in zip(
                        spans.column("_partition").to_pylist(),
                        spans.column("_offset_min").to_pylist(),
                        spans.column("_offset_max").to_pylist(),
                    )
                }
            )


def pyiceberg_peer(
    catalogs: Catalogs, kind: str, commits: CommitLog, topic: str, root: Path
) -> Any:
    if appends(kind):
        schema = pa.schema(
            [
                pa.field("id", pa.int64()),
                pa.field("name", pa.string()),
                pa.field("amount", pa.float64()),
                pa.field("active", pa.bool_()),
                pa.field("produced_at", pa.float64()),
            ]
        )
    else:
        schema = pa.schema(
            [
                pa.field("id", pa.int64()),
                pa.field("status", pa.string()),
                pa.field("version", pa.int64()),
                pa.field("op", pa.int32()),
            ]
        )
    return PyIcebergAppend(catalogs.pyiceberg_table(schema), kind, commits, topic, root)


# ---------------------------------------------------------------- streams


#: calving's ``[sink] path`` in the benchmarks: ``fused`` (the default, as in
#: ``calving run``) or ``shuffle``; ``CALVING_BENCH_PATH=shuffle`` measures the latter.
CALVING_PATH = os.environ.get("CALVING_BENCH_PATH", "fused")


def start_stream(
    env: Env,
    topic: str,
    sink: Callable[[Any, int], None],
    checkpoint: Path,
    *,
    available_now: bool = False,
    processing_time: str | None = None,
    max_offsets_per_trigger: int | None = None,
    calving: CalvingSink | None = None,
) -> Any:
    """The stream into ``sink``; when ``calving`` is the CalvingSink behind ``sink``, on
    ``CALVING_PATH`` (the fused path reads the ranges in the sink's own tasks)."""
    if calving is None and isinstance(sink, CalvingSink):
        calving = sink
    df = kafka_stream(
        env.spark,
        env.broker.bootstrap_servers,
        topic,
        max_offsets_per_trigger=max_offsets_per_trigger,
        sink=calving,
        path=CALVING_PATH if calving is not None else "shuffle",
    )
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time or "500 milliseconds")
    return writer.start()


def stop_stream(query: Any) -> None:
    if query.isActive:
        query.stop()
    failure = query.exception()
    if failure is not None:
        raise RuntimeError(f"stream failed: {failure}")


def await_covered(query: Any, commits: CommitLog, timeout: float) -> None:
    """Wait until the commits cover every expected offset (or the query fails)."""
    deadline = time.monotonic() + timeout
    while not commits.done.wait(0.05):
        if not query.isActive:
            failure = query.exception()
            if failure is not None:
                raise RuntimeError(f"stream failed: {failure}")
            if not commits.done.is_set():
                raise RuntimeError(
                    f"stream ended with {commits.covered} committed, expected {commits.ends}"
                )
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"not committed within {timeout:.0f} s: {commits.covered} of {commits.ends}"
            )


def drain(
    env: Env,
    topic: str,
    sink: Callable[[Any, int], None],
    commits: CommitLog,
    checkpoint: Path,
    *,
    max_offsets_per_trigger: int | None = None,
    timeout: float = 900,
) -> float:
    """Run an ``availableNow`` stream over the topic; seconds from its start until the
    commits cover ``commits.ends``. ``commits.first_batch_at``: when the sink was first
    called (the query's start-up ends there)."""

    def timed_sink(df: Any, batch_id: int) -> None:
        if commits.first_batch_at is None:
            commits.first_batch_at = time.time()
            commits.cpu_at_first_batch = cpu_seconds(env)
        sink(df, batch_id)

    started = time.time()
    query = start_stream(
        env,
        topic,
        timed_sink,
        checkpoint,
        available_now=True,
        max_offsets_per_trigger=max_offsets_per_trigger,
        calving=sink if isinstance(sink, CalvingSink) else None,
    )
    try:
        await_covered(query, commits, timeout)
        query.awaitTermination(timeout)
    finally:
        stop_stream(query)
    assert commits.done_at is not None
    commits.started_at = started
    return commits.done_at - started


def _warm_up(env: Env) -> None:
    """One tiny run of each stream kind (calving append, calving keyed, pyiceberg)."""
    bootstrap = env.broker.bootstrap_servers
    work = workdir(env, "warm")
    catalogs = Catalogs.at(work)
    json_topic = new_topic(env, 2, "warm_json")
    ends = produce(bootstrap, json_topic, ((i % 2, None, json_value(i), None) for i in range(200)))
    cdc_topic = new_topic(env, 2, "warm_cdc")
    cdc_ends = produce(bootstrap, cdc_topic, cdc_events(50, 200, 2).records)
    runs: list[tuple[str, str, dict[TopicPartition, int]]] = [
        ("json", json_topic, {(json_topic, p): e for p, e in ends.items()}),
        ("debezium", cdc_topic, {(cdc_topic, p): e for p, e in cdc_ends.items()}),
    ]
    for i, (kind, topic, topic_ends) in enumerate(runs):
        for side in ("calving", "pyiceberg"):
            commits = CommitLog()
            commits.expect(topic_ends)
            sink = (
                calving_sink(catalogs.calving_table(table_schema(kind)), kind, commits, env.root)
                if side == "calving"
                else pyiceberg_peer(catalogs, kind, commits, topic, env.root)
            )
            drain(env, topic, sink, commits, work / f"ckpt-{i}-{side}", timeout=300)
    _warm_every_executor(env.spark)


def _import_the_write_path(task: int, item: int) -> list[int]:
    import calving.ingest.sink.fused  # noqa: F401  (the write tasks' modules, steps too)

    return [os.getpid()]


def _warm_every_executor(spark: Any) -> None:
    """A calving Python worker on every executor, with the write path imported. The
    warm-up streams are small: their ranges make one task, which warms one executor;
    another's first task of the measured stream would start a worker (about a second
    on this machine), in a first batch whose time then swung by 1.3 s from run to run."""
    from calving.ingest.sink.spark_tasks import executors, run_tasks

    places = executors(spark)
    if len(places) > 1:
        run_tasks(spark, _import_the_write_path, list(range(len(places))), places)


# ---------------------------------------------------------------- CPU accounting


def _proc_stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a live process: its user + system time and that of
    its children that exited and were waited for (so a Python worker that ends between
    two readings stays counted, in its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    # After the command: state, ppid, ..., utime, stime, cutime, cstime (12th-15th).
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / ticks


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


#: CPU seconds used so far, by (process group, pid): see ``cpu_seconds``.
CpuSample = dict[tuple[str, int], float]


def cpu_seconds(env: Env) -> CpuSample:
    """CPU seconds used so far by this process ("driver"), its Spark JVM ("jvm"), the
    JVM's Python workers ("python workers"), the broker ("broker") and other children,
    per process. Linux only; an empty dict elsewhere. Processes that already exited are
    not counted."""
    if not os.path.isdir("/proc"):
        return {}
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _proc_stat(int(entry))
            if got is not None:
                stats[int(entry)] = got
    me = os.getpid()
    broker_pid = env.broker.pid
    cluster = {int(p) for p in os.environ.get(CLUSTER_PIDS_ENV, "").split(",") if p}
    roots = {me, broker_pid, *cluster}

    def group(pid: int) -> str | None:
        java = _comm(pid).startswith("java")
        if pid in cluster:
            return "jvm"  # a standalone master or worker daemon
        seen, under_jvm = stats[pid][0], False
        while seen in stats and seen not in (*roots, 0, 1):
            under_jvm = under_jvm or _comm(seen).startswith("java")
            seen = stats[seen][0]
        if seen == broker_pid:
            return "broker"
        if java:  # the driver's JVM, or a cluster's executor
            return "jvm" if seen == me or seen in cluster else None
        if seen in cluster or (seen == me and under_jvm):
            return "python workers"
        return "other" if seen == me else None

    out: CpuSample = {}
    for pid, (_, cpu) in stats.items():
        name = "driver" if pid == me else "broker" if pid == broker_pid else group(pid)
        if name is not None:
            out[(name, pid)] = cpu
    return out


def cpu_used(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU seconds by process group between two samples: what each process still
    running at ``after`` used since ``before`` (all of it, if it started since). A
    process that exited in between is left out (its last seconds are lost), never
    counted as negative: a group whose processes exited, such as Spark's Python workers
    of an earlier run, used to come out below zero."""
    out: dict[str, float] = {}
    for key, cpu in after.items():
        out[key[0]] = out.get(key[0], 0.0) + cpu - before.get(key, 0.0)
    return out
