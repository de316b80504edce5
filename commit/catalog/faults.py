"""Fault injection around a catalog's swap, for tests of unknown commit outcomes.

A catalog built with ``fault_plan=FaultPlan(...)`` consumes one entry of the plan per
swap attempt (``swap_metadata_location``, or the exclusive create of the filesystem
catalog's ``commit_metadata``):

* ``None``: the swap runs normally.
* ``SwapFault.UNAVAILABLE``: nothing is sent; ``CatalogUnavailableError``.
* ``SwapFault.NOT_APPLIED_REPLY_LOST``: the swap is not performed, yet the caller gets
  ``CommitStateUnknownError`` (the request was lost on the way).
* ``SwapFault.APPLIED_REPLY_LOST``: the swap is performed (a real check-and-put, which
  may itself lose), then ``CommitStateUnknownError`` (the reply was lost).

An empty plan lets every swap run normally. A catalog's ``swap_hook`` (a plain
callable, ``hook(stage, ident)`` with stage ``"before"`` / ``"after"``) is also called
around the real swap; whatever it raises reaches the caller as is. ``before_commit`` is called by the SQL
catalog after its check-and-put statement and before the transaction commits, with the
SQLAlchemy connection, so a test can cut a real connection at the worst moment.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from calving.commit.errors import CatalogUnavailableError, CommitStateUnknownError


class SwapFault(enum.Enum):
    UNAVAILABLE = "unavailable"
    NOT_APPLIED_REPLY_LOST = "not-applied-reply-lost"
    APPLIED_REPLY_LOST = "applied-reply-lost"


@dataclass(frozen=True)
class SwapEvent:
    """One swap attempt seen by a plan: the injected fault and whether the swap ran."""

    ident: tuple[str, ...]
    expected: str
    new: str
    fault: SwapFault | None
    performed: bool


class FaultPlan:
    def __init__(
        self,
        *faults: SwapFault | None,
        before_commit: Callable[[Any], None] | None = None,
    ) -> None:
        self._queue: deque[SwapFault | None] = deque(faults)
        self.before_commit = before_commit
        self.events: list[SwapEvent] = []

    def add(self, *faults: SwapFault | None) -> FaultPlan:
        self._queue.extend(faults)
        return self

    @property
    def pending(self) -> int:
        return len(self._queue)

    def next_fault(self) -> SwapFault | None:
        return self._queue.popleft() if self._queue else None


SwapHook = Callable[[str, tuple[str, ...]], None]


def guarded_swap(
    plan: FaultPlan | None,
    ident: tuple[str, ...],
    expected: str,
    new: str,
    perform: Callable[[], None],
    hook: SwapHook | None = None,
) -> None:
    """Run ``perform`` (the real swap) under the plan's next fault, if any."""
    if hook is not None:
        hook("before", ident)
    fault = plan.next_fault() if plan is not None else None
    name = ".".join(ident)
    if fault is SwapFault.UNAVAILABLE:
        _record(plan, ident, expected, new, fault, performed=False)
        raise CatalogUnavailableError(f"injected: catalog unavailable before swapping {name}")
    if fault is SwapFault.NOT_APPLIED_REPLY_LOST:
        _record(plan, ident, expected, new, fault, performed=False)
        raise CommitStateUnknownError(f"injected: swap of {name} to {new} sent, reply lost")
    perform()
    _record(plan, ident, expected, new, fault, performed=True)
    if hook is not None:
        hook("after", ident)
    if fault is SwapFault.APPLIED_REPLY_LOST:
        raise CommitStateUnknownError(f"injected: swap of {name} to {new} done, reply lost")


def _record(
    plan: FaultPlan | None,
    ident: tuple[str, ...],
    expected: str,
    new: str,
    fault: SwapFault | None,
    *,
    performed: bool,
) -> None:
    if plan is not None:
        plan.events.append(SwapEvent(ident, expected, new, fault, performed))
