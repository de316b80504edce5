"""Sharded mode across the matrix of key types: every Iceberg type a key column may
have, alone and in composites, through both ways a batch's keys are resolved (the
write tasks' own steps, and the separate stage), across a restart that reads the
shards back and a split to more shards. Each batch upserts and deletes; pyiceberg
must read exactly the model's rows (a payload names its key and its version, so a
lost delete or a second live row of a key shows)."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pytest

from calving.commit.index.shard_lookup import LocalResolver
from calving.commit.index.sharded import ShardedIndex
from calving.commit.index.task_steps import run_task_steps
from calving.commit.spec.arrow import schema_to_arrow
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import (
    BINARY,
    BOOLEAN,
    DATE,
    INT,
    LONG,
    STRING,
    TIME,
    TIMESTAMP,
    TIMESTAMP_NS,
    TIMESTAMPTZ,
    UUID,
    NestedField,
    PrimitiveType,
    fixed,
)
from calving.commit.spec.types import decimal as decimal_type
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.ledger import OffsetRange
from calving.commit.table.table import Table, create_table
from calving.ingest.sink.coordinator import Coordinator, ParsedMessages
from calving.ingest.sink.messages import DataFileWritten, KeysDeleted, ShardStepsTaken
from calving.ingest.write.parquet_writer import write_data_file
from tests.support.oracles import pyiceberg_rows

pytestmark = pytest.mark.integration

EPOCH = dt.datetime(2026, 1, 1)

#: A key column's type and the value of key number ``i`` (distinct for distinct ``i``).
VALUES: dict[str, tuple[PrimitiveType, Callable[[int], Any]]] = {
    "int": (INT, lambda i: i * 37 - 5_000),
    "long": (LONG, lambda i: i * 10**12 - 5 * 10**14),
    "string": (STRING, lambda i: f"ключ-{i}" if i % 3 else f"k{i}"),
    "uuid": (UUID, lambda i: uuid.UUID(int=i * 0x9E3779B97F4A7C15 + 1).bytes),
    "decimal": (decimal_type(12, 2), lambda i: decimal.Decimal(i * 7 - 900) / 100),
    "date": (DATE, lambda i: dt.date(1960, 1, 1) + dt.timedelta(days=i * 11)),
    "time": (TIME, lambda i: dt.time(i // 3600 % 24, i // 60 % 60, i % 60, i % 999)),
    "timestamp": (TIMESTAMP, lambda i: EPOCH + dt.timedelta(seconds=i * 61, microseconds=i)),
    "timestamptz": (
        TIMESTAMPTZ,
        lambda i: (EPOCH + dt.timedelta(hours=i)).replace(tzinfo=dt.timezone.utc),
    ),
    "timestamp_ns": (TIMESTAMP_NS, lambda i: 1_700_000_000_000_000_000 + i * 1_000_003),
    "binary": (BINARY, lambda i: b"\x00" * (i % 3) + i.to_bytes(3, "big")),
    "fixed": (fixed(4), lambda i: (i * 2_654_435_761 % 2**32).to_bytes(4, "big")),
}
#: Composite keys: each column's values from ``VALUES`` (a boolean key column takes
#: ``i`` odd).
COMPOSITES: dict[str, tuple[str, ...]] = {
    "boolean+long": ("boolean", "long"),
    "uuid+date+string": ("uuid", "date", "string"),
    "string+decimal": ("string", "decimal"),
}
KEYS = 240


def _column(kind: str) -> tuple[PrimitiveType, Callable[[int], Any]]:
    return (BOOLEAN, lambda i: i % 2 == 1) if kind == "boolean" else VALUES[kind]


class KeyedTable:
    """A table keyed by ``kinds`` (one column each), its sharded coordinator, and the
    payload each live key should hold."""

    def __init__(self, catalog: Any, name: str, kinds: Sequence[str]) -> None:
        fields = [
            NestedField(i + 1, f"k{i}", _column(kind)[0], required=True)
            for i, kind in enumerate(kinds)
        ]
        fields.append(NestedField(len(kinds) + 1, "payload", STRING))
        schema = Schema(tuple(fields), identifier_field_ids=tuple(range(1, len(kinds) + 1)))
        self.kinds = tuple(kinds)
        # Every batch's steps in the write tasks or the separate stage, never the
        # driver's path for small batches.
        properties = {"calving.index.driver-step-keys": "0"}
        self.table: Table = create_table(catalog, ("db", name), schema, properties=properties)
        self.arrow = schema_to_arrow(schema)
        self.expected: dict[int, str] = {}
        self.offset = 0
        self.coordinator = self._coordinator()

    def _coordinator(self) -> Coordinator:
        c = Coordinator(self.table, "writer-1", index_save_every=1)
        c.sharded = ShardedIndex(self.table.io, LocalResolver(), shard_count=4)
        return c

    def restart(self) -> None:
        self.table.refresh()
        self.coordinator = self._coordinator()

    def keys(self, ids: Sequence[int]) -> pa.Table:
        return pa.table(
            {
                f"k{n}": pa.array([_column(kind)[1](i) for i in ids], self.arrow.field(n).type)
                for n, kind in enumerate(self.kinds)
            }
        )

    def data_file(self, upserts: dict[int, str]) -> tuple[Any, pa.Table]:
        ids = list(upserts)
        keys = self.keys(ids)
        columns = {c: keys.column(c) for c in keys.column_names}
        columns["payload"] = pa.array([upserts[i] for i in ids], pa.string())
        location = f"{self.table.metadata.location}/data/{uuid.uuid4()}.parquet"
        arrow = pa.table(columns, schema=self.arrow)
        return write_data_file(self.table.io, location, arrow, self.table.metadata.schema), keys

    def batch(self, upserts: dict[int, str], deletes: Sequence[int], tasks: bool) -> None:
        """One batch: its keys resolved by two write tasks' own steps (``tasks``; odd
        and even key numbers), or by the separate stage."""
        messages: list[Any] = []
        job = self.coordinator.shard_job() if tasks else None
        assert not tasks or (job is not None and job.in_task)
        for task in (0, 1):
            mine = {k: v for k, v in upserts.items() if k % 2 == task}
            gone = [k for k in deletes if k % 2 == task]
            files = [self.data_file(mine)] if mine else []
            deleted = [self.keys(gone)] if gone else []
            messages += [DataFileWritten(f, k) for f, k in files]
            messages += [KeysDeleted(k) for k in deleted]
            if job is not None:
                messages.append(ShardStepsTaken(run_task_steps(job, files, deleted, task)))
        parsed = ParsedMessages.of(messages)
        records = len(upserts) + len(deletes)
        parsed.ranges[("events", 0)] = OffsetRange(self.offset, self.offset + records)
        self.offset += records
        prepared = self.coordinator.prepare(self.offset, parsed)
        assert prepared.action is not None
        outcome = self.table.commit(prepared.action, from_cache=True)
        assert self.coordinator.finish(prepared, outcome).outcome == "committed"
        self.expected.update(upserts)
        for key in deletes:
            self.expected.pop(key, None)

    def check(self) -> None:
        got = [p for (p,) in pyiceberg_rows(self.table.refresh().metadata_location, ["payload"])]
        assert len(got) == len(set(got)), "a payload is live twice"
        assert sorted(got) == sorted(self.expected.values())


def _batches(t: KeyedTable, rng: random.Random, first: int, n: int, tasks: bool) -> None:
    for b in range(first, first + n):
        upserts = {k: f"{k}@{b}" for k in rng.sample(range(KEYS), 60)}
        live = sorted(set(t.expected) - set(upserts))
        t.batch(upserts, rng.sample(live, min(len(live), 15)), tasks)


@pytest.mark.parametrize("kinds", [(k,) for k in VALUES] + list(COMPOSITES.values()), ids=str)
def test_every_key_type_through_both_paths_a_restart_and_a_split(
    sqlite_catalog: Any, kinds: tuple[str, ...]
) -> None:
    t = KeyedTable(sqlite_catalog, "_".join(kinds).replace("+", "_"), kinds)
    rng = random.Random(len(kinds) * 100 + sum(map(ord, "".join(kinds))))
    # A coordinator's first batch goes to the separate stage (no shards it has named
    # yet for the tasks to step).
    _batches(t, rng, 0, 2, tasks=False)
    _batches(t, rng, 2, 4, tasks=True)
    t.check()
    t.restart()  # the shards read back from the table's files
    _batches(t, rng, 6, 1, tasks=False)
    _batches(t, rng, 7, 2, tasks=True)
    t.table.commit_or_raise(UpdateProperties({"calving.index.shards": "8"}))
    t.restart()  # split into 8
    _batches(t, rng, 9, 1, tasks=False)
    _batches(t, rng, 10, 2, tasks=True)
    t.check()
    sharded = t.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    assert sharded.manifest.shard_count == 8 and sharded.rebuilds == 0
    assert sharded.manifest.entries == len(t.expected)
