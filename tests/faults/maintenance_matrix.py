"""The hostile-shape matrix of maintenance beside a live stream (issue 20, part 3):
``maintenance-matrix/<shape>/<cadence>/<catalog>[/sharded]``.

Each cell streams keyed Debezium CDC (creates, updates, deletes with tombstones) with
``calving run CONFIG --available-now`` while maintenance runs beside it: ``calving
maintain CONFIG --every CADENCE --local`` in a second process, or ``[maintenance] inline
= true`` (cadence ``inline``: the stream's driver runs the passes). The table's
``commit.retry.num-retries`` is 0, so a swap the stream lost to maintenance that counted
against its retries fails the stream: a build that counts them is caught by any cell
where a maintenance commit lands during a stream commit.

Shapes: ``unpartitioned``; ``identity-string`` (identity on a string unique per key:
1,500 partitions); ``bucket-x-truncate`` (``bucket(8, id)`` x ``truncate(4, name)``,
hundreds of partitions of a few rows); ``day-late`` (``day(ts)``, 15% of events dated
1-30 days back); ``hot-keys`` (half the events on 20 keys, each updated in every batch).
Required: the stream exits 0 with no failed batch; maintenance exits 0 and no pass
failed (a group given up is allowed); pyiceberg, DuckDB and pyiceberg-core equal the
model. Every cell is in ``--full``: every shape at every cadence on SQLite, every shape
at 2 s on PostgreSQL and through the REST catalog; and ``/sharded`` (the table's
primary-key index in sharded mode, ``calving.index.mode = "sharded"``: lookups on the
executors, shards following every compaction's position map) for every shape at 0.5 s,
2 s and inline on SQLite. CI runs ``QUICK_CELLS`` and the broken build, and the bucket
x truncate cell at 2 s on SQLite as tests/ingest/test_maintenance_priority.py.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.faults.catalogs import make_spec
from tests.faults.invariants import Violation
from tests.faults.scenarios import Context, Scenario, ScenarioResult, register
from tests.faults.streaming import StreamResult

NEEDS = frozenset({"kafka", "spark"})
COLUMNS = ["id", "name", "version"]
STREAM_TIMEOUT_S = 900.0
BASE_TS = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Shape:
    partition: tuple[str, ...]
    keys: int = 2500
    events: int = 9000
    unique_names: bool = False  # name = "s<key>": one identity partition per key
    late: bool = False  # 15% of events dated 1-30 days back
    hot: int = 0  # this many hot keys take half the events


SHAPES = {
    "unpartitioned": Shape(()),
    "identity-string": Shape(("name",), keys=1500, events=4000, unique_names=True),
    "bucket-x-truncate": Shape(("bucket(8, id)", "truncate(4, name)")),
    "day-late": Shape(("day(ts)",), late=True),
    "hot-keys": Shape(("bucket(4, id)",), hot=20),
}
CADENCES = {"0.5s": "500 milliseconds", "2s": "2 seconds", "5s": "5 seconds", "inline": ""}
CATALOGS = ("sqlite", "postgres", "rest-sqlite")

_PREFIXES = [a + b + "x" + c for a in "abcd" for b in "efgh" for c in "ij"]
_PREFIXES += [p[:3] + "z" for p in _PREFIXES[:28]]


def cdc_events(
    shape: Shape, partitions: int = 2, seed: int = 20
) -> tuple[list[Any], dict[int, tuple[int, str, int]]]:
    """Debezium change events of ``shape`` and the model's final rows by key."""
    rng = random.Random(seed)
    final: dict[int, tuple[int, str, int]] = {}
    records: list[Any] = []
    for n in range(shape.events):
        hot = shape.hot and n % 2 == 0
        k = rng.randrange(shape.hot) if hot else rng.randrange(shape.keys)
        key = json.dumps({"id": k}).encode()
        part = k % partitions
        ts = BASE_TS + dt.timedelta(seconds=n)
        if shape.late and rng.random() < 0.15:
            ts -= dt.timedelta(days=rng.randint(1, 30))
        if k in final and not hot and rng.random() < 0.2:
            _, name, version = final.pop(k)
            before = {"id": k, "name": name, "version": version, "ts": ts.isoformat()}
            value = {"before": before, "after": None, "op": "d", "ts_ms": n}
            records += [(part, key, json.dumps(value).encode(), None), (part, key, None, None)]
            continue
        if k in final:
            name = final[k][1]
        else:
            name = f"s{k}" if shape.unique_names else rng.choice(_PREFIXES) + f"-{k}"
        row = {"id": k, "name": name, "version": n, "ts": ts.isoformat()}
        value = {"before": None, "after": row, "op": "u" if k in final else "c", "ts_ms": n}
        records.append((part, key, json.dumps(value).encode(), None))
        final[k] = (k, name, n)
    return records, final


METRICS_PREFIX = "calving.metrics: "


