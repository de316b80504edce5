"""Helpers of the maintenance acceptance tests: a pipeline config with a
``[maintenance]`` section, the CLI as a separate process, the stream's per-batch JSON
lines, table health figures, a fresh write of the final rows, and the three readers
over an S3 warehouse."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from calving.commit.table import scan
from calving.commit.table.table import Table
from calving.ingest.catalogs import file_io, open_catalog
from calving.ingest.config.loader import load_config
from calving.ingest.write.parquet_writer import write_data_file
from tests.ingest.test_cli_errors import cli_env
from tests.support.oracles import ALL_READERS, _sorted_rows

CONFIG = """
[source]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
max_offsets_per_trigger = {max_offsets}

[format]
type = "debezium-json"
key_format = "json"

[table]
catalog = "{catalog}"
catalog_name = "{catalog_name}"
{warehouse}
name = "shop.orders"
identifier_fields = ["id"]
partition = ["bucket({buckets}, id)"]
columns = [
  {{ name = "id", type = "long", required = true }},
  {{ name = "status", type = "string" }},
  {{ name = "version", type = "long" }},
]
{table_io}

[sink]
writer_id = "orders"
checkpoint = "{tmp}/checkpoint"
trigger_interval = "200 milliseconds"

[maintenance]
rewrite_on = "{rewrite_on}"
target_file_size_bytes = {target}
min_input_files = 2
snapshot_retention_count = {retain_count}
snapshot_retention_age = "{retain_age}"
{extra}
"""

BUCKETS = 4
TARGET = 16384


def write_config(tmp: Path, name: str = "pipeline.toml", **fields: Any) -> Path:
    """The pipeline's TOML; ``fields`` override the defaults below."""
    values: dict[str, Any] = {
        "bootstrap": "127.0.0.1:1",
        "topic": "t",
        "max_offsets": 20,
        "catalog": f"sqlite:///{tmp}/catalog.db",
        "catalog_name": "calving",
        "warehouse": f'warehouse = "{tmp}/warehouse"',
        "buckets": BUCKETS,
        "table_io": "",
        "tmp": tmp,
        "rewrite_on": "local",
        "target": TARGET,
        "retain_count": 20,
        "retain_age": "1 hour",
        "extra": "",
        **fields,
    }
    path = tmp / name
    path.write_text(CONFIG.format(**values))
    return path


def start(args: list[str], tmp: Path, log_name: str, mutation: str = "") -> subprocess.Popen[str]:
    """``calving ARGS`` as a separate process, its output in ``tmp/log_name``;
    ``mutation``: a deliberately broken build of it (tests.faults.mutated_cli)."""
    from tests.faults.mutations import MUTATION_ENV

    env = cli_env(**({MUTATION_ENV: mutation} if mutation else {}))
    module = "tests.faults.mutated_cli" if mutation else "calving.ingest.launch"
    log = open(tmp / log_name, "w")  # noqa: SIM115 -- the child writes it
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=log, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp,
    )  # fmt: skip


def load_table(config: Path) -> Table:
    cfg = load_config(config)
    io = file_io(cfg.table)
    return Table.load(open_catalog(cfg.table, io), cfg.table.ident, io)


def batch_records(log_text: str) -> list[dict[str, Any]]:
    """The stream's per-batch JSON lines (``calving.metrics`` at INFO, shown by ``-v``)."""
    out = []
    for line in log_text.splitlines():
        _, sep, tail = line.partition("calving.metrics: ")
        if sep and tail.startswith('{"event":"batch"'):
            out.append(json.loads(tail))
    return out


REBUILD_MESSAGES = (
    "rebuilding it from the table",
    "primary-key index: full rebuild",
    "rebuilt the primary-key index",
)


def compactions_committed(lines: Sequence[str]) -> int:
    """Sum of ``committed=N`` over a maintain process's ``compact`` lines."""
    total = 0
    for line in lines:
        words = line.split()
        if words and words[0] == "compact":
            total += sum(int(w.split("=")[1]) for w in words if w.startswith("committed="))
    return total


# ---------------------------------------------------------------- health


def data_files_by_partition(table: Table) -> dict[Any, list[int]]:
    """Live data file sizes per partition."""
    out: dict[Any, list[int]] = {}
    for e in table.live_files().data.values():
        out.setdefault(e.data_file.partition, []).append(e.data_file.file_size_in_bytes)
    return out


def over_bound(table: Table, target: int) -> dict[Any, tuple[int, int]]:
    """Partitions with more than ceil(live bytes / target) + 1 data files."""
    bad = {}
    for part, sizes in data_files_by_partition(table).items():
        bound = math.ceil(sum(sizes) / target) + 1
        if len(sizes) > bound:
            bad[part] = (len(sizes), bound)
    return bad


def files_added_by(table: Table, snapshot_ids: set[int]) -> set[str]:
    live = table.live_files()
    return {
        p
        for p, e in live.data.items()
        if (e.entry.snapshot_id or e.manifest.added_snapshot_id) in snapshot_ids
    }


