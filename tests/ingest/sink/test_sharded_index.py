"""Sharded mode through the coordinator, stage 2 run in-process (``LocalResolver``):
upserts and deletes land exactly as in driver mode, as pyiceberg reads the table; the
driver holds a manifest, never a key; each commit names the previous commit's manifest;
a restart, another writer's commit, a corrupt shard, a stale cached shard and the
switches between driver and sharded mode all leave the table exact."""

from __future__ import annotations

import copy
import logging
import random
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calving.commit.index import INDEX_LOCATION_PROPERTY, shard_lookup
from calving.commit.index.shard_lookup import LocalResolver
from calving.commit.index.sharded import ShardedIndex, names_shards
from calving.commit.index.shards import ShardFile, read_manifest
from calving.commit.index.task_steps import run_task_steps
from calving.commit.io import FileIO, local_path
from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.maintenance.orphans import find_orphans
from calving.commit.spec.schema import Schema
from calving.commit.spec.types import INT, LONG, NestedField
from calving.commit.table.actions.fast_append import FastAppend
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.actions.update_schema import UpdateSchema
from calving.commit.table.ledger import OffsetRange
from calving.commit.table.table import Table, create_table
from calving.ingest.sink.coordinator import Coordinator, ParsedMessages
from calving.ingest.sink.messages import DataFileWritten, KeysDeleted, ShardStepsTaken
from calving.ingest.write.rewrite import local_rewrite
from tests.support.cdc_history import Step, run_history, steps_strategy
from tests.support.cdc_history import sqlite_catalog as cdc_sqlite_catalog
from tests.support.oracles import pyiceberg_rows
from tests.support.tables import EVENTS, row, write_partitioned

pytestmark = pytest.mark.integration

TOPIC = "events"


class Writer:
    """Batches through a sharded coordinator, and the rows the table should hold."""

    def __init__(self, table: Table, *, sharded: bool = True, shards: int = 4) -> None:
        self.table = table
        self.key_ids = table.metadata.schema.identifier_field_ids
        self.shards = shards
        self.sharded = sharded
        self.expected: dict[int, str] = {}
        self.offset = 0
        self.coordinator = self._coordinator()

    def _coordinator(self) -> Coordinator:
        c = Coordinator(self.table, "writer-1", index_save_every=1)
        if self.sharded:
            c.sharded = ShardedIndex(self.table.io, LocalResolver(), shard_count=self.shards)
        return c

    def restart(self, *, sharded: bool | None = None) -> None:
        if sharded is not None:
            self.sharded = sharded
        self.table.refresh()
        self.coordinator = self._coordinator()

    def batch(self, upserts: dict[int, str], deletes: Sequence[int] = ()) -> Any:
        prepared = self.prepare(upserts, deletes)
        assert prepared.action is not None
        outcome = self.table.commit(prepared.action, from_cache=True)
        return self.finish(prepared, upserts, deletes, outcome)

    def finish(
        self, prepared: Any, upserts: dict[int, str], deletes: Sequence[int], outcome: Any = None
    ) -> Any:
        if outcome is None:
            outcome = self.table.commit(prepared.action, from_cache=True)
        stats = self.coordinator.finish(prepared, outcome)
        assert stats.outcome == "committed"
        self.expected.update(upserts)
        for key in deletes:
            self.expected.pop(key, None)
        return stats

    def _keys(self, ids: list[int]) -> pa.Table:
        """The key columns of rows ``ids`` (``row()`` puts every row in region eu)."""
        names = [self.table.metadata.schema.find_field(f).name for f in self.key_ids]
        columns = {"id": pa.array(ids, pa.int64()), "region": pa.array(["eu"] * len(ids))}
        return pa.table({n: columns[n] for n in names})

    def prepare(self, upserts: dict[int, str], deletes: Sequence[int] = ()) -> Any:
        parsed = ParsedMessages()
        rows = [row(i, payload=p) for i, p in upserts.items()]
        for data_file, members in write_partitioned(self.table, rows) if rows else []:
            keys = self._keys([m["id"] for m in members])
            parsed.files.append((data_file, keys))
        if deletes:
            parsed.delete_keys.append(self._keys(list(deletes)))
        records = len(upserts) + len(deletes)
        parsed.ranges[(TOPIC, 0)] = OffsetRange(self.offset, self.offset + records)
        self.offset += records
        return self.coordinator.prepare(self.offset, parsed)

    def check(self) -> None:
        got = pyiceberg_rows(self.table.refresh().metadata_location, ["id", "payload"])
        ids = [i for i, _ in got]
        assert len(ids) == len(set(ids)), "a key has two live rows"
        assert dict(got) == self.expected


def _task_batch(
    writer: Writer,
    upserts: dict[int, str],
    deletes: Sequence[int],
    partitions: bool = False,
    read_ahead: bool = False,
) -> Any:
    """A batch whose keys two write tasks (odd and even ids) resolve themselves;
    ``partitions``: the tasks know their partitions (0 and 1), as Spark tasks do;
    ``read_ahead``: each task starts by reading its shards ahead, as Spark's do."""
    job = writer.coordinator.shard_job()
    assert job is not None and job.in_task
    messages: list[Any] = []
    for task in (0, 1):
        mine = {k: v for k, v in upserts.items() if k % 2 == task}
        gone = [k for k in deletes if k % 2 == task]
        rows = [row(i, payload=p) for i, p in mine.items()]
        files = [
            (f, writer._keys([m["id"] for m in members]))
            for f, members in (write_partitioned(writer.table, rows) if rows else [])
        ]
        deleted = [writer._keys(gone)] if gone else []
        messages += [DataFileWritten(f, k) for f, k in files]
        messages += [KeysDeleted(k) for k in deleted]
        if read_ahead:  # beside the task's writes
            shard_lookup.read_ahead_in_background(job, task if partitions else None)
        steps = run_task_steps(job, files, deleted, task if partitions else None)
        shard_lookup.tidy_in_background()  # as a write task ends: beside what follows
        messages.append(ShardStepsTaken(steps))
    parsed = ParsedMessages.of(messages)
    records = len(upserts) + len(deletes)
    parsed.ranges[(TOPIC, 0)] = OffsetRange(writer.offset, writer.offset + records)
    writer.offset += records
    prepared = writer.coordinator.prepare(writer.offset, parsed)
    return writer.finish(prepared, upserts, deletes)


