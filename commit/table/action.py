"""The action protocol and the plain results an action's ``plan`` returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.updates import Requirement, TableUpdate
from calving.commit.table.changes import SnapshotChanges


@dataclass(frozen=True)
class MetadataUpdates:
    """A metadata-only change (schema, properties, snapshot expiry)."""

    updates: tuple[TableUpdate, ...]
    requirements: tuple[Requirement, ...] = ()


@dataclass(frozen=True)
class NoChange:
    """Nothing to commit (an exactly-once replay, or an already-applied change)."""

    reason: str


Plan = SnapshotChanges | MetadataUpdates | NoChange


class Action(Protocol):
    def plan(self, base: TableMetadata, io: FileIO, commit_id: str) -> Plan:
        """Validate against ``base`` (the freshly loaded table) and state the change.

        Called again on every retry with the refreshed table. Raises a
        ``CommitConflictError`` (terminal) when the change can no longer apply.
        """
        ...


class AfterCommit(Protocol):
    def after_commit(self, before: TableMetadata, after: TableMetadata, io: FileIO) -> None:
        """Optional work once the commit is known to have landed (e.g. file cleanup)."""
        ...
