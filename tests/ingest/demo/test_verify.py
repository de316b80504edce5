"""The demo's read-back comparison must catch missing, extra and duplicated rows."""

from __future__ import annotations

from calving.ingest.demo.verify import compare


def test_equal_multisets_pass() -> None:
    r = compare("r", [(2, "b"), (1, "a")], [(1, "a"), (2, "b")])
    assert r.ok and r.rows == 2 and not r.examples


def test_missing_extra_and_duplicated_rows_fail() -> None:
    r = compare("r", [(1, "a"), (1, "a"), (3, "c")], [(1, "a"), (2, "b")])
    assert not r.ok
    assert r.missing == 1 and r.unexpected == 2
    assert "missing (2, 'b')" in r.examples
    assert "unexpected (1, 'a')" in r.examples and "unexpected (3, 'c')" in r.examples
