"""The ``calving`` command.

    calving demo [--events N] [--warehouse DIR] ...   the embedded default, end to end
    calving run CONFIG.toml [--available-now]          one pipeline from a TOML config
    calving table show NAME (--config F | --catalog URI)

Exit status: 0 on success; 1 when the demo's check fails or the stream stops with an
error; 2 for a usage or configuration error (the message names the key).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from commit.errors import CalvingError, ConfigError

log = logging.getLogger("calving.cli")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="calving", description="Exactly-once Kafka to Apache Iceberg v3 on Spark."
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = p.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo",
        help="embedded broker + CDC generator + Spark stream + read-back check",
        description="Start a Tansu broker on a free loopback port, stream a Debezium-style "
        "CDC topic into an Iceberg v3 table in a SQLite catalog, show live progress, then "
        "read the table back with pyiceberg (and DuckDB) and compare it with the "
        "generator's final state. Exits 1 on any mismatch.",
    )
    demo.add_argument("--events", type=_positive, default=100_000, help="change events (100000)")
    demo.add_argument("--keys", type=_positive, help="distinct order ids (events / 5)")
    demo.add_argument("--partitions", type=_positive, default=4, help="topic partitions (4)")
    demo.add_argument("--poison", type=_non_negative, default=5,
                      help="undecodable records, expected in the dead-letter table (5)")  # fmt: skip
    demo.add_argument("--warehouse", type=Path, default=Path("warehouse"),
                      help="warehouse directory: catalog.db, tables, checkpoints (./warehouse)")  # fmt: skip
    demo.add_argument("--max-offsets-per-trigger", type=_positive, default=20_000)
    demo.add_argument("--trigger-interval", default="1 second")
    demo.add_argument("--timeout", type=float, default=1800.0, help="seconds before giving up")
    demo.add_argument("--no-progress", action="store_true", help="no live progress line")

    run = sub.add_parser("run", help="run a pipeline from a TOML config")
    run.add_argument("config", type=Path)
    run.add_argument("--available-now", action="store_true",
                     help="commit everything available now, then stop")  # fmt: skip

    table = sub.add_parser("table", help="inspect tables")
    table_sub = table.add_subparsers(dest="table_command", required=True)
    show = table_sub.add_parser("show", help="snapshots, files, DVs, ledger")
    show.add_argument("name", help='"namespace.table"')
    where = show.add_mutually_exclusive_group()
    where.add_argument("--config", type=Path, help="take the catalog from this pipeline config")
    where.add_argument("--catalog", help="catalog URI (default: $CALVING_CATALOG)")
    show.add_argument("--catalog-name", default="calving")
    show.add_argument("--snapshots", type=_positive, default=10, help="newest snapshots listed")
    show.add_argument("--files", action="store_true", help="list every live data file")
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Spark's Python workers must run this interpreter (it has calving's dependencies).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        if args.command == "demo":
            return _demo(args)
        if args.command == "run":
            return _run(args)
        return _table_show(args)
    except ConfigError as exc:
        print(f"calving: configuration error: {exc}", file=sys.stderr)
        return 2
    except CalvingError as exc:
        print(f"calving: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _demo(args: argparse.Namespace) -> int:
    from ingest.demo.run import DemoOptions, report, run_demo

    logging.getLogger("calving").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    result = run_demo(
        DemoOptions(
            warehouse=args.warehouse,
            events=args.events,
            keys=args.keys,
            partitions=args.partitions,
            poison=args.poison,
            max_offsets_per_trigger=args.max_offsets_per_trigger,
            trigger_interval=args.trigger_interval,
            timeout=args.timeout,
            progress=not args.no_progress,
        )
    )
    report(result)
    return 0 if result.ok else 1


def _run(args: argparse.Namespace) -> int:
    from ingest.config.loader import load_config
    from ingest.pipeline import build_pipeline

    logging.getLogger("calving").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    config = load_config(args.config)
    pipeline = build_pipeline(config)
    log.info("streaming %s into %s as writer %s", config.source.spark_options().get(
        "subscribe", "the configured topics"), pipeline.table.name, config.sink.writer_id)  # fmt: skip
    pipeline.run(available_now=args.available_now)
    return 0


def _table_show(args: argparse.Namespace) -> int:
    from commit.catalog.base import parse_ident
    from commit.table.table import Table
    from ingest.catalogs import file_io, open_catalog
    from ingest.show import describe_table

    if args.config is not None:
        from ingest.config.loader import load_config

        table_cfg = load_config(args.config).table
        io = file_io(table_cfg)
        catalog = open_catalog(table_cfg, io)
    else:
        uri = args.catalog or os.environ.get("CALVING_CATALOG")
        if not uri:
            raise ConfigError("--catalog: give a catalog URI, --config, or set CALVING_CATALOG")
        from commit.catalog.filesystem import FilesystemCatalog
        from commit.catalog.sql import SqlCatalog
        from commit.io import FileIO

        io = FileIO()
        catalog = (
            FilesystemCatalog(uri, name=args.catalog_name, io=io)
            if uri.startswith("file:") or "://" not in uri
            else SqlCatalog(args.catalog_name, uri, None, io=io)
        )
    table = Table.load(catalog, parse_ident(args.name), io)
    print(describe_table(table, snapshots=args.snapshots, files=args.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
