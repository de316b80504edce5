"""Column statistics: a theta sketch of distinct values per column over the live rows,
published as the snapshot's Puffin statistics file (``apache-datasketches-theta-v1``
blobs with an ``ndv`` property, the metadata's ``statistics`` list).

Stages: sketch every live data file that the per-file cache does not hold (its rows less
its deletion vector), union the per-file sketches per column, write the statistics file
and the new per-file cache, then commit ``UpdateStatistics`` (metadata only, no snapshot).

The per-file cache is a calving-private Puffin file (table property
``calving.statistics.file-sketches``): one theta blob per (data file, column), tagged with
the data file and its DV's location, so a later run sketches only files that are new or
whose DV changed and merges the rest. Unions of these sketches are exact (the union of
k-minimum-value sketches equals the sketch of the union), so a cached run gives the same
bytes as a fresh one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from calving.commit.io import FileIO
from calving.commit.spec import puffin, theta
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.schema import Schema
from calving.commit.spec.statistics import (
    NDV_PROPERTY,
    THETA_BLOB_TYPE,
    StatisticsBlob,
    StatisticsFile,
)
from calving.commit.spec.types import PrimitiveType
from calving.commit.spec.values import arrow_to_bytes
from calving.commit.table import scan
from calving.commit.table.actions.update_statistics import (
    FILE_SKETCHES_PROPERTY,
    UpdateStatistics,
)
from calving.commit.table.data_files import read_data_file, top_level_field_ids
from calving.commit.table.table import Table

_DATA_FILE = "calving.data-file"
_DV = "calving.deletion-vector"
_TYPE = "calving.type"

# (data file path, "<DV location>@<offset>" or "") -> {(field id, type): sketch}. The type
# is part of the key: a promoted column (int -> long) hashes other bytes, so a file
# sketched before the promotion is sketched again.
FileKey = tuple[str, str]
ColumnKey = tuple[int, str]
FileSketches = dict[FileKey, dict[ColumnKey, theta.ThetaSketch]]


@dataclass
class StatisticsReport:
    """What one run did."""

    snapshot_id: int | None
    ndv: dict[str, int] = field(default_factory=dict)
    files_sketched: int = 0
    files_reused: int = 0
    statistics_path: str | None = None
    seconds: float = 0.0


def sketched_columns(schema: Schema) -> list[tuple[int, str, PrimitiveType]]:
    """(field id, name, type) of the top-level primitive columns."""
    return [
        (f.field_id, f.name, f.field_type)
        for f in schema.fields
        if isinstance(f.field_type, PrimitiveType)
    ]


def sketch_file(
    io: FileIO,
    data_file: DataFile,
    deleted: Iterable[int],
    columns: Sequence[tuple[int, str, PrimitiveType]],
) -> dict[ColumnKey, theta.ThetaSketch]:
    """Per-column sketches of one data file's live rows (columns found by field id)."""
    table = _read_columns(io, data_file, [fid for fid, _, _ in columns])
    gone = np.fromiter(deleted, dtype=np.int64)
    if len(gone):
        mask = np.ones(table.num_rows, dtype=bool)
        mask[gone] = False
        table = table.filter(pa.array(mask))
    out = {}
    for fid, _, ptype in columns:
        name = str(fid)
        if name not in table.column_names:
            continue  # a column added after the file was written: all null here
        hashes = theta.hash_bytes(arrow_to_bytes(ptype, table.column(name)))
        out[(fid, str(ptype))] = theta.ThetaSketch.of_hashes(hashes)
    return out


def _read_columns(io: FileIO, data_file: DataFile, field_ids: Sequence[int]) -> pa.Table:
    found: dict[int, str] = {}

    def pick(schema: pa.Schema) -> list[str]:
        by_id = top_level_field_ids(schema)
        found.update({fid: by_id[fid] for fid in field_ids if fid in by_id})
        return list(found.values())

    table = read_data_file(io, data_file, "column statistics", pick)
    return table.rename_columns([str(fid) for fid in found])


def read_file_sketches(io: FileIO, metadata: TableMetadata) -> FileSketches:
    """The per-file cache the table property names ({} if none, or unreadable: logged
    by the caller as a full recompute)."""
    location = metadata.properties.get(FILE_SKETCHES_PROPERTY)
    if not location or not io.exists(location):
        return {}
    data = io.read(location)
    footer = puffin.read_footer(data, location)
    out: FileSketches = {}
    for blob in footer.blobs:
        props = blob.properties
        key = (props[_DATA_FILE], props.get(_DV, ""))
        sketch = theta.deserialize(puffin.read_blob(data, blob, location), location)
        out.setdefault(key, {})[(blob.fields[0], props[_TYPE])] = sketch
    return out


