"""One commit of one action, tried until it has an outcome: the steps of each try.

An ``Attempt`` keeps what stays the same across tries (the snapshot id and commit id, so
a refresh can tell whether this very commit already landed; the retry policy; the
metadata bytes every try wrote and where) and offers the steps of one try, each taking
and returning values:

* ``begin(base) -> Committed | None``: count the try; an earlier try found landed in
  ``base`` ends the commit (its reply was lost);
* ``build(base) -> Plan``: the action validated against ``base`` (table UUID, the
  action's own checks, a metadata change's requirements);
* ``write(base, plan) -> Staged``: the producer writes the try's files; the new
  metadata, its bytes and its location;
* ``swap(staged)``: the catalog's check-and-put (crash points ``before-swap`` and
  ``after-swap`` around it);
* ``recover(error) -> outcome | Retry | None``: what a failed try leads to, cleaning up
  (``cleanup``) only when the failure certainly did not commit;
* ``resolve(base) -> Committed | None``: the one place a commit is found by reading
  back: its snapshot id, or a metadata location that holds the very bytes a try wrote;
* ``finish(staged) -> Committed``: the action's ``after_commit`` hook, then the outcome.

A lost swap is counted against ``commit.retry.num-retries`` only when the commits that
won it add data (``calving.commit.table.yielding``): losses to maintenance are rebased
and retried at once, bounded by ``commit.retry.total-timeout-ms`` alone. A *yielding*
commit (maintenance's own) counts every loss.

An unknown swap outcome is never cleaned up and never retried blindly: the catalog is
read first, and a retry only follows once it shows the commit absent (it still goes
through check-and-put, so at most one swap from that base can win).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from calving.commit import faults
from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.catalog.metadata_cache import remember_metadata
from calving.commit.errors import (
    CalvingError,
    CatalogUnavailableError,
    CommitConflictError,
    CommitStateUnknownError,
    CommitSwapLostError,
    RetriesExhaustedError,
    StaleWriterError,
    TableIdentityChangedError,
)
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.metadata_gzip import metadata_file_bytes
from calving.commit.spec.updates import AssertTableUUID, TableUpdate, apply_updates
from calving.commit.table.action import Action, MetadataUpdates, Plan
from calving.commit.table.changes import SnapshotChanges
from calving.commit.table.loading import look_in_catalog, reload_metadata
from calving.commit.table.outcomes import CommitOutcome, Committed, Conflicted, Unknown
from calving.commit.table.producer import SnapshotProducer
from calving.commit.table.retry import RetryPolicy
from calving.commit.table.yielding import lost_only_to_yielding

log = logging.getLogger("calving.commit")


def new_snapshot_id() -> int:
    # Positive 63-bit, never 0: readers treat ids as Java longs.
    return secrets.randbits(62) + 1


@dataclass(frozen=True)
class Base:
    """The table a try builds on: its current metadata location and contents."""

    location: str
    metadata: TableMetadata


@dataclass(frozen=True)
class Staged:
    """What ``write`` leaves for ``swap``: the new metadata, its bytes and location,
    and the files the try wrote (none for a metadata-only change)."""

    base: Base
    metadata: TableMetadata
    location: str
    payload: bytes
    files: tuple[str, ...]
    #: The parent's data files the staged snapshot drops.
    removed_data_files: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Retry:
    """The try certainly did not land: try again on ``base``, freshly read."""

    base: Base


def certainly_not_committed(error: CalvingError) -> bool:
    """Whether a try that failed with ``error`` is known not to have changed the table,
    so its files may be deleted: a cleanable error, or a catalog that could not be
    reached. A lost reply (``CommitStateUnknownError``) or a crash is neither."""
    return error.cleanable or isinstance(error, CatalogUnavailableError)


class Attempt:
    def __init__(
        self,
        catalog: Catalog,
        ident: TableIdent,
        action: Action,
        *,
        io: FileIO,
        base: Base,
        table_uuid: str,
        sleep: Callable[[float], None] = time.sleep,
        cached_base: bool = False,
        yielding: bool = False,
    ) -> None:
        self.catalog = catalog
        #: This commit is maintenance's: every lost swap counts (it yields to the stream).
        self.yielding = yielding
        #: ``base`` is the caller's last known state, not a fresh read: a first lost swap
        #: means only that it was stale, and is retried at once on a fresh read.
        self.cached_base = cached_base
        self.ident = ident
        self.action = action
        self.io = io
        self.table_uuid = table_uuid
        self.sleep = sleep
        self.policy = RetryPolicy.from_properties(base.metadata.properties)
        self.snapshot_id = new_snapshot_id()
        self.commit_id = str(uuid.uuid4())
        self.started = time.monotonic()
        self.tries = 0
        #: Lost swaps counted against ``commit.retry.num-retries`` (to writers that add
        #: data, or any loss of a yielding commit), and those retried for free.
        self.losses_counted = 0
        self.losses_yielded = 0
        #: The base of the current try: what a lost swap is compared with.
        self.tried_on: Base | None = None
        self.produces_snapshot = False
        # Metadata location -> the bytes a try of this commit wrote there (in try order).
        self.attempted: dict[str, bytes] = {}
        # Every file the current try has named so far, durable or not (the producer's
        # own list, so files named before a failure are in it): what cleanup deletes.
        self.files: list[str] = []

    @property
    def own_snapshot_id(self) -> int | None:
        """The snapshot id this commit adds, once a try has planned a snapshot."""
        return self.snapshot_id if self.produces_snapshot else None

    @property
    def last_location(self) -> str | None:
        return next(reversed(self.attempted), None)

    # ------------------------------------------------------------ the steps of a try

    def begin(self, base: Base) -> Committed | None:
        self.tries += 1
        self.files = []
        self.tried_on = base
        return self.resolve(base) if self.attempted else None

    def build(self, base: Base) -> Plan:
        AssertTableUUID(self.table_uuid).check(base.metadata)
        plan = self.action.plan(base.metadata, self.io, self.commit_id)
        if isinstance(plan, SnapshotChanges):
            self.produces_snapshot = True
        elif isinstance(plan, MetadataUpdates):
            for requirement in plan.requirements:
                requirement.check(base.metadata)
        return plan

    def write(self, base: Base, plan: SnapshotChanges | MetadataUpdates) -> Staged:
        updates: Sequence[TableUpdate]
        removed: frozenset[str] = frozenset()
        if isinstance(plan, SnapshotChanges):
            producer = SnapshotProducer(self.io, base.metadata, self.snapshot_id)
            self.files = producer.written
            produced = producer.produce(plan)
            updates, removed = produced.updates, produced.removed_data_files
        else:
            updates = plan.updates
        metadata = apply_updates(
            base.metadata, updates, base_location=base.location, now_ms=int(time.time() * 1000)
        )
        payload = metadata_file_bytes(metadata, self.catalog.metadata_codec(metadata))
        location = self.catalog.new_metadata_location(self.ident, base.location, metadata)
        return Staged(base, metadata, location, payload, tuple(self.files), removed)

    def swap(self, staged: Staged) -> Staged:
        """The catalog's check-and-put; returns ``staged`` with the location the
        catalog committed at (a REST catalog names its own metadata file)."""
        self.attempted[staged.location] = staged.payload
        faults.hit("before-swap")
        committed_at = self.catalog.commit_metadata(
            self.ident, staged.base.location, staged.location, staged.payload
        )
        if committed_at is not None and committed_at != staged.location:
            staged = dataclasses.replace(staged, location=committed_at)
        remember_metadata(staged.location, staged.metadata)
        faults.hit("after-swap")
        return staged

    def finish(self, staged: Staged) -> Committed:
        after = getattr(self.action, "after_commit", None)
        if after is not None:
            after(staged.base.metadata, staged.metadata, self.io)
        return Committed(
            staged.metadata,
            staged.location,
            self.own_snapshot_id,
            self.tries,
            losses_yielded=self.losses_yielded,
            removed_data_files=staged.removed_data_files,
        )

    # ------------------------------------------------------------ after a failed try

    def recover(self, error: CalvingError) -> CommitOutcome | Retry | None:
        """The outcome or the retry a failed try leads to; ``None``: the error is not a
        commit outcome and goes to the caller (after cleanup, if it is certain)."""
        if certainly_not_committed(error):
            self.cleanup(self.files)
        if isinstance(error, CommitSwapLostError | CatalogUnavailableError):
            return self._after_lost_swap(error)
        if isinstance(error, CommitStateUnknownError):
            return self._after_unknown_swap(error)
        if isinstance(error, CommitConflictError | StaleWriterError | TableIdentityChangedError):
            return Conflicted(error, self.tries)
        return None

    def _after_lost_swap(self, error: CalvingError) -> Conflicted | Retry:
        """Known not to have changed the table: refresh and rebuild. A first try on a
        cached base lost to an older commit, and a loss to commits that add no data
        (maintenance; not for a yielding commit), are retried at once and not counted;
        any other loss backs off and counts against ``commit.retry.num-retries``."""
        stale = self.cached_base and self.tries == 1 and isinstance(error, CommitSwapLostError)
        if stale:
            return Retry(Base(*reload_metadata(self.catalog, self.io, self.ident)))
        elapsed_ms = (time.monotonic() - self.started) * 1000
        if isinstance(error, CommitSwapLostError) and not self.yielding:
            fresh = Base(*reload_metadata(self.catalog, self.io, self.ident))
            if (
                self.tried_on is not None
                and fresh.location != self.tried_on.location
                and lost_only_to_yielding(self.tried_on.metadata, fresh.metadata)
            ):
                self.losses_yielded += 1
                if elapsed_ms > self.policy.total_timeout_ms:
                    return Conflicted(self._exhausted(error), self.tries)
                log.info(
                    "commit to %s lost the swap to maintenance (%d so far); rebased and "
                    "retried, not counted against commit.retry.num-retries",
                    ".".join(self.ident),
                    self.losses_yielded,
                )
                return Retry(fresh)
        self.losses_counted += 1
        wait = self.policy.wait_ms(self.losses_counted)
        if self.policy.exhausted(self.losses_counted, elapsed_ms, wait):
            return Conflicted(self._exhausted(error), self.tries)
        log.info(
            "commit to %s lost the swap (%d counted of commit.retry.num-retries=%d%s); "
            "retrying in %.0f ms",
            ".".join(self.ident),
            self.losses_counted,
            self.policy.num_retries,
            ", yielding" if self.yielding else "",
            wait,
        )
        self.sleep(wait / 1000)
        return Retry(Base(*reload_metadata(self.catalog, self.io, self.ident)))

    def _exhausted(self, error: CalvingError) -> RetriesExhaustedError:
        return RetriesExhaustedError(
            f"commit to {'.'.join(self.ident)} lost the swap {self.losses_counted} times "
            f"to writers that add data (commit.retry.num-retries={self.policy.num_retries}) "
            f"and {self.losses_yielded} times to maintenance (not counted; "
            f"commit.retry.total-timeout-ms={self.policy.total_timeout_ms}): {error}"
        )

    def _after_unknown_swap(self, error: CommitStateUnknownError) -> Committed | Unknown | Retry:
        """The swap may have happened: only the catalog can tell. Files stay."""
        seen = look_in_catalog(self.catalog, self.io, self.ident, self.sleep)
        if seen is None:
            return Unknown(error, self.last_location)
        base = Base(*seen)
        landed = self.resolve(base)
        if landed is not None:
            return landed
        if self.tries > self.policy.num_retries:
            return Unknown(error, self.last_location)
        # Certainly absent now: retrying through check-and-put is safe even if the
        # lost swap were still in flight, because at most one swap from base wins
        # and a later refresh (``begin``) finds the snapshot id.
        return Retry(base)

    def resolve(self, base: Base) -> Committed | None:
        """This commit as found in ``base``, if one of its tries landed there."""
        if has_landed(self.io, base, self.own_snapshot_id, self.attempted):
            return Committed(
                base.metadata,
                base.location,
                self.own_snapshot_id,
                self.tries,
                found_on_refresh=True,
                losses_yielded=self.losses_yielded,
            )
        return None

    def cleanup(self, files: Sequence[str]) -> None:
        """Delete a try's files; only ever called when the try certainly did not land."""
        for location in files:
            try:
                self.io.delete(location)
            except CalvingError:
                pass  # an orphan file is harmless; a failed cleanup must not mask the outcome


def has_landed(
    io: FileIO, base: Base, snapshot_id: int | None, attempted: Mapping[str, bytes]
) -> bool:
    """Whether one of this commit's tries is in ``base``: its snapshot id, or a
    metadata file it wrote that is current or in the metadata log.

    A location alone proves nothing: the filesystem catalog names versions
    deterministically (``v<N+1>.metadata.json``), so a competitor that won the race
    wrote the very location this attempt tried. Only the bytes this attempt wrote at
    that location identify it."""
    if snapshot_id is not None and base.metadata.snapshot_by_id(snapshot_id) is not None:
        return True
    logged = {e.metadata_file for e in base.metadata.metadata_log} | {base.location}
    for location, payload in attempted.items():
        if location in logged and holds(io, location, payload):
            return True
    return False


def holds(io: FileIO, location: str, payload: bytes) -> bool:
    """Whether ``location`` holds exactly ``payload`` (unreadable or gone: no)."""
    try:
        return io.read(location) == payload
    except CalvingError:
        return False  # gone (or unreadable): not provably ours
