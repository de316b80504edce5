"""Issue 10 part 4: every value that used to be accepted and break later is refused by
``calving run`` with exit 2 and one line naming the key, before the catalog database,
the namespace, the table, the warehouse or the checkpoint exists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from calving.ingest.cli import main
from tests.ingest.config.documents import edit

SECRET_FREE_BROKER = "127.0.0.1:1"  # never contacted: every case fails before


def pipeline(tmp_path: Path) -> dict[str, Any]:
    return {
        "source": {"bootstrap_servers": SECRET_FREE_BROKER, "topics": ["orders"]},
        "format": {"type": "json"},
        "table": {
            "catalog": "sqlite:///catalog.db",
            "warehouse": "warehouse",
            "name": "shop.orders",
            "partition": ["bucket(4, id)"],
            "columns": [
                {"name": "id", "type": "long", "required": True},
                {"name": "note", "type": "string"},
            ],
        },
        "sink": {"writer_id": "orders", "checkpoint": "checkpoints/orders"},
    }


def to_toml(doc: dict[str, Any]) -> str:
    """A TOML text for ``doc`` (tables of strings, numbers, booleans, lists, tables)."""
    lines: list[str] = []

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v)  # JSON escapes (\u0000 ...) are TOML basic-string escapes
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"

    for section, body in doc.items():
        lines.append(f"[{section}]")
        lines += [f"{json.dumps(k)} = {value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


def run_cli(tmp_path: Path, doc: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    config = tmp_path / "pipeline.toml"
    config.write_text(to_toml(doc))
    status = main(["run", str(config)])
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def assert_nothing_created(tmp_path: Path) -> None:
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in ("pipeline.toml", "file"))
    assert left == [], f"created before the check: {left}"


# (symptom, edits to the valid pipeline, the key the one-line error must name)
SYMPTOMS: list[tuple[str, list[tuple[str, Any]], str]] = [
    (
        "retries-not-a-number",
        [("table.properties", {"commit.retry.num-retries": "abc"})],
        'table.properties."commit.retry.num-retries"',
    ),
    (
        "blobs-per-puffin-zero",
        [("table.properties", {"calving.dv.blobs-per-puffin": "0"})],
        'table.properties."calving.dv.blobs-per-puffin"',
    ),
    (
        "bucket-beyond-int32",
        [("table.partition", ["bucket(2147483648, id)"])],
        "table.partition[0]",
    ),
    (
        "truncate-beyond-int32",
        [("table.partition", ["truncate(4294967296, id)"])],
        "table.partition[0]",
    ),
    (
        "deep-nested-type",
        [("table.columns.1.type", "list<" * 2000 + "long" + ">" * 2000)],
        "table.columns[1].type",
    ),
    ("nul-in-table-name", [("table.name", "shop.ord\x00ers")], "table.name"),
    ("nul-in-namespace", [("table.name", "sh\x00op.orders")], "table.name"),
    ("empty-namespace", [("table.name", ".orders")], "table.name"),
    ("nul-in-column-name", [("table.columns.1.name", "no\x00te")], "table.columns[1].name"),
    ("empty-column-name", [("table.columns.1.name", "")], "table.columns[1].name"),
    ("nul-in-writer-id", [("sink.writer_id", "ord\x00ers")], "sink.writer_id"),
    ("malformed-spark-master", [("spark", {"master": "local[two]"})], "spark.master"),
    ("spark-master-typo", [("spark", {"master": "spark//host:7077"})], "spark.master"),
    (
        "non-numeric-spark-setting",
        [("spark", {"conf": {"spark.executor.cores": "two"}})],
        'spark.conf."spark.executor.cores"',
    ),
    (
        "bad-spark-memory-size",
        [("spark", {"conf": {"spark.executor.memory": "4 gigabytes"}})],
        'spark.conf."spark.executor.memory"',
    ),
    (
        "unknown-librdkafka-key",
        [("source.kafka", {"securty.protocol": "SSL"})],
        'source.kafka."securty.protocol"',
    ),
    (
        "bad-librdkafka-value",
        [("source.kafka", {"security.protocol": "carrier-pigeon"})],
        'source.kafka."security.protocol"',
    ),
    ("unwritable-checkpoint", [("sink.checkpoint", "file/checkpoints")], "sink.checkpoint"),
    ("unwritable-warehouse", [("table.warehouse", "file/warehouse")], "table.warehouse"),
]


@pytest.mark.parametrize(("edits", "key"), [s[1:] for s in SYMPTOMS], ids=[s[0] for s in SYMPTOMS])
def test_refused_with_exit_2_naming_the_key_before_anything_exists(tmp_path, capsys, edits, key):
    (tmp_path / "file").write_text("a regular file: nothing can be created below it\n")
    doc = pipeline(tmp_path)
    for dotted, value in edits:
        doc = edit(doc, dotted, value)
    line = run_cli(tmp_path, doc, capsys)
    assert line.startswith("calving: configuration error: "), line
    assert f"{key}:" in line, line
    assert "Traceback" not in line and "RecursionError" not in line
    assert_nothing_created(tmp_path)


def test_the_valid_pipeline_passes_every_check(tmp_path):
    """The checks refuse only the bad values: the same pipeline without an edit loads
    and passes the pre-create stage (and that stage creates nothing)."""
    from calving.ingest.config.loader import load_config
    from calving.ingest.config.preflight import validate_before_create

    config = tmp_path / "pipeline.toml"
    doc = pipeline(tmp_path)
    doc["spark"] = {
        "master": "local[2, 3]",
        "conf": {"spark.executor.memory": "4g", "spark.sql.shuffle.partitions": "8"},
    }
    doc["source"]["kafka"] = {"security.protocol": "SASL_SSL", "isolation.level": "read_committed"}
    doc["table"]["properties"] = {"commit.retry.num-retries": "8", "owner": "ops"}
    config.write_text(to_toml(doc))
    validate_before_create(load_config(config))
    assert_nothing_created(tmp_path)


@pytest.mark.parametrize(
    "master",
    ["local", "local[4]", "local[*]", "local[4,2]", "local[*, 3]", "local-cluster[2,1,1024]",
     "spark://h1:7077", "spark://h1:7077,h2:7077", "yarn", "k8s://https://10.0.0.1:6443"],
)  # fmt: skip
def test_spark_master_forms_spark_accepts(master):
    from calving.ingest.config.spark_settings import master_ok

    assert master_ok(master)


@pytest.mark.parametrize(
    "master", ["lokal", "local[0]", "local[]", "spark://h1", "spark:/h1:7077", "yarn-client", ""]
)
def test_spark_master_forms_spark_refuses(master):
    from calving.ingest.config.spark_settings import master_ok

    assert not master_ok(master)
