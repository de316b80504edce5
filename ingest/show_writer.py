"""``calving table show --writer ID``: one line per table a writer (a many-table
pipeline's ``writer_id``) commits to, and the totals: its last commit, ledger, rows,
files, deletion vectors and what says maintenance is due. The tables come from the
writer registry (``calving.ingest.sink.many.registry``); without one, every table of
the catalog is read and those holding the writer's ledger are shown."""

from __future__ import annotations

import dataclasses
import time

from calving.commit.catalog.base import Catalog
from calving.commit.io import FileIO
from calving.commit.maintenance.health import TableHealth, table_health
from calving.commit.table.ledger import SUMMARY_WRITER, read_ledger
from calving.commit.table.table import Table
from calving.ingest.show import default_target_file_bytes, human_bytes, text_table, utc_time
from calving.ingest.sink.many import start
from calving.ingest.sink.many.registry import WriterRegistry


@dataclasses.dataclass(frozen=True)
class WriterTable:
    """One of the writer's tables, summarized."""

    name: str
    last_commit_ms: int | None
    partitions: int  # topic-partitions in the writer's ledger
    next_offsets: int  # their next offsets, summed
    health: TableHealth


def writer_tables(catalog: Catalog, io: FileIO, writer_id: str) -> tuple[list[Table], str]:
    """The writer's tables (registered, or holding its ledger) and how they were found,
    without registering anything (a read-only command)."""
    registered = WriterRegistry(catalog, writer_id).registered()
    if registered is not None:
        maybe = [start.load_for_ledger(catalog, ident, io) for ident in registered]
        return [t for t in maybe if t is not None], "the writer registry"
    found = [t for t in start.every_table(catalog, io) if read_ledger(t.metadata, writer_id)]
    return found, "every table of the catalog (the writer has no registry yet)"


def summarize(table: Table, writer_id: str, target: int | None) -> WriterTable:
    m = table.metadata
    ledger = read_ledger(m, writer_id)
    own = [s.timestamp_ms for s in m.snapshots if s.summary.get(SUMMARY_WRITER) == writer_id]
    health = table_health(
        table.io, m, table.metadata_location, target or default_target_file_bytes(table)
    )
    return WriterTable(
        table.name, max(own, default=None), len(ledger), sum(ledger.values()), health
    )


def describe_writer(
    catalog: Catalog, io: FileIO, writer_id: str, target_file_bytes: int | None = None
) -> str:
    tables, found_by = writer_tables(catalog, io, writer_id)
    rows = sorted(
        (summarize(t, writer_id, target_file_bytes) for t in tables), key=lambda r: r.name
    )
    now_ms = int(time.time() * 1000)
    out = [f"writer {writer_id}: {len(rows)} table(s), found by {found_by}"]
    if not rows:
        return "\n".join(out)
    out += text_table(
        ("table", "last commit (UTC)", "age", "partitions", "next offsets", "live rows",
         "files", "bytes", "DVs", "DV ratio", "maintenance"),
        [_row(r, now_ms) for r in rows],
    )  # fmt: skip
    due = [r for r in rows if r.health.needs_maintenance]
    out += [
        "",
        (
            f"totals: {len(rows)} tables   live rows {sum(r.health.live_rows for r in rows):,}   "
            f"files {sum(r.health.data_files for r in rows):,}   "
            f"bytes {human_bytes(sum(r.health.data_bytes for r in rows))}   "
            f"DVs {sum(r.health.dvs for r in rows):,}   "
            f"tables needing maintenance {len(due)}"
        ),
        *(f"  {r.name}: {'; '.join(r.health.needs_maintenance)}" for r in due),
    ]
    return "\n".join(out)


def _row(r: WriterTable, now_ms: int) -> tuple[str, ...]:
    h = r.health
    last = "-" if r.last_commit_ms is None else utc_time(r.last_commit_ms)
    age = "-" if r.last_commit_ms is None else _age((now_ms - r.last_commit_ms) / 1000)
    return (
        r.name,
        last,
        age,
        str(r.partitions),
        f"{r.next_offsets:,}",
        f"{h.live_rows:,}",
        f"{h.data_files:,}",
        human_bytes(h.data_bytes),
        f"{h.dvs:,}",
        f"{h.dv_ratio:.1%}",
        "due" if h.needs_maintenance else "ok",
    )


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
