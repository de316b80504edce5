"""The typed table-property accessor: defaults, ranges, and errors naming the property."""

from __future__ import annotations

import pytest

from calving.commit.errors import InvalidTablePropertyError
from calving.commit.spec.properties import KNOWN, TableProperties, validate_properties
from calving.commit.table.committer import RetryPolicy


def test_defaults_are_icebergs() -> None:
    props = TableProperties({})
    assert (props.commit_num_retries, props.commit_min_wait_ms) == (4, 100)
    assert (props.commit_max_wait_ms, props.commit_total_timeout_ms) == (60_000, 1_800_000)
    assert props.manifest_merge_enabled is True
    assert props.manifest_min_count_to_merge == 100
    assert props.manifest_target_size_bytes == 8 * 1024 * 1024
    assert props.target_file_size_bytes == 512 * 1024 * 1024
    assert props.previous_versions_max == 100
    assert props.dv_blobs_per_puffin == 1
    assert props.write_data_path is None


def test_values_are_read_and_typed() -> None:
    props = TableProperties(
        {
            "commit.retry.num-retries": " 7 ",
            "commit.manifest-merge.enabled": "FALSE",
            "write.data.path": "s3://b/t/data/",
        }
    )
    assert props.commit_num_retries == 7
    assert props.manifest_merge_enabled is False
    assert props.write_data_path == "s3://b/t/data"
    assert RetryPolicy.from_properties({"commit.retry.min-wait-ms": "5"}).min_wait_ms == 5


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("commit.retry.num-retries", "abc"),
        ("commit.retry.num-retries", "-1"),
        ("commit.retry.min-wait-ms", "1.5"),
        ("calving.dv.blobs-per-puffin", "0"),
        ("commit.manifest-merge.enabled", "yes"),
        ("commit.manifest.target-size-bytes", "12"),
        ("write.metadata.previous-versions-max", "-3"),
        ("write.data.path", ""),
        ("calving.index.shards", "6"),
        ("calving.index.mode", "executor"),
    ],
)
def test_bad_values_name_the_property_and_the_fix(name: str, value: str) -> None:
    with pytest.raises(InvalidTablePropertyError) as err:
        validate_properties({name: value, "other.engine.setting": "anything"})
    text = str(err.value)
    assert name in text and repr(value) in text
    assert "calving table set-property" in text and "\n" not in text


def test_every_known_property_reads_through_the_accessor() -> None:
    """An accessor for each declared property, so no reader bypasses the definitions."""
    accessors = {
        n for n in dir(TableProperties) if isinstance(getattr(TableProperties, n), property)
    }
    assert len(accessors) == len(KNOWN)
    for name in accessors:
        getattr(TableProperties({}), name)
