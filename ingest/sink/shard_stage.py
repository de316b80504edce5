"""Sharded mode on Spark: a keyed batch's stage 2 and the shards' rebuilds as Spark jobs.

``SparkShardResolver`` runs ``commit.index.shard_lookup.resolve_shards`` in Spark tasks:
the batch's shard requests are spread over one task per core (shard ``s`` goes to task
``s % tasks``, one slice each, so no shuffle), and with Spark's Python worker reuse a
task often finds its shards cached from an earlier batch. A small batch whose shards
are small (at most ``calving.index.driver-step-keys`` keys, ``DRIVER_SHARD_ENTRIES``
entries in the shards it touches) runs its steps in the driver instead: a Spark job
costs 0.1-0.2 s before any work, the steps of such a batch a few milliseconds; the
driver keeps at most ``DRIVER_CACHE_BYTES`` of shards for it. ``SparkShardRebuild``
rebuilds shards with ``index_rebuild.rebuild_shards`` (a small table's in the driver);
``SparkReshard`` splits or merges them into a new count, one task a group.
``sharded_index`` picks the mode of a table (``calving.index.mode``) and builds what
sharded mode needs. Messages
between the driver and the tasks are the frozen dataclasses of ``shard_lookup``,
pickled by ``spark_tasks`` (one encoder, one decoder).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from calving.commit.errors import CalvingError
from calving.commit.index.pk_index import PrimaryKeyIndex
from calving.commit.index.rebuild_place import driver_rebuild_rows
from calving.commit.index.reshard import (
    ReshardGroup,
    reshard_groups,
    reshard_here,
    split_group,
)
from calving.commit.index.shard_lookup import (
    CACHE,
    DEFAULT_CACHE_BYTES,
    DRIVER_SHARD_ENTRIES,
    ShardJob,
    ShardRequest,
    ShardResult,
    resolve_here,
    resolve_shards,
    tidy_in_background,
)
from calving.commit.index.shard_rebuild import build_shards
from calving.commit.index.sharded import ShardedIndex, choose_mode
from calving.commit.index.shards import ShardFile, ShardManifest
from calving.commit.io import FileIO
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.properties import TableProperties
from calving.commit.table.summary import live_rows
from calving.commit.table.table import Table
from calving.ingest.sink.index_rebuild import job_failed, rebuild_shards, shards_for
from calving.ingest.sink.spark_tasks import executors, pinned_groups, run_tasks

log = logging.getLogger(__name__)

#: Keys (looked up and added) up to which a batch's shard steps run in one task.
SMALL_BATCH_ROWS = 20_000
#: The driver caches up to this much of the shards it steps (``DRIVER_SHARD_ENTRIES``).
DRIVER_CACHE_BYTES = 128 << 20
#: A batch's stage pins to the executors ``owners()`` saw up to this long before (a
#: batch's write job lies between); later, it asks Spark again.
PLACES_FRESH_S = 30.0


class ShardStageError(CalvingError):
    """The Spark job of a batch's stage 2 failed (its message names the cause)."""


def _shard(request: ShardRequest) -> int:
    return request.shard


def _steps(
    job: ShardJob, task: int, item: tuple[tuple[int, int] | None, Sequence[ShardRequest]]
) -> list[ShardResult]:
    owner, group = item
    results = resolve_shards(job, group, owner=owner)
    tidy_in_background()
    return results


