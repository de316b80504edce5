"""The commit loop: apply -> validate -> write -> swap, with typed outcomes.

* The snapshot id (and commit id) stays the same across attempts, so a refresh can
  tell whether this very commit already landed.
* A lost check-and-put is clean: the attempt's own files are deleted, the table is
  refreshed, the action re-validates and rebuilds, and the loop retries with
  exponential backoff and jitter under ``commit.retry.*``.
* An unknown outcome is resolved by reading the catalog; files are never deleted
  after one, and it is never retried blindly (a retry is only made once the catalog
  shows the commit absent, and then still goes through check-and-put).
"""

from __future__ import annotations

import random
import re
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from commit import faults
from commit.catalog.base import Catalog, TableIdent
from commit.errors import (
    CalvingError,
    CatalogUnavailableError,
    CommitConflictError,
    CommitStateUnknownError,
    CommitSwapLostError,
    RetriesExhaustedError,
    StaleWriterError,
    TableIdentityChangedError,
)
from commit.io import FileIO
from commit.spec.metadata import TableMetadata, parse_metadata, serialize_metadata
from commit.table.actions.base import Action, MetadataUpdates, NoChange
from commit.table.changes import SnapshotChanges
from commit.table.producer import SnapshotProducer
from commit.table.updates import AssertTableUUID, apply_updates

# ---------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class Committed:
    metadata: TableMetadata
    metadata_location: str
    snapshot_id: int | None
    attempts: int
    found_on_refresh: bool = False  # an earlier attempt had landed (reply lost)


@dataclass(frozen=True)
class Skipped:
    """Nothing was committed because nothing needed to be (e.g. an offset replay)."""

    metadata: TableMetadata
    metadata_location: str
    reason: str


@dataclass(frozen=True)
class Conflicted:
    """Validation failed against the refreshed table; terminal for this change."""

    error: CalvingError
    attempts: int


@dataclass(frozen=True)
class Unknown:
    """The swap may have happened and the catalog could not tell; nothing was cleaned."""

    error: CommitStateUnknownError
    attempted_location: str | None


CommitOutcome = Committed | Skipped | Conflicted | Unknown


# ---------------------------------------------------------------- retry policy


@dataclass(frozen=True)
class RetryPolicy:
    num_retries: int = 4
    min_wait_ms: int = 100
    max_wait_ms: int = 60_000
    total_timeout_ms: int = 1_800_000

    @staticmethod
    def from_properties(props: dict[str, str] | object) -> RetryPolicy:
        get = props.get  # type: ignore[attr-defined]
        return RetryPolicy(
            num_retries=int(get("commit.retry.num-retries", 4)),
            min_wait_ms=int(get("commit.retry.min-wait-ms", 100)),
            max_wait_ms=int(get("commit.retry.max-wait-ms", 60_000)),
            total_timeout_ms=int(get("commit.retry.total-timeout-ms", 1_800_000)),
        )

    def wait_ms(self, retry: int) -> float:
        """Exponential backoff with jitter: uniformly in [w/2, w], w doubling per retry."""
        w = min(self.max_wait_ms, self.min_wait_ms * (2 ** max(0, retry - 1)))
        return random.uniform(w / 2, w)


def new_snapshot_id() -> int:
    # Positive 63-bit, never 0: readers treat ids as Java longs.
    return secrets.randbits(62) + 1


# ---------------------------------------------------------------- loading


# Metadata files whose names carry a UUID (Java's, pyiceberg's and the SQL catalog's
# "00042-<uuid>.metadata.json") are never rewritten, so their parsed contents are kept
# by location: a writer then reads and parses only metadata that someone else wrote,
# not the (ever longer) file it has just committed itself. Version-numbered names
# ("v42.metadata.json") come back when a table is dropped and re-created: always read.
_UUID_NAME = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}[^/]*$", re.IGNORECASE)
_PARSED: OrderedDict[str, TableMetadata] = OrderedDict()
_PARSED_MAX = 8
_PARSED_LOCK = threading.Lock()


def remember_metadata(location: str, metadata: TableMetadata) -> None:
    """Keep ``metadata`` as the parsed contents of ``location`` (if its name is unique)."""
    if not _UUID_NAME.search(location):
        return
    with _PARSED_LOCK:
        _PARSED[location] = metadata
        _PARSED.move_to_end(location)
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)


def _remembered(location: str) -> TableMetadata | None:
    with _PARSED_LOCK:
        metadata = _PARSED.get(location)
        if metadata is not None:
            _PARSED.move_to_end(location)
        return metadata


def load_metadata(catalog: Catalog, io: FileIO, ident: TableIdent) -> tuple[str, TableMetadata]:
    location = catalog.load_metadata_location(ident)
    metadata = _remembered(location)
    if metadata is None:
        metadata = parse_metadata(io.read(location), location)
        remember_metadata(location, metadata)
    return location, metadata


def _has_landed(
    io: FileIO,
    base: TableMetadata,
    base_location: str,
    snapshot_id: int | None,
    attempted: dict[str, bytes],
) -> bool:
    """Whether one of this commit's attempts is in ``base``: its snapshot id, or a
    metadata file it wrote that is current or in the metadata log.

    A location alone proves nothing: the filesystem catalog names versions
    deterministically (``v<N+1>.metadata.json``), so a competitor that won the race
    wrote the very location this attempt tried. Only the bytes this attempt wrote at
    that location identify it."""
    if snapshot_id is not None and base.snapshot_by_id(snapshot_id) is not None:
        return True
    logged = {e.metadata_file for e in base.metadata_log} | {base_location}
    for location, payload in attempted.items():
        if location in logged and _holds(io, location, payload):
            return True
    return False


