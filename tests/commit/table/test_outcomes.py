"""``done_or_raise``: the one place a commit outcome becomes an exception."""

from __future__ import annotations

import pytest

from calving.commit.errors import CommitConflictError, CommitStateUnknownError
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table.outcomes import Committed, Conflicted, Skipped, Unknown, done_or_raise


def _metadata() -> TableMetadata:
    return TableMetadata.__new__(TableMetadata)  # never read: only passed through


def test_committed_and_skipped_are_returned_as_they_are():
    committed = Committed(_metadata(), "file:///t/v2.json", 7, attempts=1)
    skipped = Skipped(_metadata(), "file:///t/v1.json", reason="offsets replayed")
    assert done_or_raise(committed) is committed
    assert done_or_raise(skipped, "batch 3") is skipped


def test_conflicted_raises_its_validation_error_unchanged():
    error = CommitConflictError("file a.parquet was rewritten")
    with pytest.raises(CommitConflictError) as raised:
        done_or_raise(Conflicted(error, attempts=2), "batch 3")
    assert raised.value is error


def test_unknown_raises_state_unknown_named_by_what():
    error = CommitStateUnknownError("catalog did not answer")
    with pytest.raises(CommitStateUnknownError, match=r"^batch 3: catalog did not answer$"):
        done_or_raise(Unknown(error, attempted_location=None), "batch 3")
    with pytest.raises(CommitStateUnknownError) as raised:
        done_or_raise(Unknown(error, attempted_location=None))
    assert raised.value is error