@pytest.mark.parametrize("read_ahead", [False, True], ids=["in-step", "read-ahead"])
def test_write_tasks_leave_their_worker_the_shard_as_the_manifest_names_it(
    sqlite_catalog: Any, read_ahead: bool
) -> None:
    """Two write tasks in one process step the same shard: the second finds the shard
    the first left (the manifest's chain, not the first task's delta applied), and the
    next batch brings it forward by the batch's two deltas, read in order (by the step,
    or by the task's read-ahead: counted once either way)."""
    table = create_table(
        sqlite_catalog,
        ("db", f"in_tasks_{read_ahead}"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0"},
    )
    writer = Writer(table, shards=1)
    rng = random.Random(5)
    shard_lookup.CACHE.clear()
    for b in range(4):
        upserts = {k: f"b{b}-{k}" for k in rng.sample(range(200), 40)}
        live = sorted(set(writer.expected) - set(upserts))
        hits, misses = shard_lookup.CACHE.hits, shard_lookup.CACHE.misses
        _task_batch(writer, upserts, rng.sample(live, min(len(live), 6)), read_ahead=read_ahead)
        if b:  # the first task: not the new chain (a miss) but its earlier state (a
            # hit), brought forward; the second: the very chain the first left.
            got = (shard_lookup.CACHE.hits, shard_lookup.CACHE.misses)
            assert got == (hits + 2, misses + 1)
        sharded = writer.coordinator.sharded
        assert sharded is not None and sharded.manifest is not None
        assert len(sharded.manifest.shards[0].deltas) == 2 * (b + 1)  # a delta a task
    writer.check()
    assert sharded.in_tasks == 4 and sharded.rebuilds == 0


@pytest.mark.parametrize("read_ahead", [False, True], ids=["in-step", "read-ahead"])
@pytest.mark.parametrize("deltas", ["16", "2"], ids=["chained", "rebased"])
def test_a_worker_reads_back_only_the_other_tasks_deltas(
    sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch, deltas: str, read_ahead: bool
) -> None:
    """Two write tasks in two workers (a cache each): a worker brings its cached
    shards forward by the batch's deltas, its own from what it remembered when it wrote
    them, the other task's read from storage; the table reads back exactly, with
    chains that grow (``chained``) and with a rebase every batch (``rebased``). With
    the read-ahead, every delta is read in its thread, none by the steps."""
    table = create_table(
        sqlite_catalog,
        ("db", f"own_deltas_{deltas}_{read_ahead}"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0", "calving.index.shard-deltas": deltas},
    )
    writer = Writer(table, shards=2)
    caches = [shard_lookup.ShardCache(), shard_lookup.ShardCache()]
    wrote: list[set[str]] = [set(), set()]
    read: list[set[str]] = [set(), set()]
    threads: set[str] = set()
    worker = [0]
    read_delta, step = shard_lookup.read_delta, run_task_steps

    def reading(io: Any, manifest: Any, shard: int, location: str) -> Any:
        read[worker[0]].add(location)
        threads.add(threading.current_thread().name)
        return read_delta(io, manifest, shard, location)

    def stepping(job: Any, files: Any, deleted: Any, task: int | None = None) -> Any:
        assert task is not None
        worker[0] = task
        monkeypatch.setattr(shard_lookup, "CACHE", caches[task])
        if read_ahead:
            shard_lookup.read_ahead_in_background(job)
        steps = step(job, files, deleted, task)
        assert not steps.unreadable, steps.unreadable
        wrote[task] |= {c.deltas[-1] for c in steps.chains if c.deltas}
        return steps

    monkeypatch.setattr(shard_lookup, "read_delta", reading)
    monkeypatch.setattr(sys.modules[__name__], "run_task_steps", stepping)
    rng = random.Random(7)
    for b in range(5):
        upserts = {k: f"b{b}-{k}" for k in rng.sample(range(300), 60)}
        live = sorted(set(writer.expected) - set(upserts))
        _task_batch(writer, upserts, rng.sample(live, min(len(live), 8)), partitions=True)
    writer.check()
    for me, other in ((0, 1), (1, 0)):
        assert read[me] and not read[me] & wrote[me]  # its own: never read back
        assert read[me] <= wrote[other]
    assert sum(c.hits for c in caches) >= 2 * 2 * 4  # every step after the first batch
    assert threads == ({"calving-shard-read-ahead"} if read_ahead else {"MainThread"})


def test_a_read_ahead_that_fails_or_does_not_fit_leaves_the_shards_to_the_steps(
    sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-ahead that cannot bring a shard forward leaves it to the step, which
    reads the chain again; one whose index would not fit the cache brings forward only
    the shards the worker holds, the steps reading the others (a miss each, counted
    once); the table reads back exactly."""
    table = create_table(
        sqlite_catalog,
        ("db", "read_ahead_left"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0"},
    )
    writer = Writer(table, shards=2)
    apply_changes = shard_lookup.apply_changes
    failed: list[int] = []

    def flaky(index: Any, added: Any, deleted: Any) -> None:
        if threading.current_thread().name == "calving-shard-read-ahead" and not failed:
            failed.append(len(added))
            raise OSError("connection reset")
        apply_changes(index, added, deleted)

    monkeypatch.setattr(shard_lookup, "apply_changes", flaky)
    rng = random.Random(11)
    for b in range(3):
        upserts = {k: f"b{b}-{k}" for k in rng.sample(range(200), 40)}
        live = sorted(set(writer.expected) - set(upserts))
        _task_batch(writer, upserts, rng.sample(live, min(len(live), 6)), read_ahead=True)
    assert len(failed) == 1
    writer.check()
    # An index that would not fit the cache: nothing uncached is read ahead.
    monkeypatch.setattr(shard_lookup, "READ_AHEAD_BYTES_PER_ENTRY", 1 << 40)
    shard_lookup.CACHE.clear()
    job = writer.coordinator.shard_job()
    assert job is not None
    shard_lookup.read_ahead_in_background(job)
    assert len(shard_lookup.CACHE) == 0
    misses = shard_lookup.CACHE.misses
    upserts = {k: f"b3-{k}" for k in rng.sample(range(200), 40)}
    _task_batch(writer, upserts, [], read_ahead=True)
    assert shard_lookup.CACHE.misses == misses + 2  # the first task's steps read both
    writer.check()
    # One that fits: the read-ahead reads the shards, and counts their misses once.
    monkeypatch.undo()
    shard_lookup.CACHE.clear()
    misses, hits = shard_lookup.CACHE.misses, shard_lookup.CACHE.hits
    upserts = {k: f"b4-{k}" for k in rng.sample(range(200), 40)}
    _task_batch(writer, upserts, [], read_ahead=True)
    assert (shard_lookup.CACHE.misses, shard_lookup.CACHE.hits) == (misses + 2, hits + 2)
    writer.check()


@pytest.mark.parametrize("read_ahead", [False, True], ids=["in-step", "read-ahead"])
@pytest.mark.parametrize("partitions", [False, True], ids=["every-task", "one-writer"])
def test_write_tasks_rebase_a_long_chain_and_workers_keep_their_cached_shard(
    sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch, partitions: bool, read_ahead: bool
) -> None:
    """A chain due for a rebase is rebased by the write tasks stepping it (no separate
    stage) and the next batch's steps take the cached chain that base holds (a cache
    hit brought forward by the batch's deltas, not a load of the new base). Tasks that
    do not know their partitions each write the manifest's chain as a base, and the
    driver keeps the first and deletes the other; tasks that do (Spark's) leave it to
    the one the driver names, the other writing its delta on the old chain. With the
    read-ahead, the bases are written in its thread, as the tasks start."""
    table = create_table(
        sqlite_catalog,
        ("db", f"rebase_in_tasks_{partitions}_{read_ahead}"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0", "calving.index.shard-deltas": "2"},
    )
    writer = Writer(table, shards=1)
    rng = random.Random(6)
    shard_lookup.CACHE.clear()
    written: list[str] = []
    threads: set[str] = set()
    write_base = shard_lookup.write_base

    def counted(*args: Any, **kwargs: Any) -> Any:
        base = write_base(*args, **kwargs)
        written.append(base.location)
        threads.add(threading.current_thread().name)
        return base

    monkeypatch.setattr(shard_lookup, "write_base", counted)
    named: list[ShardFile] = []
    for b in range(7):
        upserts = {k: f"b{b}-{k}" for k in rng.sample(range(200), 40)}
        live = sorted(set(writer.expected) - set(upserts))
        hits, misses = shard_lookup.CACHE.hits, shard_lookup.CACHE.misses
        _task_batch(writer, upserts, rng.sample(live, min(len(live), 6)), partitions, read_ahead)
        if b:  # after a rebase too: the first task brings a cached chain forward
            assert (shard_lookup.CACHE.hits, shard_lookup.CACHE.misses) == (hits + 2, misses + 1)
        sharded = writer.coordinator.sharded
        assert sharded is not None and sharded.manifest is not None
        named.append(sharded.manifest.shards[0])
    writer.check()
    assert sharded.in_tasks == 7 and sharded.rebuilds == 0
    # Two deltas a batch, rebased once the chain would pass 2 batches' deltas.
    assert [len(c.deltas) for c in named] == [2, 4, 2, 4, 2, 4, 2]
    bases = {c.location for c in named}
    assert len(bases) == 4
    shards_dir = f"{table.metadata.location}/metadata/calving-index/shards/"
    on_storage = {f for f in table.io.list_prefix(shards_dir) if "-d-" not in f.rsplit("/", 1)[1]}
    assert {f for f in on_storage if f.endswith(".calvidx")} == bases  # spare bases deleted
    assert len(written) == (3 if partitions else 6)  # three rebases: one base or two each
    assert bases - {named[0].location} <= set(written)
    assert threads == ({"calving-shard-read-ahead"} if read_ahead else {"MainThread"})


@pytest.mark.parametrize("read_ahead", [False, True], ids=["in-step", "read-ahead"])
def test_a_due_base_its_writer_does_not_step_is_written_by_every_task_later(
    sqlite_catalog: Any, read_ahead: bool
) -> None:
    """The task named to write a due base (partition 0) has no keys: the chain stays
    long, and once it holds twice its due length every task stepping it writes it. A
    base that task's read-ahead wrote is deleted as the task ends (no step took it)."""
    table = create_table(
        sqlite_catalog,
        ("db", f"rebase_owner_idle_{read_ahead}"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0", "calving.index.shard-deltas": "2"},
    )
    writer = Writer(table, shards=1)
    rng = random.Random(7)
    lengths, bases = [], set()
    for b in range(10):  # odd keys only: task 1's
        upserts = {k: f"b{b}-{k}" for k in rng.sample(range(1, 200, 2), 20)}
        _task_batch(writer, upserts, [], partitions=True, read_ahead=read_ahead)
        sharded = writer.coordinator.sharded
        assert sharded is not None and sharded.manifest is not None
        lengths.append(len(sharded.manifest.shards[0].deltas))
        bases.add(sharded.manifest.shards[0].location)
    writer.check()
    assert lengths == [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]
    shard_lookup.CACHE.settle()  # the last task's spare bases deleted
    shards_dir = f"{table.metadata.location}/metadata/calving-index/shards/"
    on_storage = {f for f in table.io.list_prefix(shards_dir) if "-d-" not in f.rsplit("/", 1)[1]}
    assert {f for f in on_storage if f.endswith(".calvidx")} == bases


def _random_batches(writer: Writer, rng: random.Random, n: int, keys: int = 300) -> None:
    for b in range(n):
        upserts = {k: f"b{b}-{k}" for k in rng.sample(range(keys), 40)}
        live = sorted(set(writer.expected) - set(upserts))
        deletes = rng.sample(live, min(len(live), 8)) if live else []
        writer.batch(upserts, deletes)


def test_sharded_upserts_and_deletes_are_exact(sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "sharded"), EVENTS)
    writer = Writer(table)
    _random_batches(writer, random.Random(1), 25)
    writer.check()
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    assert writer.coordinator.index is None  # no driver index was built
    assert sharded.manifest.snapshot_id == table.metadata.current_snapshot_id
    assert sharded.manifest.entries == len(writer.expected)
    # Every commit names the previous commit's manifest.
    named = table.metadata.properties[INDEX_LOCATION_PROPERTY]
    assert names_shards(table.metadata) and named != sharded.location
    current = table.metadata.current_snapshot
    assert current is not None
    assert read_manifest(table.io, named).snapshot_id == current.parent_snapshot_id
    # Chains grew deltas and were rebased into new bases (16 deltas a chain by default).
    assert any(s.deltas for s in sharded.manifest.shards)


def test_restart_resumes_from_the_named_manifest_without_a_rebuild(
    sqlite_catalog: Any,
) -> None:
    table = create_table(sqlite_catalog, ("db", "restart"), EVENTS)
    writer = Writer(table)
    rng = random.Random(2)
    _random_batches(writer, rng, 6)
    writer.restart()
    shard_lookup.CACHE.clear()  # a new process: no cached shard
    _random_batches(writer, rng, 4)
    writer.check()
    assert writer.coordinator.sharded is not None
    assert writer.coordinator.sharded.rebuilds == 0  # caught up, never rebuilt


def test_another_writers_commit_is_caught_up_in_every_shard(sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "foreign"), EVENTS)
    writer = Writer(table)
    rng = random.Random(3)
    _random_batches(writer, rng, 4)
    # Another tool appends rows with new keys (and one duplicate of a live key).
    files = write_partitioned(table, [row(1000 + i, payload="other") for i in range(30)])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in files)))
    writer.expected.update({1000 + i: "other" for i in range(30)})
    writer.batch({1000 + i: "ours" for i in range(0, 30, 3)}, [1001])
    writer.check()
    _random_batches(writer, rng, 3)
    writer.check()
    assert writer.coordinator.sharded is not None and writer.coordinator.sharded.rebuilds == 0


