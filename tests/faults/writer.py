"""A synthetic streaming writer, run as a subprocess by the fault scenarios.

``python -m tests.faults.writer '<json config>'``

It consumes writer ``w``'s stream (``tests.faults.stream``) in batches of ``batch``
records, like a microbatch sink: write the batch's inserts as one Parquet file, turn its
deletes into row positions, commit a ``FastAppend`` or ``RowDelta`` claiming the batch's
offset range in the exactly-once ledger, then write its own checkpoint (the next offset).
A restart resumes from that checkpoint (or from ``start``, a lost or stale checkpoint),
so the batch a crash interrupted is replayed: the ledger must make the replay commit
nothing. A batch that straddles the table's ledger (a replay with another batch size)
drops the records below it, as the coordinator does.

Fault injection: ``CALVING_FAULTS`` in the environment arms ``calving.commit.faults`` points;
with ``arm_after`` > 0 the writer arms them itself only after that many batches, so the
crash comes with history behind it. The writer hits the two points that belong to the
streaming side: ``after-data-files`` and ``after-swap-before-checkpoint``.
``swap_fault`` makes every ``swap_fault_every``-th catalog swap lose its reply.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

from calving.commit import faults
from calving.commit.catalog.faults import FaultPlan, SwapFault
from calving.commit.errors import CalvingError, RetriesExhaustedError
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.row_delta import Rebase, RowDelta
from calving.commit.table.committer import Committed, Conflicted, Skipped, Unknown
from calving.commit.table.ledger import LedgerClaim, OffsetRange, read_ledger
from calving.commit.table.table import Table
from calving.ingest.write.parquet_writer import write_data_file
from tests.faults import mutations, stream
from tests.faults.catalogs import IDENT, CatalogSpec
from tests.faults.history import Claim, HistoryRecorder

EXIT_DONE = 0
EXIT_CONFLICT = 2
EXIT_ERROR = 3


@dataclass
class WriterConfig:
    catalog: str  # CatalogSpec JSON
    writer: int
    records: int
    batch: int
    history: str
    checkpoint: str
    start: int | None = None  # resume here instead of the checkpoint
    arm_after: int = 0
    swap_fault: str | None = None  # a SwapFault value
    swap_fault_every: int = 0
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> WriterConfig:
        return WriterConfig(**json.loads(text))


# ---------------------------------------------------------------- checkpoint


def read_checkpoint(path: str) -> int | None:
    try:
        return int(json.loads(Path(path).read_text())["next"])
    except FileNotFoundError:
        return None


def write_checkpoint(path: str, next_offset: int) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    Path(tmp).write_text(json.dumps({"next": next_offset}))
    os.replace(tmp, path)


# ---------------------------------------------------------------- finding rows


class RowLocator:
    """(data file, position) of committed rows, from files this process committed and,
    on a miss, from the table's live data files of the row's partition."""

    def __init__(self) -> None:
        self.where: dict[stream.Row, tuple[str, int]] = {}
        self.indexed: set[str] = set()

    def add(self, path: str, rows: list[stream.Row]) -> None:
        for position, r in enumerate(rows):
            self.where[r] = (path, position)
        self.indexed.add(path)

    def locate(self, table: Table, r: stream.Row) -> tuple[str, int]:
        found = self.where.get(r)
        if found is not None:
            return found
        live = table.live_files()
        for path, entry in sorted(live.data.items()):
            if path in self.indexed or entry.data_file.partition != (r[1],):
                continue
            self.add(path, _rows_of(table.io, path))
        found = self.where.get(r)
        if found is None:
            raise LookupError(f"row {r} is in no live data file of {table.name}")
        return found


def _rows_of(io: Any, path: str) -> list[stream.Row]:
    data = pq.read_table(pa.BufferReader(io.read(path)), columns=list(stream.COLUMNS))
    return list(
        zip(
            data.column("topic").to_pylist(),
            data.column("partition").to_pylist(),
            data.column("offset").to_pylist(),
        )
    )


def rebase_by_row(table: Table, requested: dict[tuple[str, int], stream.Row]) -> Rebase:
    """Deletes aimed at files a concurrent commit removed, found again by row in the
    base's live files (as the coordinator does by key). A row in no live file went with
    a file another writer emptied (all its rows deleted, the file removed): it is
    deleted already, and nothing is asked for it."""

    def rebase(base: TableMetadata, gone: Mapping[str, BitMap64]) -> dict[str, BitMap64]:
        wanted = {requested[(path, pos)] for path, positions in gone.items() for pos in positions}
        live = scan.live_files(table.io, base, base.current_snapshot)
        partitions = {r[1] for r in wanted}
        out: dict[str, BitMap64] = {}
        for path, entry in sorted(live.data.items()):
            if entry.data_file.partition not in {(p,) for p in partitions}:
                continue
            for position, r in enumerate(_rows_of(table.io, path)):
                if r in wanted:
                    out.setdefault(path, BitMap64()).add(position)
        return out

    return rebase


def write_rows(table: Table, w: int, rows: list[stream.Row]) -> DataFile:
    location = f"{table.metadata.location}/data/partition={w}/{uuid.uuid4()}.parquet"
    arrow = pa.Table.from_pylist(
        [
            {"topic": t, "partition": p, "offset": o, "payload": stream.payload(p, o)}
            for t, p, o in rows
        ]
    )
    return write_data_file(
        table.io,
        location,
        arrow,
        table.metadata.schema,
        partition=(w,),
        spec_id=table.metadata.default_spec_id,
    )


# ---------------------------------------------------------------- the loop


def _arm(spec: str) -> None:
    for item in filter(None, (s.strip() for s in spec.split(","))):
        point, _, action = item.partition("=")
        faults.arm(point, action or "kill")


def _swap_plan(kind: str, every: int) -> FaultPlan:
    fault = SwapFault(kind)
    pattern: list[SwapFault | None] = [None] * (every - 1) + [fault]
    return FaultPlan(*(pattern * 2000))


def run(cfg: WriterConfig) -> int:
    mutations.apply(os.environ.get(mutations.MUTATION_ENV))
    deferred = ""
    if cfg.arm_after > 0:
        deferred = os.environ.pop("CALVING_FAULTS", "")
    spec = CatalogSpec.from_json(cfg.catalog)
    catalog = spec.open()
    if cfg.swap_fault and cfg.swap_fault_every > 0:
        catalog.fault_plan = _swap_plan(cfg.swap_fault, cfg.swap_fault_every)
    table = Table.load(catalog, IDENT)
    wid = stream.writer_id(cfg.writer)
    tp = (stream.TOPIC, cfg.writer)
    history = HistoryRecorder(cfg.history, wid)
    checkpoint = read_checkpoint(cfg.checkpoint)
    position = cfg.start if cfg.start is not None else (checkpoint or 0)
    history.record(
        "run",
        detail=cfg.label or None,
        extra={
            "start": position,
            "checkpoint": checkpoint,
            "batch": cfg.batch,
            "records": cfg.records,
            "faults": os.environ.get("CALVING_FAULTS", "") or deferred,
            "arm_after": cfg.arm_after,
            "mutation": os.environ.get(mutations.MUTATION_ENV, ""),
        },
    )
    locator = RowLocator()
    done = 0
    while position < cfg.records:
        end = min(position + cfg.batch, cfg.records)
        table.refresh()
        committed = read_ledger(table.metadata, wid).get(tp)
        if committed is not None and position < committed < end:
            position = committed  # a re-split replay: drop what the table already has
        inserts, deleted = stream.batch(cfg.writer, position, end)
        added = write_rows(table, cfg.writer, inserts) if inserts else None
        faults.hit("after-data-files")
        new_rows = {r: i for i, r in enumerate(inserts)}
        deletes: dict[str, BitMap64] = {}
        requested: dict[tuple[str, int], stream.Row] = {}
        for r in deleted:
            if r in new_rows and added is not None:
                path, pos = added.file_path, new_rows[r]
            else:
                path, pos = locator.locate(table, r)
            deletes.setdefault(path, BitMap64()).add(pos)
            requested[(path, pos)] = r
        claim = LedgerClaim(wid, {tp: OffsetRange(position, end)})
        files = (added,) if added is not None else ()
        action: FastAppend | RowDelta
        if deletes:
            rebase = rebase_by_row(table, requested)
            kind, action = "delta", RowDelta(files, deletes, ledger=claim, rebase=rebase)
        else:
            kind, action = "append", FastAppend(files, ledger=claim)
        current = table.metadata.current_snapshot_id
        attempt = history.invoke(
            kind, Claim(wid, stream.TOPIC, cfg.writer, position, end), base=current
        )
        try:
            outcome = table.commit(action)
        except CalvingError as err:
            history.record("error", attempt=attempt, detail=f"{type(err).__name__}: {err}")
            return EXIT_ERROR
        if isinstance(outcome, Committed):
            snap = (
                outcome.metadata.snapshot_by_id(outcome.snapshot_id)
                if outcome.snapshot_id is not None
                else None
            )
            history.record(
                "ok",
                attempt=attempt,
                snapshot=outcome.snapshot_id,
                base=snap.parent_snapshot_id if snap is not None else None,
                attempts=outcome.attempts,
                detail="found-on-refresh" if outcome.found_on_refresh else None,
            )
            if added is not None:
                locator.add(added.file_path, inserts)
        elif isinstance(outcome, Skipped):
            history.record("skip", attempt=attempt, detail=outcome.reason)
        elif isinstance(outcome, Conflicted):
            history.record(
                "conflict",
                attempt=attempt,
                attempts=outcome.attempts,
                detail=f"{type(outcome.error).__name__}: {outcome.error}",
            )
            if isinstance(outcome.error, RetriesExhaustedError):
                continue  # every attempt was a clean loss: the same batch again
            return EXIT_CONFLICT
        else:
            assert isinstance(outcome, Unknown)
            history.record("unknown", attempt=attempt, detail=str(outcome.error))
            continue  # the ledger makes trying the same batch again safe
        faults.hit("after-swap-before-checkpoint")
        write_checkpoint(cfg.checkpoint, end)
        position = end
        done += 1
        if deferred and done == cfg.arm_after:
            _arm(deferred)
    plan = catalog.fault_plan
    injected = sum(1 for e in plan.events if e.fault is not None) if plan is not None else 0
    print(json.dumps({"batches": done, "swap_faults": injected}), flush=True)
    catalog.close()
    return EXIT_DONE


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.faults.writer '<json config>'", file=sys.stderr)
        return 64
    return run(WriterConfig.from_json(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
