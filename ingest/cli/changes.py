"""``calving changes``: a table's change feed between two snapshots, as JSON lines or
Parquet.

    calving changes NAME --from SNAPSHOT_OR_TIME [--to SNAPSHOT_OR_TIME]
                    (--config F | --catalog URI) [--format jsonl|parquet] [--output PATH] [--net]

JSON lines go to standard output unless ``--output`` names a file; Parquet needs
``--output``. Each JSON line is one change: the table's columns (timestamps and dates
in ISO-8601, decimals as strings, binary as hex, NaN and infinities as the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` as Spark's ``to_json`` writes them, so
every line is strict JSON), then ``_change_type``,
``_change_ordinal``, ``_commit_snapshot_id`` and ``_row_id``. A summary line goes to
standard error: the changes by type and the snapshots read.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import json
import math
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from calving.commit.changelog import Bound, parse_bound
from calving.commit.errors import ChangeFeedError, ConfigError


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "changes",
        help="a table's changes between two snapshots (Iceberg changelog columns)",
        description="Every row inserted, deleted or updated after --from up to --to, with "
        "_change_type, _change_ordinal, _commit_snapshot_id and _row_id. Reads only what "
        "the range added: its manifests, deletion vectors and data files.",
    )
    p.add_argument("name", help='"namespace.table"')
    p.add_argument("--from", dest="start", required=True, metavar="SNAPSHOT_OR_TIME",
                   help="start (excluded): a snapshot id, an ISO-8601 time, or 'earliest'")  # fmt: skip
    p.add_argument("--to", dest="end", metavar="SNAPSHOT_OR_TIME",
                   help="end (included): a snapshot id or an ISO-8601 time (the current snapshot)")  # fmt: skip
    where = p.add_mutually_exclusive_group()
    where.add_argument("--config", type=Path, help="take the catalog from this pipeline config")
    where.add_argument("--catalog", help="catalog URI (default: $CALVING_CATALOG)")
    p.add_argument("--catalog-name", default="calving")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    p.add_argument("--output", type=Path, help="write here instead of standard output")
    p.add_argument("--net", action="store_true", help="one change per row over the range")


def main(args: argparse.Namespace, secrets: Any) -> int:
    from calving.change_feed import changes

    if args.format == "parquet" and args.output is None:
        raise ConfigError("--output: Parquet output needs a file (--output PATH)")
    if args.config is not None:
        secrets.add_config_file(args.config)
    if args.catalog is not None:
        secrets.add_url(args.catalog)
    start = None if args.start.strip().lower() == "earliest" else _bound("--from", args.start)
    end = None if args.end is None else _bound("--to", args.end)
    out = changes(
        args.name,
        start,
        end,
        net=args.net,
        catalog=args.catalog,
        config=args.config,
        catalog_name=args.catalog_name,
    )
    if args.format == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(out, args.output)
    elif args.output is not None:
        with args.output.open("w", encoding="utf-8") as f:
            write_jsonl(out, f)
    else:
        write_jsonl(out, sys.stdout)
    print(summary(out), file=sys.stderr)
    return 0


def _bound(option: str, text: str) -> Bound:
    try:
        return parse_bound(text)
    except ChangeFeedError as err:
        raise ConfigError(f"{option}: {err}") from None


def summary(out: pa.Table) -> str:
    kinds = Counter(out.column("_change_type").to_pylist())
    snapshots = len(set(out.column("_commit_snapshot_id").to_pylist()))
    parts = [f"{kinds[k]:,} {k}" for k in ("INSERT", "DELETE", "UPDATE_BEFORE", "UPDATE_AFTER")]
    return f"changes: {out.num_rows:,} rows ({', '.join(parts)}) from {snapshots} snapshot(s)"


def _json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if hasattr(value, "isoformat"):  # pandas Timestamp (nanosecond columns)
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"no JSON form for {type(value).__name__}")


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by its name."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _line(row: dict[str, Any]) -> str:
    try:
        return json.dumps(row, default=_json_value, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere: rare, so looked for only then
        return json.dumps(_finite(row), default=_json_value, ensure_ascii=False, allow_nan=False)


def write_jsonl(out: pa.Table, sink: IO[str]) -> None:
    for batch in out.to_batches(max_chunksize=4096):
        for row in batch.to_pylist():
            sink.write(_line(row))
            sink.write("\n")