def test_a_batch_that_never_committed_leaves_no_stale_shard(sqlite_catalog: Any) -> None:
    """A crash between the shard tasks' writes and the catalog swap: the deltas exist,
    and a reused worker's cache holds the shards as that batch left them, under chains
    no manifest names. The restarted writer replays the offsets; its steps never read
    those cached copies, and the table is exact."""
    table = create_table(sqlite_catalog, ("db", "stale"), EVENTS)
    writer = Writer(table, shards=2)
    rng = random.Random(4)
    _random_batches(writer, rng, 3)
    offset = writer.offset
    prepared = writer.prepare({k: "never" for k in range(0, 60, 2)}, [1, 3])
    assert prepared.resolved is not None
    speculative = [r.chain for r in prepared.resolved.results]
    assert all(shard_lookup.CACHE.take(c) is not None for c in speculative[:1])
    writer.offset = offset  # the crash: nothing committed, the offsets come again
    writer.restart()  # the cache is kept, as in a reused Python worker
    hits = shard_lookup.CACHE.hits
    _random_batches(writer, rng, 4)
    writer.check()
    assert writer.coordinator.sharded is not None
    manifest = writer.coordinator.sharded.manifest
    assert manifest is not None
    named = {f for s in manifest.shards for f in (s.location, *s.deltas)}
    assert not named & {c.deltas[-1] for c in speculative if c.deltas}
    assert shard_lookup.CACHE.hits > hits  # the later steps did use the cache


