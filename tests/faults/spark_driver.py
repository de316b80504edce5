"""A Spark driver for the streaming fault scenarios, run as a subprocess and killed at will.

``python -m tests.faults.spark_driver '<json config>'``

Like ``tests.support.stream_driver`` (the ``calving-kafka`` source into a ``CalvingSink``
on a keyed Debezium table), plus what the fault harness needs:

* the catalog is a ``tests.faults.catalogs.CatalogSpec`` (SQLite, PostgreSQL, filesystem);
* every commit that claims offsets is recorded in the scenario's history file
  (``tests.faults.history``), one attempt per claimed partition, so the checker can tell
  acknowledged, cut-off, skipped and refused commits apart;
* fault points (``calving.commit.faults``) are armed *in this process only* after ``arm_after``
  committed batches (the spec is passed in the config, never through ``CALVING_FAULTS``,
  so Spark's Python workers never see it). The two points the commit core cannot hit
  itself are hit here: ``after-data-files`` (the executors wrote the batch's files, the
  coordinator has not committed) and ``after-swap-before-checkpoint`` (the batch's
  snapshot landed; ``foreachBatch`` has not returned, so Spark has not written the
  batch's entry under ``checkpoint/commits/``);
* ``from_ledger`` = false starts a query without a checkpoint at the earliest offsets
  instead of the table's ledger, so every committed record is read and replayed;
* extra source options (read timeouts for the broker-pause scenario);
* ``go_file``: a warm standby. Spark starts and a table-free warm-up job starts the
  Python workers, then the driver prints ``ready`` and waits for the file before it
  reads the table, its ledger or the checkpoint;
* ``mutation``: a deliberately broken build (``tests.faults.mutations``), in this
  process only.

The process ends with ``os._exit`` (the orderly Spark shutdown costs seconds); the JVM
follows once its pipe to this process closes, and the harness kills the process group.

Output, one line each: ``started``, ``<outcome> <batch> <snapshot> <records>`` per batch
(outcome ``committed`` / ``skipped`` / ``empty``), then ``drained`` (exit 0), or
``failed <ErrorClass>: <message>`` (exit 2) when the query stops with an error.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

EXIT_DONE = 0
EXIT_FAILED = 2


@dataclass
class DriverConfig:
    catalog: str  # CatalogSpec JSON
    bootstrap: str
    topic: str
    checkpoint: str
    writer: str
    history: str
    label: str = ""
    max_offsets: int | None = None
    available_now: bool = False
    trigger_ms: int = 500
    faults: str = ""  # "point=action[,point=action]", armed after ``arm_after`` commits
    # (0: before the query starts)
    arm_after: int = 1
    from_ledger: bool = True
    source_options: dict[str, str] = field(default_factory=dict)
    index_save_every: int = 3
    go_file: str = ""  # start Spark, print "ready", wait for this file, then run
    warmup: bool = False  # run a warm-up job first (always done by a standby)
    mutation: str = ""  # a deliberately broken build (tests.faults.mutations), driver only
    path: str = "fused"  # [sink] path: fused (the source emits ranges) or shuffle

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> DriverConfig:
        return DriverConfig(**json.loads(text))


def _say(line: str) -> None:
    print(line, flush=True)


_T0 = time.monotonic()


def _log_phase(what: str) -> None:
    print(f"[driver +{time.monotonic() - _T0:.1f}s] {what}", file=sys.stderr, flush=True)


def _warm_executors(batches: Any) -> Any:
    import calving.ingest.decode
    import calving.ingest.sink.executor  # noqa: F401

    yield from batches


def _warm_up(spark: Any) -> None:
    """Start Spark's Python workers and import what the sink's tasks import, in a job
    that touches no table: a standby's first batch then costs what a later one does."""
    df = spark.range(0, 4, numPartitions=2)
    df.mapInArrow(_warm_executors, df.schema).repartition(2, "id").mapInArrow(
        _warm_executors, df.schema
    ).collect()


_CAUSE = re.compile(r"^([\w.]*?(\w+(?:Error|Exception))): (.*)$")


def _root_cause(text: str) -> tuple[str, str]:
    """The innermost Python error a ``StreamingQueryException`` carries (its message
    embeds the failing batch's traceback): ``(class name, message)``."""
    found = ("StreamingQueryException", text.strip().splitlines()[0] if text.strip() else "")
    for line in text.splitlines():
        m = _CAUSE.match(line.strip())
        if m and not m.group(2).startswith(("StreamingQuery", "Spark", "Py4J")):
            found = (m.group(2), m.group(3))
    return found[0], found[1][:400]


def _arm(spec: str) -> None:
    from calving.commit import faults

    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, action = item.partition("=")
        faults.arm(point, action or "kill")


def _record_commits(table: Any, recorder: Any) -> None:
    """Wrap ``table.commit`` (this instance only): every action claiming offsets is
    recorded as one invoke + outcome per claimed partition."""
    from calving.commit.table.committer import Committed, Conflicted, Skipped
    from tests.faults.history import Claim

    inner = table.commit

    def commit(action: Any, **options: Any) -> Any:
        claim = getattr(action, "ledger", None)
        if claim is None or not claim.ranges:
            return inner(action, **options)
        base = table.metadata.current_snapshot_id
        ids = [
            recorder.invoke(
                type(action).__name__,
                Claim(claim.writer_id, tp[0], tp[1], rng.start, rng.end),
                base,
            )
            for tp, rng in sorted(claim.ranges.items())
            if rng.end > rng.start
        ]
        try:
            outcome = inner(action, **options)
        except Exception as err:
            for a in ids:
                recorder.record("error", attempt=a, detail=f"{type(err).__name__}: {err}")
            raise
        for a in ids:
            if isinstance(outcome, Committed):
                recorder.record(
                    "ok",
                    attempt=a,
                    snapshot=outcome.snapshot_id,
                    attempts=outcome.attempts,
                    detail="found-on-refresh" if outcome.found_on_refresh else None,
                )
            elif isinstance(outcome, Skipped):
                recorder.record("skip", attempt=a, detail=outcome.reason)
            elif isinstance(outcome, Conflicted):
                recorder.record(
                    "conflict",
                    attempt=a,
                    attempts=outcome.attempts,
                    detail=f"{type(outcome.error).__name__}: {outcome.error}",
                )
            else:
                recorder.record("unknown", attempt=a, detail=str(getattr(outcome, "error", "")))
        return outcome

    table.commit = commit


