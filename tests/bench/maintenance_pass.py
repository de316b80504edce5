"""One maintenance pass over a CDC table of many tiny partitions: waves vs one commit
per group.

The table of issue 20: keyed CDC rows (``id``, ``name``) partitioned by
``bucket(8, id)`` x ``truncate(4, name)`` (about 450 partitions), built by ``batches``
upsert commits through the commit layer (new rows appended, the replaced rows deleted
with DVs), about 5,000 live rows. The table is built once; one local pass of compaction
runs on it, the table is then put back to its state before the pass (its metadata
committed again: compaction deletes no file) and the peer's pass runs on the same state:

* **waves** (calving now): the ``[maintenance]`` defaults, ``max_commits`` = 10 and a
  ``commit_pause`` of 0.5 s between commits;
* **one commit per group** (the peer, the shape of the design before waves):
  ``max_commits`` = the number of groups, no pause.

Prints wall seconds, CPU seconds and commits of each, the ratio, and checks both tables
read the same rows afterwards. ``python -m tests.bench.maintenance_pass [--batches N]``.
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from calving.commit.catalog import SqlCatalog
from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.maintenance.pacing import DEFAULT_COMMIT_PAUSE_S, Pacer
from calving.commit.spec.partition import spec_builder
from calving.commit.spec.schema import Schema
from calving.commit.spec.transforms import bucket, truncate
from calving.commit.spec.types import LONG, STRING, NestedField
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table, create_table
from calving.ingest.write.parquet_writer import write_data_file
from calving.ingest.write.rewrite import local_rewrite
from tests.bench.figures import Figure

SCHEMA = Schema(
    (
        NestedField(1, "id", LONG, required=True),
        NestedField(2, "name", STRING, required=True),
        NestedField(3, "qty", LONG),
    ),
    identifier_field_ids=(1,),
)


@dataclass(frozen=True)
class Shape:
    batches: int = 23
    keys: int = 5000
    updates_per_batch: int = 220
    seed: int = 20


@dataclass
class PassFigures:
    seconds: float
    cpu_seconds: float
    commits: int
    groups: int
    files_before: int
    files_after: int
    rows: list[tuple[Any, ...]]


def _name(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3)) + "-x"


def build(catalog: SqlCatalog, name: str, shape: Shape) -> Table:
    """The CDC table: ``shape.keys`` inserted over the first batches, then updates
    (delete the old row, insert the new) in every batch."""
    spec = spec_builder(SCHEMA, fields=[("id", bucket(8)), ("name", truncate(4))])
    table = create_table(catalog, ("db", name), SCHEMA, spec=spec)
    rng = random.Random(shape.seed)
    names = {k: _name(rng) for k in range(shape.keys)}
    where: dict[int, tuple[str, int]] = {}  # key -> (file, position)
    inserts = shape.keys // max(1, shape.batches - 1) + 1
    next_key = 0
    for _ in range(shape.batches):
        fresh = list(range(next_key, min(shape.keys, next_key + inserts)))
        next_key += len(fresh)
        old = rng.sample(sorted(where), min(len(where), shape.updates_per_batch))
        rows = [{"id": k, "name": names[k], "qty": rng.randrange(100)} for k in fresh + old]
        deletes: dict[str, Any] = {}
        for k in old:
            path, pos = where[k]
            deletes.setdefault(path, set()).add(pos)
        added = _write(table, rows, where)
        from pyroaring import BitMap64

        table.commit_or_raise(
            RowDelta(
                added_data_files=tuple(added),
                deletes={p: BitMap64(sorted(s)) for p, s in deletes.items()},
            )
        )
    return table


def _write(table: Table, rows: list[dict[str, Any]], where: dict[int, tuple[str, int]]) -> list:
    m = table.metadata
    spec, schema = m.spec, m.schema
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(spec.partition_for(schema, [r["id"], r["name"]]), []).append(r)
    out = []
    for i, (partition, members) in enumerate(sorted(groups.items(), key=lambda kv: repr(kv[0]))):
        location = f"{m.location}/data/{spec.partition_path(schema, partition)}/{time.time_ns()}-{i}.parquet"
        f = write_data_file(
            table.io,
            location,
            pa.Table.from_pylist(members),
            schema,
            partition=partition,
            spec_id=spec.spec_id,
        )
        for pos, r in enumerate(members):
            where[r["id"]] = (f.file_path, pos)
        out.append(f)
    return out


def one_pass(table: Table, policy: CompactionPolicy, pause_s: float) -> PassFigures:
    from tests.support.oracles import pyiceberg_rows

    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu0 = usage.ru_utime + usage.ru_stime
    started = time.monotonic()
    report = compact(
        table,
        policy,
        local_rewrite(table.io, policy.target_file_bytes),
        pacer=Pacer(pause_s=pause_s),
    )
    seconds = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    assert not report.groups_failed, report.groups_failed
    return PassFigures(
        seconds,
        usage.ru_utime + usage.ru_stime - cpu0,
        report.commits,
        report.groups_planned,
        report.files_before,
        report.files_after,
        pyiceberg_rows(table.metadata_location, ["id", "name", "qty"]),
    )


def measure(shape: Shape) -> tuple[PassFigures, PassFigures, int]:
    with tempfile.TemporaryDirectory() as tmp:
        catalog = SqlCatalog("bench", f"sqlite:///{tmp}/catalog.db", f"{tmp}/warehouse")
        catalog.create_namespace(("db",))
        table = build(catalog, "items", shape)
        partitions = len({e.data_file.partition for e in table.live_files().data.values()})
        built = table.metadata
        policy = CompactionPolicy()
        now = one_pass(table, policy, DEFAULT_COMMIT_PAUSE_S)
        _put_back(table, built)
        per_group = replace(policy, max_commits=max(1, now.groups))
        before = one_pass(table, per_group, 0.0)
        assert now.rows == before.rows, "the two passes left different rows"
        return now, before, partitions


def _put_back(table: Table, metadata: Any) -> None:
    """Make ``metadata`` (an earlier state of the table) current again."""
    from calving.commit.spec.metadata import serialize_metadata

    table.refresh()
    location = table.catalog.new_metadata_location(table.ident, table.metadata_location, metadata)
    table.catalog.commit_metadata(
        table.ident, table.metadata_location, location, serialize_metadata(metadata)
    )
    table.refresh()
    assert table.metadata.current_snapshot_id == metadata.current_snapshot_id


def figures(quick: bool = True) -> list[Figure]:
    now, before, partitions = measure(Shape(batches=23 if quick else 46))
    note = (
        f"{partitions} partitions, {now.groups} groups, {now.files_before} files -> "
        f"{now.files_after}; {len(now.rows)} live rows; CPU s {now.cpu_seconds:.2f} vs "
        f"{before.cpu_seconds:.2f}; commits {now.commits} vs {before.commits}"
    )
    return [
        Figure(
            "maintenance_pass",
            "compaction pass, many tiny partitions, s",
            now.seconds,
            "one commit per group",
            before.seconds,
            goal="seconds (< 30 s)",
            met=now.seconds < 30,
            note=note,
        ),
        Figure(
            "maintenance_pass",
            "commits per pass",
            float(now.commits),
            "one commit per group",
            float(before.commits),
            goal="<= max_commits (10)",
            met=now.commits <= 10,
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=Shape.batches)
    ap.add_argument("--keys", type=int, default=Shape.keys)
    args = ap.parse_args()
    now, before, partitions = measure(Shape(batches=args.batches, keys=args.keys))
    print(f"table: {partitions} partitions, {len(now.rows)} live rows, {now.groups} groups")
    print(f"{'':24}{'seconds':>10}{'CPU s':>10}{'commits':>10}{'files':>14}")
    for label, f in (("waves (max_commits=10)", now), ("one commit per group", before)):
        files = f"{f.files_before}->{f.files_after}"
        print(f"{label:24}{f.seconds:>10.2f}{f.cpu_seconds:>10.2f}{f.commits:>10}{files:>14}")
    print(
        f"ratio (per group / waves): wall {before.seconds / now.seconds:.1f}x, "
        f"CPU {before.cpu_seconds / max(now.cpu_seconds, 1e-9):.1f}x"
    )


if __name__ == "__main__":
    main()
