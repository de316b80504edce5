"""Compaction beside a hot-key CDC stream: how many rewrites Iceberg's rule would fail.

Iceberg fails a rewrite (``RewriteDataFiles``) when a delete reached one of its input
files after the rewrite was planned. calving carries such deletes onto the new files
through the rewrite's position map. Here a compaction-only pass runs every few commits
of a stream, and each group's rewrite is interleaved with the stream: after the group is
rewritten, the stream commits as many batches as fit in the rewrite's time (at least
one), and prepares one more that commits only after the rewrite did (its deletes aim at
the files the rewrite removed). Before the rewrite commits, the live deletion vectors
of its inputs are compared with those it was planned on: a grown DV is a rewrite
Iceberg's rule would fail. The failures counted for calving are real ones (groups the
compaction reports failed, stream commits that raised).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from calving.commit.errors import CalvingError
from calving.commit.maintenance.compaction import Inputs, RewriteFn, Rewritten, compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy, RewriteGroup
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import scan
from calving.commit.table.table import Table
from calving.ingest.write.rewrite import local_rewrite
from tests.bench.cdc_stream import HotKeyModel, Prepared, Stream


@dataclass
class ConcurrencyResult:
    commits: int = 0
    passes: int = 0
    rewrites_attempted: int = 0
    rewrites_committed: int = 0
    rewrites_failed: int = 0  # calving's actual failures
    iceberg_would_fail: int = 0  # a delete reached an input after planning
    deletes_carried: int = 0
    stream_commits_moved: int = 0  # stream deletes that followed a rewrite's map
    stream_failures: int = 0
    failures: list[str] = field(default_factory=list)


@dataclass
class Interleaved:
    """A ``Rewriter`` that lets the stream run while each group is being rewritten."""

    fn: RewriteFn
    stream: Stream
    model: HotKeyModel
    batch_rows: int
    result: ConcurrencyResult
    parallelism: int = 1
    pending: Prepared | None = None

    def flush(self) -> None:
        """Commit the batch prepared before the last rewrite committed."""
        if self.pending is not None:
            p, self.pending = self.pending, None
            self._stream(lambda: self.stream.commit(p))

    def _stream(self, step: object) -> None:
        try:
            step()  # type: ignore[operator]  # step is typed object: any callable the loop is handed
            self.result.commits += 1
        except CalvingError as err:
            self.result.stream_failures += 1
            self.result.failures.append(f"stream: {type(err).__name__}: {err}")

    def rewrite_many(
        self, metadata: TableMetadata, jobs: Sequence[tuple[RewriteGroup, Inputs]]
    ) -> list[Rewritten | CalvingError]:
        out: list[Rewritten | CalvingError] = []
        for group, inputs in jobs:
            self.flush()
            self.result.rewrites_attempted += 1
            t0 = time.perf_counter()
            try:
                rewritten = self.fn(metadata, group, inputs)
            except CalvingError as err:
                out.append(err)
                continue
            took = time.perf_counter() - t0
            typical = statistics.median(self.stream.latencies[-20:])
            for _ in range(max(1, round(took / typical))):
                self._stream(lambda: self.stream.step(*self.model.batch(self.batch_rows)))
            self.pending = self.stream.prepare(*self.model.batch(self.batch_rows))
            if self._deletes_reached(inputs):
                self.result.iceberg_would_fail += 1
            out.append(rewritten)
        return out

    def _deletes_reached(self, inputs: Inputs) -> bool:
        """Has any input's DV grown since planning? (Read independently of the commit.)"""
        t = self.stream.table.refresh()
        live = scan.live_files(t.io, t.metadata, t.metadata.current_snapshot)
        for f, planned in inputs:
            dv = live.dvs.get(f.file_path)
            if dv is not None and dv.data_file.record_count > len(planned):
                return True
        return False


def run_concurrent(
    compactor: Table,
    stream: Stream,
    model: HotKeyModel,
    policy: CompactionPolicy,
    *,
    commits: int,
    batch_rows: int,
    every: int,
) -> ConcurrencyResult:
    """``commits`` stream commits, a compaction pass (interleaved) after every ``every``th;
    the stream's commits made during rewrites come on top."""
    result = ConcurrencyResult()
    stream.track_moves = True
    rewriter = Interleaved(
        local_rewrite(compactor.io, policy.target_file_bytes), stream, model, batch_rows, result
    )
    for i in range(1, commits + 1):
        rewriter._stream(lambda: stream.step(*model.batch(batch_rows)))
        if i % every:
            continue
        compactor.refresh()
        report = compact(compactor, policy, rewriter)
        rewriter.flush()
        result.passes += 1
        result.rewrites_committed += report.groups_committed
        result.rewrites_failed += len(report.groups_failed)
        result.deletes_carried += report.deletes_carried
        result.failures.extend(report.groups_failed)
        print(
            f"  [maintenance] concurrent pass {result.passes} after {result.commits} commits: "
            f"{report.groups_committed}/{report.groups_planned} groups committed, "
            f"{report.deletes_carried} deletes carried",
            file=sys.stderr,
            flush=True,
        )
    result.stream_commits_moved = stream.moved_by_rewrite
    return result
