"""A keyed CDC stream driven through calving's commit path, for the maintenance benchmark.

``HotKeyModel`` is the expected table and the source of batches: each batch touches
distinct keys, most of them from a small hot set, and deletes some of the present ones
while upserting the rest (an upsert of an absent key re-inserts it). ``Stream`` commits
batches the way the sink's driver does (``calving.ingest.sink.coordinator``): refresh,
bring the primary-key index to the current snapshot (``catch_up`` after someone else
committed, e.g. a compaction), look the keys up, write the new rows' Parquet file,
commit a ``RowDelta`` whose deletion vectors drop the old rows, and apply the commit to
the index. A batch can also be *prepared* (lookup and write) and committed later, so a
rewrite can land between the two, as it does beside a pipelined stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyroaring import BitMap64

from calving.commit.index import PrimaryKeyIndex, build_from_table, catch_up
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.partition import UNPARTITIONED
from calving.commit.table import scan
from calving.commit.table.actions.row_delta import RowDelta
from calving.commit.table.table import Table
from calving.ingest.sink.driver_index import Rebase
from calving.ingest.write.task_writer import TaskWriter
from tests.bench.cdc_upsert import SCHEMA, rows

KEY_FIELD_IDS = (1,)


class HotKeyModel:
    """Keys ``0..n-1``, all present at version 0. A batch of ``size`` distinct keys takes
    ``hot_share`` of them from a hot set of ``hot_fraction * n`` keys and the rest
    uniformly; ``delete_share`` of the present ones are deleted, the others upserted."""

    def __init__(
        self,
        n_rows: int,
        *,
        hot_fraction: float = 0.01,
        hot_share: float = 0.8,
        delete_share: float = 0.1,
        seed: int = 11,
    ) -> None:
        self.versions = np.zeros(n_rows, np.int64)
        self.present = np.ones(n_rows, bool)
        self.rng = np.random.default_rng(seed)
        self.hot = self.rng.choice(n_rows, max(1, int(n_rows * hot_fraction)), replace=False)
        self.hot_share = hot_share
        self.delete_share = delete_share

    def batch(self, size: int) -> tuple[pa.Table, np.ndarray]:
        """(rows to upsert, keys to delete)."""
        n_hot = min(int(size * self.hot_share), len(self.hot))
        hot = self.rng.choice(self.hot, n_hot, replace=False)
        cold = self.rng.choice(len(self.versions), size - n_hot, replace=False)
        ids = np.unique(np.concatenate([hot, cold]))
        delete = (self.rng.random(len(ids)) < self.delete_share) & self.present[ids]
        upserts, deletes = ids[~delete], ids[delete]
        self.versions[upserts] += 1
        self.present[upserts] = True
        self.present[deletes] = False
        return rows(upserts, self.versions[upserts]), deletes

    def expected(self) -> tuple[int, int]:
        """(row count, sum(v)) of the table the stream should have made."""
        return int(self.present.sum()), int(self.versions[self.present].sum())

    def chunks(self, rows_per_file: int) -> list[pa.Table]:
        ids = np.flatnonzero(self.present).astype(np.int64)
        return [
            rows(ids[s : s + rows_per_file], self.versions[ids[s : s + rows_per_file]])
            for s in range(0, len(ids), rows_per_file)
        ]


@dataclass
class Prepared:
    """A batch looked up and written, not yet committed."""

    files: tuple[DataFile, ...]
    keys: list[pa.Table | None]
    deletes: dict[str, BitMap64]
    lookup_keys: pa.Table
    rows: int
    started: float
    started_cpu: float


@dataclass
class Stream:
    """One table's CDC stream; ``latencies[i]`` is commit i's wall time (prepare to
    index applied), including the index catch-up after another writer's commit, and
    ``cpu[i]`` its CPU time (this process)."""

    table: Table
    index: PrimaryKeyIndex
    latencies: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rows: int = 0
    catch_ups: int = 0
    #: Commits whose deletes aimed at a file a rewrite had removed meanwhile (Iceberg's
    #: RowDelta validation fails those; calving moves them through the position map).
    moved_by_rewrite: int = 0
    #: Count ``moved_by_rewrite`` (reads the live files once more per commit).
    track_moves: bool = False

    @classmethod
    def open(cls, table: Table) -> Stream:
        return cls(table, build_from_table(table.io, table.metadata, KEY_FIELD_IDS))

    def prepare(self, upserts: pa.Table, deletes: np.ndarray) -> Prepared:
        started, started_cpu = time.perf_counter(), time.process_time()
        self.table.refresh()
        if self.index.snapshot_id != self.table.metadata.current_snapshot_id:
            self.index = catch_up(self.table.io, self.index, self.table.metadata)
            self.catch_ups += 1
        ids = pa.concat_arrays(
            [upserts.column("id").combine_chunks(), pa.array(deletes, pa.int64())]
        )
        lookup_keys = pa.table({"id": ids})
        found = self.index.lookup(lookup_keys).deletes()
        writer = TaskWriter(
            self.table.io,
            self.table.metadata.location,
            SCHEMA,
            UNPARTITIONED,
            file_prefix=f"cdc-{len(self.latencies):05d}",
        )
        writer.write(upserts)
        written = writer.close()
        return Prepared(
            tuple(w.data_file for w in written),
            [w.keys for w in written],
            dict(found),
            lookup_keys,
            len(ids),
            started,
            started_cpu,
        )

    def commit(self, p: Prepared) -> float:
        if self.track_moves:
            t = self.table.refresh()
            live = scan.live_files(t.io, t.metadata, t.metadata.current_snapshot)
            if any(path not in live.data for path in p.deletes):
                self.moved_by_rewrite += 1
        rebase = Rebase(self.table.io, KEY_FIELD_IDS, p.lookup_keys)
        outcome = self.table.commit_or_raise(
            RowDelta(
                p.files, p.deletes, schema_id=self.table.metadata.current_schema_id, rebase=rebase
            )
        )
        snap = outcome.metadata.current_snapshot
        assert snap is not None
        if rebase.rebuilt is not None or snap.parent_snapshot_id != self.index.snapshot_id:
            self.index = catch_up(self.table.io, rebase.rebuilt or self.index, outcome.metadata)
            self.catch_ups += 1
        else:
            for path, positions in p.deletes.items():
                self.index.delete_positions(path, positions)
            for f, keys in zip(p.files, p.keys):
                assert keys is not None
                self.index.add_file(f.file_path, keys, row_count=f.record_count)
            self.index.snapshot_id = snap.snapshot_id
        elapsed = time.perf_counter() - p.started
        self.latencies.append(elapsed)
        self.cpu.append(time.process_time() - p.started_cpu)
        self.rows += p.rows
        return elapsed

    def step(self, upserts: pa.Table, deletes: np.ndarray) -> float:
        return self.commit(self.prepare(upserts, deletes))
