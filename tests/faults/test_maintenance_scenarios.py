"""The hostile-shape matrix's CI cells (``calving run`` beside ``calving maintain
--every`` or inline maintenance, see ``tests.faults.maintenance_matrix``) and its broken
build, which must fail the stream: the ``maintenance`` shard of ``tests.faults.quick``."""

from __future__ import annotations

import pytest

from tests.faults.quick import check_scenario, params
from tests.faults.scenarios import Scenario

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("scenario", params("maintenance"))
def test_scenario(scenario: Scenario, request: pytest.FixtureRequest, tmp_path) -> None:
    check_scenario(scenario, request, tmp_path)
