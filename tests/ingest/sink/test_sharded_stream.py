"""CDC streams in sharded mode (``calving.index.mode = sharded``) through Spark: the
shard steps run in Spark tasks (the write tasks, or a stage apart), on the fused and
the shuffle paths, and the table reads
back exactly with pyiceberg, DuckDB and DataFusion; small batches on small shards run
their steps in the driver, with the same result; a restart resumes from the manifest
the table names; compactions committing between the stream's batches are followed
without a rebuild."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from calving.commit.errors import CalvingError
from calving.commit.index import INDEX_LOCATION_PROPERTY
from calving.commit.index.sharded import names_shards
from calving.commit.index.shards import read_manifest
from calving.commit.maintenance.compaction import compact
from calving.commit.maintenance.compaction_plan import CompactionPolicy
from calving.commit.table.actions.update_properties import UpdateProperties
from calving.commit.table.table import Table, create_table
from calving.ingest.decode import DebeziumDecoder
from calving.ingest.kafka.producer import produce
from calving.ingest.sink.foreach_batch import CalvingSink
from calving.ingest.sink.shard_stage import SparkReshard, SparkShardRebuild, SparkShardResolver
from calving.ingest.write.rewrite import local_rewrite
from tests.support.cdc import COLUMNS, SCHEMA, cdc_events
from tests.support.oracles import ALL_READERS
from tests.support.streams import PATHS, drain

pytestmark = pytest.mark.integration

#: Steps on the executors even for these small batches (``driver-step-keys`` 0).
SHARDED = {
    "calving.index.mode": "sharded",
    "calving.index.shards": "8",
    "calving.index.driver-step-keys": "0",
}


def _sink(table: Table) -> CalvingSink:
    return CalvingSink(table, lambda schema: DebeziumDecoder(schema), "cdc", index_save_every=2)


def _check(table: Table, expected: Any) -> None:
    table.refresh()
    for name, read in ALL_READERS.items():
        assert read(table.metadata_location, COLUMNS) == expected, name


@pytest.mark.parametrize("path", PATHS)
def test_a_cdc_stream_in_sharded_mode_reads_back_exactly(
    path: str, spark: Any, broker: Any, make_topic: Any, sqlite_catalog: Any, tmp_path: Any
) -> None:
    topic = make_topic(partitions=3)
    stream = cdc_events(keys=300, events=3000, partitions=3)
    produce(broker.bootstrap_servers, topic, stream.records)
    table = create_table(sqlite_catalog, ("db", "cdc"), SCHEMA, properties=SHARDED)
    sink = _sink(table)
    drain(
        spark,
        broker.bootstrap_servers,
        topic,
        sink,
        str(tmp_path / "ckpt"),
        max_offsets_per_trigger=700,
        path=path,
    )
    sink.close()
    _check(table, stream.expected)
    sharded = sink.coordinator.sharded
    assert sharded is not None and isinstance(sharded.resolver, SparkShardResolver)
    assert sharded.resolver.in_driver == 0  # every batch's steps in Spark tasks
    # Most in the write tasks themselves; the rest (a chain to rebase) in a stage apart.
    assert sharded.in_tasks >= len(sink.coordinator.history) // 2 > 0
    # Their steps found their shards read ahead as the tasks waited for their records.
    assert sharded.read_ahead > 0
    assert sink.coordinator.index is None  # the driver built no index
    assert sum(s.deleted_rows for s in sink.coordinator.history) > 0
    # Each batch counts its steps, and those that read their shard from storage: the
    # workers' caches held most after the first batch.
    stepped = [s for s in sink.coordinator.history if s.shard_steps]
    assert stepped and all(0 <= (s.shards_read or 0) <= s.shard_steps for s in stepped)
    assert sum(s.shards_read or 0 for s in stepped) < sum(s.shard_steps for s in stepped)
    assert names_shards(table.metadata)
    manifest = read_manifest(table.io, table.metadata.properties[INDEX_LOCATION_PROPERTY])
    assert manifest.snapshot_id == table.metadata.current_snapshot_id  # named at close
    assert manifest.shard_count == 8 and manifest.entries == len(stream.expected)


def test_restart_and_compaction_beside_a_sharded_stream(
    spark: Any, broker: Any, make_topic: Any, sqlite_catalog: Any, tmp_path: Any
) -> None:
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=200, events=3000, partitions=2)
    half = len(stream.records) // 2
    produce(broker.bootstrap_servers, topic, stream.records[:half])
    table = create_table(sqlite_catalog, ("db", "cdc2"), SCHEMA, properties=SHARDED)
    checkpoint = str(tmp_path / "ckpt")
    sink = _sink(table)
    drain(spark, broker.bootstrap_servers, topic, sink, checkpoint, max_offsets_per_trigger=500)
    policy = CompactionPolicy(target_file_bytes=1 << 20, min_input_files=2)
    other = Table.load(sqlite_catalog, table.ident)
    assert compact(
        other, policy, local_rewrite(other.io, policy.target_file_bytes)
    ).groups_committed
    produce(broker.bootstrap_servers, topic, stream.records[half:])
    table.refresh()
    restarted = _sink(table)  # a new writer: the table names the shards of a batch ago
    # Compaction passes beside the restarted stream, committing between its batches.
    stop, passes = threading.Event(), Counter[str]()

    def compacting() -> None:
        while not stop.is_set():
            try:
                beside = Table.load(sqlite_catalog, table.ident)
                done = compact(beside, policy, local_rewrite(beside.io, policy.target_file_bytes))
                passes["groups"] += done.groups_committed
            except CalvingError as err:  # a pass that lost to the stream gives up
                passes[type(err).__name__] += 1
            stop.wait(0.2)

    thread = threading.Thread(target=compacting, daemon=True)
    thread.start()
    try:
        drain(
            spark,
            broker.bootstrap_servers,
            topic,
            restarted,
            checkpoint,
            max_offsets_per_trigger=150,
        )
    finally:
        stop.set()
        thread.join(60)
    _check(table, stream.expected)
    assert passes["groups"] >= 1, passes  # compactions landed while the stream ran
    sharded = restarted.coordinator.sharded
    assert sharded is not None and sharded.rebuilds == 0


@pytest.mark.parametrize(("shards", "where"), [(16, "executors"), (2, "driver")])
def test_a_stream_restarted_with_a_new_shard_count_reshards(
    shards: int,
    where: str,
    spark: Any,
    broker: Any,
    make_topic: Any,
    sqlite_catalog: Any,
    tmp_path: Any,
) -> None:
    """``calving.index.shards`` changed between two runs of a stream: the restarted
    stream splits (8 -> 16, in Spark tasks with ``executor-rebuild-rows`` 0) or merges
    (8 -> 2, in the driver for this small table) the shards' files, rebuilds nothing,
    and the table reads back exactly in the three readers."""
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=300, events=3000, partitions=2)
    half = len(stream.records) // 2
    produce(broker.bootstrap_servers, topic, stream.records[:half])
    name = f"reshard_{where}"
    table = create_table(sqlite_catalog, ("db", name), SCHEMA, properties=SHARDED)
    checkpoint = str(tmp_path / "ckpt")
    first = _sink(table)
    drain(spark, broker.bootstrap_servers, topic, first, checkpoint, max_offsets_per_trigger=500)
    first.close()
    changed = {"calving.index.shards": str(shards)}
    if where == "executors":
        changed["calving.index.executor-rebuild-rows"] = "0"
    table.refresh()
    table.commit_or_raise(UpdateProperties(changed))
    produce(broker.bootstrap_servers, topic, stream.records[half:])
    restarted = _sink(table)
    drain(
        spark, broker.bootstrap_servers, topic, restarted, checkpoint, max_offsets_per_trigger=500
    )
    restarted.close()
    _check(table, stream.expected)
    sharded = restarted.coordinator.sharded
    assert sharded is not None and isinstance(sharded.reshard, SparkReshard)
    assert (sharded.reshards, sharded.rebuilds) == (1, 0)
    on_executors = where == "executors"
    assert (sharded.reshard.in_driver, sharded.reshard.on_executors) == (
        (0, 1) if on_executors else (1, 0)
    )
    manifest = read_manifest(table.io, table.metadata.properties[INDEX_LOCATION_PROPERTY])
    assert manifest.shard_count == shards and manifest.entries == len(stream.expected)


def test_small_batches_on_small_shards_step_in_the_driver(
    spark: Any, broker: Any, make_topic: Any, sqlite_catalog: Any, tmp_path: Any
) -> None:
    """``calving.index.driver-step-keys`` (1,000 by default): batches of 300 records
    (at most 600 keys looked up and added) run their shard steps in the driver (but the
    first, whose size the driver has not seen: its write tasks step it), batches
    of 1,500 over 3,000 keys in Spark tasks; the table reads back exactly either way,
    and the shards written by both agree."""
    topic = make_topic(partitions=2)
    stream = cdc_events(keys=3000, events=6000, partitions=2)
    half = len(stream.records) // 2
    produce(broker.bootstrap_servers, topic, stream.records[:half])
    properties = {"calving.index.mode": "sharded", "calving.index.shards": "4"}
    table = create_table(sqlite_catalog, ("db", "small"), SCHEMA, properties=properties)
    checkpoint = str(tmp_path / "ckpt")
    sink = _sink(table)
    drain(spark, broker.bootstrap_servers, topic, sink, checkpoint, max_offsets_per_trigger=300)
    sharded = sink.coordinator.sharded
    assert sharded is not None and isinstance(sharded.resolver, SparkShardResolver)
    in_driver = sharded.resolver.in_driver
    assert in_driver > 0 and in_driver == len(sink.coordinator.history) - 1
    assert sharded.in_tasks == 1
    produce(broker.bootstrap_servers, topic, stream.records[half:])
    before = sink.coordinator.history.total
    drain(spark, broker.bootstrap_servers, topic, sink, checkpoint, max_offsets_per_trigger=1500)
    later = sink.coordinator.history.since(before)
    on_spark = len(later) - (sharded.resolver.in_driver - in_driver)
    big = sum(1 for b in later if b.records >= 1000)
    assert big >= 1 and on_spark >= big  # the 1,500-record batches: Spark tasks
    sink.close()
    _check(table, stream.expected)
    manifest = read_manifest(table.io, table.metadata.properties[INDEX_LOCATION_PROPERTY])
    assert manifest.entries == len(stream.expected)


def _index_lost_halfway(
    spark: Any, broker: Any, topic: str, catalog: Any, tmp_path: Any, name: str, mode: str
) -> tuple[Table, Any, str]:
    """Half a CDC stream drained into a new table in index ``mode``, the index then
    lost (its property removed) and the other half produced: the table, the stream and
    the checkpoint, for a restarted sink to drain."""
    stream = cdc_events(keys=400, events=2400, partitions=2)
    half = len(stream.records) // 2
    produce(broker.bootstrap_servers, topic, stream.records[:half])
    properties = {**SHARDED, "calving.index.mode": mode.split("-")[0]}
    if mode.endswith("-executors"):  # rebuilt by Spark tasks, not the driver
        properties["calving.index.executor-rebuild-rows"] = "0"
    if mode.endswith("-owners"):  # so are the shards of steps on the owners
        properties["calving.index.shard-steps"] = "owners"
    table = create_table(catalog, ("db", name), SCHEMA, properties=properties)
    checkpoint = str(tmp_path / "ckpt")
    first = _sink(table)
    drain(spark, broker.bootstrap_servers, topic, first, checkpoint, max_offsets_per_trigger=1500)
    first.close()
    table.commit_or_raise(UpdateProperties(remove=(INDEX_LOCATION_PROPERTY,)))
    produce(broker.bootstrap_servers, topic, stream.records[half:])
    return table, stream, checkpoint


@pytest.mark.parametrize(
    "mode", ["sharded", "sharded-executors", "sharded-owners", "driver", "failing"]
)
def test_the_index_opens_while_the_stream_starts(
    mode: str,
    spark: Any,
    broker: Any,
    make_topic: Any,
    sqlite_catalog: Any,
    tmp_path: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A restarted stream on a table whose index is lost: ``open_early`` (what
    ``calving.kafka_stream`` and ``Pipeline.start`` call) rebuilds it in a thread of its
    own before the first batch, which then finds it open (one rebuild in all); the table
    reads back exactly. An early open that fails (``failing``, sharded) is logged, and
    the first batch opens the index itself. Sharded mode rebuilds this small table's
    shards in the driver, or in Spark tasks with ``calving.index.executor-rebuild-rows``
    0 (``sharded-executors``) or the steps set to the owners (``sharded-owners``)."""
    topic = make_topic(partitions=2)
    index_mode = "sharded" if mode == "failing" else mode
    table, stream, checkpoint = _index_lost_halfway(
        spark,
        broker,
        topic,
        sqlite_catalog,
        tmp_path,
        f"early_{mode.replace('-', '_')}",
        index_mode,
    )
    restarted = _sink(table)
    if mode == "failing":

        def fail() -> None:
            raise CalvingError("no index today")

        restarted.coordinator.open_index = fail  # type: ignore[method-assign]  # reason: the early open made to fail
    with caplog.at_level("WARNING"):
        restarted.open_early(spark)
        assert restarted._opening is not None
        restarted._opening.join(120)
    sharded = restarted.coordinator.sharded
    if mode.startswith("sharded"):
        assert sharded is not None and sharded.manifest is not None and sharded.rebuilds == 1
        assert isinstance(sharded.rebuild, SparkShardRebuild)
        spark_job = mode != "sharded"
        assert (sharded.rebuild.in_driver, sharded.rebuild.on_executors) == (
            (0, 1) if spark_job else (1, 0)
        )
    elif mode == "driver":
        assert sharded is None and restarted.coordinator.index is not None
    else:
        assert sharded is not None and sharded.manifest is None and sharded.rebuilds == 0
        assert "opening the primary-key index before the first batch failed" in caplog.text
        assert "no index today" in caplog.text
    drain(
        spark, broker.bootstrap_servers, topic, restarted, checkpoint, max_offsets_per_trigger=1500
    )
    restarted.close()
    _check(table, stream.expected)
    if sharded is not None:
        assert sharded.rebuilds == 1  # opened once: early, or by the first batch


