"""The tiers plugin (tests/support/tiers.py) on a small suite of its own: marks by
fixture and fixture parameter, the check of unit tests, the totals."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest
from tests.support.tiers import TierPlugin

def pytest_configure(config):
    config.pluginmanager.register(TierPlugin(config), "calving-tiers")

@pytest.fixture
def broker():
    return "a broker"

@pytest.fixture
def uses_broker(broker):
    return broker

@pytest.fixture(params=["sqlite", "postgres"])
def any_catalog(request):
    return request.param
"""

SUITE = """
import subprocess
import pytest

def test_plain():
    pass

def test_through_a_fixture(uses_broker):
    pass

def test_catalog(any_catalog):
    pass

@pytest.mark.slow
def test_long():
    pass

def test_starts_a_process():
    subprocess.run(["true"], check=True)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(
        "[pytest]\nmarkers =\n    unit: u\n    integration: i\n    slow: s\n    postgres: p\n"
    )
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _selected(pytester: pytest.Pytester, expr: str) -> set[str]:
    result = pytester.runpytest("-m", expr, "--collect-only", "-q")
    return {line.split("::")[1] for line in result.outlines if "::" in line}


def test_marks_come_from_fixtures_and_their_parameters(suite: pytest.Pytester) -> None:
    assert _selected(suite, "unit") == {
        "test_plain",
        "test_catalog[sqlite]",
        "test_starts_a_process",
    }
    # integration: the others (test_through_a_fixture, test_catalog[postgres], test_long)
    assert _selected(suite, "postgres") == {"test_catalog[postgres]"}


@pytest.mark.integration  # the inner suite starts a process (`true`), as it must
def test_a_unit_test_that_starts_a_process_is_reported_and_totals_are_printed(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CALVING_TIER_CHECK", "fail")
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_starts_a_process is marked unit but starts a process (true)*",
            "*unit*3 tests*",
            "*integration*2 tests*",
            "*slow*1 tests*",
        ]
    )
    monkeypatch.setenv("CALVING_TIER_CHECK", "warn")
    monkeypatch.setenv("CALVING_TIER_SUMMARY", str(suite.path / "tiers.txt"))
    result = suite.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    summary = (suite.path / "tiers.txt").read_text()
    assert "unit tests that started a real component:" in summary
    assert "test_starts_a_process is marked unit but starts a process (true)" in summary


TEARDOWN_SUITE = """
import time
import pytest

@pytest.fixture(scope="session")
def slow_to_stop():
    yield
    time.sleep(0.6)  # a session fixture stopped after the last test (Spark, the broker)

def test_first(slow_to_stop):
    pass

def test_sleeps():
    time.sleep(0.6)

def test_last():
    pass
"""


def test_a_units_listed_time_is_its_own_not_the_fixtures_finalized_after_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support import tiers

    pytester.makeini("[pytest]\nmarkers =\n    unit: u\n    integration: i\n    slow: s\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_teardown=TEARDOWN_SUITE)
    monkeypatch.setattr(tiers, "UNIT_SECONDS", 0.4)
    monkeypatch.setenv("CALVING_TIER_SUMMARY", str(pytester.path / "tiers.txt"))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    summary = (pytester.path / "tiers.txt").read_text()
    listed = summary.split("unit tests over", 1)[1]
    assert "test_sleeps" in listed
    assert "test_last" not in listed and "test_first" not in listed  # the fixture's stop
    total = float(summary.split("\n  all", 1)[1].split()[2])
    assert total >= 1.2  # the totals still count both sleeps, the teardown's included