def _file_key(live: scan.LiveFiles, path: str) -> FileKey:
    dv = live.dvs.get(path)
    if dv is None:
        return (path, "")
    return (path, f"{dv.data_file.file_path}@{dv.data_file.content_offset}")


def sketch_live_files(
    io: FileIO, metadata: TableMetadata, cached: FileSketches, report: StatisticsReport
) -> FileSketches:
    """Sketches of every live data file of the current snapshot, from the cache where
    the file and its DV are unchanged."""
    live = scan.live_files(io, metadata, metadata.current_snapshot)
    columns = sketched_columns(metadata.schema)
    current = {fid: str(ptype) for fid, _, ptype in columns}
    out: FileSketches = {}
    for path, entry in sorted(live.data.items()):
        key = _file_key(live, path)
        hit = cached.get(key)
        if hit is not None and all(current.get(fid, t) == t for fid, t in hit):
            out[key] = hit
            report.files_reused += 1
            continue
        deleted = live.positions_deleted(io, path)
        out[key] = sketch_file(io, entry.data_file, deleted, columns)
        report.files_sketched += 1
    return out


def statistics_puffin(
    metadata: TableMetadata, per_file: FileSketches
) -> tuple[bytes, tuple[StatisticsBlob, ...], dict[str, int]]:
    """The statistics file's bytes, its blob entries and the ndv per column name."""
    snap = metadata.current_snapshot
    assert snap is not None
    writer = puffin.PuffinWriter()
    ndv: dict[str, int] = {}
    for fid, name, ptype in sketched_columns(metadata.schema):
        column = (fid, str(ptype))
        merged = theta.union([s[column] for s in per_file.values() if column in s])
        ndv[name] = merged.ndv()
        writer.add_blob(
            THETA_BLOB_TYPE,
            theta.serialize(merged),
            fields=[fid],
            snapshot_id=snap.snapshot_id,
            sequence_number=snap.sequence_number,
            properties={NDV_PROPERTY: str(ndv[name])},
        )
    blobs = tuple(
        StatisticsBlob(
            b.type, b.snapshot_id, b.sequence_number, tuple(b.fields), dict(b.properties)
        )
        for b in writer.blobs
    )
    return writer.finish(), blobs, ndv


def file_sketches_puffin(per_file: FileSketches, snapshot_id: int, sequence_number: int) -> bytes:
    writer = puffin.PuffinWriter()
    for (path, dv), sketches in sorted(per_file.items()):
        for (fid, type_name), sketch in sorted(sketches.items()):
            writer.add_blob(
                THETA_BLOB_TYPE,
                theta.serialize(sketch),
                fields=[fid],
                snapshot_id=snapshot_id,
                sequence_number=sequence_number,
                properties={_DATA_FILE: path, _DV: dv, _TYPE: type_name},
            )
    return writer.finish()


def collect_statistics(table: Table) -> StatisticsReport:
    """Compute, write and publish the current snapshot's column statistics."""
    started = time.monotonic()
    metadata = table.metadata
    snap = metadata.current_snapshot
    report = StatisticsReport(snap.snapshot_id if snap else None)
    if snap is None:
        return report
    io = table.io
    per_file = sketch_live_files(io, metadata, read_file_sketches(io, metadata), report)
    stats_bytes, blobs, report.ndv = statistics_puffin(metadata, per_file)
    base = metadata.location.rstrip("/") + "/metadata"
    token = uuid.uuid4().hex
    stats_path = f"{base}/{snap.snapshot_id}-{token}.stats"
    cache_path = f"{base}/file-sketches-{snap.snapshot_id}-{token}.puffin"
    cache_bytes = file_sketches_puffin(per_file, snap.snapshot_id, snap.sequence_number)
    io.write_many([(stats_path, stats_bytes), (cache_path, cache_bytes)])
    footer_size = puffin.footer_size_from_tail(stats_bytes[-12:], stats_path)
    statistics = StatisticsFile(
        snapshot_id=snap.snapshot_id,
        statistics_path=stats_path,
        file_size_in_bytes=len(stats_bytes),
        file_footer_size_in_bytes=footer_size,
        blob_metadata=blobs,
    )
    table.commit_or_raise(UpdateStatistics(statistics, cache_path, int(time.time() * 1000)))
    report.statistics_path = stats_path
    report.seconds = time.monotonic() - started
    return report
