"""Freshness: produce -> visible latency of a running stream at a steady produce rate.

A child process produces JSON records at a steady rate (1k and 10k records/s) to a
fresh topic while a stream with a processing-time trigger runs; each record's value
carries its produce time, and the producer keeps each record's produce time by
partition and offset (``time.time()`` at the ``produce`` call; same machine, same clock).
A record is visible once a committed snapshot's ledger covers its offset: the sink's
``on_batch`` callback (``BatchStats.ranges``) gives each commit's wall-clock time, so a
record's latency is that commit's time minus its produce time. Reported: p50 and p99
over every record of the run.

Peer: the same measurement for the pyiceberg ``foreachBatch`` append
(``tests.bench.streaming.PyIcebergAppend``), same trigger, same rates. If it falls behind
the producer (its backlog is not committed soon after the producer stops), the
latencies of what it did commit are reported and the note says so.

    python -m tests.bench.freshness [--quick] [--rates 1000,10000] [--seconds 15]
        [--trigger "250 milliseconds"] [--json-out docs/benchmarks/data/freshness.json]

``--json-out`` also writes each run's latency distribution (its percentiles, ``PERCENTS``),
which ``python -m tests.bench.plots`` draws as a CDF.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.bench import record, streaming
from tests.bench.figures import Figure, at_most

PARTITIONS = 2
TRIGGER = "250 milliseconds"
GOAL_RATE = 10_000
GOAL_P50_S = 1.5
GOAL_P99_S = 3.0
LINGER_MS = 5
#: Percentiles kept of each run's latencies (finer in the tail): the CDF of the plots.
PERCENTS = tuple(range(100)) + tuple(99 + i / 10 for i in range(1, 10)) + (100,)


def produce_steady(
    bootstrap: str, topic: str, partitions: int, rate: int, seconds: float, conn: Any
) -> None:
    """Child process: produce ``rate`` records/s for ``seconds``, then send back each
    partition's produce times (index = offset) and any delivery failures."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": LINGER_MS,
            "acks": "all",
            "compression.type": "none",
            # Offsets in produce order: one request in flight per connection.
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1,
        }
    )
    times: list[list[float]] = [[] for _ in range(partitions)]
    failures: list[str] = []
    next_offset = [0] * partitions

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"{message.partition()}: {error}")
            return
        # Offsets must follow produce order (index = offset) for the latencies to hold.
        p = message.partition()
        if message.offset() != next_offset[p]:
            failures.append(f"{p}: offset {message.offset()}, expected {next_offset[p]}")
        next_offset[p] = message.offset() + 1

    def send(i: int, partition: int) -> None:
        t = time.time()
        while True:
            try:
                producer.produce(
                    topic,
                    value=streaming.json_value(i, t),
                    partition=partition,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.01)
        times[partition].append(t)

    conn.send("ready")
    start = time.time()
    i = 0
    while True:
        elapsed = time.time() - start
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while i < due:
            send(i, i % partitions)
            i += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(60)
    # Tansu's high watermark is the last batch's base offset + 1: a lone record per
    # partition makes every earlier record visible to the stream.
    for p in range(partitions):
        send(i, p)
        i += 1
        producer.flush(60)
    conn.send(([np.array(t, np.float64) for t in times], failures, seconds))
    conn.close()


@dataclass
class Run:
    rate: int
    produced: int
    p50: float | None
    p99: float | None
    commits: int
    uncommitted: int
    achieved_rate: float
    #: Latency in seconds at each of ``PERCENTS`` (empty if nothing committed).
    percentiles: tuple[float, ...] = ()