def passes(lines: list[str]) -> list[dict[str, Any]]:
    """The JSON record of each maintenance pass: the line ``calving maintain`` prints, or
    the stream's ``calving.metrics`` log line of an inline pass."""
    out = []
    for line in lines:
        at = line.find(METRICS_PREFIX + "{")
        text = line if line.startswith("{") else line[at + len(METRICS_PREFIX) :] if at >= 0 else ""
        if text:
            record = json.loads(text)
            if record.get("event") == "maintenance":
                out.append(record)
    return out


CONFIG = """
[source]
bootstrap_servers = "{bootstrap}"
topics = ["{topic}"]
max_offsets_per_trigger = {max_offsets}

[format]
type = "debezium-json"
key_format = "json"

[table]
catalog = "{catalog}"
catalog_name = "{catalog_name}"
{warehouse}
name = "inv.items"
identifier_fields = ["id"]
partition = [{partition}]
columns = [
  {{ name = "id", type = "long", required = true }},
  {{ name = "name", type = "string" }},
  {{ name = "version", type = "long" }},
  {{ name = "ts", type = "timestamptz" }},
]
properties = {{ "commit.retry.num-retries" = "0"{properties} }}

[sink]
writer_id = "items"
checkpoint = "{tmp}/checkpoint"
trigger_interval = "200 milliseconds"

[maintenance]
rewrite_on = "local"
target_file_size_bytes = 65536
min_input_files = 2
max_commits = 10
snapshot_retention_count = 20
snapshot_retention_age = "1 hour"
{inline}
"""


def write_config(
    tmp: Path,
    shape: Shape,
    cadence: str,
    catalog: str,
    pg_url: str | None,
    bootstrap: str,
    topic: str = "items",
    max_offsets: int = 600,
    index_mode: str = "",
) -> Path:
    """The cell's pipeline TOML in ``tmp`` (and its catalog, empty); ``index_mode``:
    the table's ``calving.index.mode`` (empty: the default)."""
    spec = make_spec(catalog, tmp, pg_url)
    rest = catalog.startswith("rest-")
    inline = 'inline = true\ninline_interval = "2 seconds"\ninline_budget = "2 seconds"'
    path = tmp / "pipeline.toml"
    path.write_text(
        CONFIG.format(
            bootstrap=bootstrap,
            topic=topic,
            max_offsets=max_offsets,
            catalog=("rest+" + spec.uri) if rest else spec.uri,
            catalog_name=spec.name,
            warehouse="" if rest else f'warehouse = "{spec.warehouse}"',
            partition=", ".join(f'"{p}"' for p in shape.partition),
            tmp=tmp,
            inline=inline if cadence == "inline" else "",
            properties=(
                f', "calving.index.mode" = "{index_mode}", "calving.index.driver-step-keys" = "0"'
                if index_mode
                else ""
            ),
        )
    )
    return path


def matrix_scenario(
    shape_name: str, cadence: str, catalog: str, mutation: str = "", index_mode: str = ""
) -> Any:
    shape = SHAPES[shape_name]

    def run(ctx: Context) -> ScenarioResult:
        from calving.ingest.kafka.broker import EmbeddedBroker
        from calving.ingest.kafka.producer import produce
        from tests.faults.rest import stop_serve

        result = StreamResult("")
        records, final = cdc_events(shape)
        with EmbeddedBroker(log_path=ctx.workdir / "tansu.log") as broker:
            broker.create_topic("items", 2)
            produce(broker.bootstrap_servers, "items", records)
            result.produced = len(records)
            try:
                config = write_config(
                    ctx.workdir,
                    shape,
                    cadence,
                    catalog,
                    ctx.pg_url,
                    broker.bootstrap_servers,
                    index_mode=index_mode,
                )
                _run_cell(config, CADENCES[cadence], ctx.workdir, result, mutation)
                if index_mode and not result.violations:
                    _check_index_mode(ctx.workdir / "stream.log", index_mode, result)
                if not result.violations:
                    _check_rows(config, sorted(final.values()), result)
            finally:
                stop_serve(ctx.workdir)
        return result

    return run


def _run_cell(
    config: Path, every: str, tmp: Path, result: StreamResult, mutation: str = ""
) -> None:
    """The stream beside maintenance, then ``_judge`` of what both printed."""
    from tests.ingest.test_maintenance_acceptance import _wait_for_batches, _wait_for_table
    from tests.support import maintenance_acceptance as m

    stream = m.start(["-v", "run", str(config), "--available-now"], tmp, "stream.log", mutation)
    maintain: subprocess.Popen[str] | None = None
    result.runs += 1
    try:
        _wait_for_table(config, stream, tmp / "stream.log", limit=240)
        if every:
            maintain = m.start(["maintain", str(config), "--every", every, "--local"], tmp, "m.log")
            result.runs += 1
        _wait_for_batches(tmp / "stream.log", stream, batches=2)
        code = stream.wait(timeout=STREAM_TIMEOUT_S)
        if maintain is not None:
            time.sleep(3)  # one more pass over the finished stream's table
            maintain.send_signal(signal.SIGTERM)
            maintain_rc = maintain.wait(timeout=120)
            if maintain_rc != 0:
                tail = (tmp / "m.log").read_text()[-1500:]
                result.violations.append(Violation("maintenance", f"exited {maintain_rc}: {tail}"))
    finally:
        for proc in (maintain, stream):
            if proc is not None and proc.poll() is None:
                proc.kill()
    _judge(tmp, code, bool(every), result)


