"""The ``calving`` command.

    calving demo [--events N] [--warehouse DIR] ...   the embedded default, end to end
    calving run CONFIG.toml [--available-now]          one pipeline from a TOML config
    calving maintain CONFIG.toml [--once | --every DURATION] [--dry-run] [--local]
    calving catalog serve (--config F | --catalog URL --warehouse W) [--host H] [--port N]
    calving table show (NAME | --writer ID) (--config F | --catalog URI)
    calving changes NAME --from SNAPSHOT_OR_TIME [--to ...] (--config F | --catalog URI)
    calving table set-property NAME KEY VALUE / unset-property NAME KEY (same options)

Exit status: 0 on success (also after SIGTERM, to calving alone or to its process group:
the query stops between batches, the Spark JVM runs in a session of its own); 1 when
the demo's check fails or the stream stops with an error; 2 for a usage or configuration
error (the message names the key); 130 on Ctrl-C (the first one stops the query between
batches like SIGTERM, a second one stops at once). An error ends in one line,
``calving: error: <root cause>`` (the full traceback with ``-v``), never showing a value
that came from ``${env:...}`` or a URL's password.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from calving import __version__
from calving.commit.errors import ConfigError
from calving.ingest.errors import Secrets, report_error
from calving.ingest.worker_python import use_this_python

log = logging.getLogger("calving.cli")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="calving", description="Exactly-once Kafka to Apache Iceberg v3 on Spark."
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    p.add_argument("--version", action="version", version=f"calving {__version__}")
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
    demo.add_argument("--tables", type=_positive,
                      help="whole-database CDC instead: N tables (customers, orders, order "
                      "lines in multi-table transactions, N-3 plain ones) from one pipeline, "
                      "checked across tables after every commit")  # fmt: skip
    demo.add_argument("--transactions", type=_positive, default=3000,
                      help="with --tables: source transactions (3000)")  # fmt: skip

    run = sub.add_parser("run", help="run a pipeline from a TOML config")
    run.add_argument("config", type=Path)
    run.add_argument("--available-now", action="store_true",
                     help="commit everything available now, then stop")  # fmt: skip

    maintain = sub.add_parser(
        "maintain", help="compact, expire, remove orphans: the table of a pipeline config"
    )
    maintain.add_argument("config", type=Path)
    when = maintain.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one pass, then exit (the default)")
    when.add_argument("--every", type=_duration, metavar="DURATION",
                      help='a pass every DURATION ("10 minutes") until SIGTERM or Ctrl-C')  # fmt: skip
    maintain.add_argument("--dry-run", action="store_true", help="plan and report; change nothing")
    maintain.add_argument("--local", action="store_true",
                          help="rewrite in this process, without Spark")  # fmt: skip
    maintain.add_argument("--metrics-port", type=int, metavar="PORT",
                          help="serve the maintenance figures at http://HOST:PORT/metrics "
                          "(HOST: [metrics] host; 0: a free port)")  # fmt: skip

    table = sub.add_parser("table", help="inspect tables")
    table_sub = table.add_subparsers(dest="table_command", required=True)
    show = table_sub.add_parser("show", help="snapshots, files, DVs, ledger")
    show.add_argument("name", nargs="?", help='"namespace.table"')
    show.add_argument("--writer", metavar="ID",
                      help="instead of one table: every table of this writer_id, a line each")  # fmt: skip
    where = show.add_mutually_exclusive_group()
    where.add_argument("--config", type=Path, help="take the catalog from this pipeline config")
    where.add_argument("--catalog", help="catalog URI (default: $CALVING_CATALOG)")
    show.add_argument("--catalog-name", default="calving")
    show.add_argument("--snapshots", type=_positive, default=10, help="newest snapshots listed")
    show.add_argument("--files", action="store_true", help="list every live data file")
    from calving.ingest.table_admin import add_parsers as add_table_admin

    add_table_admin(table_sub)  # set-property, unset-property
    from calving.ingest.catalog_serve import add_parsers as add_catalog_serve

    add_catalog_serve(sub)  # catalog serve
    from calving.ingest.cli.changes import add_parsers as add_changes

    add_changes(sub)  # changes
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text}")
    return value


def _duration(text: str) -> float:
    from calving.ingest.config.runtime import interval_seconds

    try:
        seconds = interval_seconds(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'expected a duration such as "30 seconds" or "10 minutes", got {text!r}'
        ) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {text!r}")
    return seconds


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    secrets = Secrets()
    _setup_logging(args.verbose, secrets)
    # Spark's Python workers must run this interpreter (it has calving's dependencies).
    use_this_python()
    try:
        if args.command == "demo":
            return _demo(args)
        if args.command == "run":
            return _run(args, secrets)
        if args.command == "maintain":
            return _maintain(args, secrets)
        if args.command == "changes":
            from calving.ingest.cli.changes import main as changes

            return changes(args, secrets)
        if args.command == "catalog":
            from calving.ingest.catalog_serve import main as catalog_serve

            return catalog_serve(args, secrets)
        if args.table_command in ("set-property", "unset-property"):
            from calving.ingest.table_admin import main as table_admin

            return table_admin(args)
        return _table_show(args, secrets)
    except KeyboardInterrupt:
        print("calving: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 -- every error ends in one line naming its cause
        return report_error(exc, verbose=args.verbose, secrets=secrets)
    finally:
        for handler in logging.getLogger().handlers:
            handler.removeFilter(secrets.log_filter)


def _setup_logging(verbose: bool, secrets: Secrets) -> None:
    """Python logging for the command: WARNING for everything (py4j, pyspark, kafka
    ...), calving's own loggers at DEBUG with ``-v``. py4j at DEBUG would print every
    gateway command, Spark settings and source options included, in clear."""
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(secrets.log_filter)
    logging.getLogger("calving").setLevel(logging.DEBUG if verbose else logging.WARNING)
    if not verbose:
        # py4j logs a failed foreachBatch call at ERROR with its whole traceback; the
        # one-line root cause says it (``-v`` shows it).
        logging.getLogger("py4j").setLevel(logging.CRITICAL)


def _demo(args: argparse.Namespace) -> int:
    from calving.ingest.demo.run import DemoOptions, report, run_demo

    logging.getLogger("calving").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if args.tables is not None:
        from calving.ingest.demo.many import ManyDemoOptions, report_many, run_many_demo

        many = run_many_demo(
            ManyDemoOptions(
                warehouse=args.warehouse,
                tables=args.tables,
                transactions=args.transactions,
                partitions=args.partitions,
                trigger_interval=args.trigger_interval,
                timeout=args.timeout,
            )
        )
        report_many(many)
        return 0 if many.ok else 1
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


def _run(args: argparse.Namespace, secrets: Secrets) -> int:
    """SIGTERM sets a flag: the query stops between batches and the command exits 0.
    Ctrl-C does the same but exits 130; a second Ctrl-C interrupts at once."""
    logging.getLogger("calving").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    secrets.add_config_file(args.config)
    stop = threading.Event()
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    try:
        _run_pipeline(args, stop, interrupted)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted.is_set():
        raise KeyboardInterrupt
    return 0


def _interrupt_handler(stop: threading.Event, interrupted: threading.Event) -> Any:
    """Replaces pyspark's SIGINT handler, which cancels every job and raises
    KeyboardInterrupt inside whatever py4j call is running (a reentrant socket read
    that logs tracebacks); the first Ctrl-C now asks for a stop between batches."""

    def handler(_signum: int, _frame: Any) -> None:
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        stop.set()

    return handler


def _run_pipeline(
    args: argparse.Namespace, stop: threading.Event, interrupted: threading.Event
) -> None:
    from calving.ingest.config.loader import load_config
    from calving.ingest.pipeline import build_pipeline, quiet_query_errors

    config = load_config(args.config)
    pipeline = build_pipeline(config)
    signal.signal(signal.SIGINT, _interrupt_handler(stop, interrupted))
    pipeline.stop_requested = stop
    if not args.verbose:
        quiet_query_errors(pipeline.spark)
    log.info("streaming %s into %s as writer %s", config.source.spark_options().get(
        "subscribe", "the configured topics"), pipeline.sink.description, config.sink.writer_id)  # fmt: skip
    if not stop.is_set():
        pipeline.run(available_now=args.available_now)
    if stop.is_set() and not interrupted.is_set():
        last = pipeline.last_batch_id
        where = f"after batch {last}" if last is not None else "before any batch"
        if pipeline.abandoned is not None:
            # Not committed: the next run takes the batch again (exactly once).
            where += f"; the batch in flight was abandoned ({pipeline.abandoned})"
        print(f"calving: stopped on SIGTERM {where}", file=sys.stderr)


def _maintain(args: argparse.Namespace, secrets: Secrets) -> int:
    """SIGTERM or Ctrl-C stops ``--every`` between passes (exit 0, or 1 when the last
    pass had a failed job)."""
    from calving.ingest.config.loader import load_config
    from calving.ingest.config.preflight import validate_before_create
    from calving.ingest.maintain import run_command
    from calving.ingest.pipeline import spark_session

    logging.getLogger("calving").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    secrets.add_config_file(args.config)
    config = load_config(args.config)
    validate_before_create(config)
    stop = threading.Event()
    handlers = {
        sig: signal.signal(sig, lambda _signum, _frame: stop.set())
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        return run_command(
            config,
            every_s=args.every,
            dry_run=args.dry_run,
            local=args.local,
            stop=stop,
            spark_factory=lambda: _maintain_session(spark_session(config.spark), args, stop),
            out=lambda line: print(line, flush=True),
            metrics_port=args.metrics_port,
        )
    finally:
        for sig, previous in handlers.items():
            signal.signal(sig, previous)


def _maintain_session(spark: Any, args: argparse.Namespace, stop: threading.Event) -> Any:
    from calving.ingest.pipeline import quiet_query_errors

    # The new session replaced the SIGINT handler with pyspark's: put ours back.
    signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    if not args.verbose:
        quiet_query_errors(spark)
    return spark


def _table_show(args: argparse.Namespace, secrets: Secrets) -> int:
    if (args.name is None) == (args.writer is None):
        raise ConfigError("table show: give a table NAME or --writer ID (one of them)")
    from calving.commit.catalog.base import parse_ident
    from calving.commit.table.table import Table
    from calving.ingest.catalogs import check_catalog_exists, file_io, open_catalog
    from calving.ingest.show import describe_table

    if args.config is not None:
        from calving.ingest.config.loader import load_config

        secrets.add_config_file(args.config)
        config = load_config(args.config)
        table_cfg = config.table
        # Health is judged against the pipeline's own [maintenance] target.
        target = config.maintenance.policy.compaction.target_file_bytes
        check_catalog_exists(table_cfg.catalog, "table.catalog")
        io = file_io(table_cfg)
        catalog = open_catalog(table_cfg, io)
    else:
        target = None
        uri = args.catalog or os.environ.get("CALVING_CATALOG")
        if not uri:
            raise ConfigError("--catalog: give a catalog URI, --config, or set CALVING_CATALOG")
        from calving.commit.io import FileIO
        from calving.ingest.catalogs import open_catalog_uri

        secrets.add_url(uri)
        io = FileIO()
        catalog = open_catalog_uri(uri, args.catalog_name, io)
    if args.writer is not None:
        from calving.ingest.show_writer import describe_writer

        print(describe_writer(catalog, io, args.writer, target))
        return 0
    table = Table.load(catalog, parse_ident(args.name), io)
    print(
        describe_table(table, snapshots=args.snapshots, files=args.files, target_file_bytes=target)
    )
    return 0
