"""The sorted-set helpers agree with NumPy's own set routines on every dtype they see."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calving.commit.spec.sorted_sets import all_distinct, dense_ids, distinct_ids, unique_sorted

DTYPES = [np.uint64, np.int64, np.uint32]


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.integers(0, 2**31), max_size=300),
    spread=st.sampled_from([3, 1000, 2**31]),
    dtype=st.sampled_from(DTYPES),
)
def test_unique_sorted_and_all_distinct_agree_with_numpy(
    values: list[int], spread: int, dtype: type
) -> None:
    array = np.array([v % spread for v in values], dtype)
    got = unique_sorted(array)
    want = np.unique(array)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want)
    assert all_distinct(array) == (len(want) == len(array))


@settings(max_examples=150, deadline=None)
@given(
    ids=st.lists(st.integers(0, 40), max_size=300),
    dtype=st.sampled_from([np.int64, np.uint32]),
)
def test_distinct_and_dense_ids_agree_with_numpy(ids: list[int], dtype: type) -> None:
    array = np.array(ids, dtype)
    want, inverse = np.unique(array, return_inverse=True)
    assert np.array_equal(distinct_ids(array), want)
    used, at = dense_ids(array)
    assert np.array_equal(used, want)
    assert np.array_equal(at, inverse)
    assert np.array_equal(used[at], array)


@pytest.mark.parametrize("array", [np.arange(10), np.array([5, 1, 9]), np.array([1, 2, 2])])
def test_all_distinct_with_and_without_order(array: np.ndarray) -> None:
    assert all_distinct(array) == (len(set(array.tolist())) == len(array))
