"""The partial reads the change feed uses: a manifest list decoded only for the manifests
one snapshot added, and a manifest without its EXISTING entries (except those whose rows
take inherited ids, so ADDED entries still inherit the same ``first_row_id``s)."""

from __future__ import annotations

from dataclasses import replace

from calving.commit.spec.data_file import (
    DataFile,
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
)
from calving.commit.spec.manifest import inherit, read_manifest
from calving.commit.spec.manifest_list import read_manifest_list, write_manifest_list
from tests.commit.spec.test_manifest import _write as write_manifest
from tests.commit.spec.test_manifest_list import _manifest


def _file(path: str, rows: int, first: int | None) -> DataFile:
    return DataFile(FileContent.DATA, path, "PARQUET", (1, None), rows, 100, first_row_id=first)


def test_a_manifest_without_its_existing_entries() -> None:
    entries = [
        ManifestEntry(EntryStatus.EXISTING, 3, 2, 2, _file("e1", 10, 500)),
        ManifestEntry(EntryStatus.ADDED, 9, None, None, _file("a1", 4, None)),
        ManifestEntry(EntryStatus.EXISTING, 3, 2, 2, _file("e2-no-id", 7, None)),
        ManifestEntry(EntryStatus.DELETED, 9, 2, 2, _file("d1", 3, 600)),
        ManifestEntry(EntryStatus.ADDED, 9, None, None, _file("a2", 5, None)),
    ]
    data = write_manifest(entries)
    whole = read_manifest(data, "m.avro")
    part = read_manifest(data, "m.avro", skip_existing=True)
    assert [e.data_file.file_path for e in part.entries] == ["a1", "e2-no-id", "d1", "a2"]
    mf = replace(_manifest(), first_row_id=1000, sequence_number=9)
    ids = {e.data_file.file_path: e.data_file.first_row_id for e in inherit(whole.entries, mf)}
    got = {e.data_file.file_path: e.data_file.first_row_id for e in inherit(part.entries, mf)}
    assert got == {p: ids[p] for p in got}
    assert (got["a1"], got["e2-no-id"], got["a2"]) == (1000, 1004, 1011)

    dvs = [
        replace(e, data_file=replace(e.data_file, content=FileContent.POSITION_DELETES))
        for e in entries
    ]
    data = write_manifest(dvs, content=ManifestContent.DELETES)
    kept = read_manifest(data, "m.avro", skip_existing=True).entries
    assert [e.status for e in kept] == [EntryStatus.ADDED, EntryStatus.DELETED, EntryStatus.ADDED]


def test_a_manifest_list_decoded_for_one_snapshot() -> None:
    manifests = [
        _manifest("s3://b/m0.avro", added_snapshot_id=77),
        _manifest("s3://b/m1.avro", added_snapshot_id=12),
        _manifest("s3://b/m2.avro", added_snapshot_id=77),
    ]
    data = write_manifest_list(
        manifests, snapshot_id=77, parent_snapshot_id=12, sequence_number=5, first_row_id=100
    )
    own = read_manifest_list(data, "l.avro", added_snapshot_id=77).manifests
    assert list(own) == [manifests[0], manifests[2]]
    assert read_manifest_list(data, "l.avro", added_snapshot_id=5).manifests == ()