def test_a_commit_retried_onto_another_writers_snapshot_drops_its_chains(
    sqlite_catalog: Any,
) -> None:
    table = create_table(sqlite_catalog, ("db", "retried"), EVENTS)
    writer = Writer(table)
    rng = random.Random(7)
    _random_batches(writer, rng, 3)
    resolved_on = table.metadata.current_snapshot_id
    prepared = writer.prepare({k: "retried" for k in range(10)}, [20])
    other = write_partitioned(table, [row(2000 + i, payload="other") for i in range(5)])
    Table.load(sqlite_catalog, table.ident).commit_or_raise(  # another writer
        FastAppend(tuple(f for f, _ in other))
    )
    writer.expected.update({2000 + i: "other" for i in range(5)})
    writer.finish(prepared, {k: "retried" for k in range(10)}, [20])
    snapshot = table.metadata.current_snapshot
    assert snapshot is not None and snapshot.parent_snapshot_id != resolved_on
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    assert sharded.manifest.snapshot_id == resolved_on  # the chains were dropped
    writer.check()
    _random_batches(writer, rng, 3)  # the next batch catches every shard up
    writer.check()
    assert sharded.rebuilds == 0


def test_a_compaction_beside_the_stream_is_followed(sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "compacted"), EVENTS)
    writer = Writer(table)
    rng = random.Random(8)
    _random_batches(writer, rng, 6)
    policy = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2)
    other = Table.load(sqlite_catalog, table.ident)
    report = compact(other, policy, local_rewrite(other.io, policy.target_file_bytes))
    assert report.groups_committed >= 1
    _random_batches(writer, rng, 4)
    writer.check()
    assert writer.coordinator.sharded is not None and writer.coordinator.sharded.rebuilds == 0


