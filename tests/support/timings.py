"""Test files in longest-first order for pytest-xdist, from recorded timings.

``.ci/run`` runs the suite as ``pytest -n 2 --dist loadfile``: each test file goes whole
to one worker, in the order the scheduler's queue holds them. pytest-xdist's own order
puts files with many tests first, so the few-test, many-minute files (the fault
scenarios, the maintenance acceptance, the soak) came last and one worker ran them
alone while the other sat idle. With ``--no-loadscope-reorder`` the queue keeps the
collection order, and this module makes that order longest-first by the seconds each
file took in a recorded run (``tests/timings.json``): the classic longest-processing-
time rule, which keeps the two workers' finishing times within the last short files.

Only the order changes: every collected test still runs. A file the record does not
know is weighted by its test count (``UNKNOWN_SECONDS_PER_TEST`` each), so a new file
neither jumps the queue nor is forgotten.

Re-record after a CI run that wrote a JUnit XML report::

    python -m tests.support.timings /tmp/ci.xml > tests/timings.json
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

TIMINGS = Path(__file__).resolve().parent.parent / "timings.json"
UNKNOWN_SECONDS_PER_TEST = 1.0
ROOT = TIMINGS.parent.parent


class _Item(Protocol):
    @property
    def nodeid(self) -> str: ...


def file_of(nodeid: str) -> str:
    """The test file of a pytest node id (``tests/x/test_y.py::test_z[p]``)."""
    return nodeid.split("::", 1)[0]


def load(path: Path = TIMINGS) -> dict[str, float]:
    """Seconds per test file from the record; empty when there is none."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {str(k): float(v) for k, v in data["seconds"].items()}


def longest_first(items: Sequence[_Item], seconds: Mapping[str, float]) -> list[_Item]:
    """``items`` regrouped by file, files longest first; inside a file the order stays."""
    groups: dict[str, list[_Item]] = {}
    for item in items:
        groups.setdefault(file_of(item.nodeid), []).append(item)

    def weight(name: str) -> float:
        known = seconds.get(name)
        return known if known is not None else UNKNOWN_SECONDS_PER_TEST * len(groups[name])

    # sorted() is stable: equal weights keep the collection order.
    ordered = sorted(groups, key=lambda name: -weight(name))
    return [item for name in ordered for item in groups[name]]


def _file_of_classname(classname: str, root: Path) -> str | None:
    """``tests.x.test_y.TestZ`` -> ``tests/x/test_y.py``: the longest prefix that is a file."""
    parts = classname.split(".")
    for n in range(len(parts), 0, -1):
        candidate = "/".join(parts[:n]) + ".py"
        if (root / candidate).is_file():
            return candidate
    return None


def from_junit(xml_path: Path, root: Path = ROOT) -> dict[str, float]:
    """Seconds per test file (setup + call + teardown, as JUnit records a test case)."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = _file_of_classname(case.get("classname", ""), root)
        if name is not None:
            totals[name] += float(case.get("time", "0") or 0)
    return {k: round(v, 1) for k, v in sorted(totals.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.timings JUNIT.xml > tests/timings.json")
        return 2
    seconds = from_junit(Path(argv[0]))
    record = {
        "about": "seconds per test file in a CI run; tests/support/timings.py orders by it",
        "seconds": seconds,
    }
    print(json.dumps(record, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
