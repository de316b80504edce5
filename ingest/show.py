"""``calving table show``: a table's state in a readable layout (schema, partitioning,
exactly-once ledgers, recent snapshots, live data files and deletion vectors, and the
table's health: what says maintenance is due)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from calving.commit.errors import InvalidTablePropertyError
from calving.commit.maintenance.compaction_plan import DEFAULT_TARGET_FILE_BYTES
from calving.commit.maintenance.health import TableHealth, table_health
from calving.commit.maintenance.last_pass import read_last_pass
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TARGET_FILE_SIZE_BYTES
from calving.commit.spec.type_strings import type_text
from calving.commit.table.actions.update_schema import dropped_at_source
from calving.commit.table.ledger import LEDGER_PREFIX, all_ledgers
from calving.commit.table.scan import LiveFiles
from calving.commit.table.table import Table


def describe_table(
    table: Table,
    *,
    snapshots: int = 10,
    files: bool = False,
    target_file_bytes: int | None = None,
) -> str:
    """The whole report as text. ``snapshots`` = how many of the newest to list;
    ``files`` lists every live data file with its DV; ``target_file_bytes`` sizes the
    health figures (default: the table's ``write.target-file-size-bytes`` when set, else
    compaction's default target)."""
    m = table.metadata
    live = table.live_files()
    target = target_file_bytes or default_target_file_bytes(table)
    out = [
        *_header_lines(table),
        "",
        *_schema_lines(m),
        *_partitioning_lines(m),
        *_properties_lines(m),
        "",
        *_ledger_lines(m),
        "",
        *_snapshot_lines(m, snapshots),
        "",
        *_live_file_lines(live),
        *(["", *_file_lines(live)] if files else []),
        "",
        *last_pass_lines(read_last_pass(table.io, m)),
        "",
        *health_lines(table_health(table.io, m, table.metadata_location, target)),
    ]
    return "\n".join(out)


def _header_lines(table: Table) -> list[str]:
    """Which table: name, location, metadata file, uuid, snapshot and row-id counters."""
    m = table.metadata
    current = m.current_snapshot
    return [
        f"table        {table.name}",
        f"location     {m.location}",
        f"metadata     {table.metadata_location}",
        f"uuid         {m.table_uuid}   format-version {m.format_version}",
        (
            f"snapshots    {len(m.snapshots)}   current {current.snapshot_id if current else '-'}"
            f"   last-sequence-number {m.last_sequence_number}   next-row-id {m.next_row_id}"
        ),
    ]


def _schema_lines(m: TableMetadata) -> list[str]:
    """The current schema's columns, identifier (key) columns marked."""
    identifiers = set(m.schema.identifier_field_ids)
    return [
        "schema",
        *text_table(
            ("id", "name", "type", "required", "key"),
            [
                (
                    str(f.field_id),
                    f.name,
                    type_text(f.field_type),
                    "yes" if f.required else "",
                    "key" if f.field_id in identifiers else "",
                )
                for f in m.schema.fields
            ],
        ),
    ]


def _partitioning_lines(m: TableMetadata) -> list[str]:
    """The partition spec, and the columns dropped at the source (the table keeps them;
    new rows get nulls, or their write-default)."""
    spec_fields = [f"{f.transform}({m.schema.column_name(f.source_id)})" for f in m.spec.fields]
    out = ["", "partitioned by  " + (", ".join(spec_fields) or "nothing (unpartitioned)")]
    dropped = dropped_at_source(m)
    if dropped:
        out.append("dropped at the source  " + ", ".join(dropped))
    return out


def _properties_lines(m: TableMetadata) -> list[str]:
    """The table's properties but the ledgers (shown in their own section); none: nothing."""
    props = {k: v for k, v in sorted(m.properties.items()) if not k.startswith(LEDGER_PREFIX)}
    if not props:
        return []
    return ["", "properties", *(f"  {k} = {v}" for k, v in props.items())]


def _ledger_lines(m: TableMetadata) -> list[str]:
    """Each writer's exactly-once ledger: the next offset per topic-partition."""
    ledgers = all_ledgers(m)
    out = ["exactly-once ledger (next offset per topic-partition)"]
    if not ledgers:
        out.append("  (none: no Kafka offsets committed yet)")
    for writer, offsets in sorted(ledgers.items()):
        out.append(f"  writer {writer}")
        out += [f"    {t}/{p}  {o}" for (t, p), o in sorted(offsets.items())]
    return out


_SNAPSHOT_COLUMNS = (
    "seq",
    "snapshot",
    "parent",
    "time (UTC)",
    "operation",
    "+files",
    "+rows",
    "+DVs",
    "+deleted",
    "writer",
)


def _snapshot_lines(m: TableMetadata, snapshots: int) -> list[str]:
    """The newest ``snapshots`` snapshots, newest first."""
    newest = sorted(m.snapshots, key=lambda s: s.sequence_number)[-snapshots:][::-1]
    return [
        f"snapshots (newest {min(snapshots, len(m.snapshots))} of {len(m.snapshots)})",
        *text_table(
            _SNAPSHOT_COLUMNS,
            [
                (
                    str(s.sequence_number),
                    str(s.snapshot_id),
                    str(s.parent_snapshot_id or "-"),
                    utc_time(s.timestamp_ms),
                    s.operation,
                    s.summary.get("added-data-files", "0"),
                    s.summary.get("added-records", "0"),
                    s.summary.get("added-delete-files", "0"),
                    s.summary.get("added-position-deletes", "0"),
                    s.summary.get("calving.writer-id", ""),
                )
                for s in newest
            ],
        ),
    ]


def _live_file_lines(live: LiveFiles) -> list[str]:
    """Totals of the live data files, their deletion vectors and the manifests."""
    rows = sum(e.data_file.record_count for e in live.data.values())
    deleted = sum(e.data_file.record_count for e in live.dvs.values())
    size = sum(e.data_file.file_size_in_bytes for e in live.data.values())
    puffins = {e.data_file.file_path for e in live.dvs.values()}
    return [
        f"live data files  {len(live.data)}   rows {rows}   bytes {size}",
        (
            f"deletion vectors {len(live.dvs)} (in {len(puffins)} Puffin files)   "
            f"deleted rows {deleted}   live rows {rows - deleted}"
        ),
        f"manifests        {len(live.manifests)}",
    ]


def _file_lines(live: LiveFiles) -> list[str]:
    """Every live data file with its deletion vector (``--files``)."""
    return [
        "files",
        *text_table(
            ("data file", "rows", "bytes", "deleted (DV)", "DV blob"),
            [
                (
                    path,
                    str(e.data_file.record_count),
                    str(e.data_file.file_size_in_bytes),
                    str(live.dvs[path].data_file.record_count) if path in live.dvs else "",
                    _blob(live.dvs[path].data_file) if path in live.dvs else "",
                )
                for path, e in sorted(live.data.items())
            ],
        ),
    ]


def last_pass_lines(record: Mapping[str, Any] | None) -> list[str]:
    """When the last maintenance pass ran and what it did (its last-pass record)."""
    if record is None:
        return ["last maintenance pass  none recorded"]
    try:
        started = utc_time(int(record["started_ms"]))
        verdict = "stopped" if record.get("stopped") else ("ok" if record.get("ok") else "FAILED")
        out = [
            f"last maintenance pass  {started} UTC   {float(record['seconds']):.1f}s   {verdict}",
            (
                f"  commits {record['commits']}   groups {record['groups']}: committed "
                f"{record['groups_committed']}, given up {record['groups_given_up']}, failed "
                f"{record['groups_failed']}, left {record['groups_left']}   lost swaps "
                f"{record['lost_swaps']}"
            ),
            (
                f"  data files {record['files_before']} -> {record['files_after']}   bytes "
                f"{record['bytes_before']} -> {record['bytes_after']}"
            ),
        ]
        for job in record.get("jobs", []):
            if job.get("error"):
                out.append(f"  {job['job']} FAILED: {job['error']}")
        return out
    except (KeyError, TypeError, ValueError):
        return ["last maintenance pass  (record unreadable)"]


def default_target_file_bytes(table: Table) -> int:
    """The table's ``write.target-file-size-bytes`` when set (and valid), else the
    compaction default."""
    raw = table.metadata.properties.get(TARGET_FILE_SIZE_BYTES.name)
    if raw is None:
        return DEFAULT_TARGET_FILE_BYTES
    try:
        return TARGET_FILE_SIZE_BYTES.parse(raw)
    except InvalidTablePropertyError:  # the properties section shows the bad value
        return DEFAULT_TARGET_FILE_BYTES


def health_lines(h: TableHealth, top: int = 10) -> list[str]:
    """The health section: totals, the ``top`` partitions by file count, the reasons."""
    return [
        *_health_totals(h),
        *_partition_lines(h, top),
        "",
        "needs maintenance" if h.needs_maintenance else "no maintenance needed",
        *(f"  - {reason}" for reason in h.needs_maintenance),
    ]


def _health_totals(h: TableHealth) -> list[str]:
    """The health figures of the whole table: files, deletes, snapshots, metadata sizes."""
    return [
        (
            f"health (target file size {h.target_file_bytes:,} bytes "
            f"({human_bytes(h.target_file_bytes)}); small files < {h.small_file_bytes:,} bytes)"
        ),
        (
            f"  data files {h.data_files:,} in {len(h.partitions):,} partitions   "
            f"small {h.small_files:,}   bytes {h.data_bytes:,}   rows {h.rows:,}   "
            f"live rows {h.live_rows:,}"
        ),
        f"  DVs {h.dvs:,}   deleted rows {h.deleted_rows:,}   DV ratio {h.dv_ratio:.1%}",
        (
            f"  snapshots {h.snapshots:,}   manifests {h.manifests:,} "
            f"({h.data_manifests:,} data, {h.delete_manifests:,} delete)"
        ),
        (
            f"  metadata json {h.metadata_json_bytes:,} bytes   manifest list "
            f"{h.manifest_list_bytes:,} bytes   manifests {h.manifest_bytes:,} bytes"
        ),
    ]


def _partition_lines(h: TableHealth, top: int) -> list[str]:
    """The worst partition's verdict and the ``top`` partitions by file count (none
    when the table has no partitions with data)."""
    worst = h.worst_partition
    if worst is None:
        return []
    verdict = "needs compaction" if worst.needs_compaction else "ok"
    return [
        (
            f"  worst partition {worst.label}: {worst.data_files:,} files, budget "
            f"{worst.file_budget:,} (ceil(live bytes / target) + 1): {verdict}"
        ),
        "",
        f"partitions by file count (top {min(top, len(h.partitions))} of {len(h.partitions)})",
        *text_table(
            ("partition", "spec", "files", "small", "bytes", "rows", "DVs", "deleted", "budget"),
            [
                (
                    p.label,
                    str(p.spec_id),
                    f"{p.data_files:,}",
                    f"{p.small_files:,}",
                    f"{p.data_bytes:,}",
                    f"{p.rows:,}",
                    f"{p.dvs:,}",
                    f"{p.deleted_rows:,}",
                    f"{p.file_budget:,}",
                )
                for p in h.partitions[:top]
            ],
        ),
    ]


def human_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps it at least 1."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def _blob(dv: object) -> str:
    path = getattr(dv, "file_path", "")
    return f"{path.rsplit('/', 1)[-1]}@{getattr(dv, 'content_offset', '')}"


def utc_time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def text_table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    rows = list(rows)
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells: Sequence[str]) -> str:
        return "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]
