"""The fault scenarios CI runs (``tests.faults.quick``): this file runs the commit-layer
shard (crash points on each catalog, replays, lost replies, the concurrency matrix's
small cells and one large one, the deliberately broken builds, which the checker must
catch, maintenance passes killed at every commit point beside streaming writers and the
rewrite carry-over, see ``tests.faults.maintenance``) and checks that the quick subset
covers every family; test_stream_scenarios.py and test_many_scenarios.py run the Spark
shards (see ``tests.faults.streaming`` and ``tests.faults.many_tables``)."""

from __future__ import annotations

import pytest

from tests.faults.quick import QUICK, SHARDS, check_scenario, params, shard_of
from tests.faults.scenarios import Scenario, selected

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("scenario", params("commit"))
def test_scenario(scenario: Scenario, request: pytest.FixtureRequest, tmp_path) -> None:
    check_scenario(scenario, request, tmp_path)


def test_every_scenario_runs_in_one_shard() -> None:
    shards = {name: [s.name for s in QUICK if shard_of(s) == name] for name in SHARDS}
    assert all(shards.values()), shards
    assert sorted(n for names in shards.values() for n in names) == sorted(s.name for s in QUICK)
    assert {s.family for s in QUICK if shard_of(s) == "many"} == {"many-crash", "broken"}


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
    assert {
        "stream-crash",
        "broker-pause",
        "same-writer-id",
        "resplit",
        "reshard-crash",
    } <= families
    crashed = {p for s in QUICK if s.family == "stream-crash" for p in _points(s)}
    assert crashed == QUICK_POINTS
    assert {"after-manifest-list", "before-swap", "after-swap"} <= crashed
    assert "after-swap-before-checkpoint" in crashed
    paused = {s.name for s in QUICK if s.family == "broker-pause"}
    assert any(n.endswith("short-timeouts") for n in paused) and len(paused) >= 2
    every = {s.name.split("/")[1] for s in selected("full") if s.family == "stream-crash"}
    assert set(POINTS) <= every


def _points(s: Scenario) -> list[str]:
    """The crash points of ``family/point[+point...][/variant]``."""
    return s.name.split("/")[1].split("+")


def test_many_table_drivers_die_at_five_points_on_both_catalogs_in_the_ci_subset() -> None:
    from tests.faults.many_tables import POINTS

    crashed = {
        (p, s.name.rsplit("/", 1)[1]) for s in QUICK if s.family == "many-crash" for p in _points(s)
    }
    assert {kind for _, kind in crashed} == {"sqlite", "postgres"}
    assert len({p for p, _ in crashed}) == 5 and {p for p, _ in crashed} <= set(POINTS)
    every = {s.name for s in selected("full") if s.family == "many-crash"}
    assert {f"many-crash/{p}/{k}" for p in POINTS for k in ("sqlite", "postgres")} <= every


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


def test_the_maintenance_matrix_covers_every_shape_cadence_catalog_and_index_mode() -> None:
    from tests.faults.maintenance_matrix import CADENCES, CATALOGS, SHAPES, SHARDED_CADENCES

    names = [s.name.split("/")[1:] for s in selected("full") if s.family == "maintenance-matrix"]
    cells = [n for n in names if len(n) == 3]
    sharded = [tuple(n[:3]) for n in names if len(n) == 4 and n[3] == "sharded"]
    assert len(cells) + len(sharded) == len(names)
    assert {(shape, cadence) for shape, cadence, kind in cells if kind == "sqlite"} == {
        (shape, cadence) for shape in SHAPES for cadence in CADENCES
    }
    assert {(shape, kind) for shape, cadence, kind in cells if cadence == "2s"} == {
        (shape, kind) for shape in SHAPES for kind in CATALOGS
    }
    assert set(sharded) == {(s, c, "sqlite") for s in SHAPES for c in SHARDED_CADENCES}
    assert {"0.5s", "2s", "5s", "inline"} <= set(CADENCES) and len(SHAPES) >= 5
    broken = [s for s in selected("full") if s.name == "broken/maintenance-matrix-counted"]
    assert broken and broken[0].expect_violations and broken[0] in QUICK
    # CI's cells (with test_maintenance_priority.py's bucket x truncate) reach every value,
    # sharded mode included.
    quick = [s.name.split("/")[1:] for s in QUICK if s.family == "maintenance-matrix"]
    for axis, values in enumerate((SHAPES, CADENCES, CATALOGS)):
        seen = {cell[axis] for cell in quick} | {("bucket-x-truncate", "2s", "sqlite")[axis]}
        assert seen == set(values), (axis, seen)
    assert any(cell[3:] == ["sharded"] for cell in quick)


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