@pytest.mark.parametrize("mode", ["sharded", "driver"])
def test_the_first_batch_writes_while_the_index_still_opens(
    mode: str, spark: Any, broker: Any, make_topic: Any, sqlite_catalog: Any, tmp_path: Any
) -> None:
    """A restarted stream whose index is lost: the first batch's write job runs while
    the early open still rebuilds the index (the open here waits until the write job
    has started; a batch that joined the open first would keep it waiting), then the
    batch joins it and commits (sharded mode: its keys resolved by the separate stage).
    One rebuild in all, and the table reads back exactly."""
    topic = make_topic(partitions=2)
    table, stream, checkpoint = _index_lost_halfway(
        spark, broker, topic, sqlite_catalog, tmp_path, f"overlap_{mode}", mode
    )
    restarted = _sink(table)
    writing = threading.Event()
    open_saw_the_write: list[bool] = []
    write, open_index = restarted._write, restarted.coordinator.open_index

    def timed_write(*args: Any, **kwargs: Any) -> Any:
        writing.set()
        return write(*args, **kwargs)

    def slow_open() -> None:
        open_saw_the_write.append(writing.wait(20))
        open_index()

    restarted._write = timed_write  # type: ignore[method-assign]  # reason: marks the write job's start
    restarted.coordinator.open_index = slow_open  # type: ignore[method-assign]  # reason: the open waits for it
    drain(
        spark, broker.bootstrap_servers, topic, restarted, checkpoint, max_offsets_per_trigger=1500
    )
    restarted.close()
    assert open_saw_the_write == [True]
    _check(table, stream.expected)
    sharded = restarted.coordinator.sharded
    if mode == "sharded":
        assert sharded is not None and sharded.rebuilds == 1
    else:
        assert sharded is None and restarted.coordinator.index is not None
