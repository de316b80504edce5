"""Maintenance fault scenarios: a maintenance pass (``tests.faults.maintainer``, a local
rewriter) on the table the writers stream keyed inserts and deletes into.

Every scenario: writer 0 commits 4 small files into its partition; the first pass
starts while writer 1 streams into its own partition; the pass rewrites writer 0's
files and pauses before committing them, while writer 0 commits deletes of rows in
those very files (checked: the inputs' DVs grew); then it commits (its rewrite must
carry those deletes onto the new files). A second pass follows while writer 0 finishes.
Checked after it: the invariants (``check_table``: nothing lost or duplicated, no deleted
row back, history, ledgers, DVs), and that every file under the table location is
referenced by the metadata (the filesystem catalog's version files apart) with no
journal left (``calving.commit.maintenance.journal``).

Families:

* ``maintenance-crash/<point>/<catalog>``: the first pass SIGKILLs itself at a
  ``calving.commit.faults`` point of its first commit (``after-data-files``: once the
  rewritten files are written). Before the second pass its journal is there, every
  unreferenced file is listed in it, and there are such files exactly when the pass died
  before its swap; the second pass reports them all deleted.
* ``maintenance-carry/<catalog>``: no kill; the rewrite reports the carried deletes.
* ``broken/skip-carry-over``: the same with a build whose rewrite does not carry them
  (``tests.faults.mutations``): the checker must report the rows that came back.
* ``broken/forget-journal``: a pass killed at ``before-swap`` by a build that journals
  nothing: the leftover checks must report its files.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from calving.commit.faults import POINTS
from calving.commit.maintenance.journal import JOURNAL_DIR, JournalRecord
from calving.commit.maintenance.orphans import canonical, is_catalog_version_file, referenced_files
from calving.commit.table.table import Table
from tests.faults.catalogs import IDENT, KINDS
from tests.faults.history import HistoryRecorder
from tests.faults.invariants import Violation
from tests.faults.maintainer import MaintainerConfig, maintainer_id
from tests.faults.mutations import MUTATION_ENV
from tests.faults.scenarios import (
    REPO_ROOT,
    WRITER_TIMEOUT_S,
    Context,
    Harness,
    Scenario,
    ScenarioResult,
    register,
)

#: Points where the killed pass's commit has landed: it leaves no unreferenced file.
LANDED = frozenset({"after-swap", "after-swap-before-checkpoint"})
PAUSE_WAIT_S = 120.0
_ATTEMPT_MANIFEST = re.compile(r"/metadata/[0-9a-f]{12}-(\d+)-m\d+\.avro$")
QUICK = {
    "sqlite": set(POINTS),
    "postgres": {"after-metadata-file", "after-swap"},
    "filesystem": {"after-metadata-file", "after-swap"},
}


def _landed(point: str) -> bool:
    # The filesystem catalog hits after-metadata-file before it creates the version file
    # (that creation is its swap): nothing has landed there either.
    return point in LANDED


class Pass:
    """One maintainer process."""

    def __init__(self, h: Harness, label: str, *, faults: str = "", mutation: str = "") -> None:
        self.h = h
        self.label = label
        self.faults = faults
        self.pause = h.dir / f"pause-{label}"
        self.pause.mkdir()
        self.report_path = h.dir / f"maintainer-{label}.json"
        self.log = h.dir / f"maintainer-{label}.log"
        cfg = MaintainerConfig(
            catalog=h.spec.to_json(),
            history=str(h.history),
            report=str(self.report_path),
            label=label,
            pause_dir=str(self.pause),
        )
        env = {k: v for k, v in os.environ.items() if k not in ("CALVING_FAULTS", MUTATION_ENV)}
        if faults:
            env["CALVING_FAULTS"] = faults
        if mutation:
            env[MUTATION_ENV] = mutation
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.maintainer", cfg.to_json()],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        h.result.runs += 1

    def paused(self) -> dict[str, int] | None:
        """The inputs (path -> DV cardinality seen) once the pass pauses; None if it
        exited first."""
        deadline = time.monotonic() + PAUSE_WAIT_S
        marker = self.pause / "paused"
        while time.monotonic() < deadline:
            if marker.exists():
                return dict(json.loads(marker.read_text())["inputs"])
            if self.proc.poll() is not None:
                return None
            time.sleep(0.02)
        return None

    def release(self) -> None:
        (self.pause / "go").touch()

    def wait(self, *, expect_kill: bool) -> dict[str, Any] | None:
        """Wait for the pass; its report (None when killed or failed: a violation
        unless the kill was expected)."""
        try:
            code = self.proc.wait(timeout=WRITER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # only this process, by its own handle
            self.proc.wait()
            self._violation("harness", f"maintainer {self.label} hung; {self.log}")
            return None
        if expect_kill and code == -signal.SIGKILL:
            self.h.result.faults += 1
            HistoryRecorder(self.h.history, maintainer_id(self.label), "harness").record(
                "crash", detail=self.faults
            )
            return None
        if expect_kill or code != 0:
            self._violation(
                "harness",
                f"maintainer {self.label} (faults {self.faults!r}) exited {code}: {_tail(self.log)}",
            )
            return None
        report: dict[str, Any] = json.loads(self.report_path.read_text())
        return report

    def _violation(self, invariant: str, detail: str) -> None:
        self.h.violations.append(Violation(invariant, detail))


def _tail(log: Path, lines: int = 8) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return f"(no log at {log})"


# ---------------------------------------------------------------- what is on disk


def _intermediate(location: str, snapshots: set[int]) -> bool:
    """A manifest a landed commit wrote and then merged into another: the commit
    protocol does not delete these after the swap (orphan removal does, days later)."""
    m = _ATTEMPT_MANIFEST.search(location)
    return m is not None and int(m.group(1)) in snapshots


def _on_disk(h: Harness) -> tuple[set[str], list[JournalRecord]]:
    """(unreferenced files under the table location, the maintenance journals there)."""
    catalog = h.spec.open()
    try:
        table = Table.load(catalog, IDENT)
        referenced = referenced_files(table.io, table.metadata, table.metadata_location)
        listed = table.io.list_files(table.metadata.location.rstrip("/") + "/")
        journals = [
            JournalRecord.parse(table.io.read(f.location), f.location)
            for f in listed
            if f"/{JOURNAL_DIR}/" in f.location and f.location.endswith(".json")
        ]
        stray = {
            canonical(f.location)
            for f in listed
            if canonical(f.location) not in referenced
            and not is_catalog_version_file(f.location)
            and f"/{JOURNAL_DIR}/" not in f.location
        }
        return stray, journals
    finally:
        catalog.close()


def _split(h: Harness, stray: set[str]) -> tuple[set[str], set[str]]:
    """(leftovers, intermediate manifests of landed commits) among ``stray``."""
    catalog = h.spec.open()
    try:
        snapshots = {s.snapshot_id for s in Table.load(catalog, IDENT).metadata.snapshots}
    finally:
        catalog.close()
    landed = {x for x in stray if _intermediate(x, snapshots)}
    return stray - landed, landed


def _inputs_gained_deletes(h: Harness, seen: dict[str, int]) -> bool:
    """Whether one of the paused rewrite's inputs has more deleted rows now."""
    catalog = h.spec.open()
    try:
        dvs = Table.load(catalog, IDENT).live_files().dvs
        return any((dvs[p].data_file.record_count if p in dvs else 0) > n for p, n in seen.items())
    finally:
        catalog.close()


