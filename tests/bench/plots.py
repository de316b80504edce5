"""The benchmark report's plots, drawn from the benchmark scripts' JSON (``--json-out``):

* ``commit_latency.json`` -> ``commit-latency.svg``: a 10-file append's commit latency
  against the number of snapshots already in the table, calving and pyiceberg (median,
  with the fastest and slowest sample);
* ``freshness.json`` -> ``freshness-cdf.svg``: the share of records visible within a
  given produce-to-visible latency, per side and produce rate;
* ``cost.json`` -> ``cost-cpu.svg``: CPU-seconds per million records by Spark set-up, per
  kind, for calving, the raw loop and pyiceberg.

Each plot's subtitle says what the run was (sizes, machine, load average), from the JSON.
Headless (matplotlib's Agg backend); the SVG files are reproducible (no date, fixed ids),
so a committed plot can be checked against its committed JSON.

    python -m tests.bench.plots [--data docs/benchmarks/data] [--out docs/benchmarks/img]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from tests.bench import cost, record

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "docs" / "benchmarks" / "data"
IMG = REPO / "docs" / "benchmarks" / "img"
SIDE_STYLE = {
    "calving": {"color": "#1f77b4", "marker": "o"},
    "pyiceberg": {"color": "#d62728", "marker": "s"},
    "raw": {"color": "#7f7f7f", "marker": "^"},
}
RC = {
    "svg.hashsalt": "calving",  # fixed element ids: the same JSON gives the same file
    "svg.fonttype": "none",  # text stays text
    "font.size": 9,
}


def _subtitle(doc: dict[str, Any], what: str) -> str:
    m = doc["machine"]
    return (
        f"{what}; {m['cores']} cores, {m['cpu']}; load average {doc['load_average_1m']:g} "
        f"at the end; pyspark {m['pyspark']}, pyiceberg {m['pyiceberg']}"
    )


def commit_latency(doc: dict[str, Any]) -> Figure:
    params, results = doc["params"], doc["results"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for side in ("calving", "pyiceberg"):
        rows = sorted((r for r in results if r["side"] == side), key=lambda r: r["snapshots"])
        x = [r["snapshots"] for r in rows]
        y = [r["median_ms"] for r in rows]
        low = [r["median_ms"] - min(r["samples_ms"]) for r in rows]
        high = [max(r["samples_ms"]) - r["median_ms"] for r in rows]
        label = "calving (v3)" if side == "calving" else "pyiceberg add_files (v2)"
        ax.errorbar(x, y, yerr=[low, high], label=label, capsize=3, **SIDE_STYLE[side])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("snapshots already in the table")
    ax.set_ylabel("commit latency, ms (median; bars: fastest, slowest)")
    ax.set_title(
        f"Commit latency of a {params['files_per_commit']}-file append against table age",
        fontsize=11,
    )
    what = f"{params['repeat']} commits per size, SQLite catalog"
    fig.text(0.5, 0.005, _subtitle(doc, what), ha="center", va="bottom", fontsize=7)
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return fig


def freshness(doc: dict[str, Any]) -> Figure:
    params, results = doc["params"], doc["results"]
    percents = params["percents"]
    fig, ax = plt.subplots(figsize=(7, 4))
    dashes = ["-", "--", ":", "-."]
    for i, rate in enumerate(sorted({r["rate"] for r in results})):
        for run in (r for r in results if r["rate"] == rate):
            if not run["percentiles"]:
                continue
            label = f"{run['side']} @{rate:,} records/s"
            if run["uncommitted"]:
                label += f" ({run['uncommitted']:,} not committed)"
            ax.plot(
                run["percentiles"],
                [p / 100 for p in percents],
                linestyle=dashes[i % len(dashes)],
                color=SIDE_STYLE[run["side"]]["color"],
                label=label,
            )
    ax.set_xlim(left=0)
    ax.set_xlabel("produce -> visible in a committed snapshot, s")
    ax.set_ylabel("share of records")
    ax.set_ylim(0, 1.01)
    ax.set_title("Freshness: when records become visible", fontsize=11)
    what = (
        f"{params['seconds']:g} s at each rate, trigger {params['trigger']}, "
        f"{params['partitions']} partitions"
    )
    fig.text(0.5, 0.005, _subtitle(doc, what), ha="center", va="bottom", fontsize=7)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def cost_cpu(doc: dict[str, Any]) -> Figure:
    params, results = doc["params"], doc["results"]
    setups = [s for s in params["setups"] if s in results]
    kinds = [k for k in cost.KINDS if any(r["kind"] == k for s in setups for r in results[s])]
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.2 * len(kinds) + 0.6, 4), squeeze=False)
    width = 0.8 / len(cost.SIDES)
    for ax, kind in zip(axes[0], kinds):
        for j, side in enumerate(cost.SIDES):
            values = []
            for setup in setups:
                run = next(r for r in results[setup] if r["kind"] == kind)
                values.append(cost.per_million(run["sides"][side], run["records"]))
            x = [i + (j - 1) * width for i in range(len(setups))]
            ax.bar(x, values, width, label=side, color=SIDE_STYLE[side]["color"])
        ax.set_xticks(range(len(setups)), setups, rotation=30)
        ax.set_title(cost.LABELS[kind], fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("CPU-seconds per million records (whole run)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("CPU per million records by Spark set-up", fontsize=11)
    what = f"about {params['records']:,} Kafka records per run, {params['repeat']} run(s) each"
    fig.text(0.5, 0.005, _subtitle(doc, what), ha="center", va="bottom", fontsize=7)
    return fig


#: JSON file -> (image file, the benchmark named in the JSON, drawing function).
PLOTS: dict[str, tuple[str, str, Callable[[dict[str, Any]], Figure]]] = {
    "commit_latency.json": ("commit-latency.svg", "commit_latency", commit_latency),
    "freshness.json": ("freshness-cdf.svg", "freshness", freshness),
    "cost.json": ("cost-cpu.svg", "cost", cost_cpu),
}


def draw(data: Path, out: Path) -> list[Path]:
    """Every plot whose JSON is in ``data``, as SVG files in ``out``."""
    drawn = []
    out.mkdir(parents=True, exist_ok=True)
    for name, (image, benchmark, plot) in PLOTS.items():
        source = data / name
        if not source.exists():
            continue
        with plt.rc_context(RC):
            fig = plot(record.read(source, benchmark))
            fig.tight_layout(rect=(0, 0.04, 1, 1))
            fig.savefig(out / image, format="svg", metadata={"Date": None})
            plt.close(fig)
        drawn.append(out / image)
    return drawn


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="where the JSON files are")
    ap.add_argument("--out", type=Path, default=IMG, help="where the SVG files go")
    args = ap.parse_args(argv)
    drawn = draw(args.data, args.out)
    if not drawn:
        print(f"no benchmark JSON in {args.data} ({', '.join(PLOTS)})", file=sys.stderr)
        return 1
    for path in drawn:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
