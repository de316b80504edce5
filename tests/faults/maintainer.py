"""A maintenance process for the fault scenarios: one ``run_maintenance`` pass on the
harness's table with a local rewriter, run as a subprocess and killed at will.

``python -m tests.faults.maintainer '<json config>'``

``CALVING_FAULTS`` arms ``calving.commit.faults`` points from the start, so the pass dies
at its first commit (a rewrite group's). The two points that belong to a writer's side
are hit here where a maintenance run has their counterpart: ``after-data-files`` once the
first group's new data files are written (before its position map and commit), and
``after-swap-before-checkpoint`` after each commit that landed.

With ``pause_dir``, after rewriting the group of partition ``pause_partition`` (and
before committing it) the pass writes ``<pause_dir>/paused`` (the group's inputs and the
DV cardinality the rewrite saw for each) and waits for ``<pause_dir>/go``: the harness
commits a writer's deletes on those files meanwhile, so the rewrite must carry them.

Every commit is recorded in the scenario's history (``tests.faults.history``) with the
snapshot id it will add, chosen before the attempt starts: a pass killed after its swap
leaves a snapshot that the checker can attribute. The report goes to ``report`` as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pyroaring import BitMap64

from calving.commit import faults
from calving.commit.errors import CalvingError
from calving.commit.maintenance.compaction import RewriteFn
from calving.commit.maintenance.compaction_plan import CompactionPolicy, RewriteGroup
from calving.commit.maintenance.policy import MaintenancePolicy
from calving.commit.maintenance.run import run_maintenance
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.table import attempt as attempt_module
from calving.commit.table.action import Action
from calving.commit.table.committer import CommitOutcome, Committed, Conflicted, Skipped
from calving.commit.table.table import Table
from calving.ingest.write.rewrite import local_rewrite
from tests.faults import mutations
from tests.faults.catalogs import IDENT, CatalogSpec
from tests.faults.history import HistoryRecorder

PAUSE_TIMEOUT_S = 300.0
TARGET_FILE_BYTES = 1 << 20
#: Keep every snapshot: the checker walks the whole history.
POLICY = MaintenancePolicy(
    compaction=CompactionPolicy(target_file_bytes=TARGET_FILE_BYTES, min_input_files=3),
    retain_last=100_000,
)


@dataclass
class MaintainerConfig:
    catalog: str  # CatalogSpec JSON
    history: str
    report: str
    label: str
    pause_dir: str | None = None
    pause_partition: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> MaintainerConfig:
        return MaintainerConfig(**json.loads(text))


def maintainer_id(label: str) -> str:
    return f"maintainer-{label}"


# ---------------------------------------------------------------- commits in the history

_planned: list[int] = []
_new_snapshot_id = attempt_module.new_snapshot_id


def _planned_snapshot_id() -> int:
    return _planned.pop() if _planned else _new_snapshot_id()


class RecordingTable(Table):
    """A table whose commits are recorded: invoke (with the planned snapshot id), then
    the outcome; ``after-swap-before-checkpoint`` after each landed commit."""

    history: HistoryRecorder

    def commit(self, action: Action, *, from_cache: bool = False) -> CommitOutcome:
        planned = _new_snapshot_id()
        _planned[:] = [planned]
        attempt = uuid.uuid4().hex[:12]
        self.history.record(
            "invoke",
            attempt=attempt,
            kind=type(action).__name__,
            base=self.metadata.current_snapshot_id,
            snapshot=planned,
        )
        try:
            outcome = super().commit(action, from_cache=from_cache)
        except CalvingError as err:
            self.history.record("error", attempt=attempt, detail=f"{type(err).__name__}: {err}")
            raise
        finally:
            _planned.clear()
        if isinstance(outcome, Committed):
            self.history.record("ok", attempt=attempt, snapshot=outcome.snapshot_id)
            faults.hit("after-swap-before-checkpoint")
        elif isinstance(outcome, Skipped):
            self.history.record("skip", attempt=attempt, detail=outcome.reason)
        elif isinstance(outcome, Conflicted):
            self.history.record("conflict", attempt=attempt, detail=str(outcome.error))
        else:
            self.history.record("unknown", attempt=attempt, detail=str(outcome.error))
        return outcome


# ---------------------------------------------------------------- the rewriter


def pausing_rewriter(inner: RewriteFn, cfg: MaintainerConfig) -> RewriteFn:
    """``inner``, then (first group only) ``after-data-files``, then the pause."""
    state = {"first": True, "paused": False}

    def run(
        metadata: TableMetadata, group: RewriteGroup, inputs: Sequence[tuple[DataFile, BitMap64]]
    ) -> Any:
        out = inner(metadata, group, inputs)
        if state["first"]:
            state["first"] = False
            faults.hit("after-data-files")
        if cfg.pause_dir and not state["paused"] and group.partition == (cfg.pause_partition,):
            state["paused"] = True
            _pause(Path(cfg.pause_dir), {f.file_path: len(d) for f, d in inputs})
        return out

    return run


def _pause(directory: Path, seen: dict[str, int]) -> None:
    tmp = directory / f".paused.{uuid.uuid4().hex}"
    tmp.write_text(json.dumps({"inputs": seen}))
    os.replace(tmp, directory / "paused")
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while not (directory / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"maintainer: no go in {directory} after {PAUSE_TIMEOUT_S:.0f}s")
        time.sleep(0.02)


# ---------------------------------------------------------------- the pass


def run(cfg: MaintainerConfig) -> int:
    mutations.apply(os.environ.get(mutations.MUTATION_ENV))
    attempt_module.new_snapshot_id = _planned_snapshot_id
    catalog = CatalogSpec.from_json(cfg.catalog).open()
    plain = Table.load(catalog, IDENT)
    table = RecordingTable(catalog, IDENT, plain.io, plain.metadata_location, plain.metadata)
    table.history = HistoryRecorder(cfg.history, maintainer_id(cfg.label))
    table.history.record(
        "run",
        detail=cfg.label,
        extra={
            "faults": os.environ.get("CALVING_FAULTS", ""),
            "mutation": os.environ.get(mutations.MUTATION_ENV, ""),
        },
    )
    rewriter = pausing_rewriter(local_rewrite(table.io, TARGET_FILE_BYTES), cfg)
    report = run_maintenance(table, POLICY, rewriter)
    for line in report.lines():
        print(line, flush=True)
    out = {
        "ok": report.ok,
        "jobs": {
            j.job: {"figures": j.figures, "error": j.error, "skipped": j.skipped}
            for j in report.jobs
        },
    }
    Path(cfg.report).write_text(json.dumps(out, sort_keys=True))
    catalog.close()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.faults.maintainer '<json config>'", file=sys.stderr)
        return 64
    return run(MaintainerConfig.from_json(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
