"""Test tiers: every test is ``unit``, ``integration`` or (also integration) ``slow``,
decided by what it starts, and the run's totals per tier.

* Marking (at collection): a test that uses a fixture starting a real component
  (``REAL_FIXTURES``: the Kafka broker, PostgreSQL, Spark, a served catalog, ...) or a
  fixture parameter naming one (``any_catalog[postgres]``: ``REAL_PARAMS``) is marked
  ``integration`` (and ``postgres`` where it is PostgreSQL); every test not marked
  ``integration`` is marked ``unit``, so ``-m unit`` / ``-m "not integration"`` select.
* Checking (while a ``unit`` test runs): starting a process (the broker, Spark's JVM,
  ``calving`` as a command, a shell script) or connecting to PostgreSQL's port is a real
  component; the summary lists such a test (``CALVING_TIER_CHECK=fail`` fails it instead). A ``unit`` test slower than ``UNIT_SECONDS`` and a test slower than
  ``SLOW_SECONDS`` not marked ``slow`` are listed in the summary (durations on a shared
  machine are no test verdict), by their setup and call: a teardown also finalizes the
  module's and session's fixtures (the broker, Spark) after a file's or a worker's last
  test, which is not that test's time.
* Summary (end of the run, also under pytest-xdist): tests and seconds per tier
  (setup + call + teardown, summed over workers), printed and written to the file
  ``CALVING_TIER_SUMMARY`` names (``.ci/run`` prints it last).
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Fixtures that start (or connect to) a real component, by name, and what it is.
REAL_FIXTURES = {
    "broker": "the embedded Kafka broker",
    "orders_broker": "the embedded Kafka broker",
    "pg_url": "PostgreSQL",
    "pg_catalog": "PostgreSQL",
    "spark": "Spark",
    "kafka_spark": "Spark",
    "served": "a calving catalog serve process",
    "rest_server": "a REST catalog server",
    "oauth_server": "an OAuth token server",
    "s3": "a moto S3 server",
    "s3_properties": "a moto S3 server",
    "kafka": "a Kafka broker",
}
# Fixture parameters that select a real component (the fixture reads it at run time with
# request.getfixturevalue, so the fixture closure does not show it).
REAL_PARAMS = {"postgres": "PostgreSQL"}
PG_PORT = 5432
UNIT_SECONDS = 5.0
SLOW_SECONDS = 30.0
TIERS = ("unit", "integration", "slow")
# Programs the standard library runs to answer a question (ctypes.util.find_library,
# platform): no component.
_HELPERS = {"ldconfig", "gcc", "cc", "ld", "objdump", "uname"}


def tier_of(keywords: Any) -> str:
    """The one tier a test counts in: slow, else integration, else unit."""
    if "slow" in keywords:
        return "slow"
    return "integration" if "integration" in keywords else "unit"


def real_components(item: pytest.Item) -> list[str]:
    """What the test's fixtures and fixture parameters start, by name."""
    found = [
        f"{name} ({what})"
        for name, what in REAL_FIXTURES.items()
        if name in getattr(item, "fixturenames", ())
    ]
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for name, value in callspec.params.items():
            if isinstance(value, str) and value in REAL_PARAMS:
                found.append(f"{name}[{value}] ({REAL_PARAMS[value]})")
    return found


