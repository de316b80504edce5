"""Debezium JSON decoding: the vectorized path (Arrow's JSON reader) vs the per-event
path (``json.loads`` per event), same events, same decoder otherwise.

A seeded change stream (``tests.support.cdc``: creates, updates, deletes with their
tombstones, bare envelopes as Debezium's JSON converter writes them without schemas)
is decoded in Kafka-sized batches; printed: records/s and CPU-seconds per million
records of each path, and the ratio.

    python -m tests.bench.decode_debezium [--quick] [--events N]
"""

from __future__ import annotations

import argparse
import time

from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from tests.bench.figures import Figure
from tests.ingest.decode import kafka_batch
from tests.support.cdc import SCHEMA, cdc_events

BATCH = 10_000


def measure(events: int) -> dict[str, tuple[float, float]]:
    """Path -> (records/s, CPU-s per million records), best of 3."""
    stream = cdc_events(keys=events // 5, events=events, partitions=1)
    values = [r[2] for r in stream.records]
    keys = [r[1] for r in stream.records]
    batches = [
        kafka_batch(values[i : i + BATCH], keys[i : i + BATCH])
        for i in range(0, len(values), BATCH)
    ]
    out = {}
    for name, vectorized in (("per-event", False), ("vectorized", True)):
        decoder = DebeziumDecoder(SCHEMA, DebeziumOptions(vectorized=vectorized))
        best = (0.0, float("inf"))
        for _ in range(3):
            wall, cpu = time.perf_counter(), time.process_time()
            rows = sum(decoder.decode(b).rows.num_rows for b in batches)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            assert rows > 0
            best = max(best, (len(values) / wall, cpu / len(values) * 1e6), key=lambda r: r[0])
        out[name] = best
    return out


def figures(quick: bool) -> list[Figure]:
    got = measure(50_000 if quick else 200_000)
    (slow_rate, slow_cpu), (fast_rate, fast_cpu) = got["per-event"], got["vectorized"]
    return [
        Figure(
            "decode_debezium",
            "Debezium JSON decode, records/s",
            fast_rate,
            "per-event path",
            slow_rate,
            better="higher",
        ),
        Figure(
            "decode_debezium",
            "Debezium JSON decode, CPU-s per million records",
            fast_cpu,
            "per-event path",
            slow_cpu,
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--events", type=int, default=None)
    args = ap.parse_args(argv)
    got = measure(args.events or (50_000 if args.quick else 200_000))
    for name, (rate, cpu) in got.items():
        print(f"{name:10s} {rate:12,.0f} records/s  {cpu:6.2f} CPU-s per million records")
    print(f"vectorized / per-event: {got['vectorized'][0] / got['per-event'][0]:.2f}x the rate")


if __name__ == "__main__":
    main()
