"""The snapshots a change range covers: after ``start``, up to and including ``end``.

An end is a snapshot id, a point in time (the snapshot of the main branch current at
that time), or None (the current snapshot). A start is the same, or None: from the
table's first snapshot. The range is found by walking ``end``'s parents back to
``start``: a parent that is no longer in the metadata (expired) before ``start`` is
reached means changes are missing, and the range is refused; ``start`` itself may be
expired as long as its child is still there. Pure: metadata in, snapshots out.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from calving.commit.errors import ChangeFeedError
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.snapshot import Snapshot

#: A range end: a snapshot id, a time, or None (see the module doc).
Bound = int | dt.datetime | None


@dataclass(frozen=True)
class ChangeRange:
    """The snapshots of a range, oldest first (``start_id`` excluded, None: from the
    table's beginning)."""

    start_id: int | None
    end_id: int | None
    snapshots: tuple[Snapshot, ...]


def _utc_ms(when: dt.datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def _describe(bound: Bound, none: str = "the table's first snapshot") -> str:
    if bound is None:
        return none
    return bound.isoformat() if isinstance(bound, dt.datetime) else f"snapshot {bound}"


def _at_time(metadata: TableMetadata, head: int | None, when: dt.datetime) -> int | None:
    """The id of the newest ancestor of ``head`` committed at or before ``when``; None
    when the table had no snapshot then. Refused when history that old was expired."""
    ms = _utc_ms(when)
    chain = metadata.ancestors(head) if head is not None else []
    for snap in chain:
        if snap.timestamp_ms <= ms:
            return snap.snapshot_id
    oldest = chain[-1] if chain else None
    if oldest is not None and oldest.parent_snapshot_id is not None:
        raise ChangeFeedError(
            f"{when.isoformat()} is before the oldest snapshot still in the table "
            f"({oldest.snapshot_id}, committed {_iso(oldest.timestamp_ms)}); the changes "
            "before it were expired"
        )
    return None


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat()


def _snapshot_id(metadata: TableMetadata, bound: Bound, head: int | None) -> int | None:
    if isinstance(bound, dt.datetime):
        return _at_time(metadata, head, bound)
    return head if bound is None else bound


def resolve_range(metadata: TableMetadata, start: Bound, end: Bound = None) -> ChangeRange:
    """The snapshots after ``start`` up to ``end`` (see the module doc)."""
    end_id = _snapshot_id(metadata, end, metadata.current_snapshot_id)
    if end_id is not None and metadata.snapshot_by_id(end_id) is None:
        raise ChangeFeedError(f"{_describe(end)} is not in the table (expired, or never existed)")
    if isinstance(start, dt.datetime):
        start_id = _at_time(metadata, end_id, start)
    else:
        start_id = start
    walk: list[Snapshot] = []
    at = end_id
    while at is not None and at != start_id:
        snap = metadata.snapshot_by_id(at)
        if snap is None:
            raise ChangeFeedError(
                f"the range from {_describe(start)} to {_describe(end, 'now')} crosses snapshot {at}, "
                "which was expired: its changes can no longer be read"
            )
        walk.append(snap)
        at = snap.parent_snapshot_id
    if at != start_id:
        raise ChangeFeedError(
            f"{_describe(start)} is not an ancestor of {_describe(end, 'the current snapshot')} "
            "in the table's history"
        )
    return ChangeRange(start_id, end_id, tuple(reversed(walk)))


def parse_bound(text: str) -> Bound:
    """A range end as written by a person: a snapshot id (digits), or an ISO-8601 time
    (``2026-11-23T10:45:00Z``, ``2026-11-23 10:45:00+01:00``; without an offset: UTC)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ChangeFeedError(
            f"{text!r} is neither a snapshot id nor an ISO-8601 time such as 2026-11-23T10:45:00Z"
        ) from None
