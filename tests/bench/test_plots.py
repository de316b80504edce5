"""The benchmark report's plots (tests.bench.plots) on the recorded runs in
docs/benchmarks/data/: each plot shows its JSON's values, and each committed SVG in
docs/benchmarks/img/ is exactly what its committed JSON draws (so a plot cannot drift
from its data). No benchmark runs here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pytest

from tests.bench import cost, plots, record


def _recorded(name: str) -> dict[str, Any]:
    _, benchmark, _ = plots.PLOTS[name]
    return record.read(plots.DATA / name, benchmark)


def test_every_plot_has_its_recorded_run_and_committed_image() -> None:
    for name, (image, _, _) in plots.PLOTS.items():
        assert (plots.DATA / name).is_file(), f"docs/benchmarks/data/{name} is missing"
        assert (plots.IMG / image).is_file(), f"docs/benchmarks/img/{image} is missing"


def test_the_committed_images_are_drawn_from_the_committed_json(tmp_path: Path) -> None:
    drawn = plots.draw(plots.DATA, tmp_path)
    assert sorted(p.name for p in drawn) == sorted(image for image, _, _ in plots.PLOTS.values())
    for path in drawn:
        committed = plots.IMG / path.name
        assert path.read_bytes() == committed.read_bytes(), (
            f"{committed.name} differs from what its JSON draws: run python -m tests.bench.plots"
        )


def test_commit_latency_plots_the_medians_and_sample_ranges() -> None:
    doc = _recorded("commit_latency.json")
    fig = plots.commit_latency(doc)
    ax = fig.axes[0]
    # errorbar() returns a container per side: its label, and the line of the medians.
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    for side, label in (("calving", "calving (v3)"), ("pyiceberg", "pyiceberg add_files (v2)")):
        rows = sorted(
            (r for r in doc["results"] if r["side"] == side), key=lambda r: r["snapshots"]
        )
        x, y = lines[label].get_data()
        assert list(x) == [r["snapshots"] for r in rows]
        assert list(y) == pytest.approx([r["median_ms"] for r in rows])
    plt.close(fig)


def test_freshness_plots_a_cdf_per_side_and_rate() -> None:
    doc = _recorded("freshness.json")
    fig = plots.freshness(doc)
    lines = [line for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")]
    runs = [r for r in doc["results"] if r["percentiles"]]
    assert len(lines) == len(runs)
    shares = [p / 100 for p in doc["params"]["percents"]]
    for line, run in zip(lines, sorted(runs, key=lambda r: r["rate"])):
        x, y = line.get_data()
        assert list(x) == pytest.approx(run["percentiles"])
        assert list(y) == pytest.approx(shares)
        assert list(x) == sorted(x), "a CDF's latencies grow with the share"
    plt.close(fig)


def test_cost_plots_cpu_per_million_by_setup() -> None:
    doc = _recorded("cost.json")
    fig = plots.cost_cpu(doc)
    setups = [s for s in doc["params"]["setups"] if s in doc["results"]]
    for ax in fig.axes:
        kind = next(k for k, label in cost.LABELS.items() if label == ax.get_title())
        heights = [bar.get_height() for bar in ax.patches]
        expected = [
            cost.per_million(run["sides"][side], run["records"])
            for side in cost.SIDES
            for run in (next(r for r in doc["results"][s] if r["kind"] == kind) for s in setups)
        ]
        assert heights == pytest.approx(expected)
    plt.close(fig)


def test_a_run_of_another_benchmark_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cost.json").write_text(json.dumps({"benchmark": "freshness"}))
    with pytest.raises(ValueError, match="not a cost run"):
        plots.draw(tmp_path, tmp_path / "img")


def test_no_json_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert plots.main(["--data", str(tmp_path), "--out", str(tmp_path / "img")]) == 1
    assert "no benchmark JSON" in capsys.readouterr().err
