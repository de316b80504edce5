"""``RestCatalog``: calving's catalog interface over an Iceberg REST catalog.

    RestCatalog("lake", "http://127.0.0.1:8181", token=os.environ["TOKEN"])
    RestCatalog("lake", uri, credential=os.environ["CLIENT_ID_AND_SECRET"], scope="catalog")

Auth (``auth.TokenSource``): a static bearer token, or OAuth2 client credentials
(``credential``, posted to ``oauth2_server_uri``, default ``{uri}/v1/oauth/tokens``)
with the token refreshed before it expires and once after a 401.

``GET /v1/config`` is read once: its ``defaults``, then the caller's settings, then its
``overrides`` (``prefix``, ``warehouse``). A commit is an ``updateTable`` request: the
difference between the metadata the commit started from and the one it built
(``diff.commit_request``), guarded by ``assert-table-uuid`` and
``assert-ref-snapshot-id`` on ``main``. The server writes the metadata file; the
client never swaps a pointer (``swap_metadata_location`` is unsupported). Outcomes, as
the other catalogs: 409 is ``CommitSwapLostError`` (calving refreshes, rebuilds and
retries), a timeout / dropped connection / 5xx / malformed reply after sending is
``CommitStateUnknownError`` (calving reads the table back and looks for its snapshot
id, never retries blindly), an unreachable server is ``CatalogUnavailableError``.

The location a commit is told to write to (``new_metadata_location``) is not used:
the server names its own file, and ``commit_metadata`` returns it.
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from calving.commit.catalog.base import (
    Catalog,
    Namespace,
    TableIdent,
    TableSwap,
    check_ident,
    check_namespace,
    ident_name,
)
from calving.commit.catalog.metadata_cache import read_metadata_cached
from calving.commit.catalog.rest.auth import TokenSource
from calving.commit.catalog.rest.diff import commit_request
from calving.commit.catalog.rest.idempotent import parse_lifetime, send_commit
from calving.commit.catalog.rest.multi import advertises_transactions, commit_many
from calving.commit.catalog.rest.transport import DEFAULT_TIMEOUT_S, RestTransport
from calving.commit.errors import (
    CalvingError,
    CatalogError,
    CommitStateUnknownError,
    CommitSwapLostError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
    UnsupportedFeatureError,
)
from calving.commit.io import FileIO, to_uri
from calving.commit.spec.metadata import TableMetadata, parse_metadata
from calving.commit.spec.sort_order import SortOrder
from calving.commit.spec.update_json import changes_to_json
from calving.commit.spec.updates import (
    LAST_ADDED,
    AddSchema,
    AddSortOrder,
    AddSpec,
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

SEPARATOR = "%1F"


class RestCatalog(Catalog):
    def __init__(
        self,
        name: str,
        uri: str,
        *,
        warehouse: str | None = None,
        token: str | None = None,
        credential: str | None = None,
        oauth2_server_uri: str | None = None,
        scope: str | None = None,
        headers: Mapping[str, str] | None = None,
        io: FileIO | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.uri = uri
        self.io = io or FileIO()
        self.fault_plan = None
        auth = TokenSource(
            token=token,
            credential=credential,
            token_uri=oauth2_server_uri or f"{uri.rstrip('/')}/v1/oauth/tokens",
            scope=scope,
            timeout_s=timeout_s,
        )
        self.http = RestTransport(uri, headers=headers, timeout_s=timeout_s, auth=auth)
        query = f"?warehouse={urllib.parse.quote(warehouse)}" if warehouse else ""
        config = self.http.request("GET", f"v1/config{query}")
        if not isinstance(config, Mapping):
            raise CatalogError(f"REST catalog {uri}: /v1/config did not answer a JSON object")
        defaults, overrides = config.get("defaults") or {}, config.get("overrides") or {}
        if not isinstance(defaults, Mapping) or not isinstance(overrides, Mapping):
            raise CatalogError(
                f"REST catalog {uri}: /v1/config 'defaults' and 'overrides' must be JSON objects"
            )
        merged = {**dict(defaults), **({"warehouse": warehouse} if warehouse else {})}
        merged.update(overrides)
        self.warehouse = (
            to_uri(str(merged["warehouse"])).rstrip("/") if merged.get("warehouse") else None
        )
        prefix = str(merged.get("prefix") or "").strip("/")
        self._base = f"v1/{prefix}/" if prefix else "v1/"
        self.supports_multi_table_commit = advertises_transactions(config)
        #: Seconds an ``Idempotency-Key`` may be reused (``idempotency-key-lifetime``);
        #: None: the server does not take keys, and unknown outcomes are read back.
        self.idempotency_lifetime_s = parse_lifetime(config.get("idempotency-key-lifetime"))
        #: Storage properties the server vended per table (``loadTable`` ``config``).
        self._vended: dict[TableIdent, dict[str, str]] = {}

    @property
    def base_path(self) -> str:
        """``v1/`` or ``v1/{prefix}/``: where the catalog's routes start."""
        return self._base

    def commit_many(self, swaps: Sequence[TableSwap]) -> None:
        """Several tables in one ``/v1/transactions/commit`` (``rest.multi``)."""
        commit_many(self, swaps)

    def __repr__(self) -> str:
        return f"RestCatalog({self.name!r}, {self.uri!r})"

    # ------------------------------------------------------------ paths

    def _ns(self, namespace: Namespace) -> str:
        parts = check_namespace(namespace)
        return (
            self._base
            + "namespaces/"
            + SEPARATOR.join(urllib.parse.quote(p, safe="") for p in parts)
        )

    def _table(self, ident: TableIdent) -> str:
        ident = check_ident(ident)
        return f"{self._ns(ident[:-1])}/tables/{urllib.parse.quote(ident[-1], safe='')}"

    # ------------------------------------------------------------ namespaces

    def create_namespace(
        self, namespace: Namespace, properties: Mapping[str, str] | None = None
    ) -> None:
        body = {"namespace": list(check_namespace(namespace)), "properties": dict(properties or {})}
        self.http.request("POST", self._base + "namespaces", body, exists="namespace")

    def list_namespaces(self, parent: Namespace = ()) -> list[Namespace]:
        query = ""
        if parent:
            query = "?parent=" + SEPARATOR.join(
                urllib.parse.quote(p, safe="") for p in check_namespace(parent)
            )
        found: list[Namespace] = []
        for reply in self._pages(self._base + "namespaces" + query, exists="namespace"):
            found += [tuple(ns) for ns in reply.get("namespaces") or ()]
        return sorted(found)

    def namespace_exists(self, namespace: Namespace) -> bool:
        try:
            self.namespace_properties(namespace)
        except NoSuchNamespaceError:
            return False
        return True

    def namespace_properties(self, namespace: Namespace) -> dict[str, str]:
        reply = self.http.request("GET", self._ns(namespace), exists="namespace")
        return {str(k): str(v) for k, v in (reply.get("properties") or {}).items()}

    def update_namespace_properties(
        self,
        namespace: Namespace,
        updates: Mapping[str, str],
        removals: Collection[str] = (),
    ) -> None:
        body = {"removals": sorted(removals), "updates": dict(updates)}
        self.http.request("POST", self._ns(namespace) + "/properties", body, exists="namespace")

    def drop_namespace(self, namespace: Namespace) -> None:
        self.http.request("DELETE", self._ns(namespace), exists="namespace")

    # ------------------------------------------------------------ table entries

    def list_tables(self, namespace: Namespace) -> list[TableIdent]:
        found: list[TableIdent] = []
        for reply in self._pages(self._ns(namespace) + "/tables", exists="namespace"):
            for ident in reply.get("identifiers") or ():
                found.append((*ident["namespace"], ident["name"]))
        return sorted(found)

    def _pages(self, path: str, exists: str) -> list[dict[str, Any]]:
        """Every page of a list answer (``next-page-token``)."""
        pages, token = [], None
        while True:
            sep = "&" if "?" in path else "?"
            page_path = (
                path if token is None else f"{path}{sep}pageToken={urllib.parse.quote(token)}"
            )
            reply = self.http.request("GET", page_path, exists=exists)
            if not isinstance(reply, Mapping):
                raise CatalogError(f"REST catalog GET {path}: the reply is not a JSON object")
            pages.append(dict(reply))
            token = reply.get("next-page-token")
            if not token:
                return pages

    def create_table_entry(self, ident: TableIdent, metadata_location: str) -> None:
        ident = check_ident(ident)
        body = {"name": ident[-1], "metadata-location": metadata_location}
        self.http.request("POST", self._ns(ident[:-1]) + "/register", body)

    def load_metadata_location(self, ident: TableIdent) -> str:
        reply = self.http.request("GET", self._table(ident))
        location = reply.get("metadata-location") if isinstance(reply, Mapping) else None
        if not isinstance(location, str) or not location:
            raise CatalogError(
                f"REST catalog: loadTable of {ident_name(ident)} has no metadata-location"
            )
        self._remember_vended(ident, reply, location)
        return location

    def _remember_vended(self, ident: TableIdent, reply: Mapping[str, Any], location: str) -> None:
        vended = vended_storage(reply, location)
        if vended:
            self._vended[check_ident(ident)] = vended

    def table_io(self, ident: TableIdent, io: FileIO) -> FileIO:
        """``io`` with the storage credentials the server vended for ``ident`` (its
        ``loadTable`` / ``createTable`` ``config``, or the longest matching
        ``storage-credentials`` prefix); ``io`` itself when it vended none."""
        vended = self._vended.get(check_ident(ident))
        if not vended:
            return io
        return FileIO({**io.properties, **vended})

    def drop_table_entry(self, ident: TableIdent) -> None:
        """Forget the table (no purge: its files stay)."""
        self.http.request("DELETE", self._table(ident))

    def rename_table(self, src: TableIdent, dst: TableIdent) -> None:
        src, dst = check_ident(src), check_ident(dst)
        body = {
            "source": {"namespace": list(src[:-1]), "name": src[-1]},
            "destination": {"namespace": list(dst[:-1]), "name": dst[-1]},
        }
        self.http.request("POST", self._base + "tables/rename", body)

    def default_table_location(self, ident: TableIdent) -> str:
        ident = check_ident(ident)
        location = self.namespace_properties(ident[:-1]).get("location")
        if location:
            return f"{to_uri(location).rstrip('/')}/{ident[-1]}"
        if not self.warehouse:
            raise CatalogError(f"REST catalog {self.uri} names no warehouse: give a table location")
        return f"{self.warehouse}/{'.'.join(ident[:-1])}/{ident[-1]}"

    # ------------------------------------------------------------ metadata and commits

    def create_table(self, ident: TableIdent, table_location: str, metadata: bytes) -> str:
        """A create transaction (``assert-create``) carrying calving's own table UUID,
        schema, spec, sort order and properties."""
        m = parse_metadata(metadata, f"new table {ident_name(ident)}")
        body = changes_to_json([AssertCreate()], _create_updates(m, table_location))
        try:
            reply = self.commit_post(self._table(ident), body)
        except CommitSwapLostError as exc:  # assert-create failed
            raise TableAlreadyExistsError(
                f"table {ident_name(ident)} already exists: {exc}"
            ) from None
        except CommitStateUnknownError:
            location = self._created_by(ident, m.table_uuid)
            if location is None:
                raise
            return location
        return self._after_create(ident, reply)

    def _created_by(self, ident: TableIdent, table_uuid: str) -> str | None:
        """The table's location if it exists with ``table_uuid`` (a create whose reply
        was lost), else None."""
        try:
            location = self.load_metadata_location(ident)
            _, metadata = load_metadata_at(self.table_io(ident, self.io), location)
        except CalvingError:
            return None
        return location if metadata.table_uuid == table_uuid else None

    def _after_create(self, ident: TableIdent, reply: Any) -> str:
        """A commit answer vends nothing: ``loadTable`` once for the table's storage
        credentials."""
        location = str(reply["metadata-location"])
        self._remember_vended(ident, reply, location)
        if check_ident(ident) not in self._vended:
            self.load_metadata_location(ident)
        return location

    def metadata_codec(self, metadata: TableMetadata) -> str:
        """``none``: the server writes the metadata file (in its own encoding); the
        payload here only carries the changes to send."""
        return "none"

    def new_metadata_location(
        self, ident: TableIdent, current: str, metadata: TableMetadata | None = None
    ) -> str:
        """Unused by the server (it names its own files); a unique placeholder."""
        return f"{current.rsplit('/', 1)[0]}/rest-proposed-{uuid.uuid4()}.metadata.json"

    def commit_metadata(
        self, ident: TableIdent, expected: str, new_location: str, metadata: bytes
    ) -> str:
        """The changes as an ``updateTable`` request; returns the server's new metadata
        location (``new_location`` is never written)."""
        _, base = load_metadata_at(self.table_io(ident, self.io), expected)
        new = parse_metadata(metadata, new_location)
        reply = self.commit_post(self._table(ident), commit_request(base, new))
        location = reply.get("metadata-location") if isinstance(reply, Mapping) else None
        if not isinstance(location, str) or not location:
            raise CommitStateUnknownError(
                f"REST catalog: commit to {ident_name(ident)} answered without a "
                "metadata-location; the commit may have landed"
            )
        return location

    def commit_post(self, path: str, body: Any) -> Any:
        """POST a commit or transaction: under an ``Idempotency-Key`` when the server
        takes them (``rest.idempotent``), else once."""
        return send_commit(
            lambda headers: self.http.request("POST", path, body, commit=True, headers=headers),
            self.idempotency_lifetime_s,
        )

    def swap_metadata_location(self, ident: TableIdent, expected: str, new: str) -> None:
        raise UnsupportedFeatureError(
            f"REST catalog: {ident_name(ident)}: a REST catalog takes changes, not a metadata "
            "location to swap to"
        )

    def table_exists(self, ident: TableIdent) -> bool:
        try:
            self.load_metadata_location(ident)
        except NoSuchTableError:
            return False
        return True


