"""The streaming fault families (Spark drivers of one-table streams killed at commit
points, a frozen broker, two drivers sharing a writer id, re-split replays, the broken
stream build): the ``stream`` shard of ``tests.faults.quick``."""

from __future__ import annotations

import pytest

from tests.faults.quick import check_scenario, params
from tests.faults.scenarios import Scenario

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("scenario", params("stream"))
def test_scenario(scenario: Scenario, request: pytest.FixtureRequest, tmp_path) -> None:
    check_scenario(scenario, request, tmp_path)
