"""The REST catalog operations over a ``SqlCatalog``, HTTP aside.

Each method takes decoded path parts and the request's JSON body and returns the JSON
answer (or None for 204), raising ``RestError`` or calving's typed errors, which
``errors.rest_error_of`` maps to the protocol's error model.

Every name is checked by ``calving.commit.catalog.identifiers`` and every location the
server writes metadata to or registers a table from (an explicit or derived table
location, a namespace ``location``, ``write.metadata.path``, a register-table
``metadata-location``) must lie under the ``Confinement``'s roots (the warehouse and
any allowed prefixes) before anything is written.

A table commit reads the current metadata, checks the requirements, applies the
updates, writes a new metadata file and swaps the catalog row with the SQL catalog's
compare-and-swap. A lost swap (someone committed in between) is retried here from the
fresh metadata, requirements checked again, a few times; a requirement that no longer
holds is a 409 ``CommitFailedException``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from calving.commit.catalog.base import Namespace, TableIdent, check_ident, check_namespace
from calving.commit.catalog.locations import Confinement
from calving.commit.catalog.sql import NAMESPACE_EXISTS_PROPERTY, SqlCatalog
from calving.commit.errors import (
    CalvingError,
    CommitSwapLostError,
    NoSuchTableError,
)
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.spec.update_json import changes_from_json, update_from_json
from calving.commit.spec.updates import (
    LAST_ADDED,
    AssertCreate,
    AssignUUID,
    SetCurrentSchema,
    SetDefaultSortOrder,
    SetDefaultSpec,
    SetLocation,
    SetProperties,
    TableUpdate,
    UpgradeFormatVersion,
)
from calving.ingest.serve.apply import apply_changes, empty_metadata
from calving.ingest.serve.documents import metadata_bytes, metadata_file, read_metadata
from calving.ingest.serve.errors import RestError, bad_request, commit_failed, unprocessable

log = logging.getLogger(__name__)

DEFAULT_FORMAT_VERSION = 2  # as Iceberg's reference catalog; ask for 3 with format-version
COMMIT_ATTEMPTS = 4
#: The namespace property that names where its tables go by default.
NAMESPACE_LOCATION = "location"
ENDPOINTS = (
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
)


@dataclass(frozen=True)
class Prepared:
    """One table's commit, applied and serialized, not yet swapped in."""

    ident: TableIdent
    expected: str | None  # None: the table is created
    new_location: str
    metadata: TableMetadata
    data: bytes  # the metadata's JSON (the answer's ``metadata``)
    file_data: bytes  # the metadata file: ``data``, or gzip as the table asks


