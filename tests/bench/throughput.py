"""End-to-end throughput, Kafka -> committed table, JSON and Debezium JSON.

The same topic (4 partitions, produced before anything is timed) is read three ways:

* calving: the ``calving-kafka`` source into a ``CalvingSink``, Spark ``local[2]``,
  ``trigger(availableNow=True)``; timed from the query's start until the table's ledger
  (reported by the sink's ``on_batch``) covers every produced offset. Debezium streams go
  to a keyed table (upserts and deletes merged with deletion vectors).
* raw limit: one Python process, no Spark, no commits: confluent-kafka ``consume``, decode
  (JSON: ``pyarrow.json`` on newline-joined values; Debezium: ``json.loads`` per event,
  before/after image picked, no merge), and one Parquet file per 50k records.
* pyiceberg: a ``foreachBatch`` on the same source that decodes on the executors with
  calving's decoder, collects the Arrow rows and commits them with pyiceberg
  ``Table.append`` (v2 table, SQLite catalog); change events are appended as a log.

The Spark session and broker start once and are warmed up before anything is timed.
Rates are Kafka records per second (Debezium tombstones count as records).

    python -m tests.bench.throughput [--quick] [--records N] [--max-offsets N]
"""

from __future__ import annotations

import argparse
import io
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from calving.ingest.kafka.producer import produce
from tests.bench import streaming
from tests.bench.figures import Figure
from tests.support.cdc import cdc_events

PARTITIONS = 4
RAW_FILE_RECORDS = 50_000
QUICK_RECORDS = 100_000
FULL_RECORDS = 500_000
GOAL_RATE = 80_000.0
GOAL_OF_RAW = 0.5

_JSON_ARROW = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("active", pa.bool_()),
        pa.field("produced_at", pa.float64()),
    ]
)
_CDC_ARROW = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("op", pa.int8()),
    ]
)


def _decode_json(values: list[bytes]) -> pa.Table:
    text = b"\n".join(values)
    return pajson.read_json(
        io.BytesIO(text),
        parse_options=pajson.ParseOptions(
            explicit_schema=_JSON_ARROW, unexpected_field_behavior="ignore"
        ),
    )


def _decode_debezium(values: list[bytes | None]) -> pa.Table:
    ids: list[int] = []
    statuses: list[str | None] = []
    versions: list[int | None] = []
    ops: list[int] = []
    for raw in values:
        if raw is None:  # tombstone: nothing to write
            continue
        event = json.loads(raw)
        row = event["after"]
        if row is None:
            ids.append(event["before"]["id"])
            statuses.append(None)
            versions.append(None)
            ops.append(1)
        else:
            ids.append(row["id"])
            statuses.append(row["status"])
            versions.append(row["version"])
            ops.append(0)
    return pa.Table.from_arrays(
        [
            pa.array(ids, pa.int64()),
            pa.array(statuses, pa.string()),
            pa.array(versions, pa.int64()),
            pa.array(ops, pa.int8()),
        ],
        schema=_CDC_ARROW,
    )


def raw_limit(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    decode: Callable[[list], pa.Table],
    out_dir: Path,
) -> float:
    """Seconds to consume, decode and write every record of ``topic`` up to ``ends``."""
    from confluent_kafka import Consumer, TopicPartition

    out_dir.mkdir(parents=True, exist_ok=True)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-raw-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        remaining = {p: e for p, e in ends.items() if e > 0}
        pending: list[bytes | None] = []
        files = 0

        def flush() -> None:
            nonlocal files, pending
            pq.write_table(decode(pending), out_dir / f"part-{files:05d}.parquet")
            files += 1
            pending = []

        while remaining:
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                if message.error() is not None:
                    raise RuntimeError(f"raw consumer: {message.error()}")
                p, offset = message.partition(), message.offset()
                assert p is not None and offset is not None
                pending.append(message.value())
                if p in remaining and offset + 1 >= remaining[p]:
                    del remaining[p]
            if len(pending) >= RAW_FILE_RECORDS:
                flush()
        if pending:
            flush()
        return time.perf_counter() - started
    finally:
        consumer.close()


def _decode_avro(values: list[bytes]) -> pa.Table:
    import fastavro

    parsed = fastavro.parse_schema(streaming.AVRO_SCHEMA)
    rows = []
    for raw in values:
        body = io.BytesIO(raw)
        body.seek(5)  # the Confluent header: magic byte and schema id
        rows.append(fastavro.schemaless_reader(body, parsed, None))
    return pa.Table.from_pylist(rows, schema=_JSON_ARROW)


