"""Which commits a lost swap may be retried over for free: the stream's priority rule.

The stream is the table's first citizen. A swap a writer loses to commits that add no
data (a compaction's ``replace`` snapshot, a manifest rewrite, snapshot expiry,
statistics, properties: anything maintenance commits) is rebased and retried without
counting against ``commit.retry.num-retries``: the writer's change still applies on
top of them (deletes follow the rewrite's position map). Only losses to writers that
add data count; ``commit.retry.total-timeout-ms`` bounds the whole commit.

A commit made by maintenance itself is *yielding*: every swap it loses counts, so it
gives up (and its caller gives up the group for this pass) instead of contending.
Pure: two metadata values in, a verdict out.
"""

from __future__ import annotations

from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.snapshot import Snapshot

#: Snapshot operations that never add rows a concurrent writer could conflict with.
YIELDING_OPERATIONS = frozenset({"replace"})


def adds_data(snapshot: Snapshot) -> bool:
    """Whether ``snapshot`` was made by a writer that adds data (any operation but
    ``replace`` that added data files)."""
    if snapshot.summary.get("operation") in YIELDING_OPERATIONS:
        return False
    try:
        return int(snapshot.summary.get("added-data-files", "0")) > 0
    except ValueError:
        return True  # an unreadable summary is not proof of a harmless commit


def lost_only_to_yielding(before: TableMetadata, after: TableMetadata) -> bool:
    """Whether every commit between ``before`` (the base a try was built on) and
    ``after`` (the table that won the swap) adds no data. A snapshot added and already
    expired in between (sequence numbers that no snapshot now holds) counts as one that
    did; so does a table recreated under the same name."""
    if before.table_uuid != after.table_uuid:
        return False
    new = [s for s in after.snapshots if before.snapshot_by_id(s.snapshot_id) is None]
    if after.last_sequence_number - before.last_sequence_number > len(new):
        return False
    return not any(adds_data(s) for s in new)
