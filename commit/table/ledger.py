"""The exactly-once ledger: per writer id, the next Kafka offset of every
topic-partition that writer has committed.

It lives in the table *properties* (``calving.ledger.<writer-id>``), so it is
read from the current metadata alone, without walking snapshot ancestry, and
survives the expiry of every older snapshot. Each commit also records its writer
id, commit id and offset ranges in the snapshot summary for audit.

A commit claims ranges ``[start, end)`` per partition. Against the ledger:

* every range already below the ledger (``end <= next``): a replay; commit nothing;
* every range starting exactly at the ledger (or a partition new to it): commit and
  advance the ledger;
* anything else (a partial overlap, or a gap): another pipeline with the same
  writer id moved on, or records would be skipped; ``StaleWriterError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from calving.commit.errors import StaleWriterError
from calving.commit.spec.metadata import TableMetadata

LEDGER_PREFIX = "calving.ledger."
SUMMARY_WRITER = "calving.writer-id"
SUMMARY_COMMIT = "calving.commit-id"
SUMMARY_OFFSETS = "calving.offsets"

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetRange:
    start: int  # first offset covered
    end: int  # next offset after the last covered (exclusive)

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid offset range [{self.start}, {self.end})")


@dataclass(frozen=True)
class LedgerClaim:
    """The offsets one commit covers, for one writer id."""

    writer_id: str
    ranges: Mapping[TopicPartition, OffsetRange] = field(default_factory=dict)
    # A partition's first commit may start anywhere (startingOffsets=latest,
    # retention); a later gap is refused unless the caller allows it
    # (failOnDataLoss=false).
    allow_gaps: bool = False


class LedgerVerdict:
    NEW = "new"
    REPLAY = "replay"


def ledger_key(writer_id: str) -> str:
    if not writer_id or any(c.isspace() for c in writer_id):
        raise ValueError(f"writer id must be non-empty without spaces, got {writer_id!r}")
    return LEDGER_PREFIX + writer_id


def read_ledger(metadata: TableMetadata, writer_id: str) -> dict[TopicPartition, int]:
    raw = metadata.properties.get(ledger_key(writer_id))
    if not raw:
        return {}
    obj = json.loads(raw)
    return {(topic, int(p)): int(off) for topic, parts in obj.items() for p, off in parts.items()}


def all_ledgers(metadata: TableMetadata) -> dict[str, dict[TopicPartition, int]]:
    return {
        key[len(LEDGER_PREFIX) :]: read_ledger(metadata, key[len(LEDGER_PREFIX) :])
        for key in metadata.properties
        if key.startswith(LEDGER_PREFIX)
    }


def encode_offsets(offsets: Mapping[TopicPartition, int]) -> str:
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), off in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = off
    return json.dumps(nested, separators=(",", ":"), sort_keys=True)


def judge(metadata: TableMetadata, claim: LedgerClaim) -> str:
    """``NEW`` or ``REPLAY`` for this claim against the table's ledger, or raise."""
    ledger = read_ledger(metadata, claim.writer_id)
    replayed: list[TopicPartition] = []
    fresh: list[TopicPartition] = []
    for tp, rng in claim.ranges.items():
        if rng.start == rng.end:
            continue  # an empty range claims nothing
        committed = ledger.get(tp)
        if committed is None:
            fresh.append(tp)
        elif rng.end <= committed:
            replayed.append(tp)
        elif rng.start == committed or (rng.start > committed and claim.allow_gaps):
            fresh.append(tp)
        elif rng.start > committed:
            raise StaleWriterError(
                f"writer {claim.writer_id!r}: {tp[0]}/{tp[1]} would skip offsets "
                f"[{committed}, {rng.start}); the ledger is at {committed}"
            )
        else:
            raise StaleWriterError(
                f"writer {claim.writer_id!r}: {tp[0]}/{tp[1]} range [{rng.start}, {rng.end}) "
                f"overlaps the committed ledger at {committed}; another pipeline with this "
                "writer id has committed past this one. Restart from the table's ledger."
            )
    if replayed and fresh:
        raise StaleWriterError(
            f"writer {claim.writer_id!r}: batch mixes already-committed partitions "
            f"{sorted(replayed)} with new ones {sorted(fresh)}; refusing a partial commit"
        )
    if replayed or not fresh:
        return LedgerVerdict.REPLAY if replayed else LedgerVerdict.NEW
    return LedgerVerdict.NEW


def advanced_properties(metadata: TableMetadata, claim: LedgerClaim) -> dict[str, str]:
    """The ledger property after this claim commits."""
    ledger = read_ledger(metadata, claim.writer_id)
    for tp, rng in claim.ranges.items():
        ledger[tp] = max(ledger.get(tp, 0), rng.end)
    return {ledger_key(claim.writer_id): encode_offsets(ledger)}


def summary_entries(claim: LedgerClaim, commit_id: str) -> dict[str, str]:
    ranges: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), rng in sorted(claim.ranges.items()):
        ranges.setdefault(topic, {})[str(partition)] = [rng.start, rng.end]
    return {
        SUMMARY_WRITER: claim.writer_id,
        SUMMARY_COMMIT: commit_id,
        SUMMARY_OFFSETS: json.dumps(ranges, separators=(",", ":"), sort_keys=True),
    }
