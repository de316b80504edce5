"""Debezium JSON decoding: the vectorized path (Arrow's JSON reader) vs the per-event
path (``json.loads`` per event), same events, same decoder otherwise.

A seeded change stream (``tests.support.cdc``: creates, updates, deletes with their
tombstones) is decoded in Kafka-sized batches, as Debezium's JSON converter writes it
without schemas (bare envelopes) and with them (``{"schema": ..., "payload": ...}``,
``schemas.enable = true``, the converter's default); printed: records/s and
CPU-seconds per million records of each path, and the ratio.

    python -m tests.bench.decode_debezium [--quick] [--events N]
"""

from __future__ import annotations

import argparse
import json
import time

from calving.ingest.decode.debezium import DebeziumDecoder, DebeziumOptions
from tests.bench.figures import Figure
from tests.ingest.decode import kafka_batch
from tests.support.cdc import SCHEMA, cdc_events

BATCH = 10_000

_ROW = {"type": "struct", "optional": True, "name": "bench.public.items.Value", "fields": [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": True, "field": "status"},
    {"type": "int64", "optional": True, "field": "version"},
]}  # fmt: skip
#: The JSON converter's schema of the stream's envelopes (``source`` left out).
CONNECT_SCHEMA = {"type": "struct", "optional": False, "name": "bench.public.items.Envelope",
                  "fields": [{**_ROW, "field": "before"}, {**_ROW, "field": "after"},
                             {"type": "string", "optional": False, "field": "op"},
                             {"type": "int64", "optional": True, "field": "ts_ms"}]}  # fmt: skip


def wrapped(value: bytes | None) -> bytes | None:
    """A bare envelope as the JSON converter writes it with ``schemas.enable = true``."""
    if value is None:
        return None
    schema = json.dumps(CONNECT_SCHEMA, separators=(",", ":"))
    return b'{"schema":' + schema.encode() + b',"payload":' + value + b"}"


def measure(events: int, with_schemas: bool = False) -> dict[str, tuple[float, float]]:
    """Path -> (records/s, CPU-s per million records), best of 3."""
    stream = cdc_events(keys=events // 5, events=events, partitions=1)
    values = [wrapped(r[2]) if with_schemas else r[2] for r in stream.records]
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
    out = []
    for with_schemas in (False, True):
        got = measure(50_000 if quick else 200_000, with_schemas)
        (slow_rate, slow_cpu), (fast_rate, fast_cpu) = got["per-event"], got["vectorized"]
        kind = "with schemas" if with_schemas else "schemaless"
        out += [
            Figure(
                "decode_debezium",
                f"Debezium JSON ({kind}) decode, records/s",
                fast_rate,
                "per-event path",
                slow_rate,
                better="higher",
            ),
            Figure(
                "decode_debezium",
                f"Debezium JSON ({kind}) decode, CPU-s per million records",
                fast_cpu,
                "per-event path",
                slow_cpu,
            ),
        ]
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--events", type=int, default=None)
    args = ap.parse_args(argv)
    for with_schemas in (False, True):
        got = measure(args.events or (50_000 if args.quick else 200_000), with_schemas)
        print("with schemas in the events" if with_schemas else "schemaless events")
        for name, (rate, cpu) in got.items():
            print(f"  {name:10s} {rate:12,.0f} records/s  {cpu:6.2f} CPU-s per million records")
        ratio = got["vectorized"][0] / got["per-event"][0]
        print(f"  vectorized / per-event: {ratio:.2f}x the rate")


if __name__ == "__main__":
    main()