@dataclass
class SparkShardResolver:
    """A ``ShardResolver`` running the steps in Spark tasks (a small batch's on small
    shards in the driver: see the module)."""

    spark: Any
    #: Batches whose steps ran in the driver.
    in_driver: int = 0
    #: Executors the last job's steps were pinned to (0: none, or not yet run).
    pinned: int = 0
    #: When ``owners()`` last asked Spark for the executors, and what it saw.
    _asked: tuple[float, list[str]] | None = field(default=None, repr=False)

    def __call__(self, job: ShardJob, requests: Sequence[ShardRequest]) -> list[ShardResult]:
        rows = sum(len(r.lookups) + sum(len(f.positions) for f in r.added) for r in requests)
        entries = sum(job.manifest.shards[r.shard].entries for r in requests)
        if rows <= job.driver_step_keys and entries <= DRIVER_SHARD_ENTRIES:
            self.in_driver += 1
            small = replace(job, cache_bytes=min(job.cache_bytes, DRIVER_CACHE_BYTES))
            return resolve_here(small, requests)
        sc = self.spark.sparkContext
        cores = max(1, int(sc.defaultParallelism))
        places = self._places()
        # A task costs tens of milliseconds however little it does: a small batch's
        # shards go to one task (one an owner), a large batch's to one a core (two a
        # core, in two waves, took 0.26-0.34 s against 0.23 s for 50k upserts into 2M
        # keys).
        few = rows <= SMALL_BATCH_ROWS
        pinned = len(places) if len(places) > 1 else 0
        if pinned != self.pinned:
            log.info("index shard steps: pinned to %d owner executor(s) (0: not pinned)", pinned)
            self.pinned = pinned
        items: list[tuple[tuple[int, int] | None, list[ShardRequest]]]
        if len(places) > 1:
            owned, where = pinned_groups(requests, _shard, places, 1 if few else cores)
            items = [((o, len(places)), g) for o, g in owned]
        else:
            tasks = 1 if few else max(1, min(len(requests), cores))
            groups = [[r for r in requests if r.shard % tasks == t] for t in range(tasks)]
            items, where = [(None, g) for g in groups if g], None
        described = sc.getLocalProperty("spark.job.description")
        sc.setJobDescription(f"calving index shards: {len(requests)} shard(s)")
        try:
            results = run_tasks(self.spark, partial(_steps, job), items, where)
        except Exception as err:  # noqa: BLE001 -- py4j wraps every Spark job failure
            text = " ".join(str(err).split())[:300] or type(err).__name__
            raise ShardStageError(f"index shard job failed: {text}") from None
        finally:
            sc.setLocalProperty("spark.job.description", described)
        return results

    def owners(self) -> int:
        """Executors the stage pins shards to (shard ``s`` to the ``s mod n``-th by id;
        0 below two: nothing to pin). The batch's stage, if it runs soon after, pins
        to the executors seen here rather than asking Spark again (about ten py4j
        calls)."""
        places = executors(self.spark)
        self._asked = (time.monotonic(), places)
        return len(places) if len(places) > 1 else 0

    def _places(self) -> list[str]:
        """The executors to pin this job to: those ``owners()`` saw for this batch (at
        most ``PLACES_FRESH_S`` ago), else asked now."""
        asked, self._asked = self._asked, None
        if asked is not None and time.monotonic() - asked[0] <= PLACES_FRESH_S:
            return asked[1]
        return executors(self.spark)


@dataclass
class SparkShardRebuild:
    """A ``ShardRebuild`` on the executors (``index_rebuild.rebuild_shards``), or in the
    driver (``shard_rebuild.build_shards``) for a small snapshot (``rebuild_in_driver``),
    as the driver index is below that size: a Spark job costs seconds such a table does
    not need (2M keys: 0.3-0.5 s in the driver, 0.7-1.1 s on two idle one-core workers
    and 3.3 s while a stream starts beside it)."""

    spark: Any
    io_properties: Mapping[str, str]
    #: Rebuilds that ran in the driver (a small snapshot), and on the executors.
    in_driver: int = 0
    on_executors: int = 0

    def __call__(
        self,
        io: FileIO,
        metadata: TableMetadata,
        snapshot_id: int | None,
        shard_count: int,
        only: Sequence[int],
    ) -> list[ShardFile]:
        rows = rebuild_in_driver(metadata, snapshot_id)
        if rows is not None:
            self.in_driver += 1
            log.info(
                "index shards rebuilt in the driver (%d live rows, below "
                "calving.index.executor-rebuild-rows)",
                rows,
            )
            return build_shards(io, metadata, snapshot_id, shard_count, only)
        self.on_executors += 1
        return rebuild_shards(
            self.spark,
            io,
            metadata,
            snapshot_id,
            shard_count,
            self.io_properties,
            only=only,
            cache_bytes=TableProperties(metadata.properties).index_worker_cache_bytes,
        )


@dataclass(frozen=True)
class ReshardJob:
    """What every task of one reshard needs (``reshard.split_group``'s inputs)."""

    table_location: str
    manifest: ShardManifest
    shard_count: int
    io_properties: Mapping[str, str]
    #: Each task keeps the shards it wrote in its Python worker's cache (up to this
    #: many bytes), where the next batch's steps find them.
    cache_bytes: int = DEFAULT_CACHE_BYTES


