"""``[maintenance] inline_compact_files``: its default, its floor at ``min_input_files``
(below it a compaction would plan no group), 0 to turn it off, and a bad value refused in
one line naming the key."""

from __future__ import annotations

import pytest

from calving.ingest.config.maintenance import DEFAULT_INLINE_COMPACT_FILES

from .documents import cdc, edit, error_of, parse


def test_inline_compaction_by_file_count_is_on_by_default():
    config = parse(edit(cdc(), "maintenance.inline", True)).maintenance
    assert config.inline_compact_files == DEFAULT_INLINE_COMPACT_FILES == 8
    assert config.compact_files_threshold == 8


@pytest.mark.parametrize(
    ("files", "min_input", "threshold"), [(0, 5, 0), (3, 5, 5), (5, 2, 5), (12, 5, 12)]
)
def test_the_threshold_is_off_at_0_and_never_below_min_input_files(files, min_input, threshold):
    doc = edit(cdc(), "maintenance.inline_compact_files", files)
    doc = edit(doc, "maintenance.min_input_files", min_input)
    assert parse(doc).maintenance.compact_files_threshold == threshold


@pytest.mark.parametrize("value", [-1, "many", 2.5])
def test_a_bad_value_is_one_line_naming_the_key(value):
    message = error_of(edit(cdc(), "maintenance.inline_compact_files", value))
    assert "maintenance.inline_compact_files" in message and "\n" not in message, message