#: loadTable ``config`` keys that are storage settings (the rest, e.g. a table-scoped
#: ``token``, is not the FileIO's).
STORAGE_PREFIXES = ("s3.", "gcs.", "adls.", "client.")


def vended_storage(reply: Mapping[str, Any], location: str) -> dict[str, str]:
    """Storage properties a ``loadTable`` answer vends for the table at ``location``:
    its ``config``, overlaid with the ``storage-credentials`` entry whose ``prefix`` is
    the longest one the table's location starts with."""
    out = {
        str(k): str(v)
        for k, v in (reply.get("config") or {}).items()
        if str(k).startswith(STORAGE_PREFIXES)
    }
    table_root = location.rsplit("/metadata/", 1)[0]
    best: Mapping[str, Any] = {}
    best_len = -1
    for entry in reply.get("storage-credentials") or ():
        prefix = str(entry.get("prefix", "")) if isinstance(entry, Mapping) else ""
        if table_root.startswith(prefix) and len(prefix) > best_len:
            best, best_len = entry.get("config") or {}, len(prefix)
    out.update({str(k): str(v) for k, v in best.items()})
    return out


def load_metadata_at(io: FileIO, location: str) -> tuple[str, TableMetadata]:
    """The metadata a commit started from (calving's parse cache first)."""
    return location, read_metadata_cached(io, location)


def _create_updates(m: TableMetadata, location: str) -> list[TableUpdate]:
    return [
        AssignUUID(m.table_uuid),
        UpgradeFormatVersion(m.format_version),
        AddSchema(m.schema, m.last_column_id),
        SetCurrentSchema(LAST_ADDED),
        AddSpec(m.spec),
        SetDefaultSpec(LAST_ADDED),
        AddSortOrder(_default_order(m)),
        SetDefaultSortOrder(LAST_ADDED),
        SetLocation(to_uri(location).rstrip("/")),
        SetProperties(dict(m.properties)),
    ]


def _default_order(m: TableMetadata) -> SortOrder:
    for order in m.sort_orders:
        if order.order_id == m.default_sort_order_id:
            return order
    return SortOrder(0, ())
