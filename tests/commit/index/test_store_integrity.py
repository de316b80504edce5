"""A persisted index is used only when it is exactly what was written: every single-bit
flip, every truncation, a format 1 file (no checksum) and a read error all make ``load``
raise ``UnreadableIndexError`` and ``open_index`` rebuild from the table, logged once.
Real tables on a SQLite catalog, real files on disk."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyroaring import BitMap64

from calving.commit.index import store
from calving.commit.index.index_file import UnreadableIndexError
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.store import (
    INDEX_LOCATION_PROPERTY,
    build_from_table,
    load,
    open_index,
    save,
)
from calving.commit.io import local_path
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import NestedField
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.table import Table, create_table
from tests.support.tables import EVENTS, row, write_partitioned

pytestmark = pytest.mark.integration

STORE_LOGGER = "calving.commit.index.store"


def entries(index: PrimaryKeyIndex) -> list[tuple[Any, str, int]]:
    """Every (key, file, position) of the index, sorted; int and byte keys alike."""
    keys, file_index, positions, files = index.export_entries()
    values = keys.to_arrow().to_pylist()
    return sorted(zip(values, [files[i][0] for i in file_index], positions.tolist()))


def small_table(catalog: Any, key: str) -> Table:
    """A few rows, two data files and a deletion vector, keyed on ``id`` (long) or on
    ``payload`` (string)."""
    if key == "int":
        schema = EVENTS
    else:
        fields = tuple(NestedField(f.field_id, f.name, f.field_type, True) for f in EVENTS.fields)
        schema = Schema(fields, identifier_field_ids=(4,))
    table = create_table(catalog, ("db", f"small_{key}"), schema)
    first = write_partitioned(table, [row(i, payload=f"k{i}") for i in range(5)])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in first)))
    second = write_partitioned(table, [row(10 + i, payload=f"key-{i}") for i in range(3)])
    deleted = {first[0][0].file_path: BitMap64([1, 3])}
    table.commit_or_raise(RowDelta(tuple(f for f, _ in second), deleted))
    return table


def saved(table: Table) -> tuple[str, bytes, list[tuple[Any, str, int]]]:
    """Save the table's index; (its location, its bytes, its entries)."""
    index = build_from_table(table.io, table.metadata)
    location = save(table.io, index, table.metadata.location)
    return location, table.io.read(location), entries(index)


def outcome(table: Table, location: str) -> list[tuple[Any, str, int]] | None:
    """The loaded entries, or None for the typed "rebuild it" outcome. Any other
    exception propagates and fails the test."""
    try:
        return entries(load(table.io, location, table.metadata))
    except UnreadableIndexError:
        return None


@pytest.mark.parametrize("key", ["int", "string"])
def test_every_bit_flip_loads_the_same_entries_or_asks_for_a_rebuild(
    sqlite_catalog: Any, key: str
) -> None:
    table = small_table(sqlite_catalog, key)
    location, original, expected = saved(table)
    assert len(expected) == 6  # 5 + 3 rows, 2 deleted
    path = Path(local_path(location))
    same = rebuilt = 0
    for bit in range(len(original) * 8):
        flipped = bytearray(original)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(flipped)
        got = outcome(table, location)
        if got is None:
            rebuilt += 1
        else:
            assert got == expected, f"bit {bit}: loaded different entries"
            same += 1
    assert same + rebuilt == len(original) * 8
    path.write_bytes(original)
    assert outcome(table, location) == expected  # the loop really loaded this file


@pytest.mark.parametrize("key", ["int", "string"])
def test_every_truncation_asks_for_a_rebuild(sqlite_catalog: Any, key: str) -> None:
    table = small_table(sqlite_catalog, key)
    location, original, _ = saved(table)
    path = Path(local_path(location))
    for length in range(len(original)):
        path.write_bytes(original[:length])
        with pytest.raises(UnreadableIndexError, match=f"{location}: "):
            load(table.io, location, table.metadata)
    path.write_bytes(original + b"\0")  # and one byte too many
    with pytest.raises(UnreadableIndexError):
        load(table.io, location, table.metadata)


def _format_1_file(table: Table, location: str) -> str:
    """The same index as a format 1 file: the bare Arrow IPC payload, no checksum."""
    payload = store.read_index_table(table.io, location)
    md = dict(payload.schema.metadata)
    md[b"calving.index.format"] = b"1"
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, payload.schema.with_metadata(md)) as writer:
        writer.write_table(payload)
    old = location.replace(".calvidx", ".arrow")
    table.io.write(old, sink.getvalue().to_pybytes())
    return old


def test_a_format_1_file_is_rebuilt_not_read(sqlite_catalog: Any, caplog: Any) -> None:
    table = small_table(sqlite_catalog, "int")
    location, _, expected = saved(table)
    old = _format_1_file(table, location)
    with pytest.raises(UnreadableIndexError, match="format 1"):
        load(table.io, old, table.metadata)

    table.commit_or_raise(UpdateProperties({INDEX_LOCATION_PROPERTY: old}))
    with caplog.at_level(logging.WARNING, logger=STORE_LOGGER):
        assert entries(open_index(table.io, table.metadata)) == expected
    warnings = [r for r in caplog.records if r.name == STORE_LOGGER]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    message = warnings[0].getMessage()
    assert old in message and "format 1" in message and "\n" not in message


def test_a_read_error_asks_for_a_rebuild(sqlite_catalog: Any, caplog: Any) -> None:
    table = small_table(sqlite_catalog, "int")
    _, _, expected = saved(table)
    # The recorded location names a directory: reading it fails with an OSError.
    location = f"{table.metadata.location}/metadata/calving-index/a-directory.calvidx"
    os.makedirs(local_path(location))
    with pytest.raises(UnreadableIndexError, match="cannot read"):
        load(table.io, location, table.metadata)

    table.commit_or_raise(UpdateProperties({INDEX_LOCATION_PROPERTY: location}))
    with caplog.at_level(logging.WARNING, logger=STORE_LOGGER):
        assert entries(open_index(table.io, table.metadata)) == expected
    [warning] = [r for r in caplog.records if r.name == STORE_LOGGER]
    assert location in warning.getMessage() and "cannot read" in warning.getMessage()
