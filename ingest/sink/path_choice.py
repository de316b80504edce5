"""Which way records travel from Kafka to the table's files (``[sink] path``).

* fused: the ``calving-kafka`` source emits one row per planned offset range
  (``calving.emit = ranges``) and a Python task of whole ranges (small ones share a task)
  reads, decodes, collapses per key and writes (``calving.ingest.sink.fused``): record
  bytes never enter the JVM.
* shuffle: the source emits the records; a decode stage, then (keyed tables) a
  repartition by key and a collapse-and-write stage (``calving.ingest.sink.executor``).

``auto`` takes the fused path unless a keyed table's key may live in more than one
Kafka partition: several topics (a list, a pattern, an assignment over several topics)
or a format whose key is not the Kafka key (a plain JSON/Avro value with identifier
fields). Debezium and key-upsert topics are keyed by the row's primary key, so one key's
events share a partition. The sink still checks every fused batch and switches to the
shuffle path for good if a key turns up in two tasks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from calving.ingest.config.format import FormatConfig
from calving.ingest.config.source import SourceConfig


@dataclass(frozen=True)
class PathChoice:
    path: Literal["fused", "shuffle"]
    #: Why, for the log line at start.
    reason: str
    keyed: bool = False
    #: Options over the configured ones (a many-table pipeline's subscription).
    overrides: tuple[tuple[str, str], ...] = ()

    @property
    def source_options(self) -> dict[str, str]:
        """Extra ``calving-kafka`` options the path needs."""
        if self.path == "shuffle":
            return dict(self.overrides)
        if self.overrides:
            return {
                "calving.emit": "ranges",
                "calving.splitRanges": "false",
                **dict(self.overrides),
            }
        if not self.keyed:
            return {"calving.emit": "ranges"}
        # One task per topic-partition range: a partition's keys stay together.
        return {"calving.emit": "ranges", "calving.splitRanges": "false"}


@dataclass(frozen=True)
class SourcePlan:
    """A sink's Kafka source and the path its records take: the options of the
    ``calving-kafka`` stream that feeds it (``calving.kafka_stream``)."""

    source: SourceConfig
    path: PathChoice

    def spark_options(self) -> dict[str, str]:
        return {**self.source.spark_options(), **self.path.source_options}


def choose_path(
    configured: str, source: SourceConfig, fmt: FormatConfig, keyed: bool
) -> PathChoice:
    """The path for ``[sink] path = configured`` (auto, fused or shuffle)."""
    if configured == "shuffle":
        return PathChoice("shuffle", "[sink] path = shuffle", keyed)
    if configured == "fused":
        return PathChoice("fused", "[sink] path = fused", keyed)
    if not keyed:
        return PathChoice("fused", "an append table needs no shuffle", keyed)
    if not fmt.keyed:
        return PathChoice(
            "shuffle",
            f'format.type "{fmt.type}" does not key records by the table key, so one key '
            "may span Kafka partitions",
            keyed,
        )
    topics = _topics(source)
    if topics is None or len(topics) != 1:
        shown = "a topic pattern" if topics is None else f"{len(topics)} topics"
        return PathChoice("shuffle", f"{shown} feed one keyed table: a key may span topics", keyed)
    return PathChoice("fused", f"{fmt.type} keys each row by its primary key in one topic", keyed)


def _topics(source: SourceConfig) -> set[str] | None:
    """The topics the source reads, or None when a pattern decides."""
    if source.topics:
        return set(source.topics)
    if source.assign:
        return set(json.loads(source.assign))
    return None
