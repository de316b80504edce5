"""The index rebuilt as shards by Spark tasks (a real local Spark, real tables on a
SQLite catalog): every shard holds exactly the entries the driver's own rebuild puts in
it, merged they are the driver's index, and a job that fails says so in one line."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from calving.commit.index.keys import DEFAULT_HASHER
from calving.commit.index.reshard import reshard_here, resharded
from calving.commit.index.shards import (
    SHARDS_DIRECTORY,
    load_sharded,
    read_shard,
    shard_of,
    split_index,
)
from calving.commit.index.store import INDEX_LOCATION_PROPERTY, build_from_table
from calving.commit.io import local_path
from calving.commit.spec.properties import INDEX_EXECUTOR_REBUILD_ROWS
from calving.commit.table import scan
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.table import create_table
from calving.ingest.decode import DebeziumDecoder
from calving.ingest.kafka.producer import produce
from calving.ingest.sink import index_rebuild, shard_stage
from calving.ingest.sink.foreach_batch import CalvingSink
from calving.ingest.sink.index_rebuild import (
    ExecutorRebuild,
    IndexRebuildError,
    executor_rebuilds,
    rebuild_sharded,
)
from calving.ingest.sink.shard_stage import reshard_on_executors
from tests.commit.index.test_shards import entries, sharded_table
from tests.ingest.sink.test_index_corruption import Writer
from tests.support.cdc import COLUMNS, SCHEMA, cdc_events
from tests.support.oracles import duckdb_rows, pyiceberg_rows
from tests.support.streams import PATHS, drain
from tests.support.tables import EVENTS

pytestmark = pytest.mark.integration


def piece_files(table: Any) -> list[str]:
    """Stage 1's piece files left under the table's shards."""
    shards = f"{table.metadata.location}/{SHARDS_DIRECTORY}/"
    return [p for p in table.io.list_prefix(shards) if p.endswith(".calvpiece")]


def shard_contents(io: Any, manifest: Any) -> list[list[tuple[Any, str, int]]]:
    """Per shard, its sorted (key, file, position) entries."""
    file_ids = {p: i for i, (p, _) in enumerate(manifest.files)}
    out = []
    for shard in manifest.shards:
        keys, file_index, positions = read_shard(io, manifest, shard, file_ids)
        assert set(shard_of(DEFAULT_HASHER.hash(keys), manifest.shard_count).tolist()) <= {
            shard.shard
        }
        paths = [manifest.files[i][0] for i in file_index]
        out.append(sorted(zip(keys.to_arrow().to_pylist(), paths, positions.tolist())))
    return out


@pytest.mark.parametrize("key", ["int", "string"])
@pytest.mark.parametrize(
    "shards,files_per_task,jobs,pinned",
    [
        (1, 0, 2, False),
        (8, 1, 2, False),
        (32, 2, 2, False),
        (1, 0, 1, False),
        (8, 0, 1, False),
        (8, 0, "files", False),
        (8, 1, 2, True),
        (8, 0, 1, True),
    ],
)
def test_spark_shards_equal_the_drivers(
    spark: Any,
    sqlite_catalog: Any,
    key: str,
    shards: int,
    files_per_task: int,
    jobs: int | str,
    pinned: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through piece files (two jobs, as a table past ``ONE_JOB_ROWS`` rows or
    ``ONE_JOB_FILES`` files is rebuilt: ``files``, few rows in too many files) or in
    one job (each task reading every file, as a smaller table is). ``pinned``: the
    tasks writing the shards go to their owners (three executors that local mode does
    not have: the tasks run on its one, as on a cluster whose owner is gone)."""
    if jobs == "files":
        monkeypatch.setattr(index_rebuild, "ONE_JOB_FILES", 1)
    owners = [f"executor_127.0.0.1_{i}" for i in range(3)] if pinned else []
    monkeypatch.setattr(index_rebuild.spark_tasks, "executors", lambda spark: owners)
    table = sharded_table(sqlite_catalog, key)
    io = table.io
    sc = spark.sparkContext
    run_tasks = index_rebuild.spark_tasks.run_tasks
    ran: list[int] = []
    places: list[Any] = []
    monkeypatch.setattr(
        index_rebuild.spark_tasks,
        "run_tasks",
        lambda *a: (ran.append(len(a[2])), places.append(a[3:]), run_tasks(*a))[2],
    )
    sc.setJobGroup("the-callers-group", "the caller's jobs")
    try:
        location, manifest = rebuild_sharded(
            spark,
            io,
            table.metadata,
            shards,
            io.properties,
            files_per_task=files_per_task,
            one_job_rows=0 if jobs == 2 else 10**12,
        )
        # The caller's job group (a streaming query's) and description are kept.
        assert sc.getLocalProperty("spark.jobGroup.id") == "the-callers-group"
        assert sc.getLocalProperty("spark.job.description") == "the caller's jobs"
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    driver = build_from_table(io, table.metadata)
    _, reference = split_index(io, driver, table.metadata.location, shards)
    assert manifest.files == reference.files
    assert [s.entries for s in manifest.shards] == [s.entries for s in reference.shards]
    assert shard_contents(io, manifest) == shard_contents(io, reference)
    merged = load_sharded(io, location, table.metadata)
    assert entries(merged) == entries(driver)
    assert piece_files(table) == []  # stage 2 read them; the driver deleted them
    assert len(ran) == (2 if jobs == "files" else jobs)
    # The job writing the shards (the last) is pinned: one task an owner at most.
    assert bool(places[-1] and places[-1][0]) == pinned
    if pinned:
        assert set(places[-1][0]) <= set(owners) and ran[-1] == len(places[-1][0]) <= 3


