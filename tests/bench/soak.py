"""Soak: a compressed week of keyed CDC (issue 20).

A table's initial load (an insert per key, streamed as one micro-batch by a run of its
own, ``bulk_seed``), then a keyed Debezium change stream (hot keys updated often,
deletes, re-inserts of deleted keys) produced to the embedded Kafka broker; ``calving -v
run CONFIG --available-now`` with ``max_offsets_per_trigger = E`` streams it in one
micro-batch per E records with ``[maintenance] inline = true``, while a separate
``calving maintain CONFIG --every "5 seconds"`` process maintains the same table.
Maintenance's target file size is set so that the load's files are full-size files (as
a big table's are): compaction rewrites the stream's small files and the files its
deletes pass the delete ratio of, not the whole table at every pass. A monitor follows the
stream's per-batch JSON lines and at each window boundary (every ``window`` batches)
records: RSS of the driver's Python process and of its JVM child (``/proc``), the JVM's
heap and metaspace (``jcmd``), the bytes Arrow's pool holds in the driver (the window's
last batch line, ``arrow_bytes``), commit
p50/p99 of the window's batches (``commit_seconds``), the current metadata JSON's bytes
(the median of samples taken every 2 s through the window), the snapshots it keeps
(replace snapshots against the rest, and the age of the oldest),
the current snapshot's manifests, live data files per partition, full-scan seconds with
DuckDB and pyiceberg of the current snapshot and of a fresh copy of the same rows
written in one go (one file per partition), live data+delete bytes of both, and the
bytes of the primary-key index file (``calving.index.location``). The table state is
measured when the boundary is seen, a few batches past it while the stream goes on.

Figures: last/first window on commit p50, RSS and metadata bytes (goal <= 1.2x); reads
against the fresh copy (goal <= 1.3x); storage against it (goal <= 1.5x); CPU-seconds of
the driver process tree and of the maintain process beside wall time.
``--quick`` (the default): 400 batches in windows of 100 over 100,000 keys; ``--full``:
5,000 in windows of 500 over 1,000,000 keys. The full scans decode every column (DuckDB
aggregates over each; pyiceberg ``to_arrow``). tests/bench/test_soak.py runs a short one
in CI.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tests.bench.figures import Figure, at_most
from tests.support.cdc import COLUMNS, CdcStream

if TYPE_CHECKING:
    from calving.ingest.kafka.broker import EmbeddedBroker

NAME = "soak"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Params:
    batches: int = 400
    window: int = 100
    records_per_batch: int = 40  # max_offsets_per_trigger
    keys: int = 4_000
    hot_keys: int = 500  # half the changes go to these
    delete_share: float = 0.15
    partitions: int = 2
    target_file_bytes: int = 65_536
    every: str = "5 seconds"
    inline_interval: str = "5 seconds"
    #: An inline compaction between the interval's passes once a partition holds this
    #: many small files (``[maintenance] inline_compact_files``).
    inline_compact_files: int = 3
    retain_count: int = 10
    retain_age_s: int = 30
    scan_repeat: int = 2
    seed: int = 20
    #: Insert every key first in one micro-batch of its own (``calving run
    #: --available-now`` with the seed's size as ``max_offsets_per_trigger``, no
    #: maintenance), as a table's initial load is, instead of in batches of
    #: ``records_per_batch``; maintenance's target file size is then set from the seed's
    #: files (``seed_target``) so that they are the table's full-size files.
    bulk_seed: bool = True


def params(quick: bool) -> Params:
    if quick:
        return Params(keys=100_000)
    return Params(batches=5_000, window=500, keys=1_000_000)


# ---------------------------------------------------------------- the change stream


def soak_events(p: Params) -> CdcStream:
    """Keyed CDC: ``seed_records(p)`` records inserting every key, then
    ``p.batches * p.records_per_batch`` Kafka records of changes, half on ``p.hot_keys`` keys; a
    live key is deleted with ``p.delete_share`` (a delete and its tombstone), a deleted
    key picked again is re-inserted. A key stays on one partition."""
    rng = random.Random(p.seed)
    out = CdcStream()
    seed = seed_records(p)
    total = seed + p.batches * p.records_per_batch
    n = 0

    def upsert(k: int) -> None:
        row = {"id": k, "status": rng.choice(["new", "paid", "sent"]), "version": n}
        op = "u" if k in out.final else "c"
        out.updates += op == "u"
        value = {"before": None, "after": row, "op": op, "ts_ms": n}
        out.records.append((k % p.partitions, _key(k), json.dumps(value).encode(), None))
        out.final[k] = (k, row["status"], n)

    for k in range(seed):
        upsert(k % p.keys)
        n += 1
    while len(out.records) < total:
        k = rng.randrange(p.hot_keys) if rng.random() < 0.5 else rng.randrange(p.keys)
        if k in out.final and rng.random() < p.delete_share:
            _, status, version = out.final.pop(k)
            before = {"id": k, "status": status, "version": version}
            value = {"before": before, "after": None, "op": "d", "ts_ms": n}
            part = k % p.partitions
            out.records.append((part, _key(k), json.dumps(value).encode(), None))
            out.records.append((part, _key(k), None, None))  # tombstone
            out.deletes += 1
        else:
            upsert(k)
        n += 1
    return out


def seed_batches(p: Params) -> int:
    """The stream's batches that insert every key before the changes start (not
    windowed; 0 with ``bulk_seed``, whose seed is a run of its own)."""
    return 0 if p.bulk_seed else -(-p.keys // p.records_per_batch)


def seed_records(p: Params) -> int:
    """The records that insert every key (an insert per key with ``bulk_seed``, else
    ``seed_batches`` whole batches, the keys from the first again to fill the last)."""
    return p.keys if p.bulk_seed else seed_batches(p) * p.records_per_batch


#: Maintenance's small-file line is 3/4 of the target (``CompactionPolicy``): the seed's
#: smallest file sits at 80 % of the target, above that line, as a big table's files do.
SEED_FILL = 0.8


def seed_target(seed_file_bytes: list[int], floor: int) -> int:
    """Maintenance's target file size for a table whose seed wrote files of
    ``seed_file_bytes``: the smallest at ``SEED_FILL`` of it, and at least ``floor``."""
    return max(floor, int(min(seed_file_bytes, default=0) / SEED_FILL) + 1)


def _key(k: int) -> bytes:
    return json.dumps({"id": k}).encode()


# ---------------------------------------------------------------- processes


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(name))
    return out


def _tree(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _stat(pid: int) -> tuple[str, float, int] | None:
    """(command name, CPU seconds incl. reaped children, RSS bytes) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # exited, not yet reaped: no RSS to read (it reads 0)
        return None
    # fields[0] is state (field 3): utime..cstime are fields 14..17, rss field 24.
    cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / CLK_TCK
    return comm, cpu, int(fields[21]) * PAGE


