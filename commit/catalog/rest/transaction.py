"""``POST /v1/transactions/commit``: several tables, all or nothing.

Every table's commit is prepared (requirements checked, updates applied, metadata
serialized), every new metadata file is written, and then all catalog rows are
swapped in one SQL transaction: each ``UPDATE ... WHERE metadata_location =
:expected`` must change exactly one row or the whole transaction rolls back and the new
files are deleted; the requirements are then checked again on fresh metadata (409 once
they fail or the races run out). A failure of the COMMIT itself is a 500
``CommitStateUnknownException`` and the files are kept. Creating tables in a
transaction (``assert-create``) is not supported (400).

The swap itself is ``SqlCatalog.commit_many`` (``calving.commit.catalog.sql_many``), the
same multi-table commit calving's own writers use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from calving.commit.catalog.base import TableSwap, check_ident, ident_name
from calving.commit.catalog.rest.changes import AssertCreate, parse_changes
from calving.commit.catalog.rest.errors import bad_request, commit_failed
from calving.commit.catalog.rest.service import COMMIT_ATTEMPTS, CatalogService, Prepared
from calving.commit.errors import CommitSwapLostError


def commit_transaction(service: CatalogService, body: Any) -> None:
    changes = _table_changes(body)
    for _ in range(COMMIT_ATTEMPTS):
        prepared = [service.prepare(ident, change) for ident, change in changes]
        try:
            service.catalog.commit_many([table_swap(p) for p in prepared])
        except CommitSwapLostError:
            continue  # retry from fresh metadata: the requirements are checked again
        return
    raise commit_failed(f"transaction lost {COMMIT_ATTEMPTS} races to other commits")


def table_swap(p: Prepared) -> TableSwap:
    if p.expected is None:
        raise bad_request(f"{ident_name(p.ident)}: cannot create in a transaction")
    return TableSwap(p.ident, p.expected, p.new_location, p.data)


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