def stream_dvs_on_rewritten_files(table: Table) -> int:
    """DVs the stream's commits (not ``replace``) added on files a compaction wrote
    (``rewrite-*.parquet``), over the whole retained history: the stream's deletes
    followed rows into rewritten files."""
    from calving.commit.spec.data_file import EntryStatus, FileContent, ManifestContent

    stream_ids = {
        s.snapshot_id for s in table.metadata.snapshots if s.summary.get("operation") != "replace"
    }
    seen: set[str] = set()
    found = 0
    for snap in table.metadata.snapshots:
        for mf in scan.manifest_files(table.io, snap):
            if mf.content != ManifestContent.DELETES or mf.manifest_path in seen:
                continue
            seen.add(mf.manifest_path)
            for e in scan.manifest_entries(table.io, table.metadata, mf):
                df = e.data_file
                added_by = e.snapshot_id or mf.added_snapshot_id
                if (
                    e.status == EntryStatus.ADDED
                    and df.content == FileContent.POSITION_DELETES
                    and "/rewrite-" in (df.referenced_data_file or "")
                    and added_by in stream_ids
                ):
                    found += 1
    return found


def fresh_write_bytes(table: Table, rows: list[tuple[int, str, int]], where: Path) -> int:
    """Bytes calving's writer needs for ``rows`` (sorted by key), one file per bucket."""
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import LongType

    bucket = BucketTransform(BUCKETS).transform(LongType())
    parts: dict[int, list[tuple[int, str, int]]] = {}
    for row in sorted(rows):
        parts.setdefault(bucket(row[0]), []).append(row)
    total = 0
    for b, part in parts.items():
        arrow = pa.table(
            {
                "id": pa.array([r[0] for r in part], pa.int64()),
                "status": [r[1] for r in part],
                "version": pa.array([r[2] for r in part], pa.int64()),
            }
        )
        f = write_data_file(
            table.io, f"{where}/fresh-{b}.parquet", arrow, table.metadata.schema, partition=(b,)
        )
        total += f.file_size_in_bytes
    return total


def files_on_disk(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def reachable_local(table: Table) -> set[str]:
    reached = scan.files_reached(table.io, table.metadata, table.metadata.snapshots)
    return {p.removeprefix("file://") for p in reached}


# ---------------------------------------------------------------- readers on S3


_DATAFUSION_CHILD = """
import json, sys
import pyarrow as pa
from datafusion import SessionContext
from pyiceberg_core.datafusion import IcebergDataFusionTable
location, props, columns = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
ctx = SessionContext()
ctx.register_table("t", IcebergDataFusionTable(
    identifier=["oracle", "t"], metadata_location=location, file_io_properties=props))
cols = ", ".join(f'"{c}"' for c in columns)
table = pa.Table.from_batches(ctx.sql(f"SELECT {cols} FROM t").collect())
print(json.dumps([list(r.values()) for r in table.to_pylist()]))
"""


def s3_readers(props: dict[str, str]) -> dict[str, Any]:
    """pyiceberg, DuckDB (httpfs) and pyiceberg-core reading through the moto server."""

    def pyiceberg(location: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
        from pyiceberg.table import StaticTable

        table = StaticTable.from_metadata(location, properties=props)
        return _sorted_rows(table.scan().to_arrow(), columns)

    def duckdb(location: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
        import os

        import duckdb_extension_httpfs

        from calving.ingest.demo.verify import duckdb_connection

        con = duckdb_connection()
        try:
            base = os.path.join(os.path.dirname(duckdb_extension_httpfs.__file__), "extensions")
            ext = os.path.join(base, max(os.listdir(base)), "httpfs.duckdb_extension")
            con.execute(f"LOAD '{ext}'")
            endpoint = props["s3.endpoint"].removeprefix("http://")
            con.execute(
                "CREATE SECRET moto (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
                "URL_STYLE 'path', USE_SSL false)".replace("?", "'{}'").format(
                    props["s3.access-key-id"],
                    props["s3.secret-access-key"],
                    props["s3.region"],
                    endpoint,
                )
            )
            cols = ", ".join(f'"{c}"' for c in columns)
            table = con.execute(f"SELECT {cols} FROM iceberg_scan('{location}')").to_arrow_table()
        finally:
            con.close()
        return _sorted_rows(table, columns)

    def datafusion(location: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
        # In a child process: the provider holds the GIL while it reads, and the moto
        # server answers from a thread of this process.
        props_s3 = {**props, "s3.path-style-access": "true"}
        done = subprocess.run(
            [sys.executable, "-c", _DATAFUSION_CHILD, location, json.dumps(props_s3),
             json.dumps(list(columns))],
            check=True, capture_output=True, text=True, timeout=120, env=cli_env(),
        )  # fmt: skip
        return sorted(tuple(r) for r in json.loads(done.stdout))

    readers = {"pyiceberg": pyiceberg, "duckdb": duckdb, "datafusion": datafusion}
    assert readers.keys() == ALL_READERS.keys()
    return readers
