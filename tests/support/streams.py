"""Running a calving stream in tests: the calving-kafka source into a CalvingSink,
drained with ``trigger(availableNow=True)``, on the fused path (the default: the source
emits offset ranges and the sink's tasks read them) or the shuffle path (records)."""

from __future__ import annotations

import json
from typing import Any

from calving.commit.table.ledger import read_ledger
from calving.ingest.kafka.offsets import offsets_to_json
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.sink.foreach_batch import CalvingSink
from calving.ingest.sink.path_choice import PathChoice

PATHS = ("fused", "shuffle")

_registered: set[int] = set()


def kafka_stream(
    spark: Any,
    bootstrap: str,
    topic: str,
    *,
    starting_ledger: dict[tuple[str, int], int] | None = None,
    max_offsets_per_trigger: int | None = None,
    sink: CalvingSink | None = None,
    path: str = "shuffle",
) -> Any:
    """The source's DataFrame; ``path = "fused"`` (with the ``sink``) emits ranges."""
    from calving.ingest.kafka.source import KafkaSource

    if id(spark) not in _registered:
        spark.dataSource.register(KafkaSource)
        _registered.add(id(spark))
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
    }
    if starting_ledger:
        options["calving.startingLedger"] = json.dumps(offsets_to_json(starting_ledger))
    if max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    if sink is not None:
        options = use_path(sink, options, path)
        sink.open_early(spark)  # as calving.kafka_stream and Pipeline.start do
    reader = spark.readStream.format("calving-kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def use_path(sink: CalvingSink, options: dict[str, str], path: str) -> dict[str, str]:
    """The source options for ``path``; on the fused path the sink reads the ranges
    itself, with these options."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if path == "shuffle":
        return options
    keyed = bool(sink.table.metadata.schema.identifier_field_ids)
    options = {**options, **PathChoice("fused", "tests", keyed).source_options}
    sink.source_options = KafkaSourceOptions.parse(options)
    sink.keyed_path = "fused"
    return options


def drain(
    spark: Any,
    bootstrap: str,
    topic: str,
    sink: CalvingSink,
    checkpoint: str,
    *,
    max_offsets_per_trigger: int | None = None,
    timeout: float = 600,
    path: str = "fused",
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
        sink=sink,
        path=path,
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
