"""A table handle: catalog + identifier + FileIO + the metadata last seen."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.catalog.metadata_cache import read_metadata_cached
from calving.commit.io import FileIO, to_uri
from calving.commit.spec.metadata import TableMetadata, serialize_metadata
from calving.commit.spec.partition import UNPARTITIONED, PartitionSpec
from calving.commit.spec.schema import Schema
from calving.commit.spec.sort_order import UNSORTED, SortOrder
from calving.commit.table import ledger, scan
from calving.commit.table.action import Action
from calving.commit.table.committer import (
    CommitOutcome,
    Committed,
    Skipped,
    commit_action,
    load_metadata,
)
from calving.commit.table.outcomes import done_or_raise

DEFAULT_PROPERTIES = {
    "write.parquet.compression-codec": "zstd",
    "write.metadata.previous-versions-max": "100",
    # Each commit writes the whole metadata, history included: gzip, assembled from
    # pieces compressed once (spec.metadata_gzip), keeps that write small and flat.
    "write.metadata.compression-codec": "gzip",
}


class Table:
    def __init__(
        self,
        catalog: Catalog,
        ident: TableIdent,
        io: FileIO,
        metadata_location: str,
        metadata: TableMetadata,
    ) -> None:
        self.catalog = catalog
        self.ident = ident
        self.io = io
        self.metadata_location = metadata_location
        self.metadata = metadata
        #: Commits through this handle are maintenance's: they yield to the stream
        #: (every lost swap counts; see ``calving.commit.table.yielding``).
        self.yielding = False

    @staticmethod
    def load(catalog: Catalog, ident: TableIdent, io: FileIO | None = None) -> Table:
        location = catalog.load_metadata_location(ident)  # one read: the io follows it
        io = catalog.table_io(ident, io or FileIO.for_location(location))
        return Table(catalog, ident, io, location, read_metadata_cached(io, location))

    @property
    def name(self) -> str:
        return ".".join(self.ident)

    def refresh(self) -> Table:
        self.metadata_location, self.metadata = load_metadata(self.catalog, self.io, self.ident)
        return self

    def commit(self, action: Action, *, from_cache: bool = False) -> CommitOutcome:
        """Commit starting from a fresh read of the catalog, or (``from_cache``) from
        this object's state, saving that read when nobody else committed since (a stale
        state costs one try, retried at once on a fresh read); keep the result as state."""
        outcome = commit_action(
            self.catalog,
            self.ident,
            action,
            io=self.io,
            base=(self.metadata_location, self.metadata) if from_cache else None,
            expected_table_uuid=self.metadata.table_uuid,
            cached_base=from_cache,
            yielding=self.yielding,
        )
        self.adopt(outcome)
        return outcome

    def adopt(self, outcome: CommitOutcome) -> None:
        """Take a landed commit's metadata (``Committed`` or ``Skipped``, also from a
        multi-table commit) as this object's state; other outcomes change nothing."""
        if isinstance(outcome, (Committed, Skipped)):
            self.metadata_location = outcome.metadata_location
            self.metadata = outcome.metadata

    def commit_or_raise(self, action: Action, *, from_cache: bool = False) -> Committed | Skipped:
        return done_or_raise(self.commit(action, from_cache=from_cache))

    # ------------------------------------------------------------ reading

    def live_files(self) -> scan.LiveFiles:
        return scan.live_files(self.io, self.metadata, self.metadata.current_snapshot)

    def ledger(self, writer_id: str) -> dict[ledger.TopicPartition, int]:
        return ledger.read_ledger(self.metadata, writer_id)


def refresh_tables(tables: Sequence[Table]) -> None:
    """``Table.refresh`` for many tables, their metadata locations read from each
    catalog together (one query per chunk of tables on SQL catalogs); only the tables
    that moved read their metadata file (``NoSuchTableError`` for a dropped one)."""
    by_catalog: dict[int, list[Table]] = {}
    for table in tables:
        by_catalog.setdefault(id(table.catalog), []).append(table)
    for group in by_catalog.values():
        locations = group[0].catalog.load_metadata_locations([t.ident for t in group])
        for table, location in zip(group, locations):
            if location != table.metadata_location:
                table.metadata_location = location
                table.metadata = read_metadata_cached(table.io, location)


def new_table_metadata(
    schema: Schema,
    location: str,
    spec: PartitionSpec = UNPARTITIONED,
    sort_order: SortOrder = UNSORTED,
    properties: Mapping[str, str] | None = None,
) -> TableMetadata:
    """Metadata of an empty v3 table (pure apart from the clock and a fresh UUID)."""
    props = dict(DEFAULT_PROPERTIES)
    props.update(properties or {})
    spec.partition_type(schema)  # validates sources and transforms against the schema
    return TableMetadata(
        format_version=3,
        table_uuid=str(uuid.uuid4()),
        location=location.rstrip("/"),
        last_sequence_number=0,
        last_updated_ms=int(time.time() * 1000),
        last_column_id=schema.highest_field_id,
        schemas=(schema,),
        current_schema_id=schema.schema_id,
        partition_specs=(spec,),
        default_spec_id=spec.spec_id,
        last_partition_id=max((f.field_id for f in spec.fields), default=999),
        sort_orders=(sort_order,),
        default_sort_order_id=sort_order.order_id,
        properties=props,
        next_row_id=0,
    )


def create_table(
    catalog: Catalog,
    ident: TableIdent,
    schema: Schema,
    *,
    spec: PartitionSpec = UNPARTITIONED,
    sort_order: SortOrder = UNSORTED,
    properties: Mapping[str, str] | None = None,
    location: str | None = None,
    io: FileIO | None = None,
) -> Table:
    location = to_uri(location or catalog.default_table_location(ident))
    io = io or FileIO.for_location(location)
    metadata = new_table_metadata(schema, location, spec, sort_order, properties)
    metadata_location = catalog.create_table(ident, metadata.location, serialize_metadata(metadata))
    return Table(catalog, ident, catalog.table_io(ident, io), metadata_location, metadata)
