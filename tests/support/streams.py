"""Running a calving stream in tests: the calving-kafka source into a CalvingSink,
drained with ``trigger(availableNow=True)``."""

from __future__ import annotations

import json
from typing import Any

from calving.commit.table.ledger import read_ledger
from calving.ingest.kafka.offsets import offsets_to_json
from calving.ingest.sink.foreach_batch import CalvingSink

_registered: set[int] = set()


def kafka_stream(
    spark: Any,
    bootstrap: str,
    topic: str,
    *,
    starting_ledger: dict[tuple[str, int], int] | None = None,
    max_offsets_per_trigger: int | None = None,
) -> Any:
    from calving.ingest.kafka.source import KafkaSource

    if id(spark) not in _registered:
        spark.dataSource.register(KafkaSource)
        _registered.add(id(spark))
    reader = (
        spark.readStream.format("calving-kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if starting_ledger:
        reader = reader.option(
            "calving.startingLedger", json.dumps(offsets_to_json(starting_ledger))
        )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def drain(
    spark: Any,
    bootstrap: str,
    topic: str,
    sink: CalvingSink,
    checkpoint: str,
    *,
    max_offsets_per_trigger: int | None = None,
    timeout: float = 600,
) -> None:
    """Run the stream until everything available now is committed."""
    sink.table.refresh()
    ledger = read_ledger(sink.table.metadata, sink.writer_id)
    df = kafka_stream(
        spark,
        bootstrap,
        topic,
        starting_ledger=ledger,
        max_offsets_per_trigger=max_offsets_per_trigger,
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    from pyspark.errors import StreamingQueryException

    try:
        try:
            query.awaitTermination(timeout)
        except StreamingQueryException as failure:
            raise RuntimeError(f"stream failed: {failure}") from failure
        if query.isActive:
            raise TimeoutError(f"stream on {topic} did not drain in {timeout}s")
        if query.exception() is not None:
            raise RuntimeError(f"stream failed: {query.exception()}")
    finally:
        if query.isActive:
            query.stop()
    sink.close()
