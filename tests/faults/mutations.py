"""Deliberately broken builds, applied inside a writer subprocess only.

The harness sets ``CALVING_FAULTS_MUTATION=<name>`` in a writer's (or a maintenance
process's) environment; the writer (``tests.faults.writer``, ``tests.faults.maintainer``)
patches the core before it commits anything. Nothing
in ``commit/`` reads this variable: a mutation exists only to show that the invariant
checker catches the bug it plants.
"""

from __future__ import annotations

import time
from collections.abc import Callable

MUTATION_ENV = "CALVING_FAULTS_MUTATION"


def _skip_ledger() -> None:
    """The exactly-once check is gone: every claim is judged new, so a replayed batch
    commits its rows a second time."""
    from calving.commit.table.actions import validation
    from calving.commit.table.ledger import LedgerVerdict

    validation.judge = lambda base, claim: LedgerVerdict.NEW  # type: ignore[assignment]  # a mutation: the harness must catch this broken rule


def _forget_dv() -> None:
    """The producer no longer unions new deletes with a file's current DV: the new DV
    replaces the old one, so rows deleted earlier come back."""
    from pyroaring import BitMap64

    from calving.commit.table import scan

    def positions_deleted(self: scan.LiveFiles, io: object, data_file_path: str) -> BitMap64:
        return BitMap64()

    scan.LiveFiles.positions_deleted = positions_deleted  # type: ignore[method-assign]  # a mutation: the harness must catch this broken rule


def _skip_carry_over() -> None:
    """A rewrite commits without carrying the deletes its input files gained after it
    read them onto the new files (and without the same-rows check that would notice):
    rows the stream deleted meanwhile come back in the rewritten files."""
    from calving.commit.errors import CommitConflictError
    from calving.commit.io import FileIO
    from calving.commit.spec.metadata import TableMetadata
    from calving.commit.spec.position_map import SUMMARY_PROPERTY
    from calving.commit.table import scan
    from calving.commit.table.action import Plan
    from calving.commit.table.actions.rewrite_files import RewriteFiles
    from calving.commit.table.changes import SnapshotChanges

    def plan(self: RewriteFiles, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        live = scan.live_files(io, base, base.current_snapshot)
        for path in self.removed:
            if path not in live.data:
                raise CommitConflictError(f"rewrite: {path} is no longer live")
        summary = (
            {SUMMARY_PROPERTY: self.position_map_location} if self.position_map_location else {}
        )
        return SnapshotChanges(
            operation="replace",
            added_data_files=self.added,
            removed_data_files=self.removed,
            summary=summary,
        )

    RewriteFiles.plan = plan  # type: ignore[method-assign]  # a mutation: the harness must catch this broken rule


def _forget_journal() -> None:
    """A maintenance run journals nothing it writes: a killed run's files are left to
    orphan removal (days later) instead of the next run."""
    from calving.commit.maintenance.journal import RunJournal

    RunJournal.add = lambda self, locations: None  # type: ignore[method-assign]  # a mutation: the harness must catch this broken rule


def _per_table_swaps() -> None:
    """A many-table pipeline swaps each table's metadata pointer on its own, outside
    one catalog transaction: a crash between two swaps leaves a batch half committed."""
    from calving.commit.table.table import Table
    from calving.ingest.sink.many.sink import ManyTablesSink

    def swap(self: ManyTablesSink, commits: list) -> tuple[dict, bool]:
        out = {}
        for c in commits:
            out[c.ident] = Table.load(self.catalog, c.ident, self.io).commit(c.action)
        return out, False

    ManyTablesSink._swap = swap  # type: ignore[method-assign]  # a mutation: the harness must catch this broken rule


def _count_maintenance_losses() -> None:
    """The stream's priority rule is gone: a swap lost to a maintenance commit counts
    against ``commit.retry.num-retries`` like a loss to a writer that adds data, so a
    stream with few retries fails beside maintenance."""
    from calving.commit.table import attempt

    attempt.lost_only_to_yielding = lambda before, after: False  # type: ignore[assignment]  # the broken build replaces the rule
    _hold_stream_swaps()


#: How long a held swap waits for another commit to land, how many tries of one commit
#: are held, and after how many commits landed during held swaps the holding stops.
HOLD_S = 20.0
HELD_TRIES = 3
HELD_LANDINGS = 3


def _hold_stream_swaps() -> None:
    """Not a bug: the harness makes the race the broken build loses certain. Left to
    timing, a maintenance commit lands during a stream commit in most runs but not all
    (one CI run in many saw none, and the broken build went unnoticed). So each try of a
    stream (not yielding) commit, from the table's third snapshot on, waits before its
    swap until the table's pointer moved (up to ``HOLD_S``), until ``HELD_LANDINGS``
    commits have landed so: maintenance commits while the stream's try is in flight, as
    it would at any time in a long run."""
    from calving.commit.table import attempt

    swap = attempt.Attempt.swap
    landed = [0]

    def held(self: attempt.Attempt, staged: attempt.Staged) -> attempt.Staged:
        if (
            not self.yielding
            and self.tries <= HELD_TRIES
            and landed[0] < HELD_LANDINGS
            and len(staged.base.metadata.snapshots) >= 2
        ):
            deadline = time.monotonic() + HOLD_S
            while time.monotonic() < deadline:
                if self.catalog.load_metadata_location(self.ident) != staged.base.location:
                    landed[0] += 1
                    print("mutation: a commit landed during this stream swap", flush=True)
                    break
                time.sleep(0.05)
        return swap(self, staged)

    attempt.Attempt.swap = held  # type: ignore[method-assign]  # the harness's hold, see above


MUTATIONS: dict[str, Callable[[], None]] = {
    "skip-ledger": _skip_ledger,
    "forget-dv": _forget_dv,
    "skip-carry-over": _skip_carry_over,
    "forget-journal": _forget_journal,
    "per-table-swaps": _per_table_swaps,
    "count-maintenance-losses": _count_maintenance_losses,
    # Not a bug: the correct build under the same hold, which must survive the landings
    # (tests/ingest/test_maintenance_priority.py).
    "hold-stream-swaps": _hold_stream_swaps,
}


def apply(name: str | None) -> None:
    if not name:
        return
    try:
        MUTATIONS[name]()
    except KeyError:
        raise SystemExit(f"unknown mutation {name!r}; known: {', '.join(MUTATIONS)}") from None
