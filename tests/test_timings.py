"""The longest-first order of test files (tests/support/timings.py): files regrouped and
sorted by recorded seconds, unknown files weighted by their test count, and the record
read back from a JUnit XML report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.support import timings


@dataclass(frozen=True)
class Item:
    nodeid: str


def ids(items: list[Item]) -> list[str]:
    return [i.nodeid for i in items]


def test_files_go_longest_first_and_keep_their_inner_order() -> None:
    items = [
        Item("tests/a.py::t1"),
        Item("tests/b.py::t1"),
        Item("tests/a.py::t2[x]"),
        Item("tests/c.py::t1"),
        Item("tests/b.py::t2"),
    ]
    ordered = timings.longest_first(items, {"tests/a.py": 3.0, "tests/b.py": 300.0})
    # c.py is unknown: one test at UNKNOWN_SECONDS_PER_TEST (1 s) goes after a.py (3 s).
    assert ids(ordered) == [
        "tests/b.py::t1",
        "tests/b.py::t2",
        "tests/a.py::t1",
        "tests/a.py::t2[x]",
        "tests/c.py::t1",
    ]
    assert sorted(ids(ordered)) == sorted(ids(items))  # nothing dropped or doubled


def test_an_unknown_file_is_weighted_by_its_test_count() -> None:
    items = [Item(f"tests/new.py::t{i}") for i in range(50)] + [Item("tests/old.py::t")]
    ordered = timings.longest_first(items, {"tests/old.py": 20.0})
    assert ordered[0].nodeid == "tests/new.py::t0"  # 50 tests x 1 s > 20 s


def test_equal_weights_keep_the_collection_order() -> None:
    items = [Item("tests/z.py::t"), Item("tests/y.py::t"), Item("tests/x.py::t")]
    assert ids(timings.longest_first(items, {})) == ids(items)


def test_the_record_is_read_from_a_junit_report(tmp_path: Path) -> None:
    (tmp_path / "tests" / "pkg").mkdir(parents=True)
    (tmp_path / "tests" / "pkg" / "test_one.py").write_text("")
    (tmp_path / "tests" / "test_two.py").write_text("")
    report = tmp_path / "junit.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.pkg.test_one" name="a" time="1.25"/>'
        '<testcase classname="tests.pkg.test_one.TestGroup" name="b" time="2.5"/>'
        '<testcase classname="tests.test_two" name="c" time="0.5"/>'
        '<testcase classname="somewhere.else" name="d" time="9"/>'
        "</testsuite></testsuites>"
    )
    assert timings.from_junit(report, tmp_path) == {
        "tests/pkg/test_one.py": 3.8,
        "tests/test_two.py": 0.5,
    }
    record = tmp_path / "timings.json"
    record.write_text(json.dumps({"seconds": {"tests/test_two.py": 0.5}}))
    assert timings.load(record) == {"tests/test_two.py": 0.5}
    assert timings.load(tmp_path / "missing.json") == {}


def test_the_checked_in_record_names_test_files_that_exist() -> None:
    seconds = timings.load()
    assert len(seconds) > 100, "tests/timings.json is missing or nearly empty"
    gone = [name for name in seconds if not (timings.ROOT / name).is_file()]
    assert gone == [], f"re-record tests/timings.json (tests/support/timings.py): {gone}"
