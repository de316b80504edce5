"""Several tables committed together: one snapshot (or metadata change) per table, all
made current in one catalog transaction (``Catalog.commit_many``), or none.

Each table keeps its own ``Attempt`` (snapshot id, commit id, retry policy, tries):
build and write run per table exactly as in a single commit; only the swap is shared.
The catalog is asked for every table's current metadata location at once (one query
on a SQL catalog); the metadata files are read, and then each table's try is built and
written, for several tables at once (up to ``PARALLEL_TABLES`` threads: file reads,
writes and fsyncs, whose latency overlaps on an object store). The results are judged
in input order, as if built one after another: the first table whose load or build
failed decides, as it would alone, and the tries of the tables after it (which a
sequential build would not have made) are cleaned up; an error that is no commit
outcome is raised with every other table's try cleaned up (no swap was made, so none
can have landed). After a failed transaction:

* a table's metadata moved on (``TableMovedError``: another writer, compaction): nothing
  committed. Only that table's try is cleaned up, refreshed, re-validated and rebuilt
  (under its ``commit.retry.*`` policy); the other tables' tries stay staged and the
  transaction is tried again. So a conflict on one table is retried for that table
  without giving up the atomicity of the others.
* the catalog could not be reached, or lost the race without naming the table (a REST
  catalog's 409): nothing committed; every table is refreshed and rebuilt, as a lost
  swap.
* an unknown outcome: every table is read back. All found landed: committed. None:
  certainly absent, rebuilt on what was read and tried again (still through every
  row's check-and-put). Some but not all would mean the catalog is not transactional:
  every table's outcome is ``Unknown`` and no file is deleted.

A table whose rebuild cannot apply (a validation conflict, a stale writer, retries
exhausted) ends the commit with nothing committed: its outcome is that ``Conflicted``,
every other table's a ``Conflicted`` naming it, and every staged try is cleaned up. So
the outcomes are all ``Committed`` / ``Skipped``, or none is ``Committed``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from calving.commit import faults
from calving.commit.catalog.base import Catalog, TableIdent, TableSwap, ident_name
from calving.commit.catalog.metadata_cache import read_metadata_cached, remember_metadata
from calving.commit.errors import (
    CalvingError,
    CatalogUnavailableError,
    CommitConflictError,
    CommitStateUnknownError,
    CommitSwapLostError,
    TableMovedError,
    UnsupportedFeatureError,
)
from calving.commit.io import FileIO
from calving.commit.table.action import Action, NoChange
from calving.commit.table.attempt import Attempt, Base, Retry, Staged, certainly_not_committed
from calving.commit.table.loading import look_in_catalog
from calving.commit.table.outcomes import CommitOutcome, Conflicted, Skipped, Unknown
from calving.commit.thread_pools import shared_pool

#: Tables read, or built and written, at once: threads, for the I/O's latency (with 5 ms
#: per file write, 50 tables committed in 167 ms instead of 449 ms one after another).
PARALLEL_TABLES = 8

_In = TypeVar("_In")
_Out = TypeVar("_Out")


@dataclass(frozen=True)
class TableCommit:
    """One table's part of a multi-table commit."""

    ident: TableIdent
    action: Action
    #: The UUID of the table the caller's files were written for (a table dropped and
    #: recreated under the same name is refused); default: the table's current one.
    expected_table_uuid: str | None = None


class _Part:
    """One table's attempt, the base it builds on and its staged try (if any)."""

    def __init__(self, attempt: Attempt, base: Base) -> None:
        self.attempt = attempt
        self.base = base
        self.staged: Staged | None = None
        self.outcome: CommitOutcome | None = None

    @property
    def ident(self) -> TableIdent:
        return self.attempt.ident

    def drop_try(self) -> None:
        if self.staged is not None:
            self.attempt.cleanup(self.staged.files)
        self.staged = None


