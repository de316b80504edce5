"""A deletion vector's manifest entry names its data file twice: in
``referenced_data_file`` (the spec's field for DVs) and as the lower and upper bound of
the position-delete ``file_path`` column (field 2147483546), as file-scoped position
delete files do. pyiceberg 0.12 matches delete files to data files by those bounds
only: without them it hands every DV of a partition to every data file task of that
partition (and reads each of them), with them each task gets its own DV. The three
readers read the same rows either way."""

from __future__ import annotations

import pytest
from pyroaring import BitMap64

from calving.commit.spec.data_file import ManifestContent
from calving.commit.spec.deletion_vector import DELETE_FILE_PATH_FIELD_ID
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.table import scan
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import RowDelta
from tests.support.oracles import ALL_READERS
from tests.support.tables import COLUMNS, make_table, row, rows_as_tuples, write_partitioned

pytestmark = pytest.mark.integration


def test_each_dv_is_bounded_to_its_data_file_and_pyiceberg_applies_it_alone(sqlite_catalog):
    from pyiceberg.table import StaticTable

    table = make_table(sqlite_catalog, "bounded", spec=UNPARTITIONED)
    files = []
    for f in range(4):  # four files in the one partition
        rows = [row(f * 100 + i) for i in range(10)]
        ((data_file, members),) = write_partitioned(table, rows)
        files.append((data_file, members))
    table.commit_or_raise(FastAppend(tuple(f for f, _ in files)))
    deleted = {f.file_path: BitMap64([i, i + 1]) for i, (f, _) in enumerate(files)}
    table.commit_or_raise(RowDelta(deletes=deleted))

    snapshot = table.metadata.current_snapshot
    dvs = [
        e.data_file
        for mf in scan.manifest_files(table.io, snapshot)
        if mf.content == ManifestContent.DELETES
        for e in scan.manifest_entries(table.io, table.metadata, mf)
    ]
    assert len(dvs) == 4
    for dv in dvs:
        assert dv.referenced_data_file is not None
        want = {DELETE_FILE_PATH_FIELD_ID: dv.referenced_data_file.encode()}
        assert dv.lower_bounds == want and dv.upper_bounds == want

    tasks = list(StaticTable.from_metadata(table.metadata_location).scan().plan_files())
    assert len(tasks) == 4
    for task in tasks:
        (dv,) = task.delete_files  # its own DV, not the partition's four
        assert dv.lower_bounds[DELETE_FILE_PATH_FIELD_ID] == task.file.file_path.encode()

    expected = [
        r
        for i, (_, members) in enumerate(files)
        for p, r in enumerate(members)
        if p not in (i, i + 1)
    ]
    for name, reader in ALL_READERS.items():
        assert reader(table.metadata_location, COLUMNS) == rows_as_tuples(expected), name