def _corrupt_last_file(table: Table, shard: ShardFile) -> None:
    """Flip a byte of the shard's newest file (its last delta, or its base) and empty
    this process's shard cache, so the next step must read the file."""
    path = shard.deltas[-1] if shard.deltas else shard.location
    data = bytearray(table.io.read(path))
    data[30] ^= 0xFF
    with table.io.new_output_stream(path) as out:
        out.write(bytes(data))
    shard_lookup.CACHE.clear()


def test_a_corrupt_shard_is_rebuilt(sqlite_catalog: Any, caplog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "corrupt"), EVENTS)
    writer = Writer(table)
    rng = random.Random(5)
    _random_batches(writer, rng, 5)
    # The manifest the table names (a restart reads it).
    named = read_manifest(table.io, table.refresh().metadata.properties[INDEX_LOCATION_PROPERTY])
    victim = named.shards[1]
    _corrupt_last_file(table, victim)
    writer.restart()
    with caplog.at_level(logging.WARNING):
        _random_batches(writer, rng, 3)
    writer.check()
    assert "index shard 1 not used, rebuilding it" in caplog.text
    assert "checksum mismatch" in caplog.text
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.rebuilds == 1  # that shard alone


def test_a_shard_a_write_task_cannot_read_is_rebuilt_by_the_separate_stage(
    sqlite_catalog: Any, caplog: Any
) -> None:
    """A task that finds its shard's file corrupt reports it instead of failing: the
    driver leaves the tasks' steps, rebuilds that shard alone and resolves the batch in
    the separate stage; the next batches are the tasks' again."""
    table = create_table(
        sqlite_catalog,
        ("db", "corrupt_in_task"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0"},
    )
    writer = Writer(table)
    rng = random.Random(6)
    _random_batches(writer, rng, 2)
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    victim = sharded.manifest.shards[2]
    _corrupt_last_file(table, victim)
    upserts = {k: f"c-{k}" for k in range(0, 300, 3)}  # keys in every shard
    with caplog.at_level(logging.INFO, logger="calving.commit.index.sharded"):
        _task_batch(writer, upserts, [])
    assert "steps not used (shard 2: " in caplog.text
    assert sharded.in_tasks == 0 and sharded.rebuilds == 1  # that shard alone
    _task_batch(writer, {k: f"d-{k}" for k in range(1, 300, 3)}, [])
    assert sharded.in_tasks == 1
    writer.check()


def test_switching_driver_to_sharded_and_back(sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "switch"), EVENTS)
    writer = Writer(table, sharded=False)
    rng = random.Random(6)
    _random_batches(writer, rng, 4)
    assert not names_shards(table.metadata)
    writer.restart(sharded=True)
    _random_batches(writer, rng, 4)
    writer.check()
    assert writer.coordinator.sharded is not None
    assert writer.coordinator.sharded.rebuilds == 0  # the driver index was split
    writer.coordinator.save_index()
    assert names_shards(table.refresh().metadata)
    writer.restart(sharded=False)
    _random_batches(writer, rng, 4)
    writer.check()
    assert not names_shards(table.refresh().metadata)


_SETTINGS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@_SETTINGS
@given(steps=steps_strategy(10), partitioned=st.booleans())
def test_random_histories_with_compactions_keep_lineage_in_sharded_mode(
    steps: list[Step], partitioned: bool
) -> None:
    """The concurrency matrix of the driver index (batches, compactions, a compaction
    landing between a batch's plan and commit, a batch landing inside a compaction's
    rewrite), in sharded mode: after every step each snapshot reads as the model says,
    row identities included."""
    with cdc_sqlite_catalog() as catalog:
        history, _ = run_history(catalog, steps, partitioned=partitioned, keep=True, sharded=True)
    sharded = history.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None


@_SETTINGS
@given(steps=steps_strategy(10), partitioned=st.booleans())
def test_random_histories_resolved_by_the_write_tasks_steps(
    steps: list[Step], partitioned: bool
) -> None:
    """The same matrix with each batch's keys split over two write tasks that step the
    shards themselves (``task_steps``): every batch whose table no other writer moved
    since the last one is resolved from the tasks' deltas, and the snapshots, row
    identities and the shards (their entries checked against each snapshot) stay
    exact."""
    with cdc_sqlite_catalog() as catalog:
        history, _ = run_history(
            catalog, steps, partitioned=partitioned, keep=True, sharded=True, tasks=2
        )
    sharded = history.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    assert sharded.in_tasks >= 1  # the first batch at least
    assert sharded.rebuilds == 0
    if not any(s.kind != "batch" for s in steps):  # no compaction: every batch in tasks
        assert sharded.in_tasks == history.batches


def _orphans_beside_the_named_chains(table: Table) -> set[str]:
    """The files orphan removal finds now, checked to hold none of the files the
    table's shard manifest names."""
    named = read_manifest(table.io, table.metadata.properties[INDEX_LOCATION_PROPERTY])
    chained = {f for s in named.shards for f in (s.location, *s.deltas)}
    report = find_orphans(
        table.io, table.metadata, table.metadata_location, older_than_ms=int(time.time() * 1000) + 1
    )
    orphans = {f.location for f in report.orphans}
    assert not orphans & chained
    return orphans