class CatalogService:
    def __init__(
        self,
        catalog: SqlCatalog,
        clock: Callable[[], float] = time.time,
        vended: Mapping[str, str] | None = None,
        allowed_prefixes: tuple[str, ...] = (),
    ) -> None:
        self.catalog = catalog
        self.clock = clock
        roots = (*((catalog.warehouse,) if catalog.warehouse else ()), *allowed_prefixes)
        #: Where tables and metadata may live: the warehouse and ``allowed_prefixes``.
        self.confinement = Confinement(roots)
        #: Storage properties handed to clients in every ``loadTable`` / ``createTable``
        #: answer's ``config`` (static credentials: single tenant, no per-table scoping).
        self.vended = dict(vended or {})

    # ------------------------------------------------------------ config

    def config(self) -> dict[str, Any]:
        overrides = {"warehouse": self.catalog.warehouse} if self.catalog.warehouse else {}
        return {"defaults": {}, "overrides": overrides, "endpoints": list(ENDPOINTS)}

    # ------------------------------------------------------------ namespaces

    def list_namespaces(self, parent: Namespace) -> dict[str, Any]:
        found = self.catalog.list_namespaces(check_namespace(parent) if parent else ())
        return {"namespaces": [list(ns) for ns in found]}

    def create_namespace(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, Mapping) or not isinstance(body.get("namespace"), list):
            raise bad_request("CreateNamespaceRequest needs a 'namespace' list")
        namespace = check_namespace(tuple(body["namespace"]))
        properties = _string_map(body.get("properties") or {}, "properties")
        if NAMESPACE_LOCATION in properties:
            self.confinement.check(properties[NAMESPACE_LOCATION], "the namespace location")
        self.catalog.create_namespace(namespace, properties)
        return {"namespace": list(namespace), "properties": properties}

    def load_namespace(self, namespace: Namespace) -> dict[str, Any]:
        props = self.catalog.namespace_properties(check_namespace(namespace))
        props.pop(NAMESPACE_EXISTS_PROPERTY, None)
        return {"namespace": list(namespace), "properties": props}

    def update_namespace_properties(self, namespace: Namespace, body: Any) -> dict[str, Any]:
        if not isinstance(body, Mapping):
            raise bad_request("UpdateNamespacePropertiesRequest must be an object")
        updates = _string_map(body.get("updates") or {}, "updates")
        removals = body.get("removals") or []
        if not isinstance(removals, list) or not all(isinstance(k, str) for k in removals):
            raise bad_request("UpdateNamespacePropertiesRequest.removals must be a list of strings")
        both = sorted(set(updates) & set(removals))
        if both:
            raise unprocessable(f"keys both updated and removed: {both[:5]}")
        if NAMESPACE_EXISTS_PROPERTY in {*updates, *removals}:
            raise bad_request(f"property {NAMESPACE_EXISTS_PROPERTY!r} is the catalog's own")
        if NAMESPACE_LOCATION in updates:
            self.confinement.check(updates[NAMESPACE_LOCATION], "the namespace location")
        namespace = check_namespace(namespace)
        before = self.catalog.namespace_properties(namespace)
        self.catalog.update_namespace_properties(namespace, updates, removals)
        return {
            "updated": sorted(updates),
            "removed": sorted(k for k in removals if k in before),
            "missing": sorted(k for k in removals if k not in before),
        }

    def drop_namespace(self, namespace: Namespace) -> None:
        self.catalog.drop_namespace(check_namespace(namespace))

    # ------------------------------------------------------------ tables

    def list_tables(self, namespace: Namespace) -> dict[str, Any]:
        tables = self.catalog.list_tables(check_namespace(namespace))
        return {"identifiers": [{"namespace": list(t[:-1]), "name": t[-1]} for t in tables]}

    def load_table(self, ident: TableIdent) -> dict[str, Any]:
        location = self.catalog.load_metadata_location(check_ident(ident))
        _, obj = read_metadata(self.catalog.io, location)
        return {"metadata-location": location, "metadata": obj, "config": dict(self.vended)}

    def table_exists(self, ident: TableIdent) -> None:
        self.catalog.load_metadata_location(check_ident(ident))

    def drop_table(self, ident: TableIdent, purge: bool) -> None:
        if purge:
            raise RestError(
                406,
                "UnsupportedOperationException",
                "purge is not supported: drop without purgeRequested (files stay in place)",
            )
        self.catalog.drop_table_entry(check_ident(ident))

    def register_table(self, namespace: Namespace, body: Any) -> dict[str, Any]:
        if not isinstance(body, Mapping):
            raise bad_request("RegisterTableRequest must be a JSON object")
        name, location = body.get("name"), body.get("metadata-location")
        if not isinstance(name, str) or not isinstance(location, str):
            raise bad_request("RegisterTableRequest needs 'name' and 'metadata-location'")
        ident = check_ident((*check_namespace(namespace), name))
        self._check_registrable(location)
        if body.get("overwrite") and self.catalog.table_exists(ident):
            current = self.catalog.load_metadata_location(ident)
            self.catalog.swap_metadata_location(ident, current, location)
        else:
            self.catalog.register_table(ident, location)
        return self.load_table(ident)

    def _check_registrable(self, location: str) -> None:
        """A metadata file under the confinement's roots that parses; the answer says
        nothing about any other path (whether it exists, what it holds)."""
        refused = bad_request(
            "metadata-location must name a table metadata file (*.metadata.json) under "
            "the locations this catalog may use"
        )
        if not location.endswith(".metadata.json") or not self.confinement.allows(location):
            raise refused
        try:
            read_metadata(self.catalog.io, location)
        except CalvingError:
            raise refused from None

    def create_table(self, namespace: Namespace, body: Any) -> dict[str, Any]:
        if not isinstance(body, Mapping) or not isinstance(body.get("name"), str):
            raise bad_request("CreateTableRequest needs a 'name'")
        ident = check_ident((*check_namespace(namespace), str(body["name"])))
        if not self.catalog.namespace_exists(ident[:-1]):
            self.catalog.namespace_properties(ident[:-1])  # NoSuchNamespaceError (404)
        updates = self._create_updates(ident, body)
        metadata = apply_changes(
            empty_metadata(), updates, base_location=None, now_ms=self._now_ms()
        )
        self.confine(empty_metadata(), metadata)
        if body.get("stage-create"):
            obj = json.loads(metadata_bytes(metadata))
            return {"metadata-location": None, "metadata": obj, "config": dict(self.vended)}
        data = metadata_bytes(metadata)
        location = self.catalog.create_table(ident, metadata.location, data)
        return {
            "metadata-location": location,
            "metadata": json.loads(data),
            "config": dict(self.vended),
        }

    def _create_updates(self, ident: TableIdent, body: Mapping[str, Any]) -> list[TableUpdate]:
        properties = _string_map(body.get("properties") or {}, "properties")
        version = properties.pop("format-version", str(DEFAULT_FORMAT_VERSION))
        if not (version.isascii() and version.isdigit() and len(version) < 3):
            raise bad_request(f"properties.format-version must be 2 or 3, got {version[:20]!r}")
        location = body.get("location")
        if location is None:
            location = self.catalog.default_table_location(ident)
        elif not isinstance(location, str):
            raise bad_request("CreateTableRequest 'location' must be a string")
        if "schema" not in body:
            raise bad_request("CreateTableRequest needs a 'schema'")
        spec = body.get("partition-spec") or {"spec-id": 0, "fields": []}
        order = body.get("write-order") or {"order-id": 0, "fields": []}
        return [
            AssignUUID(str(uuid.uuid4())),
            UpgradeFormatVersion(int(version)),
            update_from_json({"action": "add-schema", "schema": body["schema"]}),
            SetCurrentSchema(LAST_ADDED),
            update_from_json({"action": "add-spec", "spec": spec}),
            SetDefaultSpec(LAST_ADDED),
            update_from_json({"action": "add-sort-order", "sort-order": order}),
            SetDefaultSortOrder(LAST_ADDED),
            SetLocation(self.confinement.check(location, "the table location")),
            SetProperties(properties),
        ]

    def confine(self, base: TableMetadata, new: TableMetadata) -> None:
        """Refuse (400) a table location or ``write.metadata.path`` that changed to a place
        outside the confinement; an existing table's unchanged ones are left alone."""
        if new.location != base.location:
            self.confinement.check(new.location, "the table location")
        path = TableProperties(new.properties).write_metadata_path
        if path is not None and path != TableProperties(base.properties).write_metadata_path:
            self.confinement.check(path, "write.metadata.path")

    # ------------------------------------------------------------ commits

    def commit_table(self, ident: TableIdent, body: Any) -> dict[str, Any]:
        ident = check_ident(ident)
        for attempt in range(COMMIT_ATTEMPTS):
            prepared = self.prepare(ident, body)
            try:
                location = self._swap_in(prepared)
            except CommitSwapLostError as exc:
                log.info("commit to %s lost a race (attempt %d): %s", ".".join(ident), attempt, exc)
                continue
            return {"metadata-location": location, "metadata": json.loads(prepared.data)}
        raise commit_failed(f"{'.'.join(ident)}: lost {COMMIT_ATTEMPTS} races to other commits")

    def prepare(self, ident: TableIdent, body: Any) -> Prepared:
        """Read, check requirements, apply updates, serialize (no write)."""
        requirements, updates = changes_from_json(body)
        creating = any(isinstance(r, AssertCreate) for r in requirements)
        try:
            expected: str | None = self.catalog.load_metadata_location(ident)
        except NoSuchTableError:
            if not creating:
                raise
            expected = None
        if expected is None:
            base = empty_metadata()
        elif creating:
            raise commit_failed(f"requirement failed: table {'.'.join(ident)} already exists")
        else:
            base, _ = read_metadata(self.catalog.io, expected)
        for requirement in requirements:
            if not isinstance(requirement, AssertCreate):
                requirement.check(base)
        new = apply_changes(base, updates, base_location=expected, now_ms=self._now_ms())
        self.confine(base, new)
        if expected is None:
            new_location, codec = "", "none"  # a new table's first file: plain
        else:
            new_location = self.catalog.new_metadata_location(ident, expected, new)
            codec = self.catalog.metadata_codec(new)
        data = metadata_bytes(new)
        return Prepared(ident, expected, new_location, new, data, metadata_file(new, data, codec))

    def _swap_in(self, p: Prepared) -> str:
        if p.expected is None:
            return self.catalog.create_table(p.ident, p.metadata.location, p.file_data)
        self.catalog.commit_metadata(p.ident, p.expected, p.new_location, p.file_data)
        return p.new_location

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)


def _string_map(value: Any, key: str) -> dict[str, str]:
    ok = isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )
    if not ok:
        raise bad_request(f"{key!r} must be a JSON object of strings")
    return dict(value)