def _judge(tmp: Path, code: int, separate: bool, result: StreamResult) -> None:
    """Violations for a failed stream or a failed pass (the separate process's JSON
    lines and the stream's inline ones), and the cell's note."""
    from tests.support import maintenance_acceptance as m

    log = (tmp / "stream.log").read_text()
    batches = m.batch_records(log)
    failed = [b for b in batches if b["outcome"] == "failed"]
    if code != 0 or failed or not batches:
        result.violations.append(
            Violation("stream", f"stream exited {code}, {len(failed)} failed: {log[-1500:]}")
        )
    lines = (tmp / "m.log").read_text().splitlines() if separate else []
    done = passes(lines + log.splitlines())
    bad = [p for p in done if not p.get("ok", True) or p.get("groups_failed")]
    if bad:
        result.violations.append(Violation("maintenance", f"{len(bad)} failed pass(es): {bad[:2]}"))
    yielded = sum(b.get("swaps_lost_to_maintenance", 0) for b in batches)
    result.notes.append(
        f"{len(batches)} batches, {len(done)} passes, "
        f"{sum(p.get('groups_committed', 0) for p in done)} groups compacted, "
        f"{sum(p.get('groups_given_up', 0) for p in done)} given up; "
        f"stream swaps lost to maintenance (not counted): {yielded}"
    )


def _check_index_mode(log: Path, mode: str, result: Any) -> None:
    """The stream really ran its primary-key index in ``mode`` (its log says so)."""
    said = f"primary-key index in {mode} mode"
    if said not in log.read_text():
        result.violations.append(Violation("harness", f"the stream's log never says {said!r}"))


def _check_rows(config: Path, expected: list[tuple[int, str, int]], result: Any) -> None:
    from tests.support import maintenance_acceptance as m
    from tests.support.oracles import ALL_READERS

    table = m.load_table(config)
    want = Counter(expected)
    for name, reader in ALL_READERS.items():
        got = Counter(reader(table.metadata_location, COLUMNS))
        if got != want:
            result.lost = max(result.lost, sum((want - got).values()))
            result.duplicated = max(result.duplicated, sum((got - want).values()))
            result.violations.append(Violation("rows", f"{name} differs from the model"))


#: The cells CI runs (tests/faults/test_maintenance_scenarios.py): every shape, cadence,
#: catalog and index mode at least once (bucket x truncate at 2 s on SQLite is
#: tests/ingest/test_maintenance_priority.py), about 30 s each here.
QUICK_CELLS = {
    "identity-string/2s/postgres",
    "day-late/2s/rest-sqlite",
    "hot-keys/0.5s/sqlite/sharded",
    "unpartitioned/inline/sqlite",
    "unpartitioned/5s/sqlite",
}
#: Sharded mode's cells (``--full``): every shape at these cadences on SQLite.
SHARDED_CADENCES = ("0.5s", "2s", "inline")

for _shape in SHAPES:
    for _cadence in CADENCES:
        for _catalog in CATALOGS:
            if _catalog != "sqlite" and _cadence != "2s":
                continue
            register(
                Scenario(
                    f"maintenance-matrix/{_shape}/{_cadence}/{_catalog}",
                    "maintenance-matrix",
                    matrix_scenario(_shape, _cadence, _catalog),
                    quick=f"{_shape}/{_cadence}/{_catalog}" in QUICK_CELLS,
                    slow=True,
                    needs=NEEDS | ({"postgres"} if "postgres" in _catalog else set()),
                )
            )
for _shape in SHAPES:
    for _cadence in SHARDED_CADENCES:
        _cell = f"{_shape}/{_cadence}/sqlite/sharded"
        register(
            Scenario(
                f"maintenance-matrix/{_cell}",
                "maintenance-matrix",
                matrix_scenario(_shape, _cadence, "sqlite", index_mode="sharded"),
                quick=_cell in QUICK_CELLS,
                slow=True,
                needs=NEEDS,
            )
        )
register(
    Scenario(
        "broken/maintenance-matrix-counted",
        "broken",
        matrix_scenario("bucket-x-truncate", "0.5s", "sqlite", mutation="count-maintenance-losses"),
        quick=True,
        slow=True,
        needs=NEEDS,
        expect_violations=True,
    )
)