def _holds(io: FileIO, location: str, payload: bytes) -> bool:
    try:
        return io.read(location) == payload
    except CalvingError:
        return False  # gone (or unreadable): not provably ours


# ---------------------------------------------------------------- the loop


def commit_action(
    catalog: Catalog,
    ident: TableIdent,
    action: Action,
    *,
    io: FileIO,
    base: tuple[str, TableMetadata] | None = None,
    expected_table_uuid: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> CommitOutcome:
    """Commit ``action`` to the table; returns what happened as a value.

    ``expected_table_uuid``: the UUID of the table the caller's files were written
    for; a table dropped and recreated under the same name is refused.
    """
    location, metadata = base if base is not None else load_metadata(catalog, io, ident)
    table_uuid = expected_table_uuid or metadata.table_uuid
    policy = RetryPolicy.from_properties(metadata.properties)
    snapshot_id = new_snapshot_id()
    commit_id = str(uuid.uuid4())
    attempted: dict[str, bytes] = {}  # metadata location -> the bytes this commit wrote
    started = time.monotonic()
    attempt = 0
    produces_snapshot = False

    while True:
        attempt += 1
        if attempted and _has_landed(
            io, metadata, location, snapshot_id if produces_snapshot else None, attempted
        ):
            found = snapshot_id if produces_snapshot else None
            return Committed(metadata, location, found, attempt, found_on_refresh=True)
        written: list[str] = []
        try:
            AssertTableUUID(table_uuid).check(metadata)
            plan = action.plan(metadata, io, commit_id)
            if isinstance(plan, NoChange):
                return Skipped(metadata, location, plan.reason)
            if isinstance(plan, SnapshotChanges):
                produces_snapshot = True
                producer = SnapshotProducer(io, metadata, snapshot_id)
                try:
                    produced = producer.produce(plan)
                finally:
                    written = producer.written
                updates = produced.updates
            else:
                assert isinstance(plan, MetadataUpdates)
                for requirement in plan.requirements:
                    requirement.check(metadata)
                updates = plan.updates
            new_metadata = apply_updates(
                metadata, updates, base_location=location, now_ms=int(time.time() * 1000)
            )
            payload = serialize_metadata(new_metadata)
            new_location = catalog.new_metadata_location(ident, location, new_metadata)
            attempted[new_location] = payload
            faults.hit("before-swap")
            catalog.commit_metadata(ident, location, new_location, payload)
            remember_metadata(new_location, new_metadata)
            faults.hit("after-swap")
        except (CommitSwapLostError, CatalogUnavailableError) as lost:
            # Both are known not to have changed the table: clean, refresh, retry.
            _cleanup(io, written)
            retry = attempt
            wait = policy.wait_ms(retry)
            elapsed_ms = (time.monotonic() - started) * 1000
            if retry > policy.num_retries or elapsed_ms + wait > policy.total_timeout_ms:
                return Conflicted(
                    RetriesExhaustedError(
                        f"commit to {'.'.join(ident)} lost the swap {attempt} times "
                        f"(commit.retry.num-retries={policy.num_retries}): {lost}"
                    ),
                    attempt,
                )
            sleep(wait / 1000)
            location, metadata = _reload(catalog, io, ident)
            continue
        except CommitStateUnknownError as unknown:
            # Files stay: the swap may yet be visible. Only the catalog can tell.
            seen = _look_in_catalog(catalog, io, ident, sleep)
            if seen is None:
                return Unknown(unknown, _last(attempted))
            location, metadata = seen
            if _has_landed(
                io, metadata, location, snapshot_id if produces_snapshot else None, attempted
            ):
                return Committed(
                    metadata,
                    location,
                    snapshot_id if produces_snapshot else None,
                    attempt,
                    found_on_refresh=True,
                )
            if attempt > policy.num_retries:
                return Unknown(unknown, _last(attempted))
            # Certainly absent now: retrying through check-and-put is safe even if the
            # lost swap were still in flight, because at most one swap from base wins
            # and a later refresh finds the snapshot id.
            continue
        except (CommitConflictError, StaleWriterError, TableIdentityChangedError) as conflict:
            _cleanup(io, written)
            return Conflicted(conflict, attempt)
        except CalvingError as err:
            if err.cleanable:
                _cleanup(io, written)
            raise
        after = getattr(action, "after_commit", None)
        if after is not None:
            after(metadata, new_metadata, io)
        return Committed(
            new_metadata, new_location, snapshot_id if produces_snapshot else None, attempt
        )


def _last(attempted: dict[str, bytes]) -> str | None:
    return next(reversed(attempted), None)


def _reload(catalog: Catalog, io: FileIO, ident: TableIdent) -> tuple[str, TableMetadata]:
    last: CalvingError | None = None
    for delay in (0.0, 0.1, 0.5, 1.0, 2.0):
        if delay:
            time.sleep(delay)
        try:
            return load_metadata(catalog, io, ident)
        except CatalogUnavailableError as err:
            last = err
    assert last is not None
    raise last


def _look_in_catalog(
    catalog: Catalog, io: FileIO, ident: TableIdent, sleep: Callable[[float], None]
) -> tuple[str, TableMetadata] | None:
    """The table as the catalog has it now, or None if the catalog cannot be read."""
    for delay in (0.0, 0.2, 1.0, 3.0):
        if delay:
            sleep(delay)
        try:
            return load_metadata(catalog, io, ident)
        except CatalogUnavailableError:
            continue
    return None


def _cleanup(io: FileIO, written: list[str]) -> None:
    for location in written:
        try:
            io.delete(location)
        except CalvingError:
            pass  # an orphan file is harmless; a failed cleanup must not mask the outcome