def test_a_table_without_snapshots_gets_empty_shards(spark: Any, sqlite_catalog: Any) -> None:
    table = create_table(sqlite_catalog, ("db", "empty"), EVENTS)
    location, manifest = rebuild_sharded(spark, table.io, table.metadata, 4, table.io.properties)
    assert manifest.snapshot_id is None and manifest.entries == 0 and len(manifest.shards) == 4
    assert len(load_sharded(table.io, location, table.metadata)) == 0


def test_a_failing_task_fails_the_rebuild_in_one_line(spark: Any, sqlite_catalog: Any) -> None:
    table = sharded_table(sqlite_catalog, "int")
    md = table.metadata
    live = scan.live_files(table.io, md, md.current_snapshot)
    os.remove(local_path(min(live.data)))
    with pytest.raises(IndexRebuildError, match=r"^index rebuild job failed: ") as err:
        rebuild_sharded(spark, table.io, table.metadata, 4, table.io.properties)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("key", "pinned"), [("int", False), ("string", False), ("int", True)])
def test_spark_reshards_equal_the_drivers_and_fail_in_one_line(
    spark: Any, sqlite_catalog: Any, key: str, pinned: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``reshard_on_executors`` writes the shards ``reshard_here`` writes in the driver,
    for a split (4 -> 8) and a merge (4 -> 2); ``pinned``: each group's task goes to the
    owner of its first new shard (three executors that local mode does not have: the
    tasks run on its one); a corrupt old shard fails the job in one line."""
    owners = [f"executor_127.0.0.1_{i}" for i in range(3)] if pinned else []
    monkeypatch.setattr(shard_stage, "executors", lambda spark: owners)
    places: list[Any] = []
    run_tasks = shard_stage.run_tasks
    monkeypatch.setattr(
        shard_stage, "run_tasks", lambda *a: (places.append((a[2], a[3])), run_tasks(*a))[1]
    )
    table = sharded_table(sqlite_catalog, key)
    io = table.io
    _, manifest = rebuild_sharded(spark, io, table.metadata, 4, io.properties)
    for count in (8, 2):
        on_executors = resharded(
            manifest,
            count,
            reshard_on_executors(spark, io.properties, table.metadata.location, manifest, count),
        )
        in_driver = resharded(manifest, count, reshard_here(io, table.metadata, manifest, count))
        assert [s.entries for s in on_executors.shards] == [s.entries for s in in_driver.shards]
        assert shard_contents(io, on_executors) == shard_contents(io, in_driver)
        items, where = places[-1]
        assert (where is not None) == pinned
        if where is not None:  # every group on the owner of its first new shard
            for groups, place in zip(items, where):
                assert {owners[g.targets[0] % 3] for g in groups} == {place}
    path = Path(local_path(manifest.shards[3].location))
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(IndexRebuildError, match=r"^index reshard job failed: ") as err:
        reshard_on_executors(spark, io.properties, table.metadata.location, manifest, 8)
    assert "\n" not in str(err.value)


def test_a_failed_rebuild_leaves_no_piece_files(sqlite_catalog: Any) -> None:
    """After a failed job the driver does not know which piece files its tasks wrote:
    it deletes every file named by the rebuild, and no other."""
    table = sharded_table(sqlite_catalog, "int")
    shards = f"{table.metadata.location}/{SHARDS_DIRECTORY}"
    mine = [f"{shards}/rebuild-1234-s{s}-t0.calvpiece" for s in range(3)]
    other = f"{shards}/rebuild-5678-s0-t0.calvpiece"
    for location in [*mine, other]:
        table.io.write(location, b"entries")
    index_rebuild.delete_piece_files(table.io, f"{shards}/rebuild-1234", [])
    assert piece_files(table) == [other]


@pytest.mark.parametrize("threshold,on_executors", [("0", True), (None, False)])
def test_a_restarted_writer_rebuilds_a_lost_index_on_the_executors(
    spark: Any, sqlite_catalog: Any, threshold: str | None, on_executors: bool
) -> None:
    """The coordinator's full rebuild goes to the executors when the table holds at least
    ``calving.index.executor-rebuild-rows`` live rows (default 10M: this small table
    stays on the driver); the batches after it stay exact, and no shard file is left."""
    table = create_table(sqlite_catalog, ("db", "keyed"), EVENTS)
    if threshold is not None:
        table.commit_or_raise(UpdateProperties({INDEX_EXECUTOR_REBUILD_ROWS.name: threshold}))
    writer = Writer(table)
    writer.batch(0, {i: f"v1-{i}" for i in range(40)}, [])
    writer.batch(1, {2: "v2-2", 5: "v2-5"}, [3, 30])
    table.io.delete(table.metadata.properties[INDEX_LOCATION_PROPERTY])

    writer.restart()
    writer.coordinator.rebuild = ExecutorRebuild(spark, table.io.properties)
    before = executor_rebuilds()
    writer.batch(2, {7: "v3-7", 10: "v3-10", 3: "v3-3"}, [4])
    writer.batch(3, {9: "v4-9", 30: "v4-30"}, [5])
    assert executor_rebuilds() - before == (1 if on_executors else 0)

    table.refresh()
    rows = pyiceberg_rows(table.metadata_location, ["id", "payload"])
    assert rows == sorted(writer.expected.items())
    shards_dir = local_path(f"{table.metadata.location}/{SHARDS_DIRECTORY}")
    assert not os.path.isdir(shards_dir) or os.listdir(shards_dir) == []


def test_a_failed_executor_rebuild_falls_back_to_the_driver(
    spark: Any, sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    table = sharded_table(sqlite_catalog, "string")
    table.commit_or_raise(UpdateProperties({INDEX_EXECUTOR_REBUILD_ROWS.name: "0"}))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise IndexRebuildError("index rebuild job failed: executor lost")

    monkeypatch.setattr(index_rebuild, "rebuild_sharded", broken)
    before = executor_rebuilds()
    with caplog.at_level(logging.WARNING, logger=index_rebuild.__name__):
        index = ExecutorRebuild(spark, table.io.properties)(table.io, table.metadata, None)
    assert executor_rebuilds() == before
    assert entries(index) == entries(build_from_table(table.io, table.metadata))
    [warning] = [r.getMessage() for r in caplog.records if r.name == index_rebuild.__name__]
    assert warning.endswith("rebuilding on the driver: index rebuild job failed: executor lost")


@pytest.mark.parametrize("path", PATHS)
def test_a_stream_rebuilds_its_lost_index_on_the_executors(
    path: str, spark: Any, broker: Any, make_topic: Any, sqlite_catalog: Any, tmp_path: Any
) -> None:
    """Inside ``foreachBatch``: the sink hands the coordinator the executors' rebuild;
    a restarted stream whose index file is gone rebuilds it with a Spark job and stays
    exact (pyiceberg and DuckDB)."""
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=200, events=1500, partitions=2, seed=25)
    first, second = stream.records[:800], stream.records[800:]
    produce(broker.bootstrap_servers, topic, first)
    table = create_table(sqlite_catalog, ("db", "cdc"), SCHEMA)
    table.commit_or_raise(UpdateProperties({INDEX_EXECUTOR_REBUILD_ROWS.name: "0"}))
    ckpt = str(tmp_path / "ckpt")

    def sink() -> CalvingSink:
        return CalvingSink(table, lambda schema: DebeziumDecoder(schema), "cdc")

    drain(spark, broker.bootstrap_servers, topic, sink(), ckpt, path=path)
    table.refresh()
    table.io.delete(table.metadata.properties[INDEX_LOCATION_PROPERTY])
    produce(broker.bootstrap_servers, topic, second)
    before = executor_rebuilds()
    drain(spark, broker.bootstrap_servers, topic, sink(), ckpt, path=path)
    assert executor_rebuilds() - before == 1
    table.refresh()
    assert pyiceberg_rows(table.metadata_location, COLUMNS) == stream.expected
    assert duckdb_rows(table.metadata_location, COLUMNS) == stream.expected


def test_piece_files_are_scratch_and_shard_files_are_synced_together(
    sqlite_catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stage 1's piece files are not fsynced (a crash restarts the rebuild); stage 2's
    shard files are, each once, and their directory once for the task's group, all
    before the task returns the list naming them."""
    from calving.commit.index.store import key_spec
    from calving.ingest.sink.index_rebuild import FileTask, RebuildJob, write_pieces, write_shards

    table = sharded_table(sqlite_catalog, "int", "synced")
    metadata = table.metadata
    ids, types = key_spec(metadata, None)
    exchange = f"{metadata.location}/{SHARDS_DIRECTORY}/rebuild-synced"
    job = RebuildJob(
        metadata.location,
        metadata.table_uuid,
        metadata.current_snapshot_id,
        ids,
        types,
        4,
        dict(table.io.properties),
        exchange=exchange,
    )
    live = scan.live_files(table.io, metadata, metadata.current_snapshot)
    tasks = [
        FileTask(live.data[p].data_file, dv.data_file if (dv := live.dvs.get(p)) else None)
        for p in sorted(live.data)
    ]
    synced: list[int] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), fsync(fd))[1])
    pieces = list(write_pieces(job, 0, tasks))
    assert len(pieces) == 4 and synced == []  # one piece a shard, none synced
    shards = write_shards(job, [[(p.shard, (p,)) for p in pieces]])
    assert [s.shard for s in shards] == [0, 1, 2, 3]
    assert len(synced) == 4 + 1  # each shard file, then their one directory
    assert sum(s.entries for s in shards) == sum(p.entries for p in pieces) == 148
