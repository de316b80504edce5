"""Kafka offset arithmetic for the streaming source, free of Spark and of any client.

Offsets travel through Spark's checkpoint as JSON dicts with string partition keys,
``{"orders": {"0": 400, "1": 512}}``; here they are ``dict[(topic, partition), offset]``.
An offset is always the *next* offset to read, so a range ``[start, end)`` holds at most
``end - start`` records (fewer when compaction or transaction markers leave gaps).

The functions decide three things: how far one trigger may read (admission control for
``maxOffsetsPerTrigger``), where a partition's read really starts (checkpoint, calving's
exactly-once ledger, records deleted by retention), and how ranges become Spark tasks
(``minPartitions``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from calving.commit.errors import ConfigError, Terminal

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]
#: Offsets in Spark's checkpoint form: ``{"topic": {"0": 23}}`` (``offsets_to_json``).
OffsetsJson = dict[str, dict[str, int]]

#: Spark's markers in a JSON ``startingOffsets``.
EARLIEST = -2
LATEST = -1

_log = logging.getLogger("calving.ingest.kafka")


class KafkaDataLossError(Terminal):
    """Records the query should read are gone (retention, a deleted or recreated topic).

    Raised only with ``failOnDataLoss=true``; with ``false`` the source skips ahead and
    logs a warning instead.
    """

    def __init__(self, topic: str, partition: int | None, detail: str) -> None:
        self.topic = topic
        self.partition = partition
        where = topic if partition is None else f"{topic}/{partition}"
        super().__init__(
            f"{where}: {detail}. Some data may have been lost; set failOnDataLoss=false "
            "to skip ahead instead of failing"
        )


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[start, end)`` of one topic-partition: one Spark task's work."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


# ---------------------------------------------------------------- JSON forms


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> OffsetsJson:
    """Canonical JSON form: topics sorted, partitions in numeric order.

    Spark tells "no new data" by comparing offsets, so equal offsets must serialize equal.
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_from_json(doc: Mapping[str, Mapping[str, int]], option: str = "offset") -> Offsets:
    """Parse ``{"topic": {"0": 23}}``; ``option`` names the source of the JSON in errors."""
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{option}: expected a JSON object of topics, got {doc!r}")
    out: Offsets = {}
    for topic, partitions in doc.items():
        if not isinstance(partitions, Mapping):
            raise ConfigError(
                f"{option}: topic {topic!r} must map partition numbers to offsets, "
                f"got {partitions!r}"
            )
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"{option}: partition {partition!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ConfigError(
                    f"{option}: offset of {topic}/{partition} must be an integer, got {offset!r}"
                )
            out[(str(topic), number)] = offset
    return out


def parse_offsets_option(text: str, option: str, allow_markers: bool) -> Offsets:
    """Parse an option holding offsets JSON. Markers -2 (earliest) and -1 (latest) are
    accepted when ``allow_markers``; other negative offsets never are."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{option}: not valid JSON ({error.msg}): {text!r}") from None
    offsets = offsets_from_json(doc, option)
    for (topic, partition), offset in offsets.items():
        lowest = EARLIEST if allow_markers else 0
        if offset < lowest:
            allowed = "-2 (earliest), -1 (latest) or >= 0" if allow_markers else ">= 0"
            raise ConfigError(
                f"{option}: offset {offset} of {topic}/{partition} is invalid; use {allowed}"
            )
    return offsets


def parse_assign_option(text: str) -> list[TopicPartition]:
    """Parse ``assign``: ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"assign: not valid JSON ({error.msg}): {text!r}") from None
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f'assign: expected {{"topic": [partitions]}}, got {text!r}')
    out: list[TopicPartition] = []
    for topic, partitions in doc.items():
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise ConfigError(
                f"assign: topic {topic!r} must map to a list of partition numbers, "
                f"got {partitions!r}"
            )
        out.extend((topic, p) for p in partitions)
    return sorted(set(out))


# ---------------------------------------------------------------- admission control


