"""``calving.kafka_stream(spark, sink)``: the Kafka DataFrame for a sink, read the way
``calving run`` reads it.

    sink = calving.sink(..., source={"bootstrap_servers": "broker:9092", "topics": ["orders"]})
    with sink:
        df = calving.kafka_stream(spark, sink)
        df.writeStream.foreachBatch(sink).option("checkpointLocation", ...).start()

Spark's JVM ``kafka`` source is not part of pip's pyspark, and calving's own
``calving-kafka`` source (a Python data source) must be registered on the session before
``format("calving-kafka")`` finds it. This does both the registration and the wiring
``calving run`` does: the sink's ``[source]`` keys as source options, the records path
the config chooses (``[sink] path``: on the fused path the DataFrame carries offset
ranges and the sink's tasks read the records themselves), and a start from the table's
exactly-once ledger whenever it is ahead of Spark's checkpoint.
"""

from __future__ import annotations

from typing import Any

from calving.commit.errors import ConfigError
from calving.ingest.sink.rows import RowsSink
from calving.ingest.worker_python import use_this_python


def kafka_stream(spark: Any, sink: RowsSink) -> Any:
    """The streaming DataFrame of ``sink``'s Kafka source (``calving.sink(source=...)``,
    or a config file's ``[source]``), for ``df.writeStream.foreachBatch(sink)``. Give it
    to that sink unchanged: on the fused path its rows are offset ranges, not records
    (``[sink] path = "shuffle"`` gives records). Raises ``calving.ConfigError`` if the
    sink has no source."""
    if not isinstance(sink, RowsSink):
        raise ConfigError(
            f"calving.kafka_stream: expected a sink from calving.sink(), got {type(sink).__name__}"
        )
    plan = sink.source_plan
    if plan is None:
        raise ConfigError(
            "calving.kafka_stream: the sink has no [source]; pass source={"
            '"bootstrap_servers": ..., "topics": [...]} to calving.sink(), or use a config '
            "file with a [source] section"
        )
    use_this_python(spark.sparkContext)
    from calving.ingest.pipeline import kafka_frame

    frame = kafka_frame(spark, plan.spark_options(), sink.starting_ledger())
    sink.open_early(spark)
    return frame


__all__ = ["kafka_stream"]
