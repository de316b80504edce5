"""Initial snapshot: a Debezium snapshot of one table (``op = r``, every key new) read into
a keyed table, against the raw consume-decode-write loop on the same topic.

The topic (4 partitions, Debezium JSON without schemas, one event per key, the key's
partition fixed) is produced before anything is timed. calving: the ``calving-kafka``
source into a ``CalvingSink`` on the keyed table, Spark ``local[2]``, ``availableNow``
with ``maxOffsetsPerTrigger`` (several batches, as a stream would take a snapshot), timed
from the query's start until the ledger covers every offset. The raw loop
(``tests.bench.throughput.raw_limit``): one process, no Spark, no commits, no merge:
confluent-kafka ``consume``, ``json.loads`` per event, one Parquet file per 50k records.
Then a stream of updates and deletes over the snapshot's keys is committed by the same
sink (its freshness is the ``freshness`` benchmark's), and the table is checked.

    python -m tests.bench.snapshot [--quick] [--records N] [--max-offsets N]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path

from calving.commit.table.table import Table
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.foreach_batch import CalvingSink
from tests.bench import streaming
from tests.bench.figures import Figure, at_least, render
from tests.bench.throughput import PARTITIONS, Run, _cpu_text, _decode_debezium, raw_limit

QUICK_RECORDS = 500_000
FULL_RECORDS = 5_000_000
MAX_OFFSETS = 1_000_000
GOAL_OF_RAW = 0.9


def snapshot_records(n: int) -> Iterator[tuple[int, bytes, bytes, None]]:
    """One ``op = r`` event per key ``0 .. n-1``, ``source.snapshot`` as Debezium 2 marks
    it ("first", "true", ..., "last")."""
    for i in range(n):
        mark = "first" if i == 0 else "last" if i == n - 1 else "true"
        row = {"id": i, "status": f"s{i % 7}", "version": 0}
        event = {"before": None, "after": row, "source": {"snapshot": mark}, "op": "r", "ts_ms": i}
        yield i % PARTITIONS, _key(i), json.dumps(event).encode(), None


def stream_records(n: int, changes: int) -> Iterator[tuple[int, bytes, bytes | None, None]]:
    """After the snapshot: a delete (with its tombstone) of every 5th of the first
    ``changes`` keys and an update of every other 3rd."""
    for i in range(changes):
        event: dict[str, object]
        if i % 5 == 0:
            before = {"id": i, "status": f"s{i % 7}", "version": 0}
            event = {"before": before, "after": None, "op": "d", "ts_ms": n + i}
            yield i % PARTITIONS, _key(i), json.dumps(event).encode(), None
            yield i % PARTITIONS, _key(i), None, None
        elif i % 3 == 0:
            after = {"id": i, "status": "u", "version": 1}
            event = {"before": None, "after": after, "op": "u", "ts_ms": n + i}
            yield i % PARTITIONS, _key(i), json.dumps(event).encode(), None


def _key(i: int) -> bytes:
    return json.dumps({"id": i}).encode()


def measure(n: int, max_offsets: int) -> tuple[Run, Run, dict[str, float]]:
    env = streaming.environment()
    bootstrap = env.broker.bootstrap_servers
    work = streaming.workdir(env, "snapshot")
    topic = streaming.new_topic(env, PARTITIONS, "snap")
    t0 = time.perf_counter()
    ends = produce(bootstrap, topic, snapshot_records(n), timeout=600)
    streaming.log("snapshot", f"produced {n:,} snapshot events in {time.perf_counter() - t0:.1f} s")
    catalogs = streaming.Catalogs.at(work)

    before = streaming.cpu_seconds(env)
    raw = Run(raw_limit(bootstrap, topic, ends, _decode_debezium, work / "raw"))
    raw.cpu = streaming.cpu_used(before, streaming.cpu_seconds(env))
    streaming.log("snapshot", f"raw loop {n / raw.seconds:,.0f}/s (CPU {_cpu_text(raw.cpu)})")

    table = catalogs.calving_table(streaming.table_schema("debezium"))
    commits = streaming.CommitLog()
    tp_ends = {(topic, p): e for p, e in ends.items()}
    commits.expect(tp_ends)
    sink = streaming.calving_sink(table, "debezium", commits, env.root)
    before = streaming.cpu_seconds(env)
    seconds = streaming.drain(
        env, topic, sink, commits, work / "ckpt", max_offsets_per_trigger=max_offsets
    )
    after = streaming.cpu_seconds(env)
    assert commits.first_batch_at is not None and commits.started_at is not None
    calving = Run(
        seconds,
        len(commits.commits),
        commits.first_batch_at - commits.started_at,
        streaming.cpu_used(before, after),
    )
    streaming.log("snapshot", f"calving {n / seconds:,.0f}/s (CPU {_cpu_text(calving.cpu)})")
    detail = _check(table, sink, tp_ends, n)

    # The stream after the snapshot: updates and deletes of snapshot keys, same sink.
    changes = min(n, 50_000)
    ends = produce(bootstrap, topic, stream_records(n, changes), timeout=600)
    commits = streaming.CommitLog()
    commits.expect({(topic, p): e for p, e in ends.items()})
    sink.on_batch = commits.on_calving_batch
    t1 = time.perf_counter()
    streaming.drain(env, topic, sink, commits, work / "ckpt", max_offsets_per_trigger=max_offsets)
    detail["stream_s"] = time.perf_counter() - t1
    table.refresh()
    deleted = len(range(0, changes, 5))
    rows = _row_count(table)
    if rows != n - deleted:
        raise AssertionError(f"after the stream the table holds {rows:,} rows, not {n - deleted:,}")
    return raw, calving, detail


def _row_count(table: Table) -> int:
    """Live rows: the data files' rows less their deletion vectors'."""
    live = table.live_files()
    rows = sum(e.data_file.record_count for e in live.data.values())
    return rows - sum(e.data_file.record_count for e in live.dvs.values())


def _check(
    table: Table, sink: CalvingSink, tp_ends: dict[tuple[str, int], int], n: int
) -> dict[str, float]:
    """The table holds the snapshot: every offset in the ledger, ``n`` rows, files."""
    table.refresh()
    ledger = table.ledger(sink.writer_id)
    if ledger != tp_ends:
        raise AssertionError(f"ledger {ledger} != {tp_ends}")
    rows = _row_count(table)
    if rows != n:
        raise AssertionError(f"the snapshot committed {rows:,} rows, not {n:,}")
    sizes = [e.data_file.file_size_in_bytes for e in table.live_files().data.values()]
    index = sink.coordinator.index
    return {
        "files": float(len(sizes)),
        "mean_file_mib": sum(sizes) / len(sizes) / 2**20 if sizes else 0.0,
        "index_keys": float(len(index) if index is not None else -1),
    }


def to_figures(
    n: int, max_offsets: int, raw: Run, calving: Run, detail: dict[str, float]
) -> list[Figure]:
    of_raw = raw.seconds / calving.seconds
    return [
        Figure(
            "snapshot",
            f"initial snapshot, Debezium JSON op=r, {n / 1e6:g}M rows, records/s",
            n / calving.seconds,
            "raw consume+decode+Parquet, 1 process",
            n / raw.seconds,
            better="higher",
            goal=f">= {GOAL_OF_RAW}x raw",
            met=at_least(of_raw, GOAL_OF_RAW),
            note=f"Spark {streaming.master()}, availableNow, maxOffsetsPerTrigger="
            f"{max_offsets:,}: {calving.commits} commit(s) in {calving.seconds:.1f} s, "
            f"of which {calving.startup_s:.1f} s query start-up; CPU {_cpu_text(calving.cpu)}; "
            f"{detail['files']:.0f} data files of {detail['mean_file_mib']:.1f} MiB on average; "
            f"index {detail['index_keys']:,.0f} keys. Raw loop: {raw.seconds:.1f} s, CPU "
            f"{_cpu_text(raw.cpu)}. Then {detail['stream_s']:.1f} s for the stream of "
            f"updates and deletes after it",
        )
    ]


def figures(quick: bool) -> list[Figure]:
    n = QUICK_RECORDS if quick else FULL_RECORDS
    try:
        return to_figures(n, MAX_OFFSETS, *measure(n, MAX_OFFSETS))
    finally:
        streaming.shutdown()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int, default=0)
    ap.add_argument("--max-offsets", type=int, default=MAX_OFFSETS)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    n = args.records or (QUICK_RECORDS if args.quick else FULL_RECORDS)
    try:
        raw, calving, detail = measure(n, args.max_offsets)
    finally:
        streaming.shutdown()
    out = to_figures(n, args.max_offsets, raw, calving, detail)
    if args.json_out is not None:
        args.json_out.write_text(
            json.dumps({"records": n, "raw": vars(raw), "calving": vars(calving), **detail})
        )
    print(render(out))


if __name__ == "__main__":
    main()
