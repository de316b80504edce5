"""The commit loop: build -> write -> swap, with typed outcomes.

* The snapshot id (and commit id) stays the same across tries, so a refresh can
  tell whether this very commit already landed.
* A lost check-and-put is clean: the try's own files are deleted, the table is
  refreshed, the action re-validates and rebuilds, and the loop retries with
  exponential backoff and jitter under ``commit.retry.*``.
* An unknown outcome is resolved by reading the catalog; files are never deleted
  after one, and it is never retried blindly (a retry is only made once the catalog
  shows the commit absent, and then still goes through check-and-put).

The steps of a try, and every decision after a failed one, are ``Attempt``'s
(``calving.commit.table.attempt``); this module only runs them in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.catalog.metadata_cache import remember_metadata
from calving.commit.errors import CalvingError
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table.action import Action, NoChange
from calving.commit.table.attempt import Attempt, Base, Retry, new_snapshot_id
from calving.commit.table.loading import load_metadata
from calving.commit.table.outcomes import CommitOutcome, Committed, Conflicted, Skipped, Unknown
from calving.commit.table.retry import RetryPolicy

__all__ = [
    "CommitOutcome",
    "Committed",
    "Conflicted",
    "RetryPolicy",
    "Skipped",
    "Unknown",
    "commit_action",
    "load_metadata",
    "new_snapshot_id",
    "remember_metadata",
]


def commit_action(
    catalog: Catalog,
    ident: TableIdent,
    action: Action,
    *,
    io: FileIO,
    base: tuple[str, TableMetadata] | None = None,
    expected_table_uuid: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
    cached_base: bool = False,
    yielding: bool = False,
) -> CommitOutcome:
    """Commit ``action`` to the table; returns what happened as a value.

    ``base``: the state of the table to try first, instead of reading the catalog (the
    check-and-put catches a stale one, and the retry reads the catalog). ``cached_base``:
    that state is the caller's last known one, so a first lost swap means only that it
    was stale and is retried at once, without backing off.
    ``expected_table_uuid``: the UUID of the table the caller's files were written
    for; a table dropped and recreated under the same name is refused.
    ``yielding``: the commit is maintenance's; every swap it loses counts against
    ``commit.retry.num-retries`` (the stream's losses to it do not, see
    ``calving.commit.table.yielding``).
    """
    current = Base(*(base if base is not None else load_metadata(catalog, io, ident)))
    attempt = Attempt(
        catalog,
        ident,
        action,
        io=io,
        base=current,
        table_uuid=expected_table_uuid or current.metadata.table_uuid,
        sleep=sleep,
        cached_base=cached_base and base is not None,
        yielding=yielding,
    )
    while True:
        found = attempt.begin(current)
        if found is not None:
            return found
        try:
            plan = attempt.build(current)
            if isinstance(plan, NoChange):
                return Skipped(current.metadata, current.location, plan.reason)
            staged = attempt.write(current, plan)
            staged = attempt.swap(staged)
        except CalvingError as error:
            after = attempt.recover(error)
            if after is None:
                raise
            if not isinstance(after, Retry):
                return after
            current = after.base
            continue
        return attempt.finish(staged)