def commit_tables(
    catalog: Catalog,
    io: FileIO,
    commits: Sequence[TableCommit],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[TableIdent, CommitOutcome]:
    """Commit every table's action in one catalog transaction; each table's outcome."""
    if not catalog.supports_multi_table_commit:
        raise UnsupportedFeatureError(
            f"catalog {catalog.name} cannot commit several tables in one transaction"
        )
    parts = _open_all(catalog, io, commits, sleep)
    while True:
        ended = _build_all(parts)
        if ended is not None:
            return ended
        live = [p for p in parts if p.staged is not None]
        if not live:
            return _outcomes(parts)
        try:
            _swap(catalog, live)
        except CalvingError as error:
            ended = _after_failed_swap(catalog, io, parts, live, error, sleep)
            if ended is not None:
                return ended
            continue
        for p in live:
            assert p.staged is not None
            remember_metadata(p.staged.location, p.staged.metadata)
            p.outcome = p.attempt.finish(p.staged)
        return _outcomes(parts)


def _each(fn: Callable[[_In], _Out], items: Sequence[_In]) -> list[_Out | BaseException]:
    """``fn(item)`` for every item, up to ``PARALLEL_TABLES`` at once; each one's result
    or the exception it raised, in input order, once all have finished."""

    def run(item: _In) -> _Out | BaseException:
        try:
            return fn(item)
        except BaseException as error:  # noqa: BLE001 - handed back, judged in order
            return error

    if len(items) <= 1:
        return [run(item) for item in items]
    return list(shared_pool("calving-commit", PARALLEL_TABLES).map(run, items))


def _open_all(
    catalog: Catalog, io: FileIO, commits: Sequence[TableCommit], sleep: Callable[[float], None]
) -> list[_Part]:
    """Every table's part: the catalog asked for all of their current metadata
    locations at once, the metadata files read several at a time; the first failure
    (in input order) raised."""
    locations = catalog.load_metadata_locations([c.ident for c in commits])
    opened = _each(lambda c: _open(catalog, io, c[0], c[1], sleep), list(zip(commits, locations)))
    parts = []
    for part in opened:
        if isinstance(part, BaseException):
            raise part
        parts.append(part)
    return parts


def _open(
    catalog: Catalog,
    io: FileIO,
    commit: TableCommit,
    location: str,
    sleep: Callable[[float], None],
) -> _Part:
    base = Base(location, read_metadata_cached(io, location))
    attempt = Attempt(
        catalog,
        commit.ident,
        commit.action,
        io=io,
        base=base,
        table_uuid=commit.expected_table_uuid or base.metadata.table_uuid,
        sleep=sleep,
    )
    return _Part(attempt, base)


def _build_all(parts: Sequence[_Part]) -> dict[TableIdent, CommitOutcome] | None:
    """Build and write every table without a staged try, several at once; the final
    outcomes if one table cannot apply (nothing committed). The first table (in input
    order) that failed decides, as in a sequential build; the tables after it are
    undone (``_undo_after``), and a failure that is not a commit outcome is raised
    with every other table's try cleaned up (no swap made: none can have landed)."""
    todo = [p for p in parts if p.staged is None and p.outcome is None]
    failures = _each(_build_one, todo)
    for n, (p, failure) in enumerate(zip(todo, failures)):
        if failure is None:
            continue
        _undo_after(todo[n + 1 :], failures[n + 1 :])
        if isinstance(failure, CalvingError):
            after = p.attempt.recover(failure)
            if isinstance(after, Conflicted):
                return _abandon(parts, p, after)
        for other in parts:
            if other is not p:
                other.drop_try()
        raise failure
    return None


def _build_one(p: _Part) -> None:
    """One table's try: its new files written and staged, or its outcome (Skipped)."""
    p.attempt.begin(p.base)
    plan = p.attempt.build(p.base)
    if isinstance(plan, NoChange):
        p.outcome = Skipped(p.base.metadata, p.base.location, plan.reason)
        return
    p.staged = p.attempt.write(p.base, plan)


def _undo_after(parts: Sequence[_Part], failures: Sequence[BaseException | None]) -> None:
    """Undo the tries a sequential build would not have made (they come after the
    table that decides): staged ones dropped, failed ones cleaned up as ``recover``
    would, a Skipped outcome forgotten and the try not counted."""
    for p, failure in zip(parts, failures):
        p.drop_try()
        p.outcome = None
        p.attempt.tries -= 1
        if isinstance(failure, CalvingError) and certainly_not_committed(failure):
            p.attempt.cleanup(p.attempt.files)


def _swap(catalog: Catalog, live: Sequence[_Part]) -> None:
    swaps = []
    for p in live:
        assert p.staged is not None
        p.attempt.attempted[p.staged.location] = p.staged.payload
        swaps.append(
            TableSwap(p.ident, p.staged.base.location, p.staged.location, p.staged.payload)
        )
    faults.hit("before-swap")
    catalog.commit_many(swaps)
    faults.hit("after-swap")


def _after_failed_swap(
    catalog: Catalog,
    io: FileIO,
    parts: Sequence[_Part],
    live: Sequence[_Part],
    error: CalvingError,
    sleep: Callable[[float], None],
) -> dict[TableIdent, CommitOutcome] | None:
    """Retry (None) or the final outcomes after a transaction that did not commit, or
    whose outcome is unknown."""
    if isinstance(error, CommitStateUnknownError):
        return _after_unknown(catalog, io, parts, live, error, sleep)
    if isinstance(error, TableMovedError):
        moved = [p for p in live if p.ident == tuple(error.ident)]
    elif isinstance(error, CommitSwapLostError | CatalogUnavailableError):
        moved = list(live)  # a catalog that does not say which table moved (REST: 409)
    else:
        for p in live:
            p.drop_try()
        raise error
    for p in moved:
        p.drop_try()
        after = p.attempt.recover(error)
        if isinstance(after, Conflicted):
            return _abandon(parts, p, after)
        assert isinstance(after, Retry)
        p.base = after.base
    return None


def _after_unknown(
    catalog: Catalog,
    io: FileIO,
    parts: Sequence[_Part],
    live: Sequence[_Part],
    error: CommitStateUnknownError,
    sleep: Callable[[float], None],
) -> dict[TableIdent, CommitOutcome] | None:
    seen = {p.ident: look_in_catalog(catalog, io, p.ident, sleep) for p in live}
    landed = {}
    for p in live:
        now = seen[p.ident]
        landed[p.ident] = None if now is None else p.attempt.resolve(Base(*now))
    if all(c is not None for c in landed.values()):
        for p in live:
            p.outcome = landed[p.ident]
        return _outcomes(parts)
    readable = all(now is not None for now in seen.values())
    if (
        readable
        and not any(landed.values())
        and all(p.attempt.tries <= p.attempt.policy.num_retries for p in live)
    ):
        for p in live:  # certainly absent: rebuild on what was read, try again
            now = seen[p.ident]
            assert now is not None
            p.base, p.staged = Base(*now), None
        return None
    for p in live:
        p.outcome = Unknown(error, p.attempt.last_location)
    return _outcomes(parts)


def _abandon(
    parts: Sequence[_Part], culprit: _Part, outcome: Conflicted
) -> dict[TableIdent, CommitOutcome]:
    """Nothing is committed: every staged try is cleaned up."""
    culprit.outcome = outcome
    reason = CommitConflictError(
        f"not committed: {ident_name(culprit.ident)} in the same multi-table commit could "
        f"not apply: {outcome.error}"
    )
    for p in parts:
        p.drop_try()
        if p is not culprit:
            p.outcome = Conflicted(reason, p.attempt.tries)
    return _outcomes(parts)


def _outcomes(parts: Sequence[_Part]) -> dict[TableIdent, CommitOutcome]:
    out = {}
    for p in parts:
        assert p.outcome is not None, f"{ident_name(p.ident)} has no outcome"
        out[p.ident] = p.outcome
    return out
