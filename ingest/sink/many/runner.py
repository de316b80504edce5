"""The seam between a many-table batch and the engine its tasks run on.

The write stage hands a ``TaskRunner`` the task function (``tasks.many_tables_task``) and
the groups of range rows the plan stage packed, one group per task, and gets back what
every task yielded (Arrow IPC streams of tagged messages). ``SparkTaskRunner`` runs them
as one Spark job, as the sink always has; ``InProcessRunner`` runs them one after the
other in this process (tests, and anything without Spark).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from calving.ingest.sink.worker_gc import at_task_end

#: One planned Kafka range: ``(topic, partition, start, end)``.
RangeRow = tuple[str, int, int, int]
#: What a task runs over its range rows: it yields its encoded messages.
TaskFunction = Callable[[Iterable[RangeRow]], Iterator[bytes]]


class TaskRunner(Protocol):
    """Runs a batch's tasks; ``parallelism`` is how many run at once (the plan stage
    packs the ranges into ``TASKS_PER_CORE`` times as many tasks)."""

    @property
    def parallelism(self) -> int: ...

    def run(self, task: TaskFunction, groups: list[list[RangeRow]]) -> list[bytes]:
        """``task`` over each group (one task per group); every task's output, collected."""
        ...


class SparkTaskRunner:
    """The tasks as one Spark job on ``spark``'s executors."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    @property
    def parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def run(self, task: TaskFunction, groups: list[list[RangeRow]]) -> list[bytes]:
        blobs: list[bytes] = (
            self.spark.sparkContext.parallelize(groups, len(groups))
            .mapPartitions(at_task_end(lambda items: task(r for group in items for r in group)))
            .collect()
        )
        return blobs


class InProcessRunner:
    """The tasks one after the other in this process, without Spark."""

    def __init__(self, parallelism: int = 1) -> None:
        self._parallelism = parallelism
        #: The groups of every run, in order (what the plan stage gave the tasks).
        self.runs: list[list[list[RangeRow]]] = []

    @property
    def parallelism(self) -> int:
        return self._parallelism

    def run(self, task: TaskFunction, groups: list[list[RangeRow]]) -> list[bytes]:
        self.runs.append(groups)
        return [blob for group in groups for blob in task(iter(group))]
