"""Compaction groups rewritten on Spark executors: one task per group.

The driver sends each task a ``RewriteTask`` (the table location, schema and data path,
the group's partition and inputs with the DV positions seen at planning, the target
size and the FileIO properties); the executor runs ``rewrite_group`` and returns a
``RewriteTaskResult``: the new data files and the position map, or the one-line error
that stopped it. Both are plain dataclasses pickled by Spark (one encoder, one decoder).
A group whose task fails comes back as its error, so the other groups still commit; a
failing Spark job (e.g. executors lost beyond ``spark.task.maxFailures``) fails its
batch of groups. A stop request (``stop``) cancels the job under way (its job group):
its groups come back as ``PassStoppedError``; files its tasks had written are left to
orphan removal.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from pyroaring import BitMap64

from calving.commit.errors import CalvingError
from calving.commit.io import FileIO
from calving.commit.maintenance.compaction import Inputs, PassStoppedError, Rewritten
from calving.commit.maintenance.compaction_plan import RewriteGroup
from calving.commit.spec import position_map as pm
from calving.commit.spec.data_file import DataFile
from calving.commit.spec.metadata import TableMetadata
from calving.commit.spec.partition import PartitionSpec
from calving.commit.spec.properties import TableProperties
from calving.commit.spec.schema import Schema
from calving.commit.spec.sort_order import UNSORTED, SortOrder
from calving.ingest.write.rewrite import (
    RewriteInput,
    data_sequence_numbers,
    default_sort_order,
    rewrite_group,
)


class RewriteTaskError(CalvingError):
    """A rewrite task failed on an executor (its message names the cause)."""


@dataclass(frozen=True)
class RewriteTask:
    location: str
    data_path: str | None
    schema: Schema
    spec_id: int
    partition: tuple[Any, ...]
    inputs: tuple[tuple[DataFile, bytes], ...]  # (file, its DV positions serialized)
    target_file_bytes: int
    io_properties: Mapping[str, str]
    # Layout and lineage (``calving.ingest.write.rewrite.rewrite_group``'s keywords).
    partition_spec: PartitionSpec | None = None
    sort_order: SortOrder = UNSORTED
    row_lineage: bool = True
    sequence_numbers: tuple[int | None, ...] = ()  # per input: its data sequence number


@dataclass(frozen=True)
class RewriteTaskResult:
    added: tuple[DataFile, ...] = ()
    position_map: bytes = b""  # position_map.serialize
    error: str | None = None


def run_task(task: RewriteTask) -> RewriteTaskResult:
    """The executor side."""
    try:
        out = rewrite_group(
            FileIO(dict(task.io_properties)),
            task.location,
            task.schema,
            [
                RewriteInput(f, BitMap64.deserialize(d), seq)
                for (f, d), seq in zip_longest(task.inputs, task.sequence_numbers)
            ],
            task.target_file_bytes,
            spec_id=task.spec_id,
            partition=task.partition,
            data_path=task.data_path,
            partition_spec=task.partition_spec,
            sort_order=task.sort_order,
            row_lineage=task.row_lineage,
        )
    except CalvingError as err:
        return RewriteTaskResult(error=f"{type(err).__name__}: {err}")
    return RewriteTaskResult(out.added, pm.serialize(out.position_map))


@dataclass
class SparkRewriter:
    """A ``Rewriter`` (``calving.commit.maintenance.compaction``) on a Spark session."""

    spark: Any
    io_properties: Mapping[str, str]
    target_file_bytes: int
    parallelism: int = 0  # 0: the session's default parallelism
    #: Set to cancel the rewrite job under way (SIGTERM / Ctrl-C of ``calving maintain``).
    stop: threading.Event | None = None

    def __post_init__(self) -> None:
        if self.parallelism <= 0:
            self.parallelism = max(1, int(self.spark.sparkContext.defaultParallelism))

    def tasks(
        self, metadata: TableMetadata, jobs: Sequence[tuple[RewriteGroup, Inputs]]
    ) -> list[RewriteTask]:
        data_path = TableProperties(metadata.properties).write_data_path
        seqs = data_sequence_numbers(FileIO(dict(self.io_properties)), metadata)
        order = default_sort_order(metadata)
        return [
            RewriteTask(
                metadata.location,
                data_path,
                metadata.schema,
                group.spec_id,
                tuple(group.partition),
                tuple((f, d.serialize()) for f, d in inputs),
                self.target_file_bytes,
                dict(self.io_properties),
                metadata.spec_by_id(group.spec_id),
                order,
                metadata.format_version >= 3,
                tuple(seqs.get(f.file_path) for f, _ in inputs),
            )
            for group, inputs in jobs
        ]

    def rewrite_many(
        self, metadata: TableMetadata, jobs: Sequence[tuple[RewriteGroup, Inputs]]
    ) -> list[Rewritten | CalvingError]:
        tasks = self.tasks(metadata, jobs)
        if not tasks:
            return []
        if self.stop is not None and self.stop.is_set():
            return [PassStoppedError("stopped before this group") for _ in tasks]
        sc = self.spark.sparkContext
        group = f"calving-compaction-{uuid.uuid4().hex[:12]}"
        sc.setJobGroup(group, f"calving compaction: {len(tasks)} group(s)", True)
        done = threading.Event()
        watcher = threading.Thread(target=self._cancel_on_stop, args=(group, done), daemon=True)
        watcher.start()
        try:
            results = sc.parallelize(tasks, len(tasks)).map(run_task).collect()
        except Exception as err:  # noqa: BLE001 -- py4j wraps every Spark job failure
            if self.stop is not None and self.stop.is_set():
                return [PassStoppedError("stopped: rewrite job cancelled") for _ in tasks]
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return [RewriteTaskError(f"Spark rewrite job failed: {first}") for _ in tasks]
        finally:
            done.set()
            watcher.join(timeout=5)
        return [_decoded(r) for r in results]

    def _cancel_on_stop(self, group: str, done: threading.Event) -> None:
        if self.stop is None:
            return
        while not done.is_set():
            if self.stop.wait(0.2):
                if not done.is_set():
                    self.spark.sparkContext.cancelJobGroup(group)
                return


def _decoded(result: RewriteTaskResult) -> Rewritten | CalvingError:
    if result.error is not None:
        return RewriteTaskError(result.error)
    return result.added, pm.deserialize(result.position_map, "a rewrite task result")