def _wait_started(query: Any, timeout: float = 60) -> None:
    """Until the query's first trigger has run (sources initialized)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = query.status
        if not query.isActive:
            streaming.stop_stream(query)
            raise RuntimeError("stream stopped before its first trigger")
        if status["message"] != "Initializing sources" and not status["isTriggerActive"]:
            return
        time.sleep(0.05)
    raise TimeoutError("stream did not start")


def measure(side: str, rate: int, seconds: float, trigger: str) -> Run:
    env = streaming.environment()
    work = streaming.workdir(env, f"fresh-{side}-{rate}")
    catalogs = streaming.Catalogs.at(work)
    topic = streaming.new_topic(env, PARTITIONS, f"fresh_{side}")
    commits = streaming.CommitLog()
    if side == "calving":
        sink: Any = streaming.calving_sink(
            catalogs.calving_table(streaming.JSON_SCHEMA), "json", commits, env.root
        )
    else:
        sink = streaming.pyiceberg_peer(catalogs, "json", commits, topic, env.root)
    query = streaming.start_stream(env, topic, sink, work / "ckpt", processing_time=trigger)
    try:
        _wait_started(query)
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        producer = ctx.Process(
            target=produce_steady,
            args=(env.broker.bootstrap_servers, topic, PARTITIONS, rate, seconds, child),
            daemon=True,
        )
        producer.start()
        try:
            if not parent.poll(60) or parent.recv() != "ready":
                raise RuntimeError("producer process did not start")
            if not parent.poll(seconds + 120):
                raise TimeoutError("producer process did not finish")
            times, failures, _ = parent.recv()
        finally:
            producer.join(30)
            if producer.is_alive():
                producer.kill()
        if failures:
            raise RuntimeError(f"{len(failures)} records not produced, first: {failures[0]}")
        commits.expect({(topic, p): len(t) for p, t in enumerate(times)})
        # A stream that keeps up commits the tail within a few triggers; one that fell
        # behind gets as long as the run itself to catch up, then is measured as it is.
        try:
            streaming.await_covered(query, commits, timeout=max(30.0, seconds))
        except TimeoutError:
            pass
    finally:
        streaming.stop_stream(query)
    return _latencies(rate, seconds, topic, times, commits)


def _latencies(
    rate: int,
    seconds: float,
    topic: str,
    times: list[np.ndarray],
    commits: streaming.CommitLog,
) -> Run:
    visible = [np.full(len(t), np.nan) for t in times]
    with commits.lock:
        history = list(commits.commits)
    for committed_at, ranges in history:
        for (t, p), (start, end) in ranges.items():
            if t == topic:
                part = visible[p][start:end]
                np.copyto(part, committed_at, where=np.isnan(part))
    # The last record of each partition is the lone watermark record: not in the steady
    # flow, left out of the figures.
    latency = np.concatenate([v[:-1] - t[:-1] for v, t in zip(visible, times)])
    produced = len(latency)
    done = latency[~np.isnan(latency)]
    return Run(
        rate=rate,
        produced=produced,
        p50=float(np.percentile(done, 50)) if len(done) else None,
        p99=float(np.percentile(done, 99)) if len(done) else None,
        commits=len(history),
        uncommitted=produced - len(done),
        achieved_rate=produced / seconds,
        percentiles=tuple(float(v) for v in np.percentile(done, PERCENTS)) if len(done) else (),
    )


def _seconds(v: float | None) -> str:
    return "not measured" if v is None else f"{v:.2f} s"


def _note(run: Run, side: str, seconds: float, trigger: str) -> str:
    text = (
        f"{side} @{run.rate:,}/s: {run.produced:,} records over {seconds:.0f} s "
        f"(achieved {run.achieved_rate:,.0f}/s), trigger {trigger}, {run.commits} commits"
    )
    if run.uncommitted:
        text += (
            f"; FELL BEHIND: {run.uncommitted:,} records still not committed "
            f"{max(30.0, seconds):.0f} s after the producer stopped (left out of p50/p99)"
        )
    return text


def figures(
    quick: bool,
    rates: tuple[int, ...] = (1_000, 10_000),
    seconds: float | None = None,
    trigger: str = TRIGGER,
) -> list[Figure]:
    seconds = seconds or (15.0 if quick else 60.0)
    return to_figures(measure_all(rates, seconds, trigger), seconds, trigger)


def measure_all(rates: tuple[int, ...], seconds: float, trigger: str) -> list[dict[str, Run]]:
    """Both sides at each rate, in turn."""
    return [
        {side: measure(side, rate, seconds, trigger) for side in ("calving", "pyiceberg")}
        for rate in rates
    ]


def to_figures(measured: list[dict[str, Run]], seconds: float, trigger: str) -> list[Figure]:
    out: list[Figure] = []
    for runs in measured:
        c, p = runs["calving"], runs["pyiceberg"]
        rate = c.rate
        for side, r in runs.items():
            streaming.log(
                "freshness",
                f"{side} @{rate:,}/s: p50 {_seconds(r.p50)}, p99 {_seconds(r.p99)}, "
                f"{r.commits} commits, {r.uncommitted} uncommitted",
            )
        goal = rate == GOAL_RATE
        notes = [_note(c, "calving", seconds, trigger)]
        if p.uncommitted:
            notes.append(_note(p, "pyiceberg", seconds, trigger))
        for stat, limit in (("p50", GOAL_P50_S), ("p99", GOAL_P99_S)):
            value, peer = getattr(c, stat), getattr(p, stat)
            out.append(
                Figure(
                    "freshness",
                    f"produce->visible {stat} @{rate // 1000}k/s, s",
                    value,
                    "pyiceberg append in foreachBatch",
                    peer,
                    goal=f"<= {limit:g} s" if goal else "",
                    met=(at_most(value, limit) and not c.uncommitted) if goal else None,
                    note="; ".join(notes) if stat == "p50" else "",
                )
            )
    return out


def main(argv: list[str] | None = None) -> None:
    from tests.bench.figures import render

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rates", default="1000,10000")
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--trigger", default=TRIGGER)
    ap.add_argument("--json-out", type=Path, help="also write the run here (tests.bench.record)")
    args = ap.parse_args(argv)
    rates = tuple(int(r) for r in args.rates.split(","))
    seconds = args.seconds or (15.0 if args.quick else 60.0)
    try:
        measured = measure_all(rates, seconds, args.trigger)
    finally:
        streaming.shutdown()
    print(render(to_figures(measured, seconds, args.trigger)))
    if args.json_out is not None:
        params = {
            "rates": list(rates),
            "seconds": seconds,
            "trigger": args.trigger,
            "partitions": PARTITIONS,
            "percents": list(PERCENTS),
        }
        runs = [{"side": s, **asdict(r)} for by_side in measured for s, r in by_side.items()]
        record.write(args.json_out, "freshness", params, runs)


if __name__ == "__main__":
    main()