def split_groups(job: ReshardJob, task: int, groups: Sequence[ReshardGroup]) -> list[ShardFile]:
    """A task's reshard groups (executor): their new shards written and kept cached
    in place of the old shards (whose cached states this worker drops)."""
    io = FileIO(dict(job.io_properties))

    def keep(written: ShardFile, index: PrimaryKeyIndex) -> None:
        CACHE.put(written, index, job.cache_bytes)

    out = []
    for group in groups:
        out += split_group(io, job.manifest, job.table_location, job.shard_count, group, keep)
        for s in group.sources:
            CACHE.forget(job.manifest.shards[s].location)
    return out


@dataclass
class SparkReshard:
    """A ``Reshard`` on the executors (one Spark task a group, ``split_groups``), or
    in the driver (``reshard_here``) where a rebuild would run there
    (``rebuild_in_driver``: below ``calving.index.executor-rebuild-rows``)."""

    spark: Any
    io_properties: Mapping[str, str]
    in_driver: int = 0
    on_executors: int = 0

    def __call__(
        self, io: FileIO, metadata: TableMetadata, manifest: ShardManifest, shard_count: int
    ) -> list[ShardFile]:
        if rebuild_in_driver(metadata, manifest.snapshot_id) is not None:
            self.in_driver += 1
            return reshard_here(io, metadata, manifest, shard_count)
        self.on_executors += 1
        return reshard_on_executors(
            self.spark,
            self.io_properties,
            metadata.location,
            manifest,
            shard_count,
            TableProperties(metadata.properties).index_worker_cache_bytes,
        )


def reshard_on_executors(
    spark: Any,
    io_properties: Mapping[str, str],
    table_location: str,
    manifest: ShardManifest,
    shard_count: int,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> list[ShardFile]:
    """``manifest``'s shards split or merged into ``shard_count`` by Spark tasks (at
    most one a core); the new shards, in shard order. On two executors or more a
    group runs on the owner of its first new shard (``spark_tasks.pinned_groups``, as
    the rebuild's shards are written), where that shard is left cached for its steps
    (``cache_bytes``: the worker's shard cache)."""
    groups = reshard_groups(manifest.shard_count, shard_count)
    job = ReshardJob(table_location, manifest, shard_count, dict(io_properties), cache_bytes)
    places = executors(spark)
    where: list[str] | None = None
    if len(places) > 1:
        cores = max(1, int(spark.sparkContext.defaultParallelism))
        owned, where = pinned_groups(groups, _first_target, places, cores)
        items = [g for _, g in owned]
    else:
        items = [[g] for g in groups]
    sc = spark.sparkContext
    described = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(f"calving index reshard: {manifest.shard_count} -> {shard_count} shards")
    try:
        written: list[ShardFile] = run_tasks(spark, partial(split_groups, job), items, where)
    except Exception as err:  # noqa: BLE001 -- py4j wraps every Spark job failure
        raise job_failed(err, "index reshard") from None
    finally:
        sc.setLocalProperty("spark.job.description", described)
    return sorted(written, key=lambda f: f.shard)


def _first_target(group: ReshardGroup) -> int:
    return group.targets[0]


def rebuild_in_driver(metadata: TableMetadata, snapshot_id: int | None) -> int | None:
    """The live rows of snapshot ``snapshot_id`` when its shards are rebuilt in the
    driver, else None (on the executors): ``rebuild_place.driver_rebuild_rows``'s rule,
    unless the steps are set to the owners (``calving.index.shard-steps``), whose
    pinned rebuild leaves each shard cached on its owner where the first batch steps it
    (built in the driver, the owners' first steps read their shards from storage: 1.5 s
    for 2M keys on two workers)."""
    if TableProperties(metadata.properties).index_shard_steps == "owners":
        return None
    snapshot = None if snapshot_id is None else metadata.snapshot_by_id(snapshot_id)
    return driver_rebuild_rows(metadata.properties, snapshot)


def sharded_index(spark: Any, table: Table) -> ShardedIndex | None:
    """Sharded mode's state for ``table`` when ``calving.index.mode`` picks it (None:
    the driver index); the shard count of a new index follows the table's live rows
    and the cluster's cores."""
    metadata = table.metadata
    if not metadata.schema.identifier_field_ids or choose_mode(metadata) != "sharded":
        return None
    cores = max(1, int(spark.sparkContext.defaultParallelism))
    io_properties = dict(table.io.properties)
    shards = shards_for(live_rows(metadata.current_snapshot) or 0, cores)
    log.info("%s: primary-key index in sharded mode", table.name)
    return ShardedIndex(
        table.io,
        SparkShardResolver(spark),
        SparkShardRebuild(spark, io_properties),
        reshard=SparkReshard(spark, io_properties),
        shard_count=shards,
        io_properties=io_properties,
    )
