"""What a commit did, as a value: ``Committed``, ``Skipped``, ``Conflicted`` or ``Unknown``."""

from __future__ import annotations

from dataclasses import dataclass

from calving.commit.errors import CalvingError, CommitStateUnknownError
from calving.commit.spec.metadata import TableMetadata


@dataclass(frozen=True)
class Committed:
    metadata: TableMetadata
    metadata_location: str
    snapshot_id: int | None
    attempts: int
    found_on_refresh: bool = False  # an earlier attempt had landed (reply lost)
    #: Swaps lost to maintenance (commits that add no data), retried without counting
    #: against ``commit.retry.num-retries`` (included in ``attempts``).
    losses_yielded: int = 0
    #: The parent's data files the committed snapshot dropped (removed, or emptied by
    #: its deletes); None when not known (a try found landed on a refresh).
    removed_data_files: frozenset[str] | None = None


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


def done_or_raise(outcome: CommitOutcome, what: str | None = None) -> Committed | Skipped:
    """The outcome when the change is in the table (committed, or nothing to commit);
    otherwise its error: a ``Conflicted`` change raises the validation error, an
    ``Unknown`` one a ``CommitStateUnknownError`` (prefixed with ``what`` when given), never
    something a caller could retry. The one place an outcome becomes an exception."""
    if isinstance(outcome, Committed | Skipped):
        return outcome
    if isinstance(outcome, Conflicted):
        raise outcome.error
    if what is None:
        raise outcome.error
    raise CommitStateUnknownError(f"{what}: {outcome.error}")