class TierPlugin:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.mode = os.environ.get("CALVING_TIER_CHECK", "warn")
        self.watching: str | None = None  # nodeid of the unit test running now
        self.started: list[str] = []  # what the running unit test started
        self.seconds: dict[str, float] = defaultdict(float)
        #: Setup and call (what the test itself took; see the module).
        self.own_seconds: dict[str, float] = defaultdict(float)
        self.tiers: dict[str, str] = {}
        self.violations: list[str] = []
        self.began = time.monotonic()
        sys.addaudithook(self._audit)

    # ------------------------------------------------------------ marking

    @pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            components = real_components(item)
            if components and item.get_closest_marker("integration") is None:
                item.add_marker(pytest.mark.integration)
            postgres = any("PostgreSQL" in c for c in components)
            if postgres and item.get_closest_marker("postgres") is None:
                item.add_marker(pytest.mark.postgres)
            slow = item.get_closest_marker("slow") is not None
            if slow and item.get_closest_marker("integration") is None:
                item.add_marker(pytest.mark.integration)
            if item.get_closest_marker("integration") is None:
                item.add_marker(pytest.mark.unit)

    # ------------------------------------------------------------ checking

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.watching is None:
            return
        if event == "subprocess.Popen":
            program = args[0] if args[0] is not None else (args[1] or [""])[0]
            if Path(os.fsdecode(program)).name not in _HELPERS:
                self.started.append(f"starts a process ({os.fsdecode(program)})")
        elif event in ("os.posix_spawn", "os.spawn", "os.system", "os.exec"):
            self.started.append(f"starts a process ({event})")
        elif event == "socket.connect":
            address = args[1]
            if isinstance(address, tuple) and len(address) >= 2 and address[1] == PG_PORT:
                self.started.append("connects to PostgreSQL")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._watched(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._watched(item))

    def _watched(self, item: pytest.Item) -> Iterator[None]:
        unit = item.get_closest_marker("unit") is not None
        self.watching, self.started = (item.nodeid if unit else None), []
        try:
            result = yield
        finally:
            self.watching = None
        if unit and self.started:
            what = "; ".join(sorted(set(self.started)))
            message = (
                f"{item.nodeid} is marked unit but {what}: mark it "
                "@pytest.mark.integration (tests/support/tiers.py)"
            )
            if self.mode == "fail":
                pytest.fail(message, pytrace=False)
            item.user_properties.append(("tier_violation", message))  # reaches the controller
        return result

    # ------------------------------------------------------------ summary

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        if report.when != "teardown":
            self.own_seconds[report.nodeid] += report.duration
        self.tiers.setdefault(report.nodeid, tier_of(report.keywords))
        if report.when == "teardown":
            for name, value in report.user_properties:
                if name == "tier_violation":
                    self.violations.append(str(value))

    def summary_lines(self) -> list[str]:
        count: dict[str, int] = defaultdict(int)
        total: dict[str, float] = defaultdict(float)
        for nodeid, tier in self.tiers.items():
            count[tier] += 1
            total[tier] += self.seconds[nodeid]
        wall = time.monotonic() - self.began
        lines = [f"test tiers (seconds summed over workers; wall {wall / 60:.1f} min):"]
        for tier in TIERS:
            lines.append(f"  {tier:<12} {count[tier]:>5} tests {total[tier]:>9.1f} s")
        lines.append(f"  {'all':<12} {sum(count.values()):>5} tests {sum(total.values()):>9.1f} s")
        slow_units = sorted(
            (s, n)
            for n, s in self.own_seconds.items()
            if self.tiers.get(n) == "unit" and s > UNIT_SECONDS
        )
        unmarked = sorted(
            (s, n)
            for n, s in self.own_seconds.items()
            if self.tiers.get(n) != "slow" and s > SLOW_SECONDS
        )
        for title, rows in (
            (
                f"unit tests over {UNIT_SECONDS:.0f} s (make them faster or mark them integration)",
                slow_units,
            ),
            (f"tests over {SLOW_SECONDS:.0f} s not marked slow", unmarked),
        ):
            if rows:
                lines.append(f"{title}:")
                lines += [f"  {s:7.1f} s  {n}" for s, n in reversed(rows)]
        if self.violations:
            lines.append("unit tests that started a real component:")
            lines += [f"  {v}" for v in self.violations]
        return lines

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return  # a pytest-xdist worker: the controller sums every worker's reports
        lines = self.summary_lines()
        terminalreporter.write_sep("=", "test tiers")
        for line in lines:
            terminalreporter.write_line(line)
        target = os.environ.get("CALVING_TIER_SUMMARY")
        if target:
            Path(target).write_text("\n".join(lines) + "\n")