# ---------------------------------------------------------------- the scenario


def maintenance_scenario(
    kind: str, point: str | None = None, mutation: str = ""
) -> Any:  # Callable[[Context], ScenarioResult]
    def run(ctx: Context) -> ScenarioResult:
        h = Harness(ctx, kind)
        h.run_all([(h.config(0, 20, 5, label="before"), "", False)])
        first = Pass(h, "first", faults=f"{point}=kill" if point else "", mutation=mutation)
        streaming = h.config(1, 40, 4, label="beside")
        w1 = h.start(streaming)
        seen = first.paused()
        h.run_all([(h.config(0, 30, 5, label="during-rewrite"), "", False)])
        if seen is not None:
            if not _inputs_gained_deletes(h, seen):
                h.violations.append(
                    Violation("harness", "no delete reached the paused rewrite's input files")
                )
            first.release()
        elif point != "after-data-files":
            h.violations.append(Violation("harness", f"the first pass never paused ({point})"))
        report = first.wait(expect_kill=point is not None)
        h.wait(*w1, streaming)
        stray, journals = _on_disk(h)
        listed: set[str] = set()
        if point is not None:
            listed = _check_killed_pass(h, point, stray, journals)
        else:
            _check_finished_pass(h, report, stray, journals, expect_carry=not mutation)
        second = Pass(h, "second", mutation=mutation)
        finishing = h.config(0, 40, 5, label="after")
        w0 = h.start(finishing)
        second.release()
        after = second.wait(expect_kill=False)
        h.wait(*w0, finishing)
        _check_second_pass(h, after, dead=int(point is not None), killed=listed, stray=stray)
        h.check({0: 40, 1: 40})
        return h.result

    return run


