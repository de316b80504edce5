"""``[maintenance] inline_compact_files``: between two interval passes, an inline
compaction (that job alone) runs after a batch as soon as a partition of the table, as
the stream's coordinator holds it, has that many small files; it does not count as the
interval's pass, and it never runs below the threshold or with the threshold off.
Real SQLite catalog, real local rewrites, the three readers on the result."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.table import Table
from calving.ingest.catalogs import ensure_table, file_io, open_catalog
from calving.ingest.config.loader import load_config
from calving.ingest.maintain import Maintainer, build_maintainer
from tests.support import maintenance_acceptance as m
from tests.support.oracles import ALL_READERS
from tests.support.tables import write_partitioned

pytestmark = pytest.mark.integration

BUCKETS = 2
COLUMNS = ["id", "status", "version"]


def _appends(
    table: Table, count: int, first: int = 0, buckets: int = BUCKETS
) -> list[tuple[int, str, int]]:
    """``count`` appends of one small file in each of the first ``buckets`` buckets."""
    rows: list[tuple[int, str, int]] = []
    for b in range(first, first + count):
        batch = [(b * 1000 + i, f"s{i}", b) for i in range(20)]
        written = write_partitioned(table, [dict(zip(COLUMNS, r)) for r in batch])
        assert len(written) == BUCKETS
        kept = written[:buckets]
        rows += [tuple(r[c] for c in COLUMNS) for _, members in kept for r in members]
        table.commit_or_raise(FastAppend(tuple(f for f, _ in kept)))
    return rows


def _setup(tmp_path: Path, extra: str) -> tuple[Table, Maintainer]:
    tmp_path.mkdir(exist_ok=True)
    config = m.write_config(
        tmp_path, buckets=BUCKETS, extra=f'inline = true\ninline_interval = "1 hour"\n{extra}'
    )
    cfg = load_config(config)
    io = file_io(cfg.table)
    stream = ensure_table(open_catalog(cfg.table, io), io, cfg.table)
    maintainer = build_maintainer(cfg, local=True)
    maintainer.stream_metadata = lambda: stream.metadata
    return stream, maintainer


def _files_per_bucket(table: Table) -> list[int]:
    counts: dict[object, int] = {}
    for e in table.refresh().live_files().data.values():
        counts[e.data_file.partition] = counts.get(e.data_file.partition, 0) + 1
    return sorted(counts.values())


def test_a_compaction_runs_once_a_partition_has_the_threshold_of_small_files(tmp_path):
    stream, maintainer = _setup(tmp_path, "inline_compact_files = 4")
    # The first batch's pass is the interval's (none ran yet): all jobs.
    rows = _appends(stream, 1)
    first = maintainer.after_batch()
    assert first is not None and [j.job for j in first.jobs] == list(maintainer.config.policy.jobs)
    interval_started = maintainer.last_started

    rows += _appends(stream, 2, first=1)  # 3 small files a bucket: below 4
    assert maintainer.after_batch() is None

    rows += _appends(stream, 1, first=3)  # 4 a bucket: due
    report = maintainer.after_batch()
    assert report is not None and [j.job for j in report.jobs] == ["compact"]
    summary = report.summary()
    assert report.ok and summary["groups_committed"] == BUCKETS and summary["commits"] == 1
    assert maintainer.last_started == interval_started  # the interval's clock is untouched
    assert _files_per_bucket(maintainer.table) == [1] * BUCKETS

    # The stream's view is stale until its next commit; once it has caught up, no
    # partition is due any more.
    stream.refresh()
    assert maintainer.after_batch() is None
    table = maintainer.table.refresh()
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == sorted(rows), name


def test_the_threshold_is_at_least_min_input_files_and_0_turns_it_off(tmp_path):
    stream, maintainer = _setup(tmp_path / "a", "inline_compact_files = 0")
    _appends(stream, 1)
    assert maintainer.after_batch() is not None  # the interval's first pass
    _appends(stream, 6, first=1)
    assert maintainer.after_batch() is None
    assert _files_per_bucket(maintainer.table) == [7] * BUCKETS

    # min_input_files = 2 in the acceptance config: raised to 5 here, 3 files are not due.
    stream, maintainer = _setup(tmp_path / "b", "inline_compact_files = 3")
    maintainer.config = dataclasses.replace(
        maintainer.config,
        policy=dataclasses.replace(
            maintainer.config.policy,
            compaction=dataclasses.replace(maintainer.config.policy.compaction, min_input_files=5),
        ),
    )
    assert maintainer.config.compact_files_threshold == 5
    _appends(stream, 1)
    assert maintainer.after_batch() is not None
    _appends(stream, 3, first=1)
    assert maintainer.after_batch() is None
    _appends(stream, 1, first=4)
    report = maintainer.after_batch()
    assert report is not None and [j.job for j in report.jobs] == ["compact"]


def test_only_the_partitions_that_made_it_due_are_compacted(tmp_path):
    stream, maintainer = _setup(tmp_path, "inline_compact_files = 4")
    rows = _appends(stream, 1)
    assert maintainer.after_batch() is not None  # the interval's first pass
    rows += _appends(stream, 2, first=1)  # 3 small files in each bucket
    rows += _appends(stream, 1, first=3, buckets=1)  # a 4th in one bucket only
    report = maintainer.after_batch()
    assert report is not None and report.summary()["groups_committed"] == 1
    # The due bucket is one file; the other keeps its 3 (min_input_files = 2 would have
    # rewritten them in a pass of the interval).
    assert _files_per_bucket(maintainer.table) == [1, 3]
    table = maintainer.table.refresh()
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == sorted(rows), name
