"""Table maintenance beside a live CDC stream: inline passes vs none vs a fresh table.

Two tables start identical (``rows`` keys, ``id`` long primary key, in files of a
quarter of the table each) and receive the very same ``commits`` CDC batches through
calving's commit path (``tests.bench.cdc_stream``: upserts and deletes, mostly on a hot
set of 1 % of the keys), interleaved commit by commit. After each of its commits, the
*maintained* stream calls ``Maintainer.after_batch()`` (a pass of every job, within a
time budget, at most every ``interval`` seconds), or runs a pass every ``every``
commits; the *unmaintained* one does nothing. A *fresh* table of the final rows is then
written in one commit. Policy: the target file size is the base table's file size (a
quarter of the table), snapshots kept: the last ``retain_last``, no age-based retention.

Figures (CPU-seconds of this process, all threads, beside every wall time):

* DuckDB (``iceberg_scan``, aggregates over every column) and pyiceberg (``to_arrow``)
  full scans of the maintained and the unmaintained table against the fresh one;
* commit latency (median of a window) at the last commit against commit 10;
* the stream's rows/s with maintenance on (its time included) against off;
* bytes on disk under each table's location against the fresh table;
* rewrites that Iceberg's rule would fail vs calving's actual failures, from a separate
  stream with interleaved compaction (``tests.bench.maintenance_concurrent``).

Every table is checked with DuckDB and pyiceberg (row count and ``sum(v)``) against the
model. ``--json PATH`` writes the figures (``Figure`` fields plus ratio) and details.

    python -m tests.bench.maintenance [--rows 1000000] [--commits 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from typing import Any

from calving.commit.maintenance.policy import JOBS
from tests.bench.figures import Figure, at_least, at_most, render
from tests.bench.maintenance_concurrent import ConcurrencyResult
from tests.bench.maintenance_run import Params, Result, Timed, log, run

GOAL_SCAN = 1.3
GOAL_LATENCY_GROWTH = 1.2
GOAL_THROUGHPUT = 0.85
GOAL_STORAGE = 1.5

# ---------------------------------------------------------------- figures


def _cpu(label: str, *timed: tuple[str, Timed]) -> str:
    return f"{label} CPU-s: " + ", ".join(f"{n} {t.cpu:.2f} (wall {t.wall:.2f})" for n, t in timed)


def _scan_figures(r: Result) -> list[Figure]:
    out = []
    for reader, by in r.scans.items():
        fresh = by["fresh"]
        for name in ("maintained", "unmaintained"):
            t = by[name]
            slowdown = t.wall / fresh.wall
            goal = name == "maintained"
            out.append(
                Figure(
                    "maintenance",
                    f"{reader} full scan, {name} table, ms",
                    t.wall * 1000,
                    "fresh table, same rows",
                    fresh.wall * 1000,
                    goal=f"<= {GOAL_SCAN}x fresh" if goal else "",
                    met=at_most(slowdown, GOAL_SCAN) if goal else None,
                    note=f"{slowdown:.2f}x the fresh table; "
                    + _cpu("scan", (name, t), ("fresh", fresh)),
                )
            )
    return out


def _latency_figures(r: Result) -> list[Figure]:
    last = f"at_{r.params.commits}"
    on, off = r.latency_ms["on"], r.latency_ms["off"]
    growth_on, growth_off = on[last] / on["at_10"], off[last] / off["at_10"]
    w = r.params.window
    return [
        Figure(
            "maintenance",
            f"commit latency @{r.params.commits} commits (median of {w}), ms",
            on[last],
            "maintenance off",
            off[last],
            note=f"@10 commits: on {on['at_10']:.1f} ms, off {off['at_10']:.1f} ms; CPU ms "
            f"@10 / @{r.params.commits}: on {on['cpu_at_10']:.1f} / {on['cpu_' + last]:.1f}, "
            f"off {off['cpu_at_10']:.1f} / {off['cpu_' + last]:.1f}; a commit includes refresh, "
            "index catch-up after a pass, lookup, Parquet write, RowDelta",
        ),
        Figure(
            "maintenance",
            f"commit latency growth 10->{r.params.commits} commits, x",
            growth_on,
            "maintenance off",
            growth_off,
            goal=f"on <= {GOAL_LATENCY_GROWTH}x",
            met=at_most(growth_on, GOAL_LATENCY_GROWTH),
        ),
    ]


def _throughput_figures(r: Result) -> list[Figure]:
    spent_on = r.on.wall + r.maintenance.wall
    rate_on, rate_off = r.rows_on / spent_on, r.rows_off / r.off.wall
    share = rate_on / rate_off
    return [
        Figure(
            "maintenance",
            "stream rows/s, maintenance on (its time included)",
            rate_on,
            "maintenance off",
            rate_off,
            better="higher",
            goal=f">= {GOAL_THROUGHPUT}x off",
            met=at_least(share, GOAL_THROUGHPUT),
            note=f"{r.passes} passes took {r.maintenance.wall:.1f} s wall, "
            f"{r.maintenance.cpu:.1f} CPU-s; "
            + _cpu("stream", ("on commits", r.on), ("off commits", r.off)),
        )
    ]


def _storage_figures(r: Result) -> list[Figure]:
    fresh = r.storage["fresh"]
    out = []
    for name in ("maintained", "unmaintained"):
        s = r.storage[name]
        amp = s["total"] / fresh["total"]
        goal = name == "maintained"
        files = (s.get("data", 0) + s.get("deletes", 0)) / fresh.get("data", 1)
        parts = ", ".join(f"{k} {v / 1e6:.1f}" for k, v in s.items() if k != "total")
        out.append(
            Figure(
                "maintenance",
                f"bytes on disk, {name} table, MB",
                s["total"] / 1e6,
                "fresh table, same rows",
                fresh["total"] / 1e6,
                goal=f"<= {GOAL_STORAGE}x fresh" if goal else "",
                met=at_most(amp, GOAL_STORAGE) if goal else None,
                note=f"{amp:.2f}x the fresh table ({files:.2f}x in data and delete files); "
                f"MB by kind: {parts}",
            )
        )
    return out


def _concurrency_figures(c: ConcurrencyResult) -> list[Figure]:
    attempted = max(1, c.rewrites_attempted)
    calving = 100 * c.rewrites_failed / attempted
    iceberg = 100 * c.iceberg_would_fail / attempted
    return [
        Figure(
            "maintenance",
            f"rewrites failed beside the stream, % of {c.rewrites_attempted}",
            calving,
            "Iceberg's rule (a delete reached an input)",
            iceberg,
            goal="calving 0 %",
            met=c.rewrites_failed == 0 and c.stream_failures == 0,
            note=f"{c.passes} compaction passes over {c.commits} stream commits; "
            f"{c.deletes_carried} deletes carried onto new files; {c.stream_commits_moved} "
            f"stream commits had deletes moved through a rewrite's position map; stream "
            f"commits failed: {c.stream_failures}"
            + (f"; first failure: {c.failures[0]}" if c.failures else ""),
        )
    ]


def to_figures(r: Result) -> list[Figure]:
    out = _scan_figures(r) + _latency_figures(r) + _throughput_figures(r) + _storage_figures(r)
    if r.concurrent is not None:
        out += _concurrency_figures(r.concurrent)
    return out


def to_json(r: Result, figures: list[Figure]) -> dict[str, Any]:
    """The figures (``Figure`` fields plus ``ratio``) and the raw measurements."""
    return {
        "benchmark": "maintenance",
        "params": dataclasses.asdict(r.params),
        "target_file_bytes": r.target_file_bytes,
        "figures": [{**dataclasses.asdict(f), "ratio": f.ratio} for f in figures],
        "stream": {
            "on_commits": dataclasses.asdict(r.on),
            "maintenance": dataclasses.asdict(r.maintenance),
            "off_commits": dataclasses.asdict(r.off),
            "rows_on": r.rows_on,
            "rows_off": r.rows_off,
            "passes": r.passes,
            "latency_ms": r.latency_ms,
        },
        "scans_s": {
            reader: {n: dataclasses.asdict(t) for n, t in by.items()}
            for reader, by in r.scans.items()
        },
        "storage_bytes": r.storage,
        "concurrent": dataclasses.asdict(r.concurrent) if r.concurrent else None,
        "passes": r.pass_lines,
    }


def _write_json(r: Result, figures: list[Figure], path: str | None) -> None:
    if path is None:
        path = os.path.join(tempfile.gettempdir(), "calving-bench-maintenance.json")
    with open(path, "w") as f:
        json.dump(to_json(r, figures), f, indent=2)
    log(f"figures written to {path}")


QUICK = Params(rows=100_000, commits=100, batch_rows=500, every=10, concurrent_commits=60)


def figures(
    quick: bool, params: Params | None = None, json_path: str | None = None
) -> list[Figure]:
    r = run(params or (QUICK if quick else Params()))
    out = to_figures(r)
    _write_json(r, out, json_path)
    return out


def main(argv: list[str] | None = None) -> None:
    d = Params()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=d.rows)
    ap.add_argument("--commits", type=int, default=d.commits)
    ap.add_argument("--batch-rows", type=int, default=d.batch_rows, help="keys per commit")
    ap.add_argument(
        "--every", type=int, default=d.every, help="a pass every K commits (0: after_batch)"
    )
    ap.add_argument("--interval", type=float, default=d.interval_s, help="after_batch interval, s")
    ap.add_argument("--budget", type=float, default=d.budget_s, help="time budget of a pass, s")
    ap.add_argument("--retain-last", type=int, default=d.retain_last)
    ap.add_argument("--scan-repeat", type=int, default=d.scan_repeat)
    ap.add_argument("--concurrent-commits", type=int, default=d.concurrent_commits, help="0: skip")
    ap.add_argument("--concurrent-every", type=int, default=d.concurrent_every)
    ap.add_argument("--jobs", default=",".join(JOBS), help="the jobs of a pass")
    ap.add_argument("--json", default=None, help="write the figures here as JSON")
    args = ap.parse_args(argv)
    p = Params(
        rows=args.rows, commits=args.commits, batch_rows=args.batch_rows, every=args.every,
        interval_s=args.interval, budget_s=args.budget, retain_last=args.retain_last,
        scan_repeat=args.scan_repeat, concurrent_commits=args.concurrent_commits,
        concurrent_every=args.concurrent_every, jobs=tuple(args.jobs.split(",")),
    )  # fmt: skip
    r = run(p)
    out = to_figures(r)
    print(render(out))
    _write_json(r, out, args.json)


if __name__ == "__main__":
    main()
