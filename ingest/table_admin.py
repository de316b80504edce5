"""``calving table set-property`` / ``unset-property``: repair a table's properties.

    calving table set-property NAME KEY VALUE (--config F | --catalog URI)
    calving table unset-property NAME KEY (--config F | --catalog URI)

A value for a property calving reads (``calving.commit.spec.properties.KNOWN``) is
checked with the typed accessor first; a bad one is a configuration error (exit 2)
and nothing is committed. The change is one ``UpdateProperties`` commit, and the
command prints what changed (``KEY: 'old' -> 'new'``).

A table that already carries a bad value for the very property being repaired must
still be committable: the commit path reads ``commit.retry.*`` from the table it
starts from. The commit therefore starts from the table's metadata with the property
being changed taken out (``set``) or at its default (``unset``); everything else is
the table's own, and a concurrent change is still detected (the catalog swap compares
the metadata location, not the contents).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from calving.commit.catalog.base import Catalog, parse_ident
from calving.commit.errors import CalvingError, ConfigError, InvalidTablePropertyError
from calving.commit.io import FileIO
from calving.commit.spec.properties import FIX_HINT, KNOWN, PathProperty
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.committer import commit_action
from calving.commit.table.ledger import LEDGER_PREFIX
from calving.commit.table.loading import load_metadata
from calving.commit.table.outcomes import done_or_raise

COMMANDS = ("set-property", "unset-property")


def add_parsers(table_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``set-property`` and ``unset-property`` under ``calving table``."""
    set_p = table_sub.add_parser("set-property", help="set a table property (value checked)")
    set_p.add_argument("name", help='"namespace.table"')
    set_p.add_argument("key", help="property name, e.g. commit.retry.num-retries")
    set_p.add_argument("value", help="the new value")
    unset = table_sub.add_parser("unset-property", help="remove a table property")
    unset.add_argument("name", help='"namespace.table"')
    unset.add_argument("key", help="property name")
    for p in (set_p, unset):
        where = p.add_mutually_exclusive_group()
        where.add_argument("--config", type=Path, help="take the catalog from this pipeline config")
        where.add_argument("--catalog", help="catalog URI (default: $CALVING_CATALOG)")
        p.add_argument("--catalog-name", default="calving")


def main(args: argparse.Namespace) -> int:
    """Run ``set-property`` / ``unset-property``; prints the change, returns 0."""
    key: str = args.key
    value: str | None = args.value if args.table_command == "set-property" else None
    check_change(key, value)
    catalog, io = open_target(args)
    print(change_property(catalog, io, args.name, key, value))
    return 0


def check_change(key: str, value: str | None) -> None:
    """Refuse what no table should get: ledger keys, blank names, bad known values."""
    if not key.strip() or "\x00" in key:
        raise ConfigError("KEY: a property name must be non-empty and without NUL")
    if key.startswith(LEDGER_PREFIX):
        raise ConfigError(f"KEY: {key}: the exactly-once ledger is written by calving only")
    prop = KNOWN.get(key)
    if value is not None and prop is not None:
        try:
            prop.parse(value)
            return
        except InvalidTablePropertyError as exc:
            text = str(exc).replace(f"; {FIX_HINT}", "")
        # The accessor's own words (key, value, range) without its repair hint, raised
        # outside the handler so no chained context is reported instead.
        raise InvalidTablePropertyError(text)


def open_target(args: argparse.Namespace) -> tuple[Catalog, FileIO]:
    """The catalog named by ``--config`` or ``--catalog`` / ``$CALVING_CATALOG``."""
    from calving.ingest.catalogs import (
        check_catalog_exists,
        file_io,
        open_catalog,
        open_catalog_uri,
    )

    if args.config is not None:
        from calving.ingest.config.loader import load_config

        table_cfg = load_config(args.config).table
        check_catalog_exists(table_cfg.catalog, "table.catalog")
        io = file_io(table_cfg)
        return open_catalog(table_cfg, io), io
    uri = args.catalog or os.environ.get("CALVING_CATALOG")
    if not uri:
        raise ConfigError("--catalog: give a catalog URI, --config, or set CALVING_CATALOG")
    io = FileIO()
    return open_catalog_uri(uri, args.catalog_name, io), io


def change_property(catalog: Catalog, io: FileIO, name: str, key: str, value: str | None) -> str:
    """Set (``value``) or remove (None) one property; the line describing the change."""
    ident = parse_ident(name)
    location, metadata = load_metadata(catalog, io, ident)
    old = metadata.properties.get(key)
    if old == value:
        return f"{name}: {key} " + ("is not set" if value is None else f"is already {value!r}")
    base = dict(metadata.properties)
    if value is None:
        base[key] = _readable(key, old or "")  # present, so the removal is planned
        action = UpdateProperties(remove=(key,))
    else:
        base.pop(key, None)
        action = UpdateProperties(set={key: value})
    start = metadata.with_changes(properties=base)
    outcome = commit_action(
        catalog,
        ident,
        action,
        io=io,
        base=(location, start),
        expected_table_uuid=metadata.table_uuid,
    )
    done_or_raise(outcome)
    after = "(unset)" if value is None else repr(value)
    before = "(unset)" if old is None else repr(old)
    return f"{name}: {key}: {before} -> {after}"


def _readable(key: str, old: str) -> str:
    """``old``, or the default when ``old`` is a number or boolean the commit path
    could not read while the property is being removed."""
    prop = KNOWN.get(key)
    if prop is None or isinstance(prop, PathProperty):
        return old
    try:
        prop.parse(old)
    except CalvingError:
        return str(prop.default).lower() if isinstance(prop.default, bool) else str(prop.default)
    return old


__all__ = ["COMMANDS", "add_parsers", "change_property", "check_change", "main"]
