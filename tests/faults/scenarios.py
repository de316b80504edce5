"""The scenario registry and the commit-level scenario families.

A scenario is a named function from a ``Context`` (a fresh work directory, a PostgreSQL
URL when it needs one) to a ``ScenarioResult``. ``SCENARIOS`` is a plain list: other
suites append their own (streaming scenarios with Spark and Kafka, say) with
``register(Scenario(...))`` and ``python -m tests.faults`` and the test files using
``tests.faults.quick`` run them like these. ``quick`` ones are what CI runs; ``--full`` runs them all.

Families here:

* ``crash/<point>/<catalog>``: a writer SIGKILLs itself at a ``calving.commit.faults`` point
  (armed through ``CALVING_FAULTS`` after a few batches) while a second writer keeps
  committing; it is restarted unarmed and resumes from its checkpoint, replaying the
  batch the crash interrupted.
* ``replay/<catalog>``: the checkpoint is lost: a writer restarts from offset 0 with
  another batch size (batches below, across and above the ledger), then once more with
  the original one; replayed ranges must leave the table unchanged.
* ``lost-reply/<catalog>``: catalog swaps whose reply is lost (applied or not), so the
  commit loop has to resolve unknown outcomes.
* ``concurrency/<catalog>/<W>x<C>``: W writers, C batches each, appends and row deltas,
  every writer also deleting rows of one shared seed file.
* ``broken/<mutation>``: a deliberately broken build (``tests.faults.mutations``); the
  checker must report violations (``expect_violations``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from calving.commit.faults import POINTS
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.committer import Committed
from calving.commit.table.table import create_table
from calving.ingest.write.parquet_writer import write_data_file
from tests.faults import stream
from tests.faults.catalogs import IDENT, KINDS, REST_KINDS, CatalogSpec, make_spec
from tests.faults.history import HistoryRecorder, attempts, read_history, runs
from tests.faults.invariants import CheckReport, Violation, check_table
from tests.faults.mutations import MUTATION_ENV
from tests.faults.rest import LossyProxy, stop_serve, with_proxies
from tests.faults.writer import WriterConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
WRITER_TIMEOUT_S = 900.0

TABLE_PROPERTIES = {
    # Contention is the point: many clean retries, short waits.
    "commit.retry.num-retries": "1000",
    "commit.retry.min-wait-ms": "5",
    "commit.retry.max-wait-ms": "250",
    # Merge manifests early so the merge path runs under faults and contention too.
    "commit.manifest.min-count-to-merge": "8",
    # Keep the whole metadata log: the checker walks it.
    "write.metadata.previous-versions-max": "100000",
}


# ---------------------------------------------------------------- registry


@dataclass
class Context:
    workdir: Path
    pg_url: str | None = None
    log: Callable[[str], None] = lambda message: None


@dataclass
class ScenarioResult:
    name: str
    runs: int = 0  # writer processes started
    faults: int = 0  # faults injected (kills, lost replies)
    produced: int = 0  # stream records the writers had to commit
    lost: int = 0
    duplicated: int = 0
    violations: list[Violation] = field(default_factory=list)
    seconds: float = 0.0
    expect_violations: bool = False

    @property
    def passed(self) -> bool:
        return bool(self.violations) == self.expect_violations


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str
    run: Callable[[Context], ScenarioResult]
    quick: bool = False  # part of --quick and of the CI test subset
    slow: bool = False  # a bigger cell: pytest marks it slow
    needs: frozenset[str] = frozenset()  # e.g. {"postgres"}; other suites: "kafka", "spark"
    expect_violations: bool = False  # a broken build: the checker must complain


SCENARIOS: list[Scenario] = []


def register(scenario: Scenario) -> Scenario:
    if any(s.name == scenario.name for s in SCENARIOS):
        raise ValueError(f"scenario {scenario.name!r} registered twice")
    SCENARIOS.append(scenario)
    return scenario


def selected(mode: str = "quick", names: Iterable[str] = ()) -> list[Scenario]:
    wanted = list(names)
    out = [s for s in SCENARIOS if mode == "full" or s.quick]
    if wanted:
        out = [s for s in out if any(w in s.name for w in wanted)]
    return out


def run_scenario(scenario: Scenario, ctx: Context) -> ScenarioResult:
    started = time.monotonic()
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = scenario.run(ctx)
    except Exception as err:  # noqa: BLE001 - a harness failure is reported as one, not a pass
        result = ScenarioResult(scenario.name)
        result.violations.append(Violation("harness", f"{type(err).__name__}: {err}"))
    finally:
        stop_serve(ctx.workdir)  # a REST kind's server, if the scenario started one
    result.name = scenario.name
    result.expect_violations = scenario.expect_violations
    result.seconds = time.monotonic() - started
    return result


# ---------------------------------------------------------------- the harness


class Harness:
    """One table in one catalog, its history file, and the writer processes run on it."""

    def __init__(self, ctx: Context, kind: str, *, seed: bool = True) -> None:
        self.ctx = ctx
        self.dir = ctx.workdir
        self.spec: CatalogSpec = make_spec(kind, self.dir, ctx.pg_url)
        self.history = self.dir / "history.jsonl"
        self.result = ScenarioResult("")
        self.violations = self.result.violations
        self._logs = 0
        self._create_table(seed)

    def _create_table(self, seed: bool) -> None:
        catalog = self.spec.open()
        try:
            table = create_table(
                catalog, IDENT, stream.SCHEMA, spec=stream.SPEC, properties=TABLE_PROPERTIES
            )
            if not seed:
                return
            import pyarrow as pa

            rows = [
                {"topic": t, "partition": p, "offset": o, "payload": f"seed-{o}"}
                for t, p, o in stream.seed_rows()
            ]
            data = write_data_file(
                table.io,
                f"{table.metadata.location}/data/partition={stream.SEED_PARTITION}/seed.parquet",
                pa.Table.from_pylist(rows),
                table.metadata.schema,
                partition=(stream.SEED_PARTITION,),
            )
            recorder = HistoryRecorder(self.history, "setup")
            attempt = recorder.invoke("seed", None, None)
            outcome = table.commit(FastAppend((data,)))
            assert isinstance(outcome, Committed), outcome
            recorder.record("ok", attempt=attempt, snapshot=outcome.snapshot_id)
        finally:
            catalog.close()

    def config(self, w: int, records: int, batch: int, **kw: object) -> WriterConfig:
        return WriterConfig(
            catalog=self.spec.to_json(),
            writer=w,
            records=records,
            batch=batch,
            history=str(self.history),
            checkpoint=str(self.dir / f"checkpoint-{w}.json"),
            **kw,  # type: ignore[arg-type]  # kw holds the scenario's optional settings, typed per key by the runner
        )

    def start(
        self, cfg: WriterConfig, faults: str = "", mutation: str = ""
    ) -> tuple[subprocess.Popen[bytes], Path]:
        env = {k: v for k, v in os.environ.items() if k not in ("CALVING_FAULTS", MUTATION_ENV)}
        if faults:
            env["CALVING_FAULTS"] = faults
        if mutation:
            env[MUTATION_ENV] = mutation
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self._logs += 1
        log = self.dir / f"writer-{cfg.writer}-{self._logs}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.writer", cfg.to_json()],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.result.runs += 1
        return proc, log

    def wait(
        self,
        proc: subprocess.Popen[bytes],
        log: Path,
        cfg: WriterConfig,
        *,
        faults: str = "",
        expect_kill: bool = False,
    ) -> int:
        try:
            code = proc.wait(timeout=WRITER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()  # only this writer, by its own handle
            proc.wait()
            self.violations.append(
                Violation("harness", f"writer {cfg.writer} hung ({WRITER_TIMEOUT_S:.0f}s); {log}")
            )
            return -1
        if code == -signal.SIGKILL and expect_kill:
            self.result.faults += 1
            HistoryRecorder(self.history, stream.writer_id(cfg.writer), "harness").record(
                "crash", detail=faults
            )
        elif expect_kill:
            self.violations.append(
                Violation(
                    "harness",
                    f"writer {cfg.writer} armed with {faults!r} exited {code} instead of "
                    f"dying at the fault point: {_tail(log)}",
                )
            )
        elif code != 0:
            self.violations.append(
                Violation("writer", f"writer {cfg.writer} exited {code}: {_tail(log)}")
            )
        else:
            stats = _last_json(log)
            self.result.faults += int(stats.get("swap_faults", 0))
        return code

    def run_all(self, jobs: list[tuple[WriterConfig, str, bool]], mutation: str = "") -> list[int]:
        """Run writers concurrently: (config, CALVING_FAULTS, expect a kill)."""
        started = [
            (self.start(cfg, faults, mutation), cfg, faults, kill) for cfg, faults, kill in jobs
        ]
        return [
            self.wait(proc, log, cfg, faults=faults, expect_kill=kill)
            for (proc, log), cfg, faults, kill in started
        ]

    def check(self, ledgers: dict[int, int]) -> CheckReport:
        catalog = self.spec.open()
        try:
            report = check_table(
                catalog,
                IDENT,
                events=read_history(self.history),
                expected_rows=stream.expected_rows(ledgers),
                columns=stream.COLUMNS,
                expected_ledgers={
                    stream.writer_id(w): {(stream.TOPIC, w): end} for w, end in ledgers.items()
                },
            )
        finally:
            catalog.close()
        self.result.produced = stream.produced_records(ledgers)
        self.result.lost = report.lost
        self.result.duplicated = report.duplicated
        self.violations.extend(report.violations)
        return report

    def snapshot_ids(self) -> list[int]:
        from calving.commit.table.table import Table

        catalog = self.spec.open()
        try:
            return [s.snapshot_id for s in Table.load(catalog, IDENT).metadata.snapshots]
        finally:
            catalog.close()


def _tail(log: Path, lines: int = 8) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return f"(no log at {log})"


def _last_json(log: Path) -> dict[str, object]:
    try:
        for line in reversed(log.read_text(errors="replace").splitlines()):
            if line.startswith("{"):
                return json.loads(line)
    except (OSError, ValueError):
        pass
    return {}


# ---------------------------------------------------------------- families


CRASH_RECORDS, CRASH_BATCH, CRASH_ARM_AFTER = 40, 5, 3


def crash_scenario(
    point: str, kind: str, mutation: str = ""
) -> Callable[[Context], ScenarioResult]:
    """Writer 0 dies at ``point`` in its 4th-or-later batch while writer 1 commits too;
    writer 0 restarts unarmed from its checkpoint."""

    def run(ctx: Context) -> ScenarioResult:
        h = Harness(ctx, kind)
        armed = f"{point}=kill"
        crashing = h.config(0, CRASH_RECORDS, CRASH_BATCH, arm_after=CRASH_ARM_AFTER)
        other = h.config(1, CRASH_RECORDS, 4)
        h.run_all([(crashing, armed, True), (other, "", False)], mutation)
        restart = h.config(0, CRASH_RECORDS, CRASH_BATCH, label="restart")
        h.run_all([(restart, "", False)], mutation)
        h.check({0: CRASH_RECORDS, 1: CRASH_RECORDS})
        return h.result

    return run


def replay_scenario(kind: str, mutation: str = "") -> Callable[[Context], ScenarioResult]:
    """Lost checkpoints: replays from offset 0 must not change the table below the ledger."""

    def run(ctx: Context) -> ScenarioResult:
        h = Harness(ctx, kind)
        first, total = 22, 40
        h.run_all([(h.config(0, first, 5, label="first"), "", False)], mutation)
        before = h.snapshot_ids()
        # Checkpoint lost and batch size changed: [0,7) [7,14) [14,21) are replays,
        # [21,28) straddles the ledger (22) and is trimmed, the rest is new.
        resplit = h.config(0, total, 7, start=0, label="resplit")
        h.run_all([(resplit, "", False)], mutation)
        events = read_history(h.history)
        # Only the re-split run replays: the first run committed [0, first) legitimately.
        resplit_runs = {ev.run for ev in runs(events) if ev.detail == "resplit"}
        replays = 0
        for a in attempts(events):
            c = a.claim
            if c is None or a.invoke.run not in resplit_runs:
                continue
            replays += c.end <= first
            if c.end <= first and a.status != "skip":
                h.violations.append(
                    Violation(
                        "replay",
                        f"replayed batch [{c.start}, {c.end}) below the ledger {first} "
                        f"ended {a.status}, not skip",
                    )
                )
        if replays < first // 7:
            h.violations.append(
                Violation("harness", f"expected {first // 7} replayed batches, saw {replays}")
            )
        after_resplit = h.snapshot_ids()
        if after_resplit[: len(before)] != before:
            h.violations.append(Violation("replay", "the replay rewrote earlier history"))
        # Once more from 0 with the original batch size: everything is a replay.
        again = h.config(0, total, 5, start=0, label="again")
        h.run_all([(again, "", False)], mutation)
        if h.snapshot_ids() != after_resplit:
            h.violations.append(Violation("replay", "replaying committed offsets added snapshots"))
        h.check({0: total})
        return h.result

    return run


def lost_reply_scenario(kind: str) -> Callable[[Context], ScenarioResult]:
    def run(ctx: Context) -> ScenarioResult:
        h = Harness(ctx, kind)
        a = h.config(0, 40, 5, swap_fault="applied-reply-lost", swap_fault_every=3)
        b = h.config(1, 40, 5, swap_fault="not-applied-reply-lost", swap_fault_every=4)
        h.run_all([(a, "", False), (b, "", False)])
        h.check({0: 40, 1: 40})
        return h.result

    return run


CONCURRENCY_BATCH = 4


def concurrency_scenario(
    kind: str, writers: int, commits: int, mutation: str = ""
) -> Callable[[Context], ScenarioResult]:
    records = commits * CONCURRENCY_BATCH

    def run(ctx: Context) -> ScenarioResult:
        h = Harness(ctx, kind)
        jobs = [(h.config(w, records, CONCURRENCY_BATCH), "", False) for w in range(writers)]
        h.run_all(jobs, mutation)
        h.check({w: records for w in range(writers)})
        return h.result

    return run


# ---------------------------------------------------------------- registration


def _needs(kind: str) -> frozenset[str]:
    return frozenset({"postgres"}) if kind.endswith("postgres") else frozenset()


def rest_lost_reply_scenario(kind: str) -> Callable[[Context], ScenarioResult]:
    """Two writers through lossy proxies: every 3rd commit of writer 0 lands but its
    answer is dropped, every 4th of writer 1 is dropped before reaching the server."""

    def run(ctx: Context) -> ScenarioResult:
        h = Harness(ctx, kind)

        def writers(proxies: list[LossyProxy]) -> None:
            jobs = [
                (replace(h.config(w, 40, 5), catalog=h.spec.via(p.url).to_json()), "", False)
                for w, p in enumerate(proxies)
            ]
            h.run_all(jobs)

        injected = with_proxies(h.spec.uri, [("applied", 3), ("not-applied", 4)], writers)
        h.result.faults += injected
        if injected < 2:
            h.violations.append(Violation("harness", f"only {injected} replies were lost"))
        h.check({0: 40, 1: 40})
        return h.result

    return run


QUICK_CRASH = {
    "sqlite": set(POINTS),
    "postgres": {"before-swap", "after-swap"},
    "filesystem": {"after-metadata-file", "after-swap-before-checkpoint"},
}
for _kind in KINDS:
    for _point in POINTS:
        register(
            Scenario(
                f"crash/{_point}/{_kind}",
                "crash",
                crash_scenario(_point, _kind),
                quick=_point in QUICK_CRASH[_kind],
                needs=_needs(_kind),
            )
        )
for _kind in KINDS:
    register(
        Scenario(
            f"replay/{_kind}",
            "replay",
            replay_scenario(_kind),
            quick=_kind == "sqlite",
            needs=_needs(_kind),
        )
    )
for _kind in KINDS:
    register(
        Scenario(
            f"lost-reply/{_kind}",
            "lost-reply",
            lost_reply_scenario(_kind),
            quick=_kind == "postgres",
            needs=_needs(_kind),
        )
    )
for _kind in REST_KINDS:
    register(
        Scenario(
            f"lost-reply/{_kind}",
            "lost-reply",
            rest_lost_reply_scenario(_kind),
            quick=True,
            needs=_needs(_kind),
        )
    )
    for _point in ("before-swap", "after-swap"):
        register(
            Scenario(
                f"crash/{_point}/{_kind}",
                "crash",
                crash_scenario(_point, _kind),
                quick=_kind == "rest-sqlite",
                needs=_needs(_kind),
            )
        )
QUICK_CELLS = {("sqlite", 2, 10), ("postgres", 2, 10), ("filesystem", 2, 10), ("sqlite", 5, 10)}
QUICK_CELLS |= {("rest-sqlite", 2, 10), ("rest-sqlite", 5, 10), ("rest-postgres", 2, 10)}
SLOW_QUICK_CELLS = {("postgres", 8, 50)}
for _kind in KINDS + REST_KINDS:
    for _writers in (2, 5, 8):
        for _commits in (10, 50):
            _cell = (_kind, _writers, _commits)
            register(
                Scenario(
                    f"concurrency/{_kind}/{_writers}x{_commits}",
                    "concurrency",
                    concurrency_scenario(_kind, _writers, _commits),
                    quick=_cell in QUICK_CELLS or _cell in SLOW_QUICK_CELLS,
                    slow=_writers * _commits >= 100,
                    needs=_needs(_kind),
                )
            )
register(
    Scenario(
        "broken/skip-ledger",
        "broken",
        crash_scenario("after-swap-before-checkpoint", "sqlite", mutation="skip-ledger"),
        quick=True,
        expect_violations=True,
    )
)
register(
    Scenario(
        "broken/forget-dv",
        "broken",
        concurrency_scenario("sqlite", 2, 10, mutation="forget-dv"),
        quick=True,
        expect_violations=True,
    )
)

# Streaming families (Spark drivers against the embedded broker) and maintenance passes
# beside the writers (killed at commit points; the carry-over) register themselves.
from tests.faults import maintenance, maintenance_matrix, many_tables, streaming  # noqa: F401