def test_orphan_removal_keeps_the_named_shards_and_finds_the_replaced_ones(
    sqlite_catalog: Any,
) -> None:
    table = create_table(sqlite_catalog, ("db", "orphans"), EVENTS)
    writer = Writer(table)
    _random_batches(writer, random.Random(9), 20)  # past 16 deltas: chains got new bases
    table.refresh()
    orphans = _orphans_beside_the_named_chains(table)
    shard_orphans = {o for o in orphans if "/calving-index/shards/" in o}
    assert any(o.endswith(".calvidx") for o in shard_orphans)  # replaced chains' files


def test_an_int_key_widened_to_long_keeps_the_shards(sqlite_catalog: Any) -> None:
    """A mid-stream widening of the key column (int -> long) keeps every key's encoding:
    the shards follow it without a rebuild, and the batches after it stay exact."""
    fields = tuple(
        NestedField(f.field_id, f.name, INT if f.name == "id" else f.field_type, f.required)
        for f in EVENTS.fields
    )
    schema = Schema(fields, identifier_field_ids=EVENTS.identifier_field_ids)
    table = create_table(sqlite_catalog, ("db", "widened"), schema)
    writer = Writer(table)
    rng = random.Random(10)
    _random_batches(writer, rng, 3)
    table.commit_or_raise(UpdateSchema(promote=(("id", LONG),)))
    table.refresh()
    _random_batches(writer, rng, 3)
    writer.check()
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.rebuilds == 0
    assert sharded.manifest is not None and sharded.manifest.key_types == (LONG,)


@pytest.mark.parametrize("in_place", [True, False])
def test_a_worker_holding_an_older_state_of_a_shard_reads_only_the_deltas_since(
    sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch, in_place: bool
) -> None:
    """Two workers: the one that ran a shard's step two batches ago still caches the
    shard as it left it. Given the shard now, it applies the two deltas since, not the
    whole chain, and the table stays exact. Where files cannot change in place (object
    storage; here ``replace_tail`` refuses), each update's row-lineage copy renames its
    batch's file and the worker applies those renames too."""
    if not in_place:
        monkeypatch.setattr(FileIO, "replace_tail", lambda *_: False)
    table = create_table(sqlite_catalog, ("db", "two_workers"), EVENTS)
    writer = Writer(table, shards=1)
    rng = random.Random(11)
    _random_batches(writer, rng, 3)
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    chain = sharded.manifest.shards[0]
    held = shard_lookup.CACHE.take(chain)
    assert held is not None
    other_worker = copy.deepcopy(held)
    shard_lookup.CACHE.put(chain, held, 1 << 30)
    _random_batches(writer, rng, 2)  # without in-place changes, updates rename files
    shard_lookup.CACHE.clear()
    shard_lookup.CACHE.put(chain, other_worker, 1 << 30)
    hits = shard_lookup.CACHE.hits
    _random_batches(writer, rng, 1)
    writer.check()
    assert shard_lookup.CACHE.hits == hits + 1
    assert sharded.rebuilds == 0  # the older state applied, no shard rebuilt
    assert sharded.manifest is not None and bool(sharded.manifest.aliases) != in_place


@pytest.mark.parametrize(
    ("before", "after", "saved"), [(4, 8, True), (8, 2, True), (4, 1, False), (2, 16, False)]
)
def test_a_new_shard_count_splits_or_merges_the_shards_at_the_next_start(
    sqlite_catalog: Any, before: int, after: int, saved: bool
) -> None:
    """The shards' own files make the new count (no rebuild from the data files), the
    chains' deltas included, and the stream goes on exact; unsaved (a crash), the
    manifest the table names is a commit behind, which the next batch catches up."""
    name = f"reshard_{before}_{after}_{saved}".lower()
    table = create_table(sqlite_catalog, ("db", name), EVENTS)
    writer = Writer(table, shards=before)
    rng = random.Random(12)
    _random_batches(writer, rng, 4)
    if saved:
        writer.coordinator.save_index()
    table.commit_or_raise(UpdateProperties({"calving.index.shards": str(after)}))
    writer.restart()
    _random_batches(writer, rng, 3)
    writer.check()
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    assert sharded.manifest.shard_count == after
    assert (sharded.reshards, sharded.rebuilds) == (1, 0)
    assert sharded.manifest.entries == len(writer.expected)
    writer.restart()  # the count held: nothing more to do
    _random_batches(writer, rng, 1)
    writer.check()
    restarted = writer.coordinator.sharded
    assert restarted is not None and (restarted.reshards, restarted.rebuilds) == (0, 0)


def test_an_index_whose_rows_were_all_deleted_reshards_to_empty_shards(
    sqlite_catalog: Any,
) -> None:
    table = create_table(sqlite_catalog, ("db", "reshard_empty"), EVENTS)
    writer = Writer(table, shards=4)
    writer.batch({k: f"a-{k}" for k in range(10)})
    writer.batch({}, list(range(10)))
    writer.coordinator.save_index()
    table.commit_or_raise(UpdateProperties({"calving.index.shards": "2"}))
    writer.restart()
    writer.batch({3: "back"})
    writer.check()
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    assert (sharded.reshards, sharded.rebuilds, sharded.manifest.shard_count) == (1, 0, 2)
    assert sharded.manifest.entries == 1


