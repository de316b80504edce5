"""Relative paths in a config are relative to the config file, not the working directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from calving.ingest.config import load_config, parse_config

from .documents import BASE_DIR, edit, error_of, json_append, parse

PIPELINE = """
[source]
bootstrap_servers = "broker:9092"
topics = ["orders"]

[format]
type = "avro"
schema_dir = "schemas"

[table]
catalog = "sqlite:///state/catalog.db"
warehouse = "../lake/warehouse/"
name = "shop.orders"

[[table.columns]]
name = "id"
type = "long"

[sink]
writer_id = "orders"
checkpoint = "./state/checkpoints/orders"
"""


@pytest.fixture
def pipeline_file(tmp_path: Path) -> Path:
    folder = tmp_path / "deploy" / "pipelines"
    folder.mkdir(parents=True)
    path = folder / "orders.toml"
    path.write_text(PIPELINE)
    return path


def _check_relative_to(config, folder: Path) -> None:
    assert config.table.catalog == f"sqlite:///{folder}/state/catalog.db"
    assert config.table.warehouse == f"file://{folder.parent}/lake/warehouse"
    assert config.sink.checkpoint == f"{folder}/state/checkpoints/orders"
    assert config.format.schema_dir == f"{folder}/schemas"


def test_paths_are_relative_to_the_config_file(pipeline_file, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(pipeline_file, environ={})
    _check_relative_to(config, pipeline_file.parent)


def test_a_relative_config_path_works_the_same(pipeline_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(os.path.join("deploy", "pipelines", "orders.toml"), environ={})
    _check_relative_to(config, pipeline_file.parent)
    assert config.origin == os.path.join("deploy", "pipelines", "orders.toml")


def test_parse_config_resolves_against_base_dir():
    config = parse(json_append())
    assert config.table.catalog == f"sqlite:///{BASE_DIR}/catalog.db"
    assert config.table.warehouse == f"file://{BASE_DIR}/warehouse"
    assert config.sink.checkpoint == f"{BASE_DIR}/checkpoints/orders"


def test_parse_config_defaults_to_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = parse_config(json_append(), environ={})
    assert config.table.catalog == f"sqlite:///{tmp_path}/catalog.db"
    assert config.sink.checkpoint == f"{tmp_path}/checkpoints/orders"


def test_absolute_paths_and_uris_are_kept():
    doc = edit(json_append(), "table.catalog", "sqlite:////var/lib/calving/catalog.db")
    doc = edit(doc, "table.warehouse", "s3://bucket/warehouse/")
    doc = edit(doc, "sink.checkpoint", "hdfs://namenode:8020/checkpoints/orders")
    config = parse(doc)
    assert config.table.catalog == "sqlite:////var/lib/calving/catalog.db"
    assert config.table.warehouse == "s3://bucket/warehouse"
    assert config.sink.checkpoint == "hdfs://namenode:8020/checkpoints/orders"


def test_absolute_local_paths_are_kept_as_paths():
    doc = edit(json_append(), "table.warehouse", "/data/warehouse")
    doc = edit(doc, "sink.checkpoint", "/data/checkpoints/orders/")
    config = parse(doc)
    assert config.table.warehouse == "file:///data/warehouse"
    assert config.sink.checkpoint == "/data/checkpoints/orders"


def test_home_is_expanded(monkeypatch):
    monkeypatch.setenv("HOME", "/home/calving")
    config = parse(edit(json_append(), "sink.checkpoint", "~/checkpoints/orders"))
    assert config.sink.checkpoint == "/home/calving/checkpoints/orders"


@pytest.mark.parametrize(
    ("key", "location", "expected"),
    [
        ("table.catalog", "file:lake", "an absolute file:/// URI"),
        ("table.catalog", "file://otherhost/lake", "an absolute file:/// URI"),
        ("table.warehouse", "file:warehouse", "a directory or a valid URI"),
        ("table.warehouse", "s3://[bucket/warehouse", "a directory or a valid URI"),
    ],
)
def test_unusable_file_locations_name_the_key(key, location, expected):
    # Not a bare InvalidLocationError from deep inside: a ConfigError naming the key.
    doc = edit(json_append(), key, location)
    if key == "table.catalog":
        doc = edit(doc, "table.warehouse")
    message = error_of(doc)
    assert f"{key}: expected {expected}, got {location!r}" in message


def test_filesystem_catalog_uri():
    doc = edit(json_append(), "table.catalog", "file:///data/lake/")
    doc = edit(doc, "table.warehouse", "/data/lake")
    config = parse(doc)
    assert config.table.catalog == "file:///data/lake"
    assert config.table.catalog_kind == "filesystem"
    assert config.table.warehouse == "file:///data/lake"


def test_postgres_catalog_url_is_not_a_path():
    url = "postgresql+psycopg://calving@db.internal:5432/catalog"
    config = parse(edit(json_append(), "table.catalog", url))
    assert config.table.catalog == url
    assert config.table.catalog_kind == "sql"
