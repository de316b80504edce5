"""A Spark driver process for kill-and-restart tests:

    python -m tests.support.stream_driver --bootstrap B --topic T --catalog URI \
        --warehouse W --table db.t --checkpoint DIR --writer ID --format debezium \
        [--max-offsets N] [--available-now]

Runs the calving-kafka source into a CalvingSink (processing-time trigger unless
``--available-now``). Prints one ``committed <snapshot> <records>`` line per batch so
the test can kill it mid-stream.
"""

from __future__ import annotations

import argparse
import sys

from calving.commit.catalog.base import parse_ident
from calving.commit.catalog.sql import SqlCatalog
from calving.commit.table.ledger import read_ledger
from calving.commit.table.table import Table
from calving.ingest.decode import DebeziumDecoder, JsonValueDecoder
from calving.ingest.sink.coordinator import BatchStats
from calving.ingest.sink.foreach_batch import CalvingSink


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    for name in ("bootstrap", "topic", "catalog", "warehouse", "table", "checkpoint", "writer"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--format", choices=["json", "debezium"], default="json")
    p.add_argument("--max-offsets", type=int)
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args(argv)

    from tests.support.spark import local_session
    from tests.support.streams import kafka_stream

    spark = local_session("calving-stream-driver")
    catalog = SqlCatalog("calving", args.catalog, args.warehouse)
    table = Table.load(catalog, parse_ident(args.table))
    decoder = DebeziumDecoder if args.format == "debezium" else JsonValueDecoder

    def report(stats: BatchStats) -> None:
        print(f"{stats.outcome} {stats.snapshot_id} {stats.records}", flush=True)

    sink = CalvingSink(table, decoder, args.writer, on_batch=report, index_save_every=3)
    df = kafka_stream(
        spark,
        args.bootstrap,
        args.topic,
        starting_ledger=read_ledger(table.metadata, args.writer),
        max_offsets_per_trigger=args.max_offsets,
    )
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", args.checkpoint)
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="1 second")
    query = writer.start()
    query.awaitTermination()
    sink.close()
    print("drained", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
