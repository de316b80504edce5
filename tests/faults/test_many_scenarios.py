"""The many-table fault family (a Spark driver replicating routed tables SIGKILLed at
commit points, SQLite and PostgreSQL, and the broken per-table-swaps build): the
``many`` shard of ``tests.faults.quick``."""

from __future__ import annotations

import pytest

from tests.faults.quick import check_scenario, params
from tests.faults.scenarios import Scenario

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("scenario", params("many"))
def test_scenario(scenario: Scenario, request: pytest.FixtureRequest, tmp_path) -> None:
    check_scenario(scenario, request, tmp_path)
