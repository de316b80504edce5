"""``python -m tests.bench [--quick|--full] [-k NAME ...]``: the benchmark suite.

Runs every benchmark's ``figures(quick)`` in turn (those whose name contains one of the
``-k`` strings, if given) and prints the machine it ran on and one table of every figure:
calving's value beside a peer measured in the same run, their ratio, the goal and whether
it is met. A benchmark that fails shows as "not measured" with its error in the notes,
and the others still run; the exit status is then 1. ``--quick`` (the default) takes a
few minutes on a 2-core machine; ``--full`` runs the sizes quoted in the README.

Benchmarks report; they never fail on a missed goal (the table says NO).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence

from tests.bench.figures import Figure, render
from tests.bench.record import machine

FiguresFn = Callable[[bool], list[Figure]]


def _lazy(module: str) -> FiguresFn:
    """``module.figures``, imported only when the benchmark runs (an import error then
    counts as that benchmark's failure, not the suite's)."""

    def run(quick: bool) -> list[Figure]:
        return importlib.import_module(module).figures(quick)

    return run


#: Name -> figures(quick). Cheap, Spark-free benchmarks first.
BENCHMARKS: dict[str, FiguresFn] = {
    "commit_latency": _lazy("tests.bench.commit_latency"),
    "cdc_upsert": _lazy("tests.bench.cdc_upsert"),
    "changes": _lazy("tests.bench.changes"),
    "lineage_cost": _lazy("tests.bench.lineage_cost"),
    "rest_catalog": _lazy("tests.bench.rest_catalog"),
    "decode_debezium": _lazy("tests.bench.decode_debezium"),
    "index": _lazy("tests.bench.index_bench"),
    "index_rebuild": _lazy("tests.bench.index_rebuild"),
    "index_sharded": _lazy("tests.bench.index_sharded"),
    "shard_steps": _lazy("tests.bench.shard_steps"),
    "maintenance": _lazy("tests.bench.maintenance"),
    "maintenance_pass": _lazy("tests.bench.maintenance_pass"),
    "throughput": _lazy("tests.bench.throughput"),
    "freshness": _lazy("tests.bench.freshness"),
    "worker_start": _lazy("tests.bench.worker_start"),
    "many_tables": _lazy("tests.bench.many_tables"),
    "many_tables_start": _lazy("tests.bench.many_tables_start"),
    "many_tables_memory": _lazy("tests.bench.many_tables_memory"),
    # Issue 22's initial-snapshot figure, so ``-k many_tables`` runs it.
    "many_tables_snapshot": _lazy("tests.bench.snapshot"),
    "cost": _lazy("tests.bench.cost"),
    "soak": _lazy("tests.bench.soak"),
}


def selected(names: Sequence[str], benchmarks: Mapping[str, FiguresFn]) -> list[str]:
    if not names:
        return list(benchmarks)
    return [b for b in benchmarks if any(n in b for n in names)]


def _error_text(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def run(
    names: Sequence[str],
    quick: bool,
    benchmarks: Mapping[str, FiguresFn] = BENCHMARKS,
) -> tuple[list[Figure], list[str]]:
    """Every figure of the selected benchmarks, and the names of those that failed."""
    figures: list[Figure] = []
    failed: list[str] = []
    chosen = selected(names, benchmarks)
    for i, name in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            got = benchmarks[name](quick)
        except Exception as error:  # noqa: BLE001 - reported in the table, suite goes on
            traceback.print_exc(file=sys.stderr)
            failed.append(name)
            figures.append(Figure(name, "not measured", None, note=_error_text(error)))
            status = "FAILED"
        else:
            figures.extend(got)
            status = f"{len(got)} figures"
        print(
            f"[{i}/{len(chosen)}] {name}: {status} in {time.monotonic() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return figures, failed


def machine_line() -> str:
    m = machine()
    return (
        f"machine: {m['cores']} cores, "
        + (f"{m['ram_gib']:.1f} GiB RAM, " if m["ram_gib"] is not None else "")
        + f"{m['cpu']}; Python {m['python']}, "
        f"pyspark {m['pyspark']}, pyiceberg {m['pyiceberg']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick")
    mode.add_argument("--full", action="store_const", dest="mode", const="full")
    parser.add_argument(
        "-k", action="append", default=[], metavar="NAME", help="only benchmarks containing NAME"
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(BENCHMARKS))
        return 0
    quick = args.mode != "full"
    if not selected(args.k, BENCHMARKS):
        parser.error(f"no benchmark matches {args.k}; known: {', '.join(BENCHMARKS)}")
    started = time.monotonic()
    try:
        figures, failed = run(args.k, quick, BENCHMARKS)
    finally:
        streaming = sys.modules.get("tests.bench.streaming")
        if streaming is not None:
            streaming.shutdown()
    elapsed = time.monotonic() - started
    print(machine_line())
    print(f"mode: {'quick' if quick else 'full'}; {elapsed:.0f} s")
    print()
    print(render(figures))
    if failed:
        print(f"\nnot measured (failed): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
