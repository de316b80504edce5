"""The invariant checker run after every fault scenario.

``check_table`` reads the table as the catalog has it now, its whole metadata log, and
the scenario's commit history, and returns a ``CheckReport`` whose ``violations`` list is
empty when everything holds:

* linear history: every snapshot is on ``main``'s ancestry, sequence numbers are
  contiguous, timestamps never go back, row-lineage ids chain (``first-row-id`` of a
  snapshot = the previous one's plus its ``added-rows``), and across the metadata log each
  new current snapshot's parent is the previous current;
* no lost update: every acknowledged commit's snapshot is an ancestor of the current one,
  and every snapshot is explained by an attempt that was acknowledged, cut off by a crash
  or left unknown (never by one reported as conflicted or skipped);
* exactly once: every expected row appears once, in pyiceberg and in DuckDB alike; no
  row appears twice; no deleted row comes back;
* the ledger: in snapshot summaries each writer's ranges per partition follow each other
  with neither gap nor overlap; the ledger property never goes back across the metadata
  log, and each change of it is exactly the range that commit claimed; its final value is
  the expected one; a skipped (replayed) claim lies inside what was committed;
* deletion vectors: at most one per data file in every snapshot; in the current one each
  DV's cardinality equals its manifest ``record_count`` and its Puffin blob's property,
  its blob offsets match the Puffin footer, every position is below the data file's
  record count, and it references a live data file;
* files: every manifest, data file and Puffin file the current snapshot references exists,
  and the snapshot summary totals match the live files.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from calving.commit.catalog.base import Catalog, TableIdent
from calving.commit.errors import CalvingError
from calving.commit.io import FileIO
from calving.commit.spec.data_file import EntryStatus, FileContent, ManifestContent
from calving.commit.spec.deletion_vector import PROPERTY_CARDINALITY, PROPERTY_REFERENCED_DATA_FILE
from calving.commit.spec.metadata import TableMetadata, parse_metadata
from calving.commit.spec.puffin import read_footer
from calving.commit.spec.snapshot import Snapshot
from calving.commit.table import scan
from calving.commit.table.ledger import (
    LEDGER_PREFIX,
    SUMMARY_OFFSETS,
    SUMMARY_WRITER,
    TopicPartition,
    all_ledgers,
)
from tests.faults.history import Attempt, Claim, Event, attempts

Row = tuple[Any, ...]
RowReader = Callable[[str, Sequence[str]], list[Row]]


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.detail}"


@dataclass
class CheckReport:
    violations: list[Violation] = field(default_factory=list)
    expected_rows: int = 0
    lost: int = 0  # expected rows missing (the worst reader)
    duplicated: int = 0  # extra copies of rows (the worst reader)
    unexpected: int = 0  # rows that must not be there (deleted or never produced)
    snapshots: int = 0
    metadata_location: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def add(self, invariant: str, detail: str) -> None:
        self.violations.append(Violation(invariant, detail))


def default_readers() -> dict[str, RowReader]:
    from tests.support.oracles import duckdb_rows, pyiceberg_rows

    return {"pyiceberg": pyiceberg_rows, "duckdb": duckdb_rows}


# ---------------------------------------------------------------- entry point


def check_table(
    catalog: Catalog,
    ident: TableIdent,
    *,
    events: Sequence[Event] = (),
    expected_rows: Counter[Row] | None = None,
    columns: Sequence[str] = ("topic", "partition", "offset"),
    expected_ledgers: Mapping[str, Mapping[TopicPartition, int]] | None = None,
    readers: Mapping[str, RowReader] | None = None,
    io: FileIO | None = None,
) -> CheckReport:
    report = CheckReport()
    location = catalog.load_metadata_location(ident)
    io = io or FileIO.for_location(location)
    metadata = parse_metadata(io.read(location), location)
    report.metadata_location = location
    report.snapshots = len(metadata.snapshots)

    check_linear_history(metadata, report)
    check_metadata_log(io, metadata, location, report)
    committed = check_ledger_ranges(metadata, expected_ledgers, report)
    check_attempts(attempts(events), metadata, committed, report)
    check_files_and_dvs(io, metadata, report)
    if expected_rows is not None:
        check_rows(location, expected_rows, columns, readers or default_readers(), report)
    return report


# ---------------------------------------------------------------- history


def check_linear_history(metadata: TableMetadata, report: CheckReport) -> None:
    chain = list(reversed(metadata.ancestors()))  # oldest first
    on_main = {s.snapshot_id for s in chain}
    for s in metadata.snapshots:
        if s.snapshot_id not in on_main:
            report.add(
                "linear-history",
                f"snapshot {s.snapshot_id} (seq {s.sequence_number}) is not an ancestor of "
                f"the current snapshot {metadata.current_snapshot_id}",
            )
    if not chain:
        return
    if chain[0].parent_snapshot_id is not None:
        report.add("linear-history", f"oldest snapshot {chain[0].snapshot_id} has a parent")
    first = chain[0].sequence_number
    for i, s in enumerate(chain):
        if s.sequence_number != first + i:
            report.add(
                "linear-history",
                f"snapshot {s.snapshot_id} has sequence number {s.sequence_number}, "
                f"expected {first + i} (sequence numbers must be contiguous)",
            )
            break
    if chain[-1].sequence_number != metadata.last_sequence_number:
        report.add(
            "linear-history",
            f"last-sequence-number {metadata.last_sequence_number} != current snapshot's "
            f"{chain[-1].sequence_number}",
        )
    for prev, s in pairwise(chain):
        if s.timestamp_ms < prev.timestamp_ms:
            report.add("linear-history", f"snapshot {s.snapshot_id} is older than its parent")
        if (
            prev.first_row_id is not None
            and s.first_row_id is not None
            and s.first_row_id != prev.first_row_id + (prev.added_rows or 0)
        ):
            report.add(
                "row-lineage",
                f"snapshot {s.snapshot_id} first-row-id {s.first_row_id} != parent's "
                f"{prev.first_row_id} + added-rows {prev.added_rows}",
            )
    last = chain[-1]
    if last.first_row_id is not None and metadata.next_row_id != last.first_row_id + (
        last.added_rows or 0
    ):
        report.add(
            "row-lineage",
            f"next-row-id {metadata.next_row_id} != current snapshot's first-row-id "
            f"{last.first_row_id} + added-rows {last.added_rows}",
        )


def _raw_ledgers(obj: Mapping[str, Any]) -> dict[str, dict[TopicPartition, int]]:
    out: dict[str, dict[TopicPartition, int]] = {}
    for key, value in (obj.get("properties") or {}).items():
        if key.startswith(LEDGER_PREFIX):
            parsed = json.loads(value)
            out[key[len(LEDGER_PREFIX) :]] = {
                (t, int(p)): int(o) for t, parts in parsed.items() for p, o in parts.items()
            }
    return out


def _summary_ranges(summary: Mapping[str, str]) -> dict[TopicPartition, tuple[int, int]]:
    raw = summary.get(SUMMARY_OFFSETS)
    if not raw:
        return {}
    return {
        (t, int(p)): (int(r[0]), int(r[1]))
        for t, parts in json.loads(raw).items()
        for p, r in parts.items()
    }


def check_metadata_log(
    io: FileIO, metadata: TableMetadata, location: str, report: CheckReport
) -> None:
    """Walk every metadata file of the log, oldest first, then the current one."""
    locations = [e.metadata_file for e in metadata.metadata_log] + [location]
    versions: list[tuple[str, dict[str, Any]]] = []
    for loc in locations:
        try:
            data = io.read(loc)  # gzip when its name says so, as Iceberg readers tell it
            if loc.endswith(".gz.metadata.json"):
                data = gzip.decompress(data)
            versions.append((loc, json.loads(data)))
        except CalvingError as err:
            report.add("metadata-log", f"metadata file {loc} of the log cannot be read: {err}")
    for (loc_a, a), (loc_b, b) in pairwise(versions):
        cur_a, cur_b = a.get("current-snapshot-id"), b.get("current-snapshot-id")
        cur_a = None if cur_a in (None, -1) else cur_a
        cur_b = None if cur_b in (None, -1) else cur_b
        snaps_b = {s["snapshot-id"]: s for s in b.get("snapshots") or []}
        new_snapshot = cur_b is not None and cur_b != cur_a
        if new_snapshot:
            parent = snaps_b.get(cur_b, {}).get("parent-snapshot-id")
            if parent != cur_a:
                report.add(
                    "linear-history",
                    f"{loc_b}: new current snapshot {cur_b} has parent {parent}, but the "
                    f"previous metadata {loc_a} had current {cur_a}",
                )
        if int(b.get("last-sequence-number", 0)) < int(a.get("last-sequence-number", 0)):
            report.add("linear-history", f"{loc_b}: last-sequence-number went back")
        led_a, led_b = _raw_ledgers(a), _raw_ledgers(b)
        claimed = (
            _summary_ranges(snaps_b[cur_b].get("summary") or {})
            if new_snapshot and cur_b in snaps_b
            else {}
        )
        claim_writer = (
            (snaps_b[cur_b].get("summary") or {}).get(SUMMARY_WRITER)
            if new_snapshot and cur_b in snaps_b
            else None
        )
        for writer, before in led_a.items():
            after = led_b.get(writer)
            if after is None:
                report.add("ledger", f"{loc_b}: the ledger of {writer!r} disappeared")
                continue
            for tp, off in before.items():
                if tp not in after:
                    report.add("ledger", f"{loc_b}: {writer!r} lost partition {tp}")
                elif after[tp] < off:
                    report.add(
                        "ledger",
                        f"{loc_b}: ledger of {writer!r} {tp} went back from {off} to {after[tp]}",
                    )
        for writer, after in led_b.items():
            before = led_a.get(writer, {})
            for tp, off in after.items():
                if before.get(tp) == off:
                    continue
                rng = claimed.get(tp) if claim_writer == writer else None
                if rng is None:
                    report.add(
                        "ledger",
                        f"{loc_b}: ledger of {writer!r} {tp} moved {before.get(tp)} -> {off} "
                        "without a snapshot claiming that range",
                    )
                elif rng[1] != off or (tp in before and rng[0] != before[tp]):
                    report.add(
                        "ledger",
                        f"{loc_b}: ledger of {writer!r} {tp} moved {before.get(tp)} -> {off} "
                        f"but the snapshot claimed [{rng[0]}, {rng[1]})",
                    )


@dataclass
class CommittedRanges:
    """What the snapshots claim, per (writer, topic-partition): ranges oldest first."""

    ranges: dict[tuple[str, TopicPartition], list[tuple[int, int, int]]] = field(
        default_factory=dict
    )  # (start, end, snapshot id)
    by_snapshot: dict[int, tuple[str, dict[TopicPartition, tuple[int, int]]]] = field(
        default_factory=dict
    )

    def covers(self, claim: Claim) -> bool:
        tp = (claim.topic, claim.partition)
        spans = sorted((s, e) for s, e, _ in self.ranges.get((claim.writer, tp), []))
        point = claim.start
        for s, e in spans:
            if s <= point < e:
                point = e
            if point >= claim.end:
                return True
        return point >= claim.end


def check_ledger_ranges(
    metadata: TableMetadata,
    expected_ledgers: Mapping[str, Mapping[TopicPartition, int]] | None,
    report: CheckReport,
) -> CommittedRanges:
    committed = CommittedRanges()
    for s in reversed(metadata.ancestors()):
        writer = s.summary.get(SUMMARY_WRITER)
        ranges = _summary_ranges(s.summary)
        if writer is None:
            continue
        committed.by_snapshot[s.snapshot_id] = (writer, ranges)
        for tp, (start, end) in ranges.items():
            seen = committed.ranges.setdefault((writer, tp), [])
            if end <= start:
                report.add("ledger", f"snapshot {s.snapshot_id} claims empty [{start}, {end})")
            if seen and start != seen[-1][1]:
                kind = "overlaps" if start < seen[-1][1] else "leaves a gap after"
                report.add(
                    "exactly-once" if start < seen[-1][1] else "ledger",
                    f"snapshot {s.snapshot_id} of {writer!r} claims {tp} [{start}, {end}), "
                    f"which {kind} [{seen[-1][0]}, {seen[-1][1]}) of snapshot {seen[-1][2]}",
                )
            seen.append((start, end, s.snapshot_id))
    ledgers = all_ledgers(metadata)
    for (writer, tp), seen in committed.ranges.items():
        have = ledgers.get(writer, {}).get(tp)
        if have != seen[-1][1]:
            report.add(
                "ledger",
                f"ledger property of {writer!r} {tp} is {have}, the last committed range "
                f"ends at {seen[-1][1]}",
            )
    if expected_ledgers is not None:
        for writer, want in expected_ledgers.items():
            have_w = ledgers.get(writer, {})
            for tp, off in want.items():
                if have_w.get(tp) != off:
                    report.add(
                        "ledger",
                        f"ledger of {writer!r} {tp} is {have_w.get(tp)}, expected {off} "
                        "(the writer did not finish its stream)",
                    )
    return committed


def _claim_key(writer: str, tp: TopicPartition, rng: tuple[int, int]) -> tuple[Any, ...]:
    return (writer, tp[0], tp[1], rng[0], rng[1])


def check_attempts(
    history: Iterable[Attempt],
    metadata: TableMetadata,
    committed: CommittedRanges,
    report: CheckReport,
) -> None:
    history = list(history)
    on_main = {s.snapshot_id for s in metadata.ancestors()}
    explained: set[int] = set()
    may_have_landed: dict[tuple[Any, ...], list[Attempt]] = {}
    for a in history:
        out = a.outcome
        if out is not None and out.event == "ok" and out.snapshot is not None:
            if out.snapshot not in on_main:
                report.add(
                    "lost-update",
                    f"{a.invoke.writer} attempt {a.invoke.attempt} was acknowledged as "
                    f"snapshot {out.snapshot}, which is not in the table's history",
                )
            explained.add(out.snapshot)
        if a.invoke.snapshot is not None and a.status in ("cut", "unknown", "error"):
            # The attempt named the snapshot id it would add before it started (a
            # maintenance commit claims no offsets): it may have landed.
            explained.add(a.invoke.snapshot)
        if a.claim is not None and a.status in ("ok", "cut", "unknown", "error"):
            c = a.claim
            may_have_landed.setdefault(
                _claim_key(c.writer, (c.topic, c.partition), (c.start, c.end)), []
            ).append(a)
        if a.status == "skip" and a.claim is not None and not committed.covers(a.claim):
            c = a.claim
            report.add(
                "exactly-once",
                f"{c.writer} batch [{c.start}, {c.end}) of {c.topic}/{c.partition} was "
                "skipped as a replay but no snapshot committed those offsets",
            )
    if not history:
        return  # no history recorded: nothing to attribute snapshots to
    for s in metadata.snapshots:
        if s.snapshot_id in explained:
            continue
        claim = committed.by_snapshot.get(s.snapshot_id)
        if claim is not None:
            writer, ranges = claim
            if ranges and all(
                _claim_key(writer, tp, rng) in may_have_landed for tp, rng in ranges.items()
            ):
                continue
        report.add(
            "lost-update",
            f"snapshot {s.snapshot_id} ({s.summary.get('operation')}, "
            f"{s.summary.get(SUMMARY_WRITER)}) is explained by no acknowledged, cut-off or "
            "unknown attempt: an attempt reported as failed or skipped landed",
        )


# ---------------------------------------------------------------- files and DVs


def _dv_entries_per_file(io: FileIO, metadata: TableMetadata, snapshot: Snapshot) -> Counter[str]:
    counts: Counter[str] = Counter()
    for mf in scan.manifest_files(io, snapshot):
        if mf.content != ManifestContent.DELETES:
            continue
        for e in scan.manifest_entries(io, metadata, mf):
            if e.status == EntryStatus.DELETED:
                continue
            ref = e.data_file.referenced_data_file
            if e.data_file.content == FileContent.POSITION_DELETES and ref:
                counts[ref] += 1
    return counts


def check_files_and_dvs(io: FileIO, metadata: TableMetadata, report: CheckReport) -> None:
    for s in metadata.snapshots:
        try:
            counts = _dv_entries_per_file(io, metadata, s)
        except CalvingError as err:
            report.add("files", f"snapshot {s.snapshot_id} cannot be read: {err}")
            continue
        for ref, n in sorted(counts.items()):
            if n > 1:
                report.add(
                    "one-dv-per-file",
                    f"snapshot {s.snapshot_id}: {n} live deletion vectors for {ref}",
                )
    current = metadata.current_snapshot
    if current is None:
        return
    live = scan.live_files(io, metadata, current)
    for mf in live.manifests:
        if not io.exists(mf.manifest_path):
            report.add("files", f"manifest {mf.manifest_path} is missing")
    for path in live.data:
        if not io.exists(path):
            report.add("files", f"data file {path} is missing")
    footers: dict[str, Any] = {}
    total_positions = 0
    for ref, entry in sorted(live.dvs.items()):
        dv = entry.data_file
        total_positions += dv.record_count
        target = live.data.get(ref)
        if target is None:
            report.add("dv", f"deletion vector {dv.file_path} references {ref}, not live")
            continue
        try:
            positions = scan.read_dv(io, dv)
        except CalvingError as err:
            report.add("dv", f"deletion vector for {ref} cannot be read: {err}")
            continue
        if len(positions) != dv.record_count:
            report.add(
                "dv-cardinality",
                f"DV for {ref} holds {len(positions)} positions, its manifest record_count "
                f"says {dv.record_count}",
            )
        if positions and positions.max() >= target.data_file.record_count:
            report.add(
                "dv-position",
                f"DV for {ref} deletes position {positions.max()} of a "
                f"{target.data_file.record_count}-row file",
            )
        if dv.file_path not in footers:
            try:
                footers[dv.file_path] = read_footer(io.read(dv.file_path), dv.file_path)
            except CalvingError as err:
                report.add("dv", f"Puffin file {dv.file_path} cannot be read: {err}")
                footers[dv.file_path] = None
        footer = footers[dv.file_path]
        if footer is None:
            continue
        blobs = [b for b in footer.blobs if b.offset == dv.content_offset]
        if len(blobs) != 1 or blobs[0].length != dv.content_size_in_bytes:
            report.add(
                "dv",
                f"DV for {ref}: manifest offset {dv.content_offset} length "
                f"{dv.content_size_in_bytes} matches no blob of {dv.file_path}'s footer",
            )
            continue
        props = blobs[0].properties
        if props.get(PROPERTY_REFERENCED_DATA_FILE) != ref:
            report.add("dv", f"DV blob for {ref} names {props.get(PROPERTY_REFERENCED_DATA_FILE)}")
        if props.get(PROPERTY_CARDINALITY) != str(dv.record_count):
            report.add(
                "dv-cardinality",
                f"DV blob for {ref} has cardinality {props.get(PROPERTY_CARDINALITY)}, "
                f"manifest record_count {dv.record_count}",
            )
    totals = {
        "total-records": sum(e.data_file.record_count for e in live.data.values()),
        "total-data-files": len(live.data),
        "total-delete-files": len(live.dvs),
        "total-position-deletes": total_positions,
    }
    for key, want in totals.items():
        have = current.summary.get(key)
        if have is not None and int(have) != want:
            report.add("summary", f"current snapshot's {key} is {have}, live files give {want}")


# ---------------------------------------------------------------- rows


def check_rows(
    metadata_location: str,
    expected: Counter[Row],
    columns: Sequence[str],
    readers: Mapping[str, RowReader],
    report: CheckReport,
) -> None:
    report.expected_rows = sum(expected.values())
    results: dict[str, Counter[Row]] = {}
    for name, reader in readers.items():
        try:
            got = Counter(tuple(r) for r in reader(metadata_location, columns))
        except Exception as err:  # noqa: BLE001 - an oracle failing to read the table is a finding
            report.add("readers", f"{name} cannot read {metadata_location}: {err!r}")
            continue
        results[name] = got
        lost = sum((expected - got).values())
        dup = sum(n - 1 for r, n in got.items() if n > 1 and r in expected)
        unexpected = sum(n for r, n in got.items() if r not in expected)
        report.lost = max(report.lost, lost)
        report.duplicated = max(report.duplicated, dup)
        report.unexpected = max(report.unexpected, unexpected)
        if lost:
            sample = sorted(expected - got)[:5]
            report.add("exactly-once", f"{name}: {lost} expected rows missing, e.g. {sample}")
        if dup:
            sample = sorted(r for r, n in got.items() if n > 1)[:5]
            report.add("exactly-once", f"{name}: {dup} duplicated rows, e.g. {sample}")
        if unexpected:
            sample = sorted(r for r in got if r not in expected)[:5]
            report.add(
                "exactly-once",
                f"{name}: {unexpected} rows that must not be there (deleted or never "
                f"produced), e.g. {sample}",
            )
    names = sorted(results)
    for a, b in pairwise(names):
        if results[a] != results[b]:
            report.add("readers", f"{a} and {b} read different rows")