@dataclass
class TreeSample:
    python_rss: int = 0
    jvm_rss: int = 0
    cpu_s: float = 0.0
    jvm_pid: int | None = None


@dataclass(frozen=True)
class JvmHeap:
    """The driver JVM's heap and metaspace in bytes, from ``jcmd PID GC.heap_info``
    (no collection forced): what its RSS is made of."""

    heap_used: int
    heap_committed: int
    metaspace: int


def jvm_heap(pid: int | None) -> JvmHeap | None:
    """``pid``'s heap figures, or None (no JVM, no ``jcmd``, output not understood)."""
    if pid is None or shutil.which("jcmd") is None:
        return None
    try:
        out = subprocess.run(
            ["jcmd", str(pid), "GC.heap_info"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_heap_info(out)


def parse_heap_info(text: str) -> JvmHeap | None:
    """``GC.heap_info`` output: the heap's ``total``/``used`` summed over its lines (one
    for G1's heap, one per generation for the serial and parallel collectors, as the
    CI's drivers run) and the ``Metaspace`` line's ``committed``, in KiB there."""
    heap = re.findall(r"total (\d+)K, used (\d+)K", text)
    meta = re.search(r"Metaspace\s+used \d+K, committed (\d+)K", text)
    if not heap or meta is None:
        return None
    used = sum(int(u) for _, u in heap) << 10
    committed = sum(int(t) for t, _ in heap) << 10
    return JvmHeap(used, committed, int(meta.group(1)) << 10)


def sample_tree(pid: int) -> TreeSample | None:
    """RSS of ``pid`` (the driver's Python) and of its JVM child, CPU of the tree."""
    root = _stat(pid)
    if root is None:
        return None
    s = TreeSample(python_rss=root[2], cpu_s=root[1])
    for child in _tree(pid)[1:]:
        st = _stat(child)
        if st is None:
            continue
        s.cpu_s += st[1]
        if st[0] == "java":
            s.jvm_rss += st[2]
            s.jvm_pid = child
    return s


# ---------------------------------------------------------------- measuring


@dataclass
class Window:
    index: int
    batches: int  # batches seen when measured
    commit_p50_ms: float
    commit_p99_ms: float
    python_rss: int
    jvm_rss: int
    jvm_heap: JvmHeap | None
    arrow_bytes: int | None  # the driver's Arrow pool at the window's last batch
    metadata_bytes: int
    snapshots: int  # kept by retention when measured: they make up the metadata file
    #: what the kept snapshots are: replace (maintenance) against the rest, and the
    #: seconds between the oldest kept one and the measurement (``_snapshot_mix``)
    snapshot_mix: str
    manifests: int
    files_per_partition_mean: float
    files_per_partition_max: int
    rows: int
    duckdb_s: float
    duckdb_fresh_s: float
    pyiceberg_s: float
    pyiceberg_fresh_s: float
    storage_bytes: int
    fresh_bytes: int
    index_bytes: int
    cpu_s: float
    elapsed_s: float


@dataclass
class Result:
    params: Params
    windows: list[Window] = field(default_factory=list)
    stream_rc: int | None = None
    maintain_rc: int | None = None
    batches: int = 0
    failed_batches: int = 0
    index_rebuilds: int = 0
    maintain_failed: list[str] = field(default_factory=list)
    maintain_passes: int = 0
    #: Compaction groups the maintain process gave up, by cause (``groups_given_up_by``).
    given_up_by: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    driver_cpu_s: float = 0.0
    maintain_cpu_s: float = 0.0
    readers: dict[str, bool] = field(default_factory=dict)
    expected_rows: int = 0
    log_tail: str = ""


def _local(location: str) -> str:
    return location.removeprefix("file://").removeprefix("file:")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class LogFollower:
    """The stream's per-batch JSON lines, read as the log grows."""

    def __init__(self, path: Path) -> None:
        self.path, self.pos, self.records = path, 0, []
        self._partial = ""

    def poll(self) -> list[dict[str, Any]]:
        from tests.support.maintenance_acceptance import batch_records

        with open(self.path) as f:
            f.seek(self.pos)
            text = f.read()
            self.pos = f.tell()
        text, self._partial = self._partial + text, ""
        if text and not text.endswith("\n"):
            text, _, self._partial = text.rpartition("\n")
        self.records.extend(batch_records(text))
        return self.records


class MetadataSampler:
    """The current metadata file's bytes, sampled every ``every_s`` through a window: it
    moves with the snapshots retention keeps at that moment (snapshots younger than
    ``retain_age_s``, expired every few seconds), so one sample at the boundary is noisy.
    Samples start ``settle_s`` after the first call (the stream's first batch), the
    retention age and a maintenance interval: before, the table holds less history than
    retention keeps, whatever the soak does later.
    """

    def __init__(self, config: Path, settle_s: float, every_s: float = 2.0) -> None:
        from calving.ingest.catalogs import file_io, open_catalog
        from calving.ingest.config.loader import load_config

        table = load_config(config).table
        self.catalog, self.ident = open_catalog(table, file_io(table)), table.ident
        self.every_s, self.settle_s = every_s, settle_s
        self.next_at: float | None = None
        self.samples: list[int] = []

    def sample(self) -> None:
        now = time.monotonic()
        if self.next_at is None:
            self.next_at = now + self.settle_s
        if now < self.next_at:
            return
        self.next_at = now + self.every_s
        (location,) = self.catalog.load_metadata_locations([self.ident])
        self.samples.append(_size(_local(location)))

    def window_median(self, at_boundary: int) -> int:
        """The window's median (with the boundary's own sample), and a new window."""
        samples, self.samples = [*self.samples, at_boundary], []
        return int(statistics.median(samples))


class Measurer:
    """Table figures of the stream's current snapshot against a fresh copy."""

    def __init__(self, config: Path, tmp: Path, p: Params) -> None:
        from calving.commit.catalog import SqlCatalog
        from calving.ingest.demo.verify import duckdb_connection

        self.config, self.p = config, p
        self.fresh_catalog = SqlCatalog("fresh", f"sqlite:///{tmp}/fresh.db", f"{tmp}/fresh")
        self.fresh_catalog.create_namespace(("fresh",))
        self.con = duckdb_connection()

    def close(self) -> None:
        self.con.close()

    def measure(self, index: int, batch_records: list[dict[str, Any]]) -> dict[str, Any]:
        from calving.commit.index.store import INDEX_LOCATION_PROPERTY
        from calving.commit.table import scan
        from tests.support.maintenance_acceptance import load_table

        table = load_table(self.config)
        md = table.metadata
        location = table.metadata_location
        live = table.live_files()
        per_part: dict[Any, int] = {}
        for e in live.data.values():
            per_part[e.data_file.partition] = per_part.get(e.data_file.partition, 0) + 1
        storage = sum(e.data_file.file_size_in_bytes for e in live.data.values()) + sum(
            e.data_file.file_size_in_bytes for e in live.dvs.values()
        )
        index_path = md.properties.get(INDEX_LOCATION_PROPERTY)
        index_bytes = _size(_local(index_path)) if index_path else 0
        arrow = self._pyiceberg(location)
        fresh_location, fresh_bytes = self._fresh_copy(table, arrow, index)
        times = self._scan_times(location, fresh_location, arrow.num_rows)
        commits = [b["commit_seconds"] * 1000 for b in batch_records if b["outcome"] == "committed"]
        return {
            "commit_p50_ms": _percentile(commits, 0.5),
            "commit_p99_ms": _percentile(commits, 0.99),
            "metadata_bytes": _size(_local(location)),
            "snapshots": len(md.snapshots),
            "snapshot_mix": _snapshot_mix(md.snapshots, time.time()),
            "manifests": len(scan.manifest_files(table.io, md.current_snapshot)),
            "files_per_partition_mean": statistics.mean(per_part.values()) if per_part else 0.0,
            "files_per_partition_max": max(per_part.values(), default=0),
            "rows": arrow.num_rows,
            "storage_bytes": storage,
            "fresh_bytes": fresh_bytes,
            "index_bytes": index_bytes,
            **times,
        }

    def _pyiceberg(self, location: str) -> pa.Table:
        from pyiceberg.table import StaticTable

        return StaticTable.from_metadata(location).scan().to_arrow()

    def _duckdb(self, location: str) -> int:
        """A full scan that decodes every column: a bare ``count(*)`` of a table without
        deletes is answered from the files' row counts, without reading a column."""
        path = _local(location).replace("'", "''")
        (count, *_) = self.con.execute(
            "SELECT count(*), sum(id), sum(version), sum(length(status)) "
            f"FROM iceberg_scan('{path}')"
        ).fetchone()
        return int(count)

    def _scan_times(self, location: str, fresh: str, rows: int) -> dict[str, float]:
        readers: dict[str, Callable[[str], int]] = {
            "duckdb": self._duckdb,
            "pyiceberg": lambda loc: self._pyiceberg(loc).num_rows,
        }
        out: dict[str, float] = {}
        for name, read in readers.items():
            best = {"live": float("inf"), "fresh": float("inf")}
            for _ in range(self.p.scan_repeat):  # interleaved: noise hits both alike
                for which, loc in (("live", location), ("fresh", fresh)):
                    t0 = time.perf_counter()
                    got = read(loc)
                    best[which] = min(best[which], time.perf_counter() - t0)
                    if got != rows:
                        raise AssertionError(f"{name} reads {got} rows of {which}, want {rows}")
            out[f"{name}_s"], out[f"{name}_fresh_s"] = best["live"], best["fresh"]
        return out

    def _fresh_copy(self, table: Any, arrow: pa.Table, index: int) -> tuple[str, int]:
        """The same rows as one table written in one go: one file per partition."""
        from pyiceberg.transforms import BucketTransform
        from pyiceberg.types import LongType

        from calving.commit.table.actions.fast_append import FastAppend
        from calving.commit.table.table import create_table
        from calving.ingest.write.parquet_writer import write_data_file
        from tests.support.maintenance_acceptance import BUCKETS

        md = table.metadata
        fresh = create_table(self.fresh_catalog, ("fresh", f"w{index}"), md.schema, spec=md.spec)
        rows = pa.table(
            {
                "id": arrow.column("id").cast(pa.int64()),
                "status": arrow.column("status").cast(pa.string()),
                "version": arrow.column("version").cast(pa.int64()),
            }
        ).sort_by("id")
        bucket = BucketTransform(BUCKETS).transform(LongType())
        ids = rows.column("id").to_pylist()
        parts: dict[int, list[int]] = {}
        for i, k in enumerate(ids):
            parts.setdefault(bucket(k), []).append(i)
        files = tuple(
            write_data_file(
                fresh.io,
                f"{fresh.metadata.location}/data/fresh-{b}.parquet",
                rows.take(pa.array(positions)),
                fresh.metadata.schema,
                partition=(b,),
            )
            for b, positions in sorted(parts.items())
        )
        fresh.commit_or_raise(FastAppend(files))
        fresh = fresh.refresh()
        return fresh.metadata_location, sum(f.file_size_in_bytes for f in files)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# ---------------------------------------------------------------- the run


def log(msg: str) -> None:
    print(f"  [soak] {msg}", file=sys.stderr, flush=True)


def _config(tmp: Path, bootstrap: str, topic: str, p: Params, target: int) -> Path:
    from tests.support.maintenance_acceptance import write_config

    extra = "\n".join(
        [
            "inline = true",
            f'inline_interval = "{p.inline_interval}"',
            'inline_budget = "2 seconds"',
            f"inline_compact_files = {p.inline_compact_files}",
            'commit_pause = "0.2 seconds"',
        ]
    )
    return write_config(
        tmp,
        bootstrap=bootstrap,
        topic=topic,
        max_offsets=p.records_per_batch,
        target=target,
        retain_count=p.retain_count,
        retain_age=f"{p.retain_age_s} seconds",
        extra=extra,
    )


def _bulk_seed(tmp: Path, bootstrap: str, topic: str, p: Params) -> list[int]:
    """The seed streamed in one micro-batch by a run of its own, without maintenance
    (the soak's pipeline and table, ``max_offsets_per_trigger`` = the seed): the bytes of
    the data files it wrote."""
    from tests.support import maintenance_acceptance as m

    config = m.write_config(
        tmp,
        "seed.toml",
        bootstrap=bootstrap,
        topic=topic,
        max_offsets=seed_records(p),
        retain_count=p.retain_count,
        retain_age=f"{p.retain_age_s} seconds",
    )
    t0 = time.monotonic()
    proc = m.start(["run", str(config), "--available-now"], tmp, "seed.log")
    if proc.wait(timeout=1800) != 0:
        raise RuntimeError("the seed run failed: " + (tmp / "seed.log").read_text()[-3000:])
    table = m.load_table(config)
    sizes = [e.data_file.file_size_in_bytes for e in table.live_files().data.values()]
    log(
        f"seed: {seed_records(p):,} inserts in one batch, {len(sizes)} files "
        f"({sum(sizes) / 2**20:.1f} MiB) in {time.monotonic() - t0:.0f} s"
    )
    return sizes


def _wait_for_table(config: Path, proc: subprocess.Popen[str], log_path: Path) -> None:
    from calving.commit.errors import NoSuchNamespaceError, NoSuchTableError
    from tests.support.maintenance_acceptance import load_table

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("the stream exited early: " + log_path.read_text()[-3000:])
        try:
            load_table(config)
            return
        except (NoSuchTableError, NoSuchNamespaceError):
            time.sleep(0.3)
    raise TimeoutError("the stream created no table: " + log_path.read_text()[-3000:])


def _given_up_by(lines: list[str]) -> dict[str, int]:
    """Groups given up over every pass's JSON line, by cause."""
    total: dict[str, int] = {}
    for line in lines:
        if line.startswith('{"') and '"event": "maintenance"' in line:
            for cause, n in json.loads(line).get("groups_given_up_by", {}).items():
                total[cause] = total.get(cause, 0) + n
    return dict(sorted(total.items()))


def run(p: Params, broker: EmbeddedBroker | None = None, tmp: Path | None = None) -> Result:
    """The whole soak; its own embedded broker unless ``broker`` is given, in ``tmp`` (or
    a temporary directory deleted afterwards)."""
    from calving.ingest.kafka.broker import EmbeddedBroker

    own_tmp = tmp is None
    work = Path(tempfile.mkdtemp(prefix="calving-bench-soak-")) if tmp is None else tmp
    own = None
    try:
        if broker is None:
            broker = own = EmbeddedBroker(log_path=work / "tansu.log").start()
        return _run(p, broker, work)
    finally:
        if own is not None:
            own.stop()
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)


def _run(p: Params, broker: EmbeddedBroker, tmp: Path) -> Result:
    from calving.ingest.kafka.producer import produce
    from tests.support import maintenance_acceptance as m

    topic = f"soak_{os.getpid()}_{int(time.time())}"
    broker.create_topic(topic, p.partitions)
    bootstrap = broker.bootstrap_servers
    stream = soak_events(p)
    log(
        f"{len(stream.records):,} records ({stream.updates:,} updates, {stream.deletes:,} "
        f"deletes) over {p.keys:,} keys -> "
        + ("a seed batch" if p.bulk_seed else f"~{seed_batches(p)} seed batches")
        + f", then "
        f"{p.batches:,} of changes, {p.records_per_batch} records each"
    )
    target = p.target_file_bytes
    if p.bulk_seed:
        produce(bootstrap, topic, stream.records[: seed_records(p)])
        target = seed_target(_bulk_seed(tmp, bootstrap, topic, p), floor=1024)
        produce(bootstrap, topic, stream.records[seed_records(p) :])
    else:
        produce(bootstrap, topic, stream.records)
    config = _config(tmp, bootstrap, topic, p, target)
    r = Result(p, expected_rows=len(stream.final))
    started, reaped = time.monotonic(), _reaped_children_cpu()
    seed = seed_batches(p)
    proc = m.start(["-v", "run", str(config), "--available-now"], tmp, "stream.log")
    maintain: subprocess.Popen[str] | None = None
    measurer: Measurer | None = None
    try:
        _wait_for_table(config, proc, tmp / "stream.log")
        maintain = m.start(["maintain", str(config), "--every", p.every, "--local"], tmp, "m.log")
        measurer = Measurer(config, tmp, p)
        # expiry runs in maintenance passes, one every ``every`` (5 s) at most
        metadata = MetadataSampler(config, settle_s=p.retain_age_s + 5)
        follower = LogFollower(tmp / "stream.log")
        last = TreeSample()
        maintain_cpu = 0.0
        while True:
            done = proc.poll() is not None
            records = follower.poll()
            s = sample_tree(proc.pid)
            if s is not None:
                last = s
            ms = sample_tree(maintain.pid)
            if ms is not None:
                maintain_cpu = ms.cpu_s
            k = len(r.windows)
            boundary = seed + (k + 1) * p.window
            if len(records) > seed + k * p.window:
                metadata.sample()
            if len(records) >= boundary:
                figures = measurer.measure(k, records[seed + k * p.window : boundary])
                figures["metadata_bytes"] = metadata.window_median(figures["metadata_bytes"])
                w = Window(
                    index=k + 1,
                    batches=len(records),
                    python_rss=last.python_rss,
                    jvm_rss=last.jvm_rss,
                    jvm_heap=jvm_heap(last.jvm_pid),
                    arrow_bytes=records[boundary - 1].get("arrow_bytes"),
                    cpu_s=last.cpu_s,
                    elapsed_s=time.monotonic() - started,
                    **figures,
                )
                r.windows.append(w)
                log(_row(w))
                continue
            if done:
                break
            time.sleep(0.5)
        r.stream_rc = proc.returncode
        r.seconds = time.monotonic() - started
        # Reaped, the stream counts in our children's CPU (with the JVM if it reaped it).
        after_stream = _reaped_children_cpu()
        r.driver_cpu_s = max(last.cpu_s, after_stream - reaped)
        maintain.send_signal(signal.SIGTERM)
        r.maintain_rc = maintain.wait(timeout=180)
        r.maintain_cpu_s = max(maintain_cpu, _reaped_children_cpu() - after_stream)
    finally:
        for child in (maintain, proc):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
        if measurer is not None:
            measurer.close()
    records = follower.poll()
    r.batches = len(records)
    r.failed_batches = sum(b["outcome"] == "failed" for b in records)
    r.index_rebuilds = max((b["index_rebuilds"] or 0 for b in records), default=0)
    lines = (tmp / "m.log").read_text().splitlines()
    r.maintain_failed = [line for line in lines if "FAILED" in line]
    r.maintain_passes = sum(line.startswith("maintenance of") for line in lines)
    r.given_up_by = _given_up_by(lines)
    r.log_tail = (tmp / "stream.log").read_text()[-3000:]
    if r.stream_rc == 0:
        r.readers = _readers(config, stream)
    return r


def _reaped_children_cpu() -> float:
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def _readers(config: Path, stream: CdcStream) -> dict[str, bool]:
    from tests.support.maintenance_acceptance import load_table
    from tests.support.oracles import ALL_READERS

    location = load_table(config).metadata_location
    return {name: read(location, COLUMNS) == stream.expected for name, read in ALL_READERS.items()}


def _snapshot_mix(snapshots: Any, now_s: float) -> str:
    """``R/O, S``: of the kept snapshots, R that maintenance's rewrites made (replace)
    and O others (the stream's, expiry's own), and S seconds back to the oldest."""
    replace = sum(s.operation == "replace" for s in snapshots)
    oldest = min((s.timestamp_ms for s in snapshots), default=int(now_s * 1000))
    return f"{replace}/{len(snapshots) - replace}, {now_s - oldest / 1000:.0f}"


# ---------------------------------------------------------------- reporting

HEADER = (
    "window",
    "batches",
    "py RSS MiB",
    "JVM RSS MiB",
    "JVM heap used/committed, metaspace MiB",
    "py Arrow MiB",
    "commit p50 ms",
    "commit p99 ms",
    "metadata KiB",
    "snapshots",
    "replace/other, oldest s",
    "manifests",
    "files/part mean",
    "files/part max",
    "rows",
    "duckdb ms (fresh)",
    "pyiceberg ms (fresh)",
    "storage KiB (fresh)",
    "index KiB",
    "driver CPU s",
    "elapsed s",
)


def _cells(w: Window) -> tuple[str, ...]:
    mib, kib = 1 << 20, 1 << 10
    return (
        str(w.index),
        str(w.batches),
        f"{w.python_rss / mib:.0f}",
        f"{w.jvm_rss / mib:.0f}",
        _heap_cell(w.jvm_heap),
        "-" if w.arrow_bytes is None else f"{w.arrow_bytes / mib:.1f}",
        f"{w.commit_p50_ms:.0f}",
        f"{w.commit_p99_ms:.0f}",
        f"{w.metadata_bytes / kib:.1f}",
        str(w.snapshots),
        w.snapshot_mix,
        str(w.manifests),
        f"{w.files_per_partition_mean:.1f}",
        str(w.files_per_partition_max),
        f"{w.rows:,}",
        f"{w.duckdb_s * 1000:.0f} ({w.duckdb_fresh_s * 1000:.0f})",
        f"{w.pyiceberg_s * 1000:.0f} ({w.pyiceberg_fresh_s * 1000:.0f})",
        f"{w.storage_bytes / kib:.0f} ({w.fresh_bytes / kib:.0f})",
        f"{w.index_bytes / kib:.0f}",
        f"{w.cpu_s:.0f}",
        f"{w.elapsed_s:.0f}",
    )


def _heap_cell(h: JvmHeap | None) -> str:
    mib = 1 << 20
    if h is None:
        return "-"
    return f"{h.heap_used / mib:.0f}/{h.heap_committed / mib:.0f}, {h.metaspace / mib:.0f}"


def _row(w: Window) -> str:
    return " | ".join(f"{h}={c}" for h, c in zip(HEADER, _cells(w), strict=True))


def table(r: Result) -> str:
    """One Markdown row per window."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(_cells(w)) + " |" for w in r.windows]
    return "\n".join(lines)


def to_figures(r: Result) -> list[Figure]:
    p = r.params
    if len(r.windows) < 2:
        raise RuntimeError(f"{len(r.windows)} windows measured; need 2 ({r.batches} batches)")
    first, last = r.windows[0], r.windows[-1]
    growth_goal = "last <= 1.2x first"

    def growth(label: str, a: float, b: float, goal: str = growth_goal) -> Figure:
        return Figure(
            NAME, f"{label}, last window", b, "first window", a, goal=goal,
            met=at_most(b, 1.2 * a) if goal else None,
        )  # fmt: skip

    def vs_fresh(label: str, live: float, fresh: float, limit: float) -> Figure:
        return Figure(
            NAME, f"{label}, last window", live, "fresh copy", fresh,
            goal=f"<= {limit}x fresh", met=at_most(live, limit * fresh),
        )  # fmt: skip

    note = (
        f"{r.batches:,} batches of {p.records_per_batch} records over {p.keys:,} keys "
        f"({p.hot_keys} hot), windows of {p.window}; {r.seconds:.0f} s; "
        f"stream rc {r.stream_rc}, {r.failed_batches} failed batches; maintain rc "
        f"{r.maintain_rc}, {r.maintain_passes} passes, {len(r.maintain_failed)} failed jobs, "
        f"groups given up {sum(r.given_up_by.values())} "
        f"({', '.join(f'{k} {v}' for k, v in r.given_up_by.items()) or 'none'})"
    )
    figs = [
        growth("commit p50, ms", first.commit_p50_ms, last.commit_p50_ms),
        growth("commit p99, ms", first.commit_p99_ms, last.commit_p99_ms, goal=""),
        growth("driver Python RSS, MiB", first.python_rss / 2**20, last.python_rss / 2**20),
        growth("driver JVM RSS, MiB", first.jvm_rss / 2**20, last.jvm_rss / 2**20),
        growth(
            "metadata file (gzip), KiB", first.metadata_bytes / 1024, last.metadata_bytes / 1024
        ),
        growth("snapshots kept, at the boundary", first.snapshots, last.snapshots, goal=""),
        growth("manifests", first.manifests, last.manifests, goal=""),
        growth(
            "live files per partition, max",
            first.files_per_partition_max,
            last.files_per_partition_max,
            goal="",
        ),
        growth("index file, KiB", first.index_bytes / 1024, last.index_bytes / 1024, goal=""),
        vs_fresh("DuckDB full scan, ms", last.duckdb_s * 1000, last.duckdb_fresh_s * 1000, 1.3),
        vs_fresh(
            "pyiceberg full scan, ms", last.pyiceberg_s * 1000, last.pyiceberg_fresh_s * 1000, 1.3
        ),
        vs_fresh(
            "storage (data + deletes), KiB", last.storage_bytes / 1024, last.fresh_bytes / 1024, 1.5
        ),
        Figure(
            NAME,
            "batches per second (wall)",
            r.batches / r.seconds if r.seconds else None,
            better="higher",
        ),
        Figure(
            NAME,
            "driver CPU-s per 100 batches (Python + JVM)",
            100 * r.driver_cpu_s / r.batches if r.batches else None,
        ),
        Figure(
            NAME,
            "maintain process CPU-s per 100 batches",
            100 * r.maintain_cpu_s / r.batches if r.batches else None,
            note=note,
        ),
    ]
    return figs


def figures(quick: bool) -> list[Figure]:
    r = run(params(quick))
    print(table(r))
    print()
    if r.stream_rc != 0 or r.failed_batches or r.maintain_rc != 0 or r.maintain_failed:
        raise RuntimeError(
            f"stream rc {r.stream_rc}, {r.failed_batches} failed batches, maintain rc "
            f"{r.maintain_rc}, failed jobs {r.maintain_failed[:3]}: {r.log_tail[-500:]}"
        )
    if not all(r.readers.values()):
        raise RuntimeError(f"readers disagree with the expected rows: {r.readers}")
    return to_figures(r)