def run(cfg: DriverConfig) -> int:
    os.environ.pop("CALVING_FAULTS", None)  # armed below, in this process only

    from pyspark.errors import StreamingQueryException

    from calving.commit import faults
    from calving.commit.table.ledger import read_ledger
    from calving.commit.table.table import Table
    from calving.ingest.decode import DebeziumDecoder
    from calving.ingest.kafka.offsets import offsets_to_json
    from calving.ingest.kafka.source import KafkaSource
    from calving.ingest.sink.coordinator import BatchStats
    from calving.ingest.sink.foreach_batch import CalvingSink
    from tests.faults import mutations
    from tests.faults.catalogs import IDENT, CatalogSpec
    from tests.faults.history import HistoryRecorder
    from tests.support.spark import local_session
    from tests.support.streams import use_path

    spark = local_session(f"calving-faults-{cfg.label or cfg.writer}")
    spark.dataSource.register(KafkaSource)
    _log_phase("spark up")
    if cfg.go_file or cfg.warmup:
        _warm_up(spark)
        _log_phase("warm")
    if cfg.go_file:
        # A warm standby: everything the restart reads (table, ledger, checkpoint) is
        # read only once the harness says go, as a process started then would.
        _say("ready")
        while not os.path.exists(cfg.go_file):
            time.sleep(0.05)

    faults.disarm_all()
    mutations.apply(cfg.mutation)
    recorder = HistoryRecorder(cfg.history, cfg.writer)
    recorder.record(
        "run",
        detail=cfg.label or None,
        extra={
            "max_offsets": cfg.max_offsets,
            "available_now": cfg.available_now,
            "faults": cfg.faults,
            "arm_after": cfg.arm_after,
            "from_ledger": cfg.from_ledger,
            "checkpoint": cfg.checkpoint,
            "mutation": cfg.mutation,
        },
    )
    catalog = CatalogSpec.from_json(cfg.catalog).open()
    table = Table.load(catalog, IDENT)
    _log_phase("released" if cfg.go_file else "table loaded")
    _record_commits(table, recorder)

    sink = CalvingSink(table, DebeziumDecoder, cfg.writer, index_save_every=cfg.index_save_every)
    committed = 0
    inner_commit_batch = sink.coordinator.commit_batch

    def commit_batch(batch_id: int, parsed: Any) -> BatchStats:
        nonlocal committed
        if parsed.ranges:
            faults.hit("after-data-files")
        stats = inner_commit_batch(batch_id, parsed)
        if stats.outcome == "committed":
            faults.hit("after-swap-before-checkpoint")
            committed += 1
            if cfg.faults and committed == cfg.arm_after:
                _arm(cfg.faults)
        return stats

    sink.coordinator.commit_batch = commit_batch  # type: ignore[method-assign]  # the fault harness replaces the coordinator's commit

    def report(stats: BatchStats) -> None:
        _log_phase(f"batch {stats.batch_id} {stats.outcome}")
        _say(f"{stats.outcome} {stats.batch_id} {stats.snapshot_id} {stats.records}")

    sink.on_batch = report

    options = {
        "kafka.bootstrap.servers": cfg.bootstrap,
        "subscribe": cfg.topic,
        "startingOffsets": "earliest",
    }
    ledger = read_ledger(table.metadata, cfg.writer)
    if cfg.from_ledger and ledger:
        options["calving.startingLedger"] = json.dumps(offsets_to_json(ledger))
    if cfg.max_offsets:
        options["maxOffsetsPerTrigger"] = str(cfg.max_offsets)
    options.update(cfg.source_options)
    reader = spark.readStream.format("calving-kafka")
    for key, value in use_path(sink, options, cfg.path).items():
        reader = reader.option(key, value)
    df = reader.load()
    _log_phase("source loaded")
    if cfg.faults and cfg.arm_after == 0:  # a point the start reaches (a reshard)
        _arm(cfg.faults)
    writer = df.writeStream.foreachBatch(sink)
    writer = writer.option("checkpointLocation", cfg.checkpoint)
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
    query = writer.start()
    _log_phase("query started")
    _say("started")
    try:
        query.awaitTermination()
    except StreamingQueryException as err:  # the query stopped with an error
        name, message = _root_cause(str(err))
        _say(f"failed {name}: {message}")
        recorder.record("error", detail=f"{name}: {message}")
        traceback.print_exc(file=sys.stderr)
        return EXIT_FAILED
    sink.close()
    _say("drained")
    return EXIT_DONE


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.faults.spark_driver '<json config>'", file=sys.stderr)
        return 64
    return run(DriverConfig.from_json(argv[1]))


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's and Spark's orderly shutdown (seconds): the table and the
    # checkpoint are written, and the JVM exits once this process's pipe to it closes.
    os._exit(code)
