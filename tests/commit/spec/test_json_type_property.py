"""``calving.debezium.json-type``: Debezium Json columns are strings; ``variant`` is
refused with the reason (pyarrow cannot write Parquet VARIANT columns, and the readers
could not read such a table), before anything is created or committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from calving.commit.errors import InvalidTablePropertyError
from calving.commit.spec.properties import (
    DEBEZIUM_JSON_TYPE,
    TableProperties,
    validate_properties,
)
from calving.ingest.cli import main

KEY = DEBEZIUM_JSON_TYPE.name


def test_string_is_the_type_and_variant_is_refused_with_its_reason() -> None:
    assert TableProperties({}).debezium_json_type == "string"
    assert TableProperties({KEY: "String"}).debezium_json_type == "string"
    with pytest.raises(InvalidTablePropertyError, match="pyarrow .* cannot write Parquet VARIANT"):
        validate_properties({KEY: "variant"})
    with pytest.raises(InvalidTablePropertyError, match="want string"):
        assert TableProperties({KEY: "xml"}).debezium_json_type


def test_set_property_refuses_variant(tmp_path: Path, capsys: Any) -> None:
    uri = f"sqlite:///{tmp_path}/catalog.db"
    assert main(["table", "set-property", "db.t", KEY, "variant", "--catalog", uri]) == 2
    err = capsys.readouterr().err
    assert f"{KEY}='variant': variant is not available" in err
