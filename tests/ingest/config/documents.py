"""Small valid config documents for the config tests, and edits of them by dotted key."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from calving.commit.errors import ConfigError
from calving.ingest.config import CalvingConfig, parse_config

BASE_DIR = "/srv/calving/pipelines"
_DELETE = object()


def json_append() -> dict[str, Any]:
    """A valid plain-JSON append pipeline with declared columns."""
    return {
        "source": {"bootstrap_servers": "broker:9092", "topics": ["orders"]},
        "format": {"type": "json"},
        "table": {
            "catalog": "sqlite:///catalog.db",
            "warehouse": "warehouse",
            "name": "shop.orders",
            "columns": [
                {"name": "id", "type": "long"},
                {"name": "ts", "type": "timestamptz"},
                {"name": "note", "type": "string"},
            ],
        },
        "sink": {"writer_id": "orders", "checkpoint": "checkpoints/orders"},
    }


def cdc() -> dict[str, Any]:
    """A valid Debezium-JSON pipeline into a keyed table."""
    doc = json_append()
    doc["format"] = {"type": "debezium-json"}
    doc["table"]["identifier_fields"] = ["id"]
    return doc


def edit(doc: dict[str, Any], key: str, value: Any = _DELETE) -> dict[str, Any]:
    """A copy of ``doc`` with the dotted ``key`` set to ``value`` (or deleted).
    ``table.columns.1.type`` indexes into lists."""
    out = copy.deepcopy(doc)
    *parents, last = key.split(".")
    node: Any = out
    for part in parents:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
    if isinstance(node, list):
        if value is _DELETE:
            del node[int(last)]
        else:
            node[int(last)] = value
    elif value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return out


def parse(doc: dict[str, Any], environ: dict[str, str] | None = None) -> CalvingConfig:
    return parse_config(doc, "pipeline.toml", base_dir=BASE_DIR, environ=environ or {})


def error_of(doc: dict[str, Any], environ: dict[str, str] | None = None) -> str:
    """The message of the ``ConfigError`` parsing ``doc`` raises."""
    with pytest.raises(ConfigError) as info:
        parse(doc, environ)
    message = str(info.value)
    assert message.startswith("pipeline.toml: "), message
    return message
