"""A table that already carries a bad property (written before calving checked them, or
by another engine): ``calving run`` fails at start naming the property and the repair
command, and ``calving table set-property`` / ``unset-property`` repair it on a real
SQLite catalog (read back with pyiceberg)."""

from __future__ import annotations

import pytest
from pyiceberg.table import StaticTable

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.errors import InvalidTablePropertyError
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.table import Table
from calving.ingest.catalogs import ensure_table, file_io, open_catalog
from calving.ingest.cli import main
from calving.ingest.config.loader import load_config

from .test_preflight import pipeline, to_toml

KEY = "commit.retry.num-retries"


def _table_with_bad_property(tmp_path):
    config = tmp_path / "pipeline.toml"
    config.write_text(to_toml(pipeline(tmp_path)))
    table_cfg = load_config(config).table
    io = file_io(table_cfg)
    table = ensure_table(open_catalog(table_cfg, io), io, table_cfg)
    # Planted below the checks, as an older calving or another engine could have.
    table.commit_or_raise(UpdateProperties(set={KEY: "abc"}))
    return config, f"sqlite:///{tmp_path}/catalog.db"


def _properties(uri, tmp_path):
    table = Table.load(SqlCatalog("calving", uri, str(tmp_path / "warehouse")), ("shop", "orders"))
    return StaticTable.from_metadata(table.metadata_location).properties


def test_the_table_check_at_start_names_the_property_and_the_fix(tmp_path):
    """``build_pipeline`` brings the table up through ``ensure_table``: the bad value
    stops it there, before any commit, with one line naming property and command."""
    config, uri = _table_with_bad_property(tmp_path)
    before = _properties(uri, tmp_path)
    table_cfg = load_config(config).table
    io = file_io(table_cfg)
    with pytest.raises(InvalidTablePropertyError) as info:
        ensure_table(open_catalog(table_cfg, io), io, table_cfg)
    message = str(info.value)
    assert "\n" not in message
    assert KEY in message and "'abc'" in message
    assert f"calving table set-property shop.orders {KEY} VALUE" in message
    assert f"calving table unset-property shop.orders {KEY}" in message
    assert info.value.__context__ is None  # no unrelated chained error to report instead
    assert _properties(uri, tmp_path) == before  # nothing committed


def test_set_property_repairs_the_table(tmp_path, capsys):
    config, uri = _table_with_bad_property(tmp_path)
    assert main(["table", "set-property", "shop.orders", KEY, "8", "--catalog", uri]) == 0
    assert capsys.readouterr().out.strip() == f"shop.orders: {KEY}: 'abc' -> '8'"
    props = _properties(uri, tmp_path)
    assert props[KEY] == "8"
    assert props["write.parquet.compression-codec"] == "zstd"  # the rest untouched

    # With --config, and a value the accessor refuses: exit 2, nothing changes.
    assert main(["table", "set-property", "shop.orders", KEY, "many", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and KEY in err[0] and "whole number" in err[0], err
    assert _properties(uri, tmp_path)[KEY] == "8"

    # The ledger belongs to calving's exactly-once commits.
    assert (
        main(["table", "set-property", "shop.orders", "calving.ledger.w", "{}", "--catalog", uri])
        == 2
    )
    capsys.readouterr()


def test_unset_property_repairs_the_table(tmp_path, capsys):
    config, uri = _table_with_bad_property(tmp_path)
    assert main(["table", "unset-property", "shop.orders", KEY, "--config", str(config)]) == 0
    assert capsys.readouterr().out.strip() == f"shop.orders: {KEY}: 'abc' -> (unset)"
    assert KEY not in _properties(uri, tmp_path)
    assert main(["table", "unset-property", "shop.orders", KEY, "--catalog", uri]) == 0
    assert capsys.readouterr().out.strip() == f"shop.orders: {KEY} is not set"

    # Repaired: the pipeline's table check passes again.
    table_cfg = load_config(config).table
    io = file_io(table_cfg)
    ensure_table(open_catalog(table_cfg, io), io, table_cfg)


def test_the_dead_letter_table_is_checked_too(tmp_path):
    from calving.ingest.catalogs import ensure_dead_letter_table

    config = tmp_path / "pipeline.toml"
    config.write_text(to_toml(pipeline(tmp_path)))
    table_cfg = load_config(config).table
    io = file_io(table_cfg)
    catalog = open_catalog(table_cfg, io)
    table = ensure_dead_letter_table(catalog, io, "shop.dead")
    table.commit_or_raise(UpdateProperties(set={"calving.dv.blobs-per-puffin": "0"}))
    with pytest.raises(InvalidTablePropertyError) as info:
        ensure_dead_letter_table(catalog, io, "shop.dead")
    assert "calving table set-property shop.dead calving.dv.blobs-per-puffin VALUE" in str(
        info.value
    )