def test_a_reshard_cut_short_is_done_again_and_its_files_are_orphans(
    sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies after the reshard wrote some new shards (a crash point in the
    second group): nothing names them, the table still names the old manifest, the
    next start reshards again, the stream goes on exact, and orphan removal finds the
    cut-short files while keeping every named one."""
    from calving.commit.index import reshard

    table = create_table(sqlite_catalog, ("db", "reshard_cut"), EVENTS)
    writer = Writer(table, shards=4)
    rng = random.Random(15)
    _random_batches(writer, rng, 4)
    writer.coordinator.save_index()
    named_before = table.metadata.properties[INDEX_LOCATION_PROPERTY]
    table.commit_or_raise(UpdateProperties({"calving.index.shards": "8"}))
    split = reshard.split_group
    written: list[str] = []
    groups: list[int] = []

    def dies_in_the_second(*args: Any, **kwargs: Any) -> Any:
        groups.append(1)
        if len(groups) == 2:
            raise SystemExit("crash: reshard cut short")
        done = split(*args, **kwargs)
        written.extend(f.location for f in done)
        return done

    monkeypatch.setattr(reshard, "split_group", dies_in_the_second)
    with pytest.raises(SystemExit):
        writer.restart()
        _random_batches(writer, rng, 1)
    table.refresh()
    assert table.metadata.properties[INDEX_LOCATION_PROPERTY] == named_before
    monkeypatch.setattr(reshard, "split_group", split)
    writer.restart()
    _random_batches(writer, rng, 2)
    writer.check()
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    assert (sharded.reshards, sharded.rebuilds, sharded.manifest.shard_count) == (1, 0, 8)
    writer.coordinator.save_index()
    table.refresh()
    orphans = _orphans_beside_the_named_chains(table)
    assert len(written) == 2 and set(written) <= orphans  # the cut-short group's shards


def test_a_shard_that_cannot_be_split_is_rebuilt(sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "reshard_corrupt"), EVENTS)
    writer = Writer(table, shards=4)
    rng = random.Random(14)
    _random_batches(writer, rng, 3)
    writer.coordinator.save_index()
    manifest = read_manifest(table.io, table.metadata.properties[INDEX_LOCATION_PROPERTY])
    path = local_path(manifest.shards[2].location)
    with open(path, "r+b") as f:
        f.seek(40)
        byte = f.read(1)
        f.seek(40)
        f.write(bytes([byte[0] ^ 1]))
    table.commit_or_raise(UpdateProperties({"calving.index.shards": "8"}))
    writer.restart()
    _random_batches(writer, rng, 2)
    writer.check()
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    assert sharded.manifest.shard_count == 8
    assert (sharded.reshards, sharded.rebuilds) == (0, 1)


def test_a_composite_key_of_a_string_and_a_long(sqlite_catalog: Any) -> None:
    """Byte-encoded keys (region, id): upserts, deletes, another writer's append and a
    compaction, then a restart, all exact in sharded mode."""
    schema = Schema(EVENTS.fields, identifier_field_ids=(2, 1))
    table = create_table(sqlite_catalog, ("db", "composite"), schema)
    writer = Writer(table, shards=8)
    rng = random.Random(13)
    _random_batches(writer, rng, 4)
    files = write_partitioned(table, [row(3000 + i, payload="other") for i in range(20)])
    table.commit_or_raise(FastAppend(tuple(f for f, _ in files)))
    writer.expected.update({3000 + i: "other" for i in range(20)})
    policy = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2)
    other = Table.load(sqlite_catalog, table.ident)
    compact(other, policy, local_rewrite(other.io, policy.target_file_bytes))
    writer.batch({3000 + i: "ours" for i in range(0, 20, 2)}, [3001, 5])
    writer.restart()
    _random_batches(writer, rng, 3)
    writer.check()
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.rebuilds == 0


def test_a_tasks_shard_steps_are_fsynced_together(
    sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write task's delta files (one a shard it steps) are made durable together: the
    shards' directory is fsynced once a task, not once a file."""
    from calving.commit import io_sync

    table = create_table(
        sqlite_catalog,
        ("db", "steps_synced"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0"},
    )
    writer = Writer(table, shards=4)
    rng = random.Random(8)
    _task_batch(writer, {k: f"a-{k}" for k in rng.sample(range(200), 40)}, [])
    synced: list[str] = []
    fsync_dir = io_sync.fsync_dir

    def counted(directory: str) -> None:
        synced.append(directory)
        fsync_dir(directory)

    monkeypatch.setattr(io_sync, "fsync_dir", counted)
    steps = run_task_steps
    per_task: list[int] = []

    def run(*args: Any, **kwargs: Any) -> Any:
        before = len(synced)
        out = steps(*args, **kwargs)
        per_task.append(sum(1 for d in synced[before:] if d.endswith("calving-index/shards")))
        assert len(out.chains) == 4  # each task stepped every shard: 4 delta files
        return out

    monkeypatch.setattr(sys.modules[__name__], "run_task_steps", run)
    _task_batch(writer, {k: f"b-{k}" for k in rng.sample(range(200), 40)}, [])
    writer.check()
    assert per_task == [1, 1]


class _Owners(LocalResolver):
    """Stage 2 in this process, saying it pins steps to ``n`` owners."""

    def __init__(self, n: int) -> None:
        self.n = n

    def owners(self) -> int:
        return self.n


@pytest.mark.parametrize(
    ("choice", "owners", "threshold", "in_tasks"),
    [
        ("write-tasks", 2, 0, True),
        ("owners", 2, 10**9, False),
        ("owners", 0, 0, True),  # nothing to pin to (local mode): the write tasks
        ("auto", 2, 10**9, True),  # a small index: the write tasks
        ("auto", 2, 50, False),  # past the threshold: the owners
        ("auto", 0, 50, True),
    ],
)
def test_shard_steps_run_in_the_write_tasks_or_on_the_owners(
    sqlite_catalog: Any, monkeypatch: Any, choice: str, owners: int, threshold: int, in_tasks: bool
) -> None:
    """``calving.index.shard-steps``: the write tasks get a job to step with, or the
    batch goes to the separate stage (pinned to the owners); either way exact."""
    from calving.commit.index import sharded as sharded_module

    monkeypatch.setattr(sharded_module, "OWNER_STEP_ENTRIES", threshold)
    table = create_table(
        sqlite_catalog,
        ("db", f"steps_{choice.replace('-', '_')}_{owners}_{threshold}"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0", "calving.index.shard-steps": choice},
    )
    writer = Writer(table)
    writer.batch({k: f"a{k}" for k in range(100)})
    sharded = writer.coordinator.sharded
    assert sharded is not None
    sharded.resolver = _Owners(owners)
    job = writer.coordinator.shard_job()
    assert (job is not None) == in_tasks
    if job is None:
        writer.batch({k: f"b{k}" for k in range(0, 100, 3)}, deletes=[1, 2])
    else:
        _task_batch(writer, {k: f"b{k}" for k in range(0, 100, 3)}, [1, 2])
    writer.check()
    assert sharded.in_tasks == int(in_tasks)


@pytest.mark.parametrize(("cache", "in_tasks"), [(1 << 30, True), (1 << 29, False)])
def test_auto_steps_on_the_owners_sooner_with_a_smaller_worker_cache(
    sqlite_catalog: Any, monkeypatch: Any, cache: int, in_tasks: bool
) -> None:
    """``auto``'s threshold is a share of the worker's shard cache: 100 entries stay in
    the write tasks under a threshold of 150 at the default 1 GiB, and go to the owners
    with half the cache (75)."""
    from calving.commit.index import sharded as sharded_module

    monkeypatch.setattr(sharded_module, "OWNER_STEP_ENTRIES", 150)
    table = create_table(
        sqlite_catalog,
        ("db", f"auto_cache_{cache}"),
        EVENTS,
        properties={
            "calving.index.driver-step-keys": "0",
            "calving.index.worker-cache-bytes": str(cache),
        },
    )
    writer = Writer(table)
    writer.batch({k: f"a{k}" for k in range(100)})
    sharded = writer.coordinator.sharded
    assert sharded is not None
    sharded.resolver = _Owners(2)
    assert (writer.coordinator.shard_job() is not None) == in_tasks


def test_an_index_larger_than_the_worker_cache_keeps_what_fits(sqlite_catalog: Any) -> None:
    """``calving.index.worker-cache-bytes`` below the index's size: the cache keeps as
    many shards as fit, and every batch finds those (the same ones) and reads only the
    others; the table stays exact."""
    table = create_table(
        sqlite_catalog,
        ("db", "small_cache"),
        EVENTS,
        properties={"calving.index.worker-cache-bytes": str(1 << 20)},
    )
    writer = Writer(table, shards=8)
    shard_lookup.CACHE.clear()
    keys = 150_000  # about 2.3 MiB of shards: a third of them fit
    writer.batch({k: "a" for k in range(keys)})
    sharded = writer.coordinator.sharded
    assert sharded is not None
    resolve = sharded.resolve
    found: list[int] = []
    cached: list[list[int]] = []

    def watched(*args: Any, **kwargs: Any) -> Any:
        got = resolve(*args, **kwargs)
        found.append(got.cache_hits)
        cached.append(shard_lookup.CACHE.shards())
        return got

    sharded.resolve = watched  # type: ignore[method-assign]  # the test's probe
    for n in range(4):
        stats = writer.batch({k: f"b{n}" for k in range(n, keys, 97)})  # every shard
        assert shard_lookup.CACHE.nbytes <= 1 << 20
        # The batch's figures (the metrics' index_shard_steps, index_shards_read).
        assert (stats.shard_steps, stats.shards_read) == (8, 8 - found[-1])
    assert 0 < found[0] < 8 and found == [found[0]] * 4, found
    assert all(c == cached[0] for c in cached) and len(cached[0]) == found[0]
    writer.check()


def test_a_pinned_step_keeps_only_its_owners_shards_cached(sqlite_catalog: Any) -> None:
    """A step run as owner ``o`` of ``n`` drops the other owners' shards from its
    process's cache (a rebuild's task, or an earlier placement, left them there)."""
    table = create_table(
        sqlite_catalog,
        ("db", "pinned_cache"),
        EVENTS,
        properties={"calving.index.driver-step-keys": "0", "calving.index.shard-steps": "owners"},
    )
    writer = Writer(table)
    shard_lookup.CACHE.clear()
    writer.batch({k: f"a{k}" for k in range(200)})
    assert shard_lookup.CACHE.shards() == [0, 1, 2, 3]  # one process stepped them all
    sharded = writer.coordinator.sharded
    assert sharded is not None and sharded.manifest is not None
    after_pinned: list[list[int]] = []

    class Pinned(LocalResolver):
        def __call__(self, job: Any, requests: Any) -> Any:
            mine = [r for r in requests if r.shard % 2 == 1]
            got = shard_lookup.resolve_shards(job, mine, owner=(1, 2))
            after_pinned.append(shard_lookup.CACHE.shards())
            others = [r for r in requests if r.shard % 2 == 0]
            return got + shard_lookup.resolve_shards(job, others)

        def owners(self) -> int:
            return 2

    sharded.resolver = Pinned()
    writer.batch({k: f"b{k}" for k in range(0, 200, 7)})
    # Owner 1's steps dropped shards 0 and 2 (cached by the first batch) and left its
    # own; owner 0's steps (unpinned, in this same process) then put theirs back.
    assert after_pinned == [[1, 3]]
    assert shard_lookup.CACHE.shards() == [0, 1, 2, 3]
    shard_lookup.CACHE.keep(0, 2)
    assert shard_lookup.CACHE.shards() == [0, 2]
    writer.check()
