"""Fixtures of the deploy tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.fakes import make_fake_spark


@pytest.fixture
def fake_spark(tmp_path: Path) -> dict[str, str]:
    """Environment with SPARK_HOME at a fake that records calls (tests.deploy.fakes)."""
    return make_fake_spark(tmp_path)
