"""Checks shared by the snapshot-producing actions."""

from __future__ import annotations

from collections.abc import Mapping

from calving.commit.errors import CommitConflictError, SchemaError
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.types import can_promote
from calving.commit.table.ledger import (
    LedgerClaim,
    LedgerVerdict,
    advanced_properties,
    judge,
    summary_entries,
)


class IncompatibleSchemaChangeError(CommitConflictError):
    """The table's schema changed concurrently in a way the written files cannot follow."""


def check_schema_compatible(base: TableMetadata, written_schema_id: int | None) -> None:
    """Files written with ``written_schema_id`` must still read correctly under the
    table's current schema: every column they hold keeps its id and a type they can be
    promoted to, and no required column appeared that they lack."""
    if written_schema_id is None or written_schema_id == base.current_schema_id:
        return
    try:
        written = base.schema_by_id(written_schema_id)
    except SchemaError:
        raise IncompatibleSchemaChangeError(
            f"files were written with schema {written_schema_id}, which table "
            f"{base.table_uuid} does not have"
        ) from None
    current = base.schema
    written_ids = {f.field_id for f in written.all_fields()}
    for f in written.all_fields():
        now = current.find_field(f.field_id)
        if now is not None and not can_promote(f.field_type, now.field_type):
            raise IncompatibleSchemaChangeError(
                f"column {f.name!r} (id {f.field_id}) changed from {f.field_type} to "
                f"{now.field_type} concurrently; files written as {f.field_type} cannot be read "
                "as that"
            )
    for f in current.all_fields():
        if f.required and f.field_id not in written_ids and f.initial_default is None:
            raise IncompatibleSchemaChangeError(
                f"required column {f.name!r} (id {f.field_id}) was added concurrently; "
                "the files being committed do not have it"
            )


def ledger_step(
    base: TableMetadata, claim: LedgerClaim | None, commit_id: str
) -> tuple[Mapping[str, str], Mapping[str, str]] | None:
    """(summary entries, properties) for this claim, or None when it is a replay."""
    if claim is None:
        return {}, {}
    if judge(base, claim) == LedgerVerdict.REPLAY:
        return None
    return summary_entries(claim, commit_id), advanced_properties(base, claim)