DECODERS: dict[str, Callable[[list], pa.Table]] = {
    "json": _decode_json,
    "avro": _decode_avro,
    "debezium": _decode_debezium,
}
LABELS = {
    "json": "JSON",
    "avro": "Avro (Confluent framing)",
    "debezium": "Debezium JSON (keyed table)",
}


def _records(kind: str, n: int) -> list[tuple[int, bytes | None, bytes | None, None]]:
    if kind == "json":
        return [(i % PARTITIONS, None, streaming.json_value(i), None) for i in range(n)]
    if kind == "avro":
        return [(i % PARTITIONS, None, streaming.avro_value(i), None) for i in range(n)]
    # Debezium: events over n/5 keys; each delete adds a tombstone (so a few more records).
    return cdc_events(max(1, n // 5), n, PARTITIONS, seed=2026).records


@dataclass
class Run:
    """One timed run of one side."""

    seconds: float
    commits: int = 0
    startup_s: float = 0.0  # query start until the sink's first call
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process group
    #: The same from the sink's first call on (the query's start-up left out).
    cpu_batches: dict[str, float] = field(default_factory=dict)


def _stream_run(
    env: streaming.Env,
    catalogs: streaming.Catalogs,
    side: str,
    kind: str,
    topic: str,
    tp_ends: dict[tuple[str, int], int],
    checkpoint: Path,
    max_offsets_per_trigger: int | None,
) -> Run:
    """One calving or pyiceberg stream over the whole topic into a new table."""
    commits = streaming.CommitLog()
    commits.expect(tp_ends)
    if side == "calving":
        table = catalogs.calving_table(streaming.table_schema(kind))
        sink: Any = streaming.calving_sink(table, kind, commits, env.root)
    else:
        sink = streaming.pyiceberg_peer(catalogs, kind, commits, topic, env.root)
    before = streaming.cpu_seconds(env)
    seconds = streaming.drain(
        env, topic, sink, commits, checkpoint, max_offsets_per_trigger=max_offsets_per_trigger
    )
    after = streaming.cpu_seconds(env)
    cpu = streaming.cpu_used(before, after)
    batches = streaming.cpu_used(commits.cpu_at_first_batch or before, after)
    if side == "calving":
        table.refresh()
        if table.ledger(sink.writer_id) != tp_ends:
            raise AssertionError(f"calving ledger {table.ledger(sink.writer_id)} != {tp_ends}")
    assert commits.first_batch_at is not None and commits.started_at is not None
    startup = commits.first_batch_at - commits.started_at
    return Run(seconds, len(commits.commits), startup, cpu, batches)


@dataclass
class Result:
    kind: str
    records: int
    raw: Run
    calving: Run
    pyiceberg: Run

    def rate(self, side: str) -> float:
        return self.records / getattr(self, side).seconds


def measure(kind: str, n: int, max_offsets_per_trigger: int | None, repeat: int = 2) -> Result:
    """Records per second of calving, the raw limit and pyiceberg on one topic: the best
    of ``repeat`` runs each, the three sides taking turns."""
    env = streaming.environment()
    bootstrap = env.broker.bootstrap_servers
    work = streaming.workdir(env, f"tp-{kind}")
    topic = streaming.new_topic(env, PARTITIONS, f"tp_{kind}")
    t0 = time.perf_counter()
    ends = produce(bootstrap, topic, _records(kind, n))
    total = sum(ends.values())
    streaming.log(
        "throughput", f"{kind}: produced {total:,} records in {time.perf_counter() - t0:.1f} s"
    )
    tp_ends = {(topic, p): e for p, e in ends.items()}
    decode = DECODERS[kind]
    catalogs = streaming.Catalogs.at(work)
    best: dict[str, Run] = {}
    for rep in range(repeat):
        before = streaming.cpu_seconds(env)
        raw = Run(raw_limit(bootstrap, topic, ends, decode, work / f"raw-{rep}"))
        raw.cpu = streaming.cpu_used(before, streaming.cpu_seconds(env))
        runs = {"raw": raw}
        for side in ("calving", "pyiceberg"):
            runs[side] = _stream_run(
                env,
                catalogs,
                side,
                kind,
                topic,
                tp_ends,
                work / f"ckpt-{side}-{rep}",
                max_offsets_per_trigger,
            )
        streaming.log(
            "throughput",
            f"{kind} run {rep + 1}/{repeat}: "
            + ", ".join(
                f"{side} {total / r.seconds:,.0f}/s (CPU {_cpu_text(r.cpu)})"
                for side, r in runs.items()
            ),
        )
        for side, r in runs.items():
            if side not in best or r.seconds < best[side].seconds:
                best[side] = r
    return Result(kind, total, best["raw"], best["calving"], best["pyiceberg"])


def _cpu_text(cpu: dict[str, float]) -> str:
    order = ["jvm", "python workers", "driver", "broker", "other"]
    parts = [f"{k} {cpu[k]:.1f}" for k in order if cpu.get(k, 0.0) >= 0.05]
    return ", ".join(parts) + " s" if parts else "n/a"


def to_figures(r: Result, max_offsets: int | None) -> list[Figure]:
    label = LABELS[r.kind]
    size = f"{r.records / 1000:,.0f}k"
    batching = f"maxOffsetsPerTrigger={max_offsets:,}" if max_offsets else "no admission limit"
    c = r.calving
    of_raw = r.rate("calving") / r.rate("raw")
    after_startup = r.records / (c.seconds - c.startup_s)
    return [
        Figure(
            "throughput",
            f"{label} -> table, {size} records, records/s",
            r.rate("calving"),
            "raw consume+decode+Parquet, 1 process",
            r.rate("raw"),
            better="higher",
            goal=f">= {GOAL_OF_RAW:.1f}x raw and >= {GOAL_RATE / 1000:.0f}k/s",
            met=of_raw >= GOAL_OF_RAW and r.rate("calving") >= GOAL_RATE,
            note=f"{r.kind}: Spark {streaming.master()}, availableNow, {batching}: {c.commits} commit(s) in "
            f"{c.seconds:.1f} s, of which {c.startup_s:.1f} s query start-up "
            f"({after_startup:,.0f}/s after it); CPU {_cpu_text(c.cpu)}. "
            f"Raw limit (no Spark, no commits): {r.raw.seconds:.1f} s, "
            f"CPU {_cpu_text(r.raw.cpu)}"
            + ("" if streaming.appends(r.kind) else "; it does not merge by key"),
        ),
        Figure(
            "throughput",
            f"{label} -> table, {size} records, records/s",
            r.rate("calving"),
            "pyiceberg append in foreachBatch",
            r.rate("pyiceberg"),
            better="higher",
            note=f"pyiceberg: {r.pyiceberg.commits} commit(s) in {r.pyiceberg.seconds:.1f} s, "
            f"CPU {_cpu_text(r.pyiceberg.cpu)}"
            + (
                ""
                if streaming.appends(r.kind)
                else "; it appends the change rows as a log (no upsert/delete), so does less"
            ),
        ),
    ]


def figures(quick: bool, max_offsets_per_trigger: int | None = None) -> list[Figure]:
    n = QUICK_RECORDS if quick else FULL_RECORDS
    out = []
    for kind in ("json", "debezium"):
        out += to_figures(measure(kind, n, max_offsets_per_trigger), max_offsets_per_trigger)
    return out


def main(argv: list[str] | None = None) -> None:
    from tests.bench.figures import render

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--kinds", default="json,debezium")
    ap.add_argument("--max-offsets", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json-out", type=Path, help="also write the runs here (tests.bench.cost)")
    args = ap.parse_args(argv)
    n = args.records or (QUICK_RECORDS if args.quick else FULL_RECORDS)
    limit = args.max_offsets or None
    out = []
    results = []
    try:
        for kind in args.kinds.split(","):
            results.append(measure(kind, n, limit, args.repeat))
            out += to_figures(results[-1], limit)
    finally:
        streaming.shutdown()
    if args.json_out is not None:
        args.json_out.write_text(json.dumps([to_json(r) for r in results], indent=1))
    print(render(out))


def to_json(r: Result) -> dict[str, Any]:
    """One kind's runs as JSON: records, the Spark master and, per side, seconds, commits,
    start-up seconds and CPU seconds by process group."""
    return {
        "kind": r.kind,
        "records": r.records,
        "master": streaming.master(),
        "sides": {
            side: {
                "seconds": run.seconds,
                "commits": run.commits,
                "startup_s": run.startup_s,
                "cpu": run.cpu,
                "cpu_batches": run.cpu_batches or run.cpu,
            }
            for side, run in (("raw", r.raw), ("calving", r.calving), ("pyiceberg", r.pyiceberg))
        },
    }


if __name__ == "__main__":
    main()
