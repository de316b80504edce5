"""A CDC pipeline whose table lives behind ``calving catalog serve`` (a separate process,
over SQLite and over PostgreSQL): ``[table.catalog] type = "rest"`` with an OAuth2
client credential from the environment. The table is read back through the same server
by pyiceberg's RestCatalog (OAuth2 too) and DuckDB (ATTACH ... TYPE iceberg, ENDPOINT),
and from its metadata by pyiceberg-core / DataFusion; pyiceberg creates a v3 table there
that calving then streams into. Config errors for the REST forms name their key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from calving.commit.catalog import SqlCatalog
from calving.commit.errors import CalvingError, ConfigError
from calving.ingest.config.loader import parse_config
from calving.ingest.kafka.producer import produce
from calving.ingest.pipeline import build_pipeline
from tests.commit.catalog.rest.conftest import duckdb_rest_connection
from tests.ingest.test_catalog_serve import _listening_url
from tests.support.cdc import COLUMNS, cdc_events
from tests.support.oracles import datafusion_rows

pytestmark = pytest.mark.integration

CREDENTIAL = "calving-pipeline:cl13nt-s3cret"
TOKEN = "duckdb-t0ken"


@pytest.fixture(params=["sqlite", "postgres"])
def served(request, tmp_path) -> Iterator[str]:
    """``calving catalog serve`` over a fresh SQL catalog; yields its URL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/catalog.db"
    else:
        url = request.getfixturevalue("pg_url")
    name = f"rest_{uuid.uuid4().hex[:10]}"  # PostgreSQL: one database, a catalog per test
    SqlCatalog(name, url, str(tmp_path / "warehouse")).create_namespace(("shop",))
    cmd = [sys.executable, "-m", "calving.ingest.cli", "catalog", "serve", "--catalog", url,
           "--catalog-name", name, "--warehouse", str(tmp_path / "warehouse"), "--port", "0",
           "--token-env", "SERVE_TOKEN", "--client-credential-env", "SERVE_CREDENTIAL"]  # fmt: skip
    env = {**os.environ, "SERVE_TOKEN": TOKEN, "SERVE_CREDENTIAL": CREDENTIAL}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        yield _listening_url(proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert CREDENTIAL.split(":")[1] not in err and TOKEN not in err


def _config(endpoint: str, broker: Any, topic: str, tmp_path: Any, name: str) -> Any:
    doc = {
        "source": {
            "bootstrap_servers": broker.bootstrap_servers,
            "topics": [topic],
            "max_offsets_per_trigger": 800,
        },
        "format": {"type": "debezium-json"},
        "table": {
            "catalog": {"type": "rest", "uri": endpoint, "credential": "${env:REST_CREDENTIAL}"},
            "name": f"shop.{name}",
            "identifier_fields": ["id"],
            "columns": [
                {"name": "id", "type": "long"},
                {"name": "status", "type": "string"},
                {"name": "version", "type": "long"},
            ],
        },
        "sink": {"writer_id": name, "checkpoint": str(tmp_path / f"ckpt-{name}")},
    }
    return parse_config(doc, "pipeline.toml", environ={"REST_CREDENTIAL": CREDENTIAL})


def _pyiceberg(endpoint: str) -> Any:
    from pyiceberg.catalog.rest import RestCatalog

    token_uri = f"{endpoint}/v1/oauth/tokens"
    return RestCatalog("r", uri=endpoint, credential=CREDENTIAL, **{"oauth2-server-uri": token_uri})


def _through_rest(endpoint: str, name: str) -> dict[str, list[tuple[Any, ...]]]:
    table = _pyiceberg(endpoint).load_table(f"shop.{name}")
    arrow = table.scan().to_arrow()
    rows = sorted(zip(*(arrow.column(c).to_pylist() for c in COLUMNS), strict=True))
    con = duckdb_rest_connection()
    try:
        con.execute(f"CREATE SECRET rest_token (TYPE iceberg, TOKEN '{TOKEN}')")
        con.execute(f"ATTACH '' AS r (TYPE iceberg, ENDPOINT '{endpoint}', SECRET rest_token)")
        duck = sorted(con.execute(f"SELECT id, status, version FROM r.shop.{name}").fetchall())
    finally:
        con.close()
    location = table.metadata_location
    return {"pyiceberg": rows, "duckdb": duck, "datafusion": datafusion_rows(location, COLUMNS)}


@pytest.mark.slow  # 30-50 s: a Spark streaming query per case
def test_cdc_pipeline_through_the_rest_server(served, spark, broker, make_topic, tmp_path):
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=200, events=1500, partitions=2, seed=5)
    ends = produce(broker.bootstrap_servers, topic, stream.records)
    pipeline = build_pipeline(_config(served, broker, topic, tmp_path, "orders"), spark)
    assert pipeline.config.table.catalog_kind == "rest"
    pipeline.run(available_now=True, timeout=300)
    table = pipeline.table.refresh()
    assert table.ledger("orders") == {(topic, p): e for p, e in ends.items()}
    assert table.live_files().dvs and stream.deletes > 0
    for reader, rows in _through_rest(served, "orders").items():
        assert rows == stream.expected, reader


