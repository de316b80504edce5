"""``RestCatalog.commit_many``: several tables in one ``POST /v1/{prefix}/transactions/commit``.

Each table's change is the difference between the metadata it was built on and the one
built (``diff.commit_request``, guarded by ``assert-table-uuid`` and
``assert-ref-snapshot-id``), named by its identifier. The server applies all or none.
Outcomes as a single commit's: 409 is a lost race (``CommitSwapLostError``; the server
does not say which table, so every table is refreshed), a 5xx, timeout or dropped
connection after sending is ``CommitStateUnknownError`` (repeated under its
``Idempotency-Key`` where the server takes one, else resolved by reading every table
back), and a server without the endpoint (404, 405, 501 before anything is applied)
is ``UnsupportedFeatureError``. The metadata files are the server's: ``swaps``'
locations and payloads are only the client's record of what it proposed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from calving.commit.catalog.base import TableSwap, check_ident
from calving.commit.catalog.metadata_cache import read_metadata_cached
from calving.commit.catalog.rest.diff import commit_request
from calving.commit.errors import CalvingError, UnsupportedFeatureError
from calving.commit.spec.metadata import parse_metadata

if TYPE_CHECKING:
    from calving.commit.catalog.rest.client import RestCatalog

#: How a server lists the endpoint in ``/v1/config`` ``endpoints``.
TRANSACTIONS_ENDPOINT = "POST /v1/{prefix}/transactions/commit"


def advertises_transactions(config: Any) -> bool:
    """Whether a ``/v1/config`` answer allows multi-table commits: listed among its
    ``endpoints``, or no list at all (a server older than the list; calving then finds
    out on first use)."""
    endpoints = config.get("endpoints") if hasattr(config, "get") else None
    if not isinstance(endpoints, list):
        return True
    return TRANSACTIONS_ENDPOINT in endpoints


def commit_many(catalog: RestCatalog, swaps: Sequence[TableSwap]) -> None:
    changes = []
    for s in swaps:
        ident = check_ident(s.ident)
        base = read_metadata_cached(catalog.io, s.expected)
        change = commit_request(base, parse_metadata(s.payload, s.location))
        changes.append({"identifier": {"namespace": list(ident[:-1]), "name": ident[-1]}, **change})
    try:
        catalog.commit_post(catalog.base_path + "transactions/commit", {"table-changes": changes})
    except CalvingError as exc:
        if getattr(exc, "http_status", None) in (404, 405, 501) and "NoSuch" not in str(exc):
            raise UnsupportedFeatureError(
                f"REST catalog {catalog.uri} has no multi-table transactions endpoint: {exc}"
            ) from None
        raise