def _check_killed_pass(
    h: Harness, point: str, stray: set[str], journals: list[JournalRecord]
) -> set[str]:
    """Checks the killed pass's journal against the disk; what it lists."""
    add = h.violations.append
    if len(journals) != 1:
        add(Violation("leftovers", f"{len(journals)} journals after the killed pass, not 1"))
        return set()
    listed = {canonical(x) for x in journals[0].locations}
    leftovers, _ = _split(h, stray)
    unlisted = sorted(leftovers - listed)
    if unlisted:
        add(Violation("leftovers", f"unreferenced files not in the journal: {unlisted[:3]}"))
    if _landed(point) and leftovers:
        add(Violation("leftovers", f"{point}: landed, yet unreferenced {sorted(leftovers)[:3]}"))
    if not _landed(point) and not leftovers:
        add(Violation("harness", f"{point}: the killed pass left no file to clean up"))
    return listed


def _check_finished_pass(
    h: Harness,
    report: dict[str, Any] | None,
    stray: set[str],
    journals: list[JournalRecord],
    *,
    expect_carry: bool,
) -> None:
    leftovers, _ = _split(h, stray)
    if journals or leftovers:
        h.violations.append(
            Violation(
                "leftovers",
                f"a finished pass left {len(journals)} journals, {sorted(leftovers)[:3]}",
            )
        )
    if report is None or not expect_carry:
        return
    carried = report["jobs"]["compact"]["figures"].get("deletes_carried", 0)
    if carried < 1:
        h.violations.append(
            Violation("harness", f"the rewrite carried no delete: {report['jobs']['compact']}")
        )


def _check_second_pass(
    h: Harness, report: dict[str, Any] | None, *, dead: int, killed: set[str], stray: set[str]
) -> None:
    """The second pass deleted exactly the killed pass's unreferenced files; afterwards
    no journal and no unreferenced file is left (but landed writers' intermediate
    manifests, which no journal lists)."""
    if report is None:
        return
    deleted = len(stray & killed)
    job = report["jobs"]["leftovers"]
    got = (job["figures"].get("dead_runs"), job["figures"].get("leftovers_deleted"))
    if job["error"] or got != (dead, deleted):
        h.violations.append(
            Violation(
                "leftovers",
                f"second pass: {job}; expected {deleted} file(s) deleted of {dead} dead run(s)",
            )
        )
    after, journals = _on_disk(h)
    leftovers, _ = _split(h, after)
    remaining = sorted(leftovers | (after & killed))
    if remaining or journals:
        h.violations.append(
            Violation(
                "leftovers",
                f"after the second pass: {len(journals)} journal(s), unreferenced {remaining[:3]}",
            )
        )


# ---------------------------------------------------------------- registration


def _needs(kind: str) -> frozenset[str]:
    return frozenset({"postgres"}) if kind == "postgres" else frozenset()


for _kind in KINDS:
    for _point in POINTS:
        register(
            Scenario(
                f"maintenance-crash/{_point}/{_kind}",
                "maintenance-crash",
                maintenance_scenario(_kind, _point),
                quick=_point in QUICK[_kind],
                needs=_needs(_kind),
            )
        )
    register(
        Scenario(
            f"maintenance-carry/{_kind}",
            "maintenance-carry",
            maintenance_scenario(_kind),
            quick=_kind == "sqlite",
            needs=_needs(_kind),
        )
    )
register(
    Scenario(
        "broken/forget-journal",
        "broken",
        maintenance_scenario("sqlite", "before-swap", mutation="forget-journal"),
        quick=True,
        expect_violations=True,
    )
)
register(
    Scenario(
        "broken/skip-carry-over",
        "broken",
        maintenance_scenario("sqlite", mutation="skip-carry-over"),
        quick=True,
        expect_violations=True,
    )
)
