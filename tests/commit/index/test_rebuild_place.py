"""``rebuild_place``: the one rule both index modes use for where a rebuild runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from calving.commit.index.rebuild_place import driver_rebuild_rows


def _snapshot(**summary: str) -> Any:
    return SimpleNamespace(summary=summary)


@pytest.mark.parametrize(
    ("summary", "threshold", "expected"),
    [
        ({"total-records": "9999999"}, None, 9_999_999),  # below the 10M default
        ({"total-records": "10000000"}, None, None),  # at it: the executors
        ({"total-records": "10000001", "total-position-deletes": "2"}, None, 9_999_999),
        ({"total-records": "3"}, "4", 3),
        ({"total-records": "4"}, "4", None),
        ({"total-records": "0"}, "0", None),  # 0: every rebuild on the executors
        ({"operation": "append"}, None, None),  # no totals: unknown size, the executors
        ({"total-records": "x"}, None, None),
    ],
)
def test_a_small_snapshot_is_rebuilt_in_the_driver(
    summary: dict[str, str], threshold: str | None, expected: int | None
) -> None:
    props = {} if threshold is None else {"calving.index.executor-rebuild-rows": threshold}
    assert driver_rebuild_rows(props, _snapshot(**summary)) == expected


def test_no_snapshot_is_an_empty_table() -> None:
    assert driver_rebuild_rows({}, None) == 0
    assert driver_rebuild_rows({"calving.index.executor-rebuild-rows": "0"}, None) is None
