"""``calving.changes(...)``: what changed in a table between two snapshots.

    import calving
    changes = calving.changes("sales.orders", "2026-11-23T10:00:00Z", catalog="sqlite:///c.db")
    changes = calving.changes(table, 4738892374624337, net=True)   # a loaded calving Table

Returns a ``pyarrow.Table``: the table's columns, then ``_change_type`` (INSERT, DELETE,
UPDATE_BEFORE, UPDATE_AFTER), ``_change_ordinal``, ``_commit_snapshot_id`` and
``_row_id`` (see ``calving.commit.changelog``). ``start`` is excluded, ``end`` (default:
the current snapshot) included; each is a snapshot id, a ``datetime`` or ISO-8601 text
(the snapshot current at that time), and ``start=None`` means the table's beginning.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING

from calving.commit.changelog import Bound, parse_bound, read_changes
from calving.commit.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

    from calving.commit.table.table import Table

Point = int | str | dt.datetime | None


def bound(value: Point) -> Bound:
    if isinstance(value, str):
        return parse_bound(value)
    if isinstance(value, bool) or not (value is None or isinstance(value, int | dt.datetime)):
        raise ConfigError(
            f"a range end is a snapshot id, a datetime or ISO-8601 text, got {value!r}"
        )
    return value


def open_table(
    name: str,
    *,
    catalog: str | None = None,
    config: str | os.PathLike[str] | None = None,
    catalog_name: str = "calving",
) -> Table:
    """The table ``name`` ("namespace.table") from a catalog URI or a pipeline config
    (neither: ``$CALVING_CATALOG``)."""
    from calving.commit.catalog.base import parse_ident
    from calving.commit.io import FileIO
    from calving.commit.table.table import Table
    from calving.ingest.catalogs import (
        check_catalog_exists,
        file_io,
        open_catalog,
        open_catalog_uri,
    )

    if config is not None:
        from calving.ingest.config.loader import load_config

        table_cfg = load_config(Path(config)).table
        check_catalog_exists(table_cfg.catalog, "table.catalog")
        io = file_io(table_cfg)
        cat = open_catalog(table_cfg, io)
    else:
        uri = catalog or os.environ.get("CALVING_CATALOG")
        if not uri:
            raise ConfigError("catalog: give a catalog URI, a config, or set CALVING_CATALOG")
        io = FileIO()
        cat = open_catalog_uri(uri, catalog_name, io)
    return Table.load(cat, parse_ident(name), io)


def changes(
    table: Table | str,
    start: Point,
    end: Point = None,
    *,
    net: bool = False,
    catalog: str | None = None,
    config: str | os.PathLike[str] | None = None,
    catalog_name: str = "calving",
) -> pa.Table:
    """The changes after ``start`` up to ``end`` (see the module doc); ``net``: one change
    per row. ``table`` is a loaded calving ``Table`` (refreshed first) or a name with
    ``catalog`` or ``config``."""
    from calving.commit.table.table import Table

    if isinstance(table, Table):
        table.refresh()
        loaded = table
    else:
        loaded = open_table(table, catalog=catalog, config=config, catalog_name=catalog_name)
    return read_changes(loaded.io, loaded.metadata, bound(start), bound(end), net=net)


__all__ = ["changes", "open_table"]
