"""Whole-database CDC: one pipeline into 1, 10, 50 and 500 tables at the same total rate.

* throughput: the same number of Debezium JSON change events (schemas in the events)
  spread over N topics, pre-produced, drained with ``availableNow`` by one many-table
  pipeline whose tables an earlier run created (a first event each); records/s and
  CPU-seconds per million records (driver, JVM, Python workers, broker). Peer: the
  one-table run.
* freshness: a child process produces 10,000 events/s in total over the N topics (500
  tables: 20 hot ones, 480 idle) for a while; a record is visible once a committed batch
  covers its offset; p50 and p99 of produce -> visible over every record.
* one event per table: a batch holding one event in each of 50 routed tables, with one
  Kafka consumer per task against one per range (the peer), phases and CPU-seconds.
* atomic commit: 50 tables, one small data file each: one catalog transaction
  (``commit_tables``) against 50 single-table commits, median of several rounds.

    python -m tests.bench.many_tables [--quick] [--one-event-batch]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from tests.bench import streaming
from tests.bench.figures import Figure, at_least, at_most, render

THROUGHPUT_COUNTS = (1, 10, 50, 500)
#: (tables, hot tables: None for all) of the freshness runs.
FRESHNESS_COUNTS = ((1, None), (10, None), (50, None), (500, 20))
RATE = 10_000
TRIGGER = "500 milliseconds"
GOAL_RATIO = {500: 0.8}
GOAL_P99_S = {50: 2.0, 500: 3.0}
WRITER = "bench-db"


# ---------------------------------------------------------------- events


def _tables(n: int) -> tuple[str, list[str]]:
    prefix = f"mt{uuid.uuid4().hex[:8]}"
    return prefix, [f"t{i:02d}" for i in range(n)]


def _events(prefix: str, name: str) -> tuple[bytes, bytes]:
    """(value template, key template) of one table's events: ``%d`` placeholders for
    the key and the produce time."""
    from calving.ingest.demo.database import SourceDatabase, plain_table

    db = SourceDatabase(prefix=prefix, transaction_metadata=False)
    db.add_table(plain_table(name))
    table = db.tables[name]
    value = {
        "schema": table.value_schema(prefix),
        "payload": {
            "before": None,
            "after": {"id": -1, "code": "c", "amount": -2, "active": True},
            "source": {
                "connector": "postgresql",
                "name": prefix,
                "db": "shop",
                "schema": "inventory",
                "table": name,
                "lsn": 1,
            },
            "op": "c",
            "ts_ms": 1,
            "transaction": None,
        },
    }
    key = {"schema": table.key_schema(prefix), "payload": {"id": -1}}
    text = json.dumps(value, separators=(",", ":")).replace('"id":-1', '"id":%d')
    text = text.replace('"amount":-2', '"amount":%d')
    key_text = json.dumps(key, separators=(",", ":")).replace('"id":-1', '"id":%d')
    return text.encode(), key_text.encode()


def _topic(prefix: str, name: str) -> str:
    return f"{prefix}.inventory.{name}"


def _config(prefix: str, work: Path, bootstrap: str, trigger: str) -> Any:
    from calving.ingest.config.loader import parse_config

    doc = {
        "source": {
            "bootstrap_servers": bootstrap,
            "topic_pattern": rf"{prefix}\.inventory\..*",
            "starting_offsets": "earliest",
        },
        "format": {"type": "debezium-json"},
        "table": {
            "catalog": f"sqlite:///{work / 'catalog.db'}",
            "warehouse": str(work / "warehouse"),
            "name": "{schema}.{table}",
        },
        "sink": {
            "writer_id": WRITER,
            "checkpoint": str(work / "ckpt"),
            "trigger_interval": trigger,
        },
    }
    return parse_config(doc, "many-tables bench")


# ---------------------------------------------------------------- throughput


def _create_tables(env: Any, prefix: str, names: list[str]) -> list[tuple[str, bytes, bytes]]:
    """Each table's topic with one first event (offset 0) that creates its table when
    the pipeline first runs; returns (topic, value template, key template) per table."""
    from calving.ingest.kafka.producer import produce

    topics = []
    for name in names:
        topic = _topic(prefix, name)
        env.broker.create_topic(topic, 1)
        value, key = _events(prefix, name)
        produce(env.broker.bootstrap_servers, topic, [(0, key % 0, value % (0, 0), None)])
        topics.append((topic, value, key))
    return topics


def throughput(n: int, events: int, hot: int | None = None) -> tuple[float, float, int, float]:
    """(records/s, CPU-seconds per million records, batches, records/s of batch time)
    draining ``events`` over the first ``hot`` of ``n`` tables (all of them by default),
    the tables created by an earlier run of the same pipeline (a first event each), as a
    running database's are. The whole run includes the pipeline's start (its tables
    loaded) and its stop (their indexes saved); batch time is the batches' route, write
    and commit phases only."""
    from calving.ingest.kafka.producer import produce
    from calving.ingest.pipeline import build_pipeline

    env = streaming.environment()
    work = streaming.workdir(env, f"many-{n}")
    prefix, names = _tables(n)
    topics = _create_tables(env, prefix, names)
    config = _config(prefix, work, env.broker.bootstrap_servers, "1 second")
    build_pipeline(config, env.spark).run(available_now=True, timeout=900)
    keys = 2_000
    busy = topics[: hot or n]
    per_table = events // len(busy)
    for topic, value, key in busy:
        records = [(0, key % (i % keys), value % (i % keys, i), None) for i in range(per_table)]
        produce(env.broker.bootstrap_servers, topic, records)
    batches: list[Any] = []
    pipeline = build_pipeline(config, env.spark, on_batch=batches.append)
    before = streaming.cpu_seconds(env)
    started = time.perf_counter()
    pipeline.run(available_now=True, timeout=900)
    seconds = time.perf_counter() - started
    used = streaming.cpu_used(before, streaming.cpu_seconds(env))
    total = per_table * len(busy)
    in_batches = sum(sum(b.phases.values()) for b in batches)
    return total / seconds, sum(used.values()) / total * 1e6, len(batches), total / in_batches


# ---------------------------------------------------------------- freshness


def _produce_steady(
    bootstrap: str, topics: list[tuple[str, bytes, bytes]], rate: int, seconds: float, conn: Any
) -> None:
    """Child process: ``rate`` events/s over ``topics`` round robin for ``seconds``; send
    back each topic's produce times (index = offset)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "enable.idempotence": False,
                         "max.in.flight.requests.per.connection": 1})  # fmt: skip
    times: list[list[float]] = [[] for _ in topics]

    def send(i: int) -> None:
        j = i % len(topics)
        topic, value, key = topics[j]
        t = time.time()
        k = (i // len(topics)) % 2_000
        while True:
            try:
                producer.produce(topic, value=value % (k, i), key=key % k, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        times[j].append(t)

    conn.send("ready")
    start, i = time.time(), 0
    while time.time() - start < seconds:
        due = int((time.time() - start) * rate)
        while i < due:
            send(i)
            i += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(60)
    for _ in range(len(topics)):  # Tansu's watermark: a lone last record per topic
        send(i)
        i += 1
        producer.flush(60)
    conn.send([np.array(t, np.float64) for t in times])
    conn.close()


def freshness(
    n: int, seconds: float, hot: int | None = None
) -> tuple[float | None, float | None, int]:
    """(p50 s, p99 s, records not committed) at ``RATE`` events/s over the first ``hot``
    of ``n`` topics (all by default); every table is created first (a first event per
    topic), so creation is not measured."""
    from calving.ingest.pipeline import build_pipeline

    env = streaming.environment()
    work = streaming.workdir(env, f"many-fresh-{n}")
    prefix, names = _tables(n)
    topics = _create_tables(env, prefix, names)[: hot or n]
    commits: list[tuple[float, dict[tuple[str, int], tuple[int, int]]]] = []

    def on_batch(stats: Any) -> None:
        now = time.time()
        ranges = {tp: (r.start, r.end) for s in stats.tables.values() for tp, r in s.ranges.items()}
        commits.append((now, ranges))

    pipeline = build_pipeline(
        _config(prefix, work, env.broker.bootstrap_servers, TRIGGER), env.spark, on_batch=on_batch
    )
    query = pipeline.start()
    try:
        _wait(lambda: _covered(commits, {(t[0], 0): 1 for t in topics}), 300)
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(
            target=_produce_steady,
            args=(env.broker.bootstrap_servers, topics, RATE, seconds, child),
            daemon=True,
        )
        proc.start()
        if not parent.poll(60) or parent.recv() != "ready":
            raise RuntimeError("producer did not start")
        if not parent.poll(seconds + 120):
            raise TimeoutError("producer did not finish")
        times = parent.recv()
        proc.join(30)
        ends = {(t[0], 0): len(ts) + 1 for t, ts in zip(topics, times)}
        _wait(lambda: _covered(commits, ends), max(30.0, seconds))
    finally:
        query.stop()
        pipeline.sink.close()
    latencies = []
    for (topic, _, _), ts in zip(topics, times):
        visible = np.full(len(ts), np.nan)
        for at, ranges in commits:
            r = ranges.get((topic, 0))
            if r is not None:
                lo, hi = max(r[0] - 1, 0), min(r[1] - 1, len(ts))  # offset 0: the warm-up event
                part = visible[lo:hi]
                np.copyto(part, at, where=np.isnan(part))
        latencies.append(visible[:-1] - ts[:-1])
    lat = np.concatenate(latencies)
    done = lat[~np.isnan(lat)]
    if not len(done):
        return None, None, len(lat)
    return (
        float(np.percentile(done, 50)),
        float(np.percentile(done, 99)),
        int(len(lat) - len(done)),
    )


def _covered(commits: list[Any], ends: dict[tuple[str, int], int]) -> bool:
    high: dict[tuple[str, int], int] = {}
    for _, ranges in list(commits):
        for tp, (_, end) in ranges.items():
            high[tp] = max(end, high.get(tp, 0))
    return all(high.get(tp, 0) >= end for tp, end in ends.items())


def _wait(check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("timed out")
        time.sleep(0.1)


# ---------------------------------------------------------------- one event per table


def one_event_batches(n: int = 50, rounds: int = 3) -> dict[bool, tuple[float, float, dict]]:
    """A batch holding one event in each of ``n`` tables, tables already routed and
    created: median wall seconds and CPU-seconds per batch and the median phases, with
    one Kafka consumer per task (True) and one per range (False, the peer), rounds
    interleaved in one run."""
    from calving.ingest.kafka.producer import produce
    from calving.ingest.pipeline import build_many_sink

    env = streaming.environment()
    work = streaming.workdir(env, f"many-one-{n}")
    prefix, names = _tables(n)
    topics = [_topic(prefix, name) for name in names]
    templates = [_events(prefix, name) for name in names]
    for topic in topics:
        env.broker.create_topic(topic, 1)
    sink = build_many_sink(_config(prefix, work, env.broker.bootstrap_servers, "1 second"))
    offset = 0

    def produce_round() -> list[tuple[str, int, int, int]]:
        nonlocal offset
        for topic, (value, key) in zip(topics, templates):
            record = (0, key % offset, value % (offset, offset), None)
            produce(env.broker.bootstrap_servers, topic, [record])
        offset += 1
        return [(topic, 0, offset - 1, offset) for topic in topics]

    sink.write_batch(env.spark, produce_round(), 0)  # routes and creates the tables
    runs: dict[bool, list[tuple[float, float, dict]]] = {True: [], False: []}
    for r in range(rounds):
        for reuse in (True, False):
            sink.reuse_consumer = reuse
            rows = produce_round()
            before = streaming.cpu_seconds(env)
            started = time.perf_counter()
            stats = sink.write_batch(env.spark, rows, 1 + 2 * r + int(not reuse))
            wall = time.perf_counter() - started
            cpu = sum(streaming.cpu_used(before, streaming.cpu_seconds(env)).values())
            runs[reuse].append((wall, cpu, stats.phases))
    out = {}
    for reuse, measured in runs.items():
        phases = {k: statistics.median(m[2][k] for m in measured) for k in measured[0][2]}
        out[reuse] = (
            statistics.median(m[0] for m in measured),
            statistics.median(m[1] for m in measured),
            phases,
        )
    return out


def _one_event_figure(n: int = 50) -> Figure:
    measured = one_event_batches(n)
    (wall, cpu, phases), (peer, peer_cpu, peer_phases) = measured[True], measured[False]
    shown = ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
    peer_shown = ", ".join(f"{k} {v:.2f}" for k, v in peer_phases.items())
    return Figure("many_tables", f"batch with 1 event in each of {n} tables, s", wall,
                  "one Kafka consumer per range", peer, goal="<= 0.5 s",
                  met=at_most(wall, 0.5),
                  note=f"tables already created; median of 3 interleaved rounds; phases s: "
                  f"{shown} (peer {peer_shown}); CPU-s per batch {cpu:.2f} (peer "
                  f"{peer_cpu:.2f})")  # fmt: skip


# ---------------------------------------------------------------- atomic commit


def atomic_commit(tables: int = 50, rounds: int = 7) -> tuple[float, float]:
    """Median ms of one ``commit_tables`` over ``tables`` tables vs ``tables`` commits."""
    import tempfile

    import pyarrow as pa

    from calving.commit.catalog.sql import SqlCatalog
    from calving.commit.spec.schema import Schema
    from calving.commit.spec.types import NestedField, PrimitiveType
    from calving.commit.table.actions.fast_append import FastAppend
    from calving.commit.table.ledger import LedgerClaim, OffsetRange
    from calving.commit.table.multi_commit import TableCommit, commit_tables
    from calving.commit.table.outcomes import Committed
    from calving.commit.table.table import create_table
    from calving.ingest.write.parquet_writer import write_data_file

    root = Path(tempfile.mkdtemp(prefix="calving-bench-atomic-"))
    catalog = SqlCatalog("bench", f"sqlite:///{root / 'c.db'}", str(root / "wh"))
    schema = Schema((NestedField(1, "id", PrimitiveType("long"), True),), identifier_field_ids=(1,))
    catalog.create_namespace(("db",))
    handles = [create_table(catalog, ("db", f"t{i}"), schema) for i in range(tables)]
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})

    def actions(round_: int, writer: str) -> list[TableCommit]:
        """One append per table; each path claims offsets for its own writer id, so
        both commit every round (one writer's claims would leave the other a gap)."""
        out = []
        for i, t in enumerate(handles):
            f = write_data_file(t.io, f"{t.metadata.location}/data/{writer}-{round_}-{i}.parquet",
                                rows, schema)  # fmt: skip
            claim = LedgerClaim(writer, {(f"topic{i}", 0): OffsetRange(round_ * 3, round_ * 3 + 3)})
            out.append(TableCommit(t.ident, FastAppend((f,), ledger=claim)))
        return out

    together, single = [], []
    for r in range(rounds):
        commits = actions(r, "together")
        started = time.perf_counter()
        outcomes = list(commit_tables(catalog, handles[0].io, commits).values())
        together.append((time.perf_counter() - started) * 1000)
        commits = actions(r, "single")
        started = time.perf_counter()
        outcomes += [t.refresh().commit(c.action) for t, c in zip(handles, commits)]
        single.append((time.perf_counter() - started) * 1000)
        assert all(isinstance(o, Committed) for o in outcomes), outcomes
    catalog.close()
    return statistics.median(together), statistics.median(single)


# ---------------------------------------------------------------- figures


def figures(quick: bool) -> list[Figure]:
    events = 30_000 if quick else 150_000
    seconds = 10.0 if quick else 30.0
    out: list[Figure] = []
    try:
        rates = {}
        for n in THROUGHPUT_COUNTS:
            rate, cpu, batches, batch_rate = throughput(n, events)
            rates[n] = (rate, cpu, batches, batch_rate)
            streaming.log("many_tables", f"{n} table(s): {rate:,.0f} rec/s ({batch_rate:,.0f} "
                          f"in batch time), {cpu:.1f} CPU-s/M")  # fmt: skip
        one = rates[1][0]
        for n in THROUGHPUT_COUNTS[1:]:
            rate, cpu, batches, batch_rate = rates[n]
            goal = GOAL_RATIO.get(n)
            out.append(Figure("many_tables", f"throughput {n} tables, records/s", rate,
                              "same pipeline, 1 table", one, better="higher",
                              goal=f">= {goal}x of 1 table" if goal else "",
                              met=at_least(rate / one, goal) if goal else None,
                              note=f"{events:,} Debezium JSON events over {n} tables (created "
                              f"before), {batches} batches; the whole run with the pipeline's "
                              f"start and stop; in batch time {batch_rate:,.0f}/s (1 table: "
                              f"{rates[1][3]:,.0f}/s); {cpu:.1f} CPU-s per million records "
                              f"(1 table: {rates[1][1]:.1f})"))  # fmt: skip
        for n, hot in FRESHNESS_COUNTS:
            p50, p99, left = freshness(n, seconds, hot)
            goal = GOAL_P99_S.get(n)
            label = f"{n} tables ({hot} hot)" if hot else f"{n} table(s)"
            streaming.log("many_tables", f"freshness {label}: p50 {p50}, p99 {p99}")
            out.append(Figure("many_tables", f"freshness {label} @{RATE:,}/s, p99 s", p99,
                              "", None, goal=f"<= {goal} s" if goal else "",
                              met=at_most(p99, goal) if goal else None,
                              note=f"p50 {p50 if p50 is None else round(p50, 2)} s over "
                              f"{seconds:.0f} s, trigger {TRIGGER}, {left} not committed"))  # fmt: skip
        out.append(_one_event_figure())
        together, single = atomic_commit()
        out.append(Figure("many_tables", "commit of 50 tables, ms", together,
                          "50 single-table commits", single,
                          goal="<= 50 single commits", met=at_most(together, single),
                          note="one catalog transaction (SQLite), one 3-row file per table, "
                          "median of 7"))  # fmt: skip
    finally:
        streaming.shutdown()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--one-event-batch",
        action="store_true",
        help="only the batch with one event in each of 50 tables",
    )
    args = parser.parse_args(argv)
    if args.one_event_batch:
        try:
            print(render([_one_event_figure()]))
        finally:
            streaming.shutdown()
        return
    print(render(figures(args.quick)))


if __name__ == "__main__":
    main()
