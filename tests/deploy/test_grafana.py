"""deploy/grafana/calving.json against the metrics calving serves: every series a panel or
a template variable queries is in ``calving.ingest.metrics.METRICS`` (read at test time,
so new series need no change here) with the suffix its type allows (a histogram only as
``_bucket`` / ``_sum`` / ``_count``), and every label the queries match or group by is
one of those series' labels."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from calving.ingest.metrics import METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "calving.json"
BASE_LABELS = frozenset({"table", "writer_id"})
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_SERIES = re.compile(r"\bcalving_[a-z0-9_]+\b")
_MATCHERS = re.compile(r"\b(calving_[a-z0-9_]+)\s*\{([^}]*)\}")
_GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable."""
    out = []
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r}", target["expr"]))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            out.append(
                (f"variable {var['name']}", query["query"] if isinstance(query, dict) else query)
            )
    return out


def metric_of(series: str) -> tuple[str, str]:
    """The METRICS name a series belongs to, and the problem with it ("" if none)."""
    if series in METRICS:
        kind = METRICS[series][0]
        if kind == "histogram":
            return series, f"{series} is a histogram: query _bucket, _sum or _count"
        return series, ""
    for suffix in HISTOGRAM_SUFFIXES:
        base = series.removesuffix(suffix)
        if base != series and base in METRICS:
            if METRICS[base][0] != "histogram":
                return base, f"{series}: {base} is a {METRICS[base][0]}, it has no {suffix}"
            return base, ""
    return series, f"{series} is not a metric calving serves (calving.ingest.metrics.METRICS)"


def labels_of(name: str) -> frozenset[str]:
    extra = frozenset(METRICS[name][1]) if name in METRICS else frozenset()
    return BASE_LABELS | extra | ({"le"} if METRICS.get(name, ("",))[0] == "histogram" else set())


def problems(dashboard: dict[str, Any]) -> list[str]:
    found = []
    for where, expr in queries(dashboard):
        names = set()
        for series in _SERIES.findall(expr):
            name, problem = metric_of(series)
            names.add(name)
            if problem:
                found.append(f"{where}: {problem}")
        allowed = frozenset().union(*(labels_of(n) for n in names)) if names else frozenset()
        for series, matchers in _MATCHERS.findall(expr):
            used = {m.split("=")[0].rstrip("!~").strip() for m in matchers.split(",") if m.strip()}
            for label in sorted(used - labels_of(metric_of(series)[0])):
                found.append(f"{where}: {series} has no label {label!r}")
        for grouping in _GROUPING.findall(expr):
            for label in sorted({g.strip() for g in grouping.split(",")} - allowed - {""}):
                found.append(f"{where}: grouped by {label!r}, a label none of its series has")
        if "label_values(" not in expr and not names:
            found.append(f"{where}: queries no calving series")
    return found


def test_every_query_names_a_metric_calving_serves_with_its_labels() -> None:
    assert not problems(_dashboard())


def test_the_dashboard_covers_each_kind_of_figure() -> None:
    queried = {metric_of(s)[0] for _, e in queries(_dashboard()) for s in _SERIES.findall(e)}
    for name in (
        "calving_records_total",
        "calving_batches_total",
        "calving_commits_total",
        "calving_commit_duration_seconds",
        "calving_batch_duration_seconds",
        "calving_freshness_seconds",
        "calving_kafka_lag_records",
        "calving_dead_letters_total",
        "calving_index_bytes",
        "calving_commit_retries_total",
        "calving_commit_conflicts_total",
    ):
        assert name in queried, name


def test_panels_are_well_formed() -> None:
    dashboard = _dashboard()
    panels = list(_panels(dashboard["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "table", "writer_id"} <= variables
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] != "row":
            assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel[
                "title"
            ]
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)), panel["title"]


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("rate(calving_commit_duration_seconds[5m])", "is a histogram"),
        ("rate(calving_records_total_bucket[5m])", "is a counter, it has no _bucket"),
        ("calving_no_such_series", "is not a metric calving serves"),
        ('calving_index_keys{topic="x"}', "has no label 'topic'"),
        ("sum by (partition) (calving_records_total)", "grouped by 'partition'"),
        ("up", "queries no calving series"),
    ],
)
def test_a_wrong_query_is_caught(expr: str, problem: str) -> None:
    broken = {
        "panels": [{"id": 1, "title": "t", "targets": [{"expr": expr}]}],
        "templating": {"list": []},
    }
    found = problems(broken)
    assert any(problem in p for p in found), found


def test_the_queries_of_a_sound_dashboard_pass() -> None:
    sound = {
        "panels": [
            {
                "id": 1,
                "title": "t",
                "targets": [
                    {
                        "expr": "histogram_quantile(0.9, sum by (le, table) "
                        '(rate(calving_batch_duration_seconds_bucket{table=~"$table"}[5m])))'
                    },
                    {"expr": 'sum by (topic, partition) (calving_kafka_lag_records{topic="o"})'},
                ],
            }
        ],
        "templating": {"list": []},
    }
    assert problems(sound) == []