def admit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int | None
) -> Offsets:
    """The end offsets of one trigger reading from ``start`` towards ``latest``.

    Without a limit, or when the total lag fits in it, every partition reads to
    ``latest``. Otherwise every lagging partition first gets one record (none starves)
    and the rest of ``max_rows`` is spread in proportion to the remaining lags, leftover
    rows going to the largest remainders (ties by topic-partition: deterministic). The
    total admitted is then exactly ``max(max_rows, number of lagging partitions)``.
    ``start`` must not exceed ``latest`` for any partition of ``latest``.
    """
    lags = {tp: latest[tp] - start[tp] for tp in latest}
    if any(lag < 0 for lag in lags.values()):
        raise ValueError("admit() needs start <= latest for every partition")
    total = sum(lags.values())
    if max_rows is None or total <= max_rows:
        return dict(latest)
    if max_rows < 1:
        raise ValueError("max_rows must be positive")
    lagging = sorted(tp for tp, lag in lags.items() if lag > 0)
    shares = dict.fromkeys(lagging, 1)
    spread = max_rows - len(lagging)
    if spread > 0:
        # total > max_rows, so rest > spread: each proportional share stays below its lag.
        rest = {tp: lags[tp] - 1 for tp in lagging}
        rest_total = sum(rest.values())
        for tp in lagging:
            shares[tp] += spread * rest[tp] // rest_total
        leftover = max_rows - sum(shares.values())
        by_remainder = sorted(lagging, key=lambda tp: (-(spread * rest[tp] % rest_total), tp))
        for tp in by_remainder[:leftover]:
            shares[tp] += 1
    end = dict(latest)
    for tp in lagging:
        end[tp] = start[tp] + shares[tp]
    return end


# ---------------------------------------------------------------- where reads start


def resolve_read_start(
    tp: TopicPartition,
    start: int,
    end: int,
    earliest: int,
    ledger: int | None,
    fail_on_data_loss: bool,
) -> int:
    """Where the range ``start -> end`` of ``tp`` really begins reading.

    * ``end < start``: the partition's offsets went backwards (topic deleted and
      recreated): data loss; skipping ahead means reading the new records from earliest.
    * calving's ledger (the next offset the table has not committed) lifts the start:
      records below it are already in the table.
    * a start below ``earliest``: retention deleted records before they were read.

    Returns the first offset to read; nothing is read when it is ``>= end``.
    """
    topic, partition = tp
    if end < start:
        _data_loss(
            fail_on_data_loss,
            topic,
            partition,
            f"offset went back from {start} to {end} (topic recreated?); "
            f"reading from the earliest available offset {earliest}",
        )
        start = earliest
    if ledger is not None and ledger > start:
        start = ledger
    if start < earliest:
        _data_loss(
            fail_on_data_loss,
            topic,
            partition,
            f"offsets {start}..{earliest - 1} were deleted before they were read "
            f"(earliest available is {earliest})",
        )
        start = earliest
    return start


def report_vanished_partitions(vanished: Iterable[TopicPartition], fail_on_data_loss: bool) -> None:
    """Partitions that were in the previous offsets and are gone from the broker."""
    for topic, partition in sorted(vanished):
        _data_loss(fail_on_data_loss, topic, partition, "partition no longer exists")


def _data_loss(fail: bool, topic: str, partition: int | None, detail: str) -> None:
    if fail:
        raise KafkaDataLossError(topic, partition, detail)
    _log.warning("possible data loss on %s/%s: %s (failOnDataLoss=false)", topic, partition, detail)


# ---------------------------------------------------------------- Spark tasks


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split ranges so that there are at least ``min_partitions`` of them (when there are
    that many records), cutting each range into near-equal pieces in proportion to its share
    of all records.

    Without ``min_partitions``, or when there already are that many ranges, returns them
    unchanged: one Spark task per topic-partition.
    """
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        # Rounding each share up makes the pieces add up to at least min_partitions.
        pieces = min(r.size, -(-r.size * min_partitions // total))
        for i in range(pieces):
            lo = r.start + r.size * i // pieces
            hi = r.start + r.size * (i + 1) // pieces
            out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out


def group_small_ranges(
    ranges: list[OffsetRange], task_records: int
) -> list[tuple[OffsetRange, ...]]:
    """``ranges`` dealt into as few tasks as hold ``task_records`` records each, never
    more tasks than ranges: a batch of 40 records over two partitions is one task (one
    file per table partition instead of two), one of 2 x 50,000 stays two. Largest
    range first into the lightest task, so the tasks come out near-equal; a range is
    never cut, so every key of a topic-partition stays in one task."""
    if not ranges:
        return []
    total = sum(r.size for r in ranges)
    tasks = min(len(ranges), max(1, -(-total // task_records)))
    if tasks == len(ranges):
        return [(r,) for r in ranges]
    groups: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    loads = [0] * tasks
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition)):
        lightest = loads.index(min(loads))
        groups[lightest].append(r)
        loads[lightest] += r.size
    return [tuple(g) for g in groups]
