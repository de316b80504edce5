"""``POST /v1/transactions/commit``: several tables, all or nothing.

Every table's commit is prepared (requirements checked, updates applied, metadata
serialized), every new metadata file is written, and then all catalog rows are
swapped in one SQL transaction: each ``UPDATE ... WHERE metadata_location =
:expected`` must change exactly one row or the whole transaction rolls back (409) and
the new files are deleted. A failure of the COMMIT itself is a 500
``CommitStateUnknownException`` and the files are kept. Creating tables in a
transaction (``assert-create``) is not supported (400).

This reaches into ``SqlCatalog``'s connection and row helpers: the catalog swaps one
row per transaction, and the multi-row swap is this endpoint's alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from calving.commit.catalog.base import check_ident, ident_name
from calving.commit.catalog.rest.changes import AssertCreate, parse_changes
from calving.commit.catalog.rest.errors import RestError, bad_request, commit_failed
from calving.commit.catalog.rest.service import COMMIT_ATTEMPTS, CatalogService, Prepared
from calving.commit.catalog.sql import SqlCatalog
from calving.commit.catalog.sql_database import (
    ICEBERG_TABLES,
    commit_was_rolled_back,
    describe_error,
)
from calving.commit.errors import (
    CalvingError,
    CatalogUnavailableError,
    CommitStateUnknownError,
    CommitSwapLostError,
)

_T = ICEBERG_TABLES.c


def commit_transaction(service: CatalogService, body: Any) -> None:
    changes = _table_changes(body)
    for _ in range(COMMIT_ATTEMPTS):
        prepared = [service.prepare(ident, change) for ident, change in changes]
        catalog = service.catalog
        catalog.io.write_many([(p.new_location, p.data) for p in prepared])
        try:
            swap_all(catalog, prepared)
        except (CommitSwapLostError, CatalogUnavailableError) as exc:
            for p in prepared:
                _discard(catalog, p.new_location)
            if isinstance(exc, CommitSwapLostError):
                continue  # retry from fresh metadata: the requirements are checked again
            raise
        return
    raise commit_failed(f"transaction lost {COMMIT_ATTEMPTS} races to other commits")


def _table_changes(body: Any) -> list[tuple[tuple[str, ...], Mapping[str, Any]]]:
    if not isinstance(body, Mapping) or not isinstance(body.get("table-changes"), list):
        raise bad_request("CommitTransactionRequest needs a 'table-changes' list")
    out: list[tuple[tuple[str, ...], Mapping[str, Any]]] = []
    for change in body["table-changes"]:
        ident_obj = change.get("identifier") if isinstance(change, Mapping) else None
        if not isinstance(ident_obj, Mapping) or not isinstance(ident_obj.get("name"), str):
            raise bad_request("every table change needs an 'identifier' with a 'name'")
        namespace = tuple(str(p) for p in ident_obj.get("namespace") or ())
        ident = check_ident((*namespace, ident_obj["name"]))
        if any(ident == seen for seen, _ in out):
            raise bad_request(f"table {ident_name(ident)} appears twice in the transaction")
        requirements, _ = parse_changes(change)
        if any(isinstance(r, AssertCreate) for r in requirements):
            raise bad_request("creating tables in a multi-table transaction is not supported")
        out.append((ident, change))
    if not out:
        raise bad_request("the transaction has no table changes")
    return out


def swap_all(catalog: SqlCatalog, prepared: Sequence[Prepared]) -> None:
    """Swap every table's row in one database transaction, or none."""
    committing = False
    try:
        with catalog._connect(write=True) as conn:
            transaction = conn.begin()
            for p in prepared:
                if p.expected is None:
                    raise bad_request(f"{ident_name(p.ident)}: cannot create in a transaction")
                stmt = (
                    ICEBERG_TABLES.update()
                    .where(catalog._table_row(p.ident), _T.metadata_location == p.expected)
                    .values(metadata_location=p.new_location, previous_metadata_location=p.expected)
                )
                if conn.execute(stmt).rowcount != 1:
                    transaction.rollback()
                    raise CommitSwapLostError(
                        f"{ident_name(p.ident)}: metadata moved on from {p.expected}"
                    )
            committing = True
            transaction.commit()
    except (CalvingError, RestError):
        raise
    except Exception as err:
        if committing and not commit_was_rolled_back(err):
            raise CommitStateUnknownError(
                f"catalog {catalog.name}: transaction COMMIT failed, outcome unknown: "
                f"{describe_error(err)}"
            ) from err
        raise CatalogUnavailableError(
            f"catalog {catalog.name}: transaction not committed: {describe_error(err)}"
        ) from err


def _discard(catalog: SqlCatalog, location: str) -> None:
    try:
        catalog.io.delete(location)
    except CalvingError:
        pass  # an unreferenced file: orphan cleanup removes it
