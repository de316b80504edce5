"""Poison records through ``calving run CONFIG --available-now`` (subprocess, embedded
broker, real Spark): ten good records and one with invalid UTF-8 in a string.

With a dead-letter topic the run exits 0, the ten rows are in the table and the bad
record is on the topic with its coordinates, on the vectorized JSON path, Debezium JSON
on the fused and the shuffle path; with no dead-letter destination the run stops with
one line naming the record's offset. Either way no Parquet file is left that the table
does not reference (before the fix: ``UnicodeDecodeError`` from the Parquet footer
metrics, an orphan data file, no offset named)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calving.commit.catalog.sql import SqlCatalog
from calving.commit.table.table import Table
from calving.ingest.kafka.producer import produce
from tests.ingest.conftest import unique_name
from tests.ingest.sink.test_dead_letter_rules import _coordinates, _topic_messages
from tests.ingest.test_cli_errors import last_line, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = """
[source]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]

[format]
type = "{format}"

[table]
catalog = "sqlite:///{tmp}/catalog.db"
warehouse = "{tmp}/warehouse"
name = "{table}"
columns = [ {{ name = "id", type = "long" }}, {{ name = "name", type = "string" }} ]
{keys}

[sink]
writer_id = "w"
checkpoint = "{tmp}/checkpoints"
path = "{path}"
{dead}

[spark]
master = "local[1]"
"""
BAD = b'{"id": 100, "name": "\xff\xfe"}'


def _records(fmt: str) -> list[tuple[int, bytes, bytes, list]]:
    rows = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(10)] + [BAD]
    out = []
    for i, row in enumerate(rows):
        key = json.dumps({"id": 100 if i == 10 else i}).encode()
        value = row if fmt == "json" else b'{"before": null, "op": "c", "after": ' + row + b"}"
        out.append((0, key, value, []))
    return out


def _unreferenced_parquet(tmp: Path, table_name: str) -> set[str]:
    from pyiceberg.table import StaticTable

    catalog = SqlCatalog("calving", f"sqlite:///{tmp}/catalog.db", str(tmp))
    table = Table.load(catalog, tuple(table_name.split(".")))
    static = StaticTable.from_metadata(table.metadata_location)
    referenced = {
        p.removeprefix("file://") for p in static.inspect.files()["file_path"].to_pylist()
    }
    location = table.metadata.location.removeprefix("file://")
    on_disk = {str(p) for p in Path(location).rglob("*.parquet")}
    return on_disk - referenced


def _run(tmp: Path, broker, make_topic, fmt: str, path: str, dead_topic: str | None):
    topic = make_topic(partitions=1)
    produce(broker.bootstrap_servers, topic, _records(fmt))
    table = f"db.{unique_name('poison')}"
    config = tmp / "pipeline.toml"
    config.write_text(
        CONFIG.format(
            bootstrap=broker.bootstrap_servers, topic=topic, tmp=tmp, table=table,
            format=fmt, path=path,
            keys='identifier_fields = ["id"]' if fmt != "json" else "",
            dead=f'dead_letter_topic = "{dead_topic}"' if dead_topic else "",
        )
    )  # fmt: skip
    code, out = run_cli(["run", str(config), "--available-now"], tmp)
    return topic, table, code, out


@pytest.mark.parametrize(
    ("fmt", "path"),
    [("json", "auto"), ("debezium-json", "fused"), ("debezium-json", "shuffle")],
)
def test_invalid_utf8_is_dead_lettered_with_its_coordinates(
    tmp_path, broker, make_topic, fmt, path
):
    dead_topic = make_topic(partitions=1)
    topic, table, code, out = _run(tmp_path, broker, make_topic, fmt, path, dead_topic)
    assert code == 0, out[-3000:]
    catalog = SqlCatalog("calving", f"sqlite:///{tmp_path}/catalog.db", str(tmp_path))
    loaded = Table.load(catalog, tuple(table.split(".")))
    from pyiceberg.table import StaticTable

    rows = StaticTable.from_metadata(loaded.metadata_location).scan().to_arrow()
    assert sorted(rows.column("id").to_pylist()) == list(range(10))
    dead = _topic_messages(broker.bootstrap_servers, dead_topic)
    assert [_coordinates(m) for m in dead] == [(0, 10)]
    assert dead[0].value() == (BAD if fmt == "json" else _records(fmt)[10][2])
    assert dict(dead[0].headers())["calving.topic"] == topic.encode()
    assert _unreferenced_parquet(tmp_path, table) == set()


def test_invalid_utf8_without_a_dead_letter_destination_stops_naming_the_offset(
    tmp_path, broker, make_topic
):
    topic, table, code, out = _run(tmp_path, broker, make_topic, "json", "auto", None)
    assert code == 1, out[-3000:]
    line = last_line(out)
    assert f"{topic}/0@10" in line and "UTF-8" in line, out[-3000:]
    assert "UnicodeDecodeError" not in out
    assert _unreferenced_parquet(tmp_path, table) == set()
