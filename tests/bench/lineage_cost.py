"""Cost of row lineage through updates: a CDC upsert batch with updates keeping their
``_row_id`` vs the previous behaviour (updates get a new one), on the same table.

Two identical keyed tables of N rows (``tests.bench.cdc_upsert``'s rows: ``id`` long
primary key, ``v``, ``name``, ``score``, in 250k-row files) take the very same batches of
B updates of distinct existing keys, interleaved so machine noise hits both alike. Each
batch goes through what the stream runs: the task's collapse-and-write
(``write_last_events``: last event per key, Parquet file) and the driver's
``Coordinator`` (index lookup, deletion vectors, ledger claim, commit); the second table
has the property ``calving.row-lineage.keep-on-update`` false. One warm-up batch per table
is not measured. Wall and CPU seconds (this process) per batch, median.

``--spark`` (and the report's second pair of figures): the same through a local Spark
batch, each a DataFrame of the B updates handed to ``calving.sink`` (foreachBatch on
decoded rows: the Spark job writes the file on the executors, then the driver looks the
keys up, copies the file with the ids and commits); CPU-seconds of the driver, its JVM
and the Python workers.

Checked after the run with DuckDB: the base files' rows have ``_row_id`` = ``id`` (keys
0..N-1 in order from ``first_row_id`` 0), so on the lineage table every row still has
``_row_id = id``, and on the other only the rows never updated do.

    python -m tests.bench.lineage_cost [--rows 1000000] [--batches 100,10000] [--repeat 9]
        [--spark]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from calving.commit.catalog import SqlCatalog
from calving.commit.index import build_from_table
from calving.commit.spec.metadata import serialize_metadata
from calving.commit.spec.properties import ROW_LINEAGE_KEEP_ON_UPDATE
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.ledger import OffsetRange
from calving.ingest.decode.batch import OP_UPSERT
from calving.ingest.sink.coordinator import Coordinator, ParsedMessages
from calving.ingest.sink.driver_index import IndexState
from calving.ingest.sink.executor import TaskPlan, write_last_events
from tests.bench.cdc_upsert import Model, _write_table
from tests.bench.figures import Figure, at_most
from tests.support.oracles import duckdb_connection

ROWS_PER_FILE = 250_000
GOAL_RATIO = 1.05
TOPIC = "bench"


@dataclass
class Side:
    """One table and its coordinator; times per measured batch."""

    name: str
    coordinator: Coordinator
    offset: int = 0
    batches: int = 0
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def upsert(self, batch: pa.Table, measure: bool) -> None:
        table = self.coordinator.table
        n = batch.num_rows
        rows = batch.append_column("_op", pa.array([OP_UPSERT] * n, pa.int8()))
        rows = rows.append_column("_partition", pa.array([0] * n, pa.int32()))
        rows = rows.append_column("_offset", pa.array(range(self.offset, self.offset + n)))
        rows = rows.append_column("_topic", pa.array([TOPIC] * n, pa.string()))
        self.batches += 1
        plan = TaskPlan(
            metadata_json=serialize_metadata(table.metadata),
            metadata_location=table.metadata_location,
            decoder=None,
            file_prefix=f"{self.name}-{self.batches}",
            io_properties=table.io.properties,
        )
        wall, cpu = time.perf_counter(), time.process_time()
        parsed = ParsedMessages.of(write_last_events(plan, rows))
        parsed.ranges[(TOPIC, 0)] = OffsetRange(self.offset, self.offset + n)
        stats = self.coordinator.commit_batch(self.batches, parsed)
        if measure:
            self.wall.append(time.perf_counter() - wall)
            self.cpu.append(time.process_time() - cpu)
        self.offset += n
        assert stats.outcome == "committed" and stats.deleted_rows == n, stats


def _side(catalog: SqlCatalog, model: Model, name: str, keep: bool) -> Side:
    table = _write_table(catalog, name, model.chunks(min(len(model.versions), ROWS_PER_FILE)))
    if not keep:
        table.commit_or_raise(UpdateProperties({ROW_LINEAGE_KEEP_ON_UPDATE.name: "false"}))
    coordinator = Coordinator(table, "bench", index_save_every=1 << 30)
    coordinator.index_state = IndexState(build_from_table(table.io, table.metadata))
    return Side(name, coordinator)


def _rows_where(metadata_location: str, condition: str) -> tuple[int, int]:
    """(rows, rows meeting the SQL ``condition``), read by DuckDB."""
    path = metadata_location.removeprefix("file://").replace("'", "''")
    con = duckdb_connection()
    try:
        got = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {condition}) FROM iceberg_scan('{path}')"
        ).fetchone()
    finally:
        con.close()
    assert got is not None
    return int(got[0]), int(got[1])


def _row_ids_equal_to_id(side: Side) -> tuple[int, int]:
    return _rows_where(side.coordinator.table.metadata_location, "_row_id = id")


def _ids_past(metadata_location: str, n: int) -> tuple[int, int]:
    """(rows, rows whose ``_row_id`` is ``n`` or more)."""
    return _rows_where(metadata_location, f"_row_id >= {int(n)}")


def run(rows: int, batch: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-lineage-") as tmp:
        catalog = SqlCatalog("bench", f"sqlite:///{tmp}/catalog.db", f"{tmp}/warehouse")
        catalog.create_namespace(("bench",))
        model = Model(rows)
        keep = _side(catalog, model, "lineage", keep=True)
        new = _side(catalog, model, "new_ids", keep=False)
        updated: set[int] = set()
        for i in range(repeat + 1):
            b = model.batch(batch)
            updated.update(b.column("id").to_pylist())
            sides = (keep, new) if i % 2 == 0 else (new, keep)
            for side in sides:
                side.upsert(b, measure=i > 0)
        kept, renewed = _row_ids_equal_to_id(keep), _row_ids_equal_to_id(new)
        if kept != (rows, rows) or renewed != (rows, rows - len(updated)):
            raise AssertionError(
                f"DuckDB: rows with _row_id = id: lineage {kept}, new ids {renewed}; "
                f"want {(rows, rows)} and {(rows, rows - len(updated))}"
            )
        return {"rows": rows, "batch": batch, "repeat": repeat, "keep": keep, "new": new}


# ---------------------------------------------------------------- through Spark

#: The bench table's columns for ``calving.sink``.
COLUMNS = [
    {"name": "id", "type": "long", "required": True},
    {"name": "v", "type": "long", "required": True},
    {"name": "name", "type": "string"},
    {"name": "score", "type": "double"},
]


@dataclass
class SparkSide:
    """One table written by a ``calving.sink`` (foreachBatch on decoded rows)."""

    name: str
    sink: Any
    batches: int = 0
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def upsert(self, frame: Any, measure: bool, cpu: Callable[[Any], float]) -> None:
        self.batches += 1
        wall, before = time.perf_counter(), cpu(None)
        self.sink(frame, self.batches)
        if measure:
            self.wall.append(time.perf_counter() - wall)
            self.cpu.append(cpu(before))
        stats = self.sink.coordinator.history[-1]
        assert stats.outcome == "committed", stats


def run_spark(rows: int, batch: int, repeat: int) -> dict[str, Any]:
    """``run`` through Spark: each batch a DataFrame of B updates handed to a
    ``calving.sink`` (Spark job writing on the executors, then the driver's lookup,
    copy and commit), in this process's local Spark. CPU: driver, JVM and Python
    workers (``tests.bench.streaming``)."""
    import calving
    from tests.bench import streaming

    env = streaming.environment()
    spark = env.spark

    def frame(t: pa.Table) -> Any:
        ops = pa.array(["u"] * t.num_rows, pa.string())
        return spark.createDataFrame(t.append_column("op", ops).to_pandas())

    def cpu(before: Any) -> Any:
        """A sample (``before`` None), or the CPU-s since ``before`` but the broker's."""
        now = streaming.cpu_seconds(env)
        if before is None:
            return now
        return sum(v for k, v in streaming.cpu_used(before, now).items() if k != "broker")

    with tempfile.TemporaryDirectory(prefix="bench-lineage-spark-") as tmp:
        model = Model(rows)
        seed = pa.concat_tables(model.chunks(rows))
        sides = []
        for name, keep in (("lineage", True), ("new_ids", False)):
            sink = calving.sink(
                catalog=f"sqlite:///{tmp}/catalog.db",
                warehouse=f"{tmp}/warehouse",
                table=f"bench.{name}",
                writer_id=name,
                columns=COLUMNS,
                identifier_fields=["id"],
                op_column="op",
                properties={} if keep else {ROW_LINEAGE_KEEP_ON_UPDATE.name: "false"},
            )
            side = SparkSide(name, sink)
            side.upsert(frame(seed), measure=False, cpu=cpu)
            sides.append(side)
        keep_side, new_side = sides
        updated: set[int] = set()
        for i in range(repeat + 1):
            b = model.batch(batch)
            updated.update(b.column("id").to_pylist())
            f = frame(b)
            order = (keep_side, new_side) if i % 2 == 0 else (new_side, keep_side)
            for side in order:
                side.upsert(f, measure=i > 0, cpu=cpu)
        for side in sides:
            side.sink.close()
        # The seed's rows took ids 0..rows-1; an update that keeps its id stays there.
        kept = _ids_past(keep_side.sink.table.metadata_location, rows)
        renewed = _ids_past(new_side.sink.table.metadata_location, rows)
        if kept != (rows, 0) or renewed != (rows, len(updated)):
            raise AssertionError(
                f"DuckDB: (rows, rows with _row_id >= {rows}): lineage {kept}, new ids "
                f"{renewed}; want {(rows, 0)} and {(rows, len(updated))}"
            )
        return {"rows": rows, "batch": batch, "repeat": repeat, "keep": keep_side,
                "new": new_side}  # fmt: skip


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _figure(r: dict[str, Any], where: str) -> Figure:
    rows, batch = r["rows"], r["batch"]
    keep, new = r["keep"], r["new"]
    wall_keep, wall_new = _median(keep.wall), _median(new.wall)
    ratio = wall_keep / wall_new
    size = f"{rows // 1000}k" if rows < 1_000_000 else f"{rows // 1_000_000}M"
    goal = rows >= 1_000_000
    return Figure(
        "lineage_cost",
        f"upsert batch of {batch:,} updates into a {size}-row table, updates keep "
        f"_row_id ({where}), ms",
        wall_keep * 1000,
        "same batch, updates get a new _row_id (before)",
        wall_new * 1000,
        goal=f"<= {GOAL_RATIO}x" if goal else "",
        met=at_most(ratio, GOAL_RATIO) if goal else None,
        note=(
            f"lineage/before {ratio:.2f}x; CPU-s per batch "
            f"{_median(keep.cpu):.3f} vs {_median(new.cpu):.3f}"
        ),
    )


def figures(quick: bool) -> list[Figure]:
    rows = 200_000 if quick else 1_000_000
    repeat = 5 if quick else 9
    out = []
    for batch in (100, 10_000):
        out.append(_figure(run(rows, batch, repeat), "task write and commit in one process"))
    for batch in (100, 10_000):
        out.append(_figure(run_spark(rows, batch, repeat), "a local Spark batch"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.lineage_cost", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batches", default="100,10000")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--spark", action="store_true", help="through a local Spark batch")
    args = parser.parse_args(argv)
    for batch in (int(b) for b in args.batches.split(",")):
        r = (run_spark if args.spark else run)(args.rows, batch, args.repeat)
        keep, new = r["keep"], r["new"]
        print(f"{batch:,} updates into {args.rows:,} rows, median of {args.repeat}:")
        for name, side in (("updates keep _row_id", keep), ("updates get a new one", new)):
            print(
                f"  {name:22s} {_median(side.wall) * 1000:8.1f} ms wall  "
                f"{_median(side.cpu):6.3f} CPU-s"
            )
        print(f"  ratio (keep / new): {_median(keep.wall) / _median(new.wall):.2f}x wall, "
              f"{_median(keep.cpu) / _median(new.cpu):.2f}x CPU")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