def test_pyiceberg_creates_a_v3_table_and_calving_streams_into_it(
    served, spark, broker, make_topic, tmp_path
):
    import pyarrow as pa

    schema = pa.schema(
        [pa.field("id", pa.int64(), False), ("status", pa.string()), ("version", pa.int64())]
    )
    from pyiceberg.schema import Schema

    created = _pyiceberg(served).create_table(
        "shop.made_by_pyiceberg", schema=schema, properties={"format-version": "3"}
    )
    iceberg_schema: Schema = created.schema()
    with created.update_schema() as update:
        update.set_identifier_fields("id")
    assert iceberg_schema.find_field("id").required
    topic = make_topic(partitions=1)
    stream = cdc_events(keys=50, events=300, partitions=1, seed=9)
    produce(broker.bootstrap_servers, topic, stream.records)
    config = _config(served, broker, topic, tmp_path, "made_by_pyiceberg")
    pipeline = build_pipeline(config, spark)
    assert pipeline.table.metadata.format_version == 3
    pipeline.run(available_now=True, timeout=300)
    assert _through_rest(served, "made_by_pyiceberg")["pyiceberg"] == stream.expected


def _table_error(catalog: Any, environ: dict[str, str] | None = None) -> str:
    doc = {
        "source": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
        "format": {"type": "json"},
        "table": {"catalog": catalog, "name": "db.t", "columns": [{"name": "id", "type": "long"}]},
        "sink": {"writer_id": "w", "checkpoint": "/tmp/ckpt-rest-errors"},
    }
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "pipeline.toml", environ=environ or {})
    return str(info.value)


@pytest.mark.parametrize(
    ("catalog", "fragment"),
    [
        ("rest+ftp://host", "table.catalog: "),
        ("rest+http://", "table.catalog: expected an http:// or https:// URI"),
        ("rest+http://user:pw@host:1", "table.catalog: must not hold credentials"),
        ({"type": "rest"}, "table.catalog.uri: is required"),
        ({"type": "graph", "uri": "http://h"}, "table.catalog.type: "),
        ({"type": "rest", "uri": "http://h", "token": "literal"}, "table.catalog.token: is a secret"),
        ({"type": "rest", "uri": "http://h", "credential": "a:b"}, "table.catalog.credential: is a secret"),
        ({"type": "rest", "uri": "http://h", "timeout": "soon"}, "table.catalog.timeout: expected a duration"),
        ({"type": "sql", "uri": "sqlite:///c.db", "token": "x"}, "table.catalog.token: is a REST catalog setting"),
        ({"type": "filesystem", "uri": "sqlite:///c.db"}, "table.catalog.uri: does not name a filesystem"),
        ({"type": "rest", "uri": "http://h", "colour": "red"}, "table.catalog.colour"),
    ],
)  # fmt: skip
def test_rest_config_errors_name_the_key(catalog, fragment):
    message = _table_error(catalog)
    assert fragment in message, message
    assert "literal" not in message and "a:b" not in message and "pw" not in message


def test_unreachable_server_and_wrong_credential_are_one_line(tmp_path, served):
    from calving.ingest.catalogs import open_catalog

    closed = parse_config(
        _doc_for("http://127.0.0.1:9", tmp_path),
        "pipeline.toml",
        environ={"REST_CREDENTIAL": CREDENTIAL},
    )
    with pytest.raises(CalvingError) as info:
        open_catalog(closed.table)
    assert "table.catalog: REST catalog http://127.0.0.1:9 unavailable" in str(info.value)
    wrong = parse_config(
        _doc_for(served, tmp_path),
        "pipeline.toml",
        environ={"REST_CREDENTIAL": "calving-pipeline:wrong-guess"},
    )
    with pytest.raises(ConfigError) as refused:
        open_catalog(wrong.table)
    message = str(refused.value)
    assert message.startswith("table.catalog: REST catalog") and "invalid_client" in message
    assert "wrong-guess" not in message and "\n" not in message


def _doc_for(endpoint: str, tmp_path: Any) -> dict[str, Any]:
    return {
        "source": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
        "format": {"type": "json"},
        "table": {
            "catalog": {"type": "rest", "uri": endpoint, "credential": "${env:REST_CREDENTIAL}"},
            "name": "shop.x",
            "columns": [{"name": "id", "type": "long"}],
        },
        "sink": {"writer_id": "w", "checkpoint": str(tmp_path / "ckpt")},
    }
