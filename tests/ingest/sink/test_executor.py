"""Executor helpers: records a writer's ledger already covers are dropped before decoding,
with and without the one-call shortcut (every record past every partition's ledger)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from calving.ingest.sink.executor import drop_committed


def _records(*rows: tuple[str, int, int]) -> pa.Table:
    topics, partitions, offsets = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table(
        {
            "topic": pa.array(topics, pa.string()),
            "partition": pa.array(partitions, pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
        }
    )


def _kept(batch: pa.Table) -> list[tuple[str, int, int]]:
    return list(zip(*(batch.column(c).to_pylist() for c in ("topic", "partition", "offset"))))


def test_records_before_their_partitions_ledger_are_dropped() -> None:
    batch = _records(("a", 0, 5), ("a", 0, 6), ("a", 1, 2), ("b", 0, 9), ("a", 0, 7))
    ledger = {("a", 0): 7, ("a", 1): 3}
    assert _kept(drop_committed(batch, ledger)) == [("b", 0, 9), ("a", 0, 7)]


def test_a_batch_past_every_ledger_entry_is_kept_whole() -> None:
    batch = _records(("a", 0, 10), ("a", 0, 11))
    assert drop_committed(batch, {("a", 0): 10, ("a", 1): 4}) is batch
    assert drop_committed(batch, {}) is batch
    empty = _records()
    assert drop_committed(empty, {("a", 0): 10}) is empty


def test_another_partitions_higher_ledger_does_not_drop_this_ones_records() -> None:
    """Offsets of different partitions are unrelated: ("a", 1)'s ledger at 100 must not
    drop ("a", 0)'s record at 50 (the shortcut does not apply; each partition judged)."""
    batch = _records(("a", 0, 50), ("a", 1, 99), ("a", 1, 100))
    ledger = {("a", 0): 10, ("a", 1): 100}
    assert _kept(drop_committed(batch, ledger)) == [("a", 0, 50), ("a", 1, 100)]


@pytest.mark.integration
def test_an_executors_task_modules_do_not_import_the_sql_catalog() -> None:
    """A Spark executor's Python worker imports the task modules cold on its first
    task: SQLAlchemy (0.14 s of the 0.9 s it took) is for the driver's SQL catalog and
    config checks only, and stays out of the executor's imports."""
    import subprocess
    import sys

    modules = ["calving.ingest.sink.executor", "calving.ingest.sink.index_rebuild"]
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sqlalchemy'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout[:300]
