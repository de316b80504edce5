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
from calving.commit.errors import CommitSwapLostError
from calving.commit.spec.update_json import changes_from_json
from calving.commit.spec.updates import AssertCreate
from calving.ingest.serve.errors import bad_request, commit_failed
from calving.ingest.serve.service import COMMIT_ATTEMPTS, CatalogService, Prepared


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
    return TableSwap(p.ident, p.expected, p.new_location, p.file_data)


def _table_changes(body: Any) -> list[tuple[tuple[str, ...], Mapping[str, Any]]]:
    if not isinstance(body, Mapping) or not isinstance(body.get("table-changes"), list):
        raise bad_request("CommitTransactionRequest needs a 'table-changes' list")
    out: list[tuple[tuple[str, ...], Mapping[str, Any]]] = []
    for change in body["table-changes"]:
        ident_obj = change.get("identifier") if isinstance(change, Mapping) else None
        if not isinstance(ident_obj, Mapping) or not isinstance(ident_obj.get("name"), str):
            raise bad_request("every table change needs an 'identifier' with a 'name'")
        namespace = ident_obj.get("namespace") or ()
        if not isinstance(namespace, list):
            raise bad_request("a table change's identifier 'namespace' must be a list")
        ident = check_ident((*namespace, ident_obj["name"]))
        if any(ident == seen for seen, _ in out):
            raise bad_request(f"table {ident_name(ident)} appears twice in the transaction")
        requirements, _ = changes_from_json(change)
        if any(isinstance(r, AssertCreate) for r in requirements):
            raise bad_request("creating tables in a multi-table transaction is not supported")
        out.append((ident, change))
    if not out:
        raise bad_request("the transaction has no table changes")
    return out
