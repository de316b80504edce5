"""Stage 2, plan: how a batch's tables are written (a ``TablePlan`` per table, from its
current metadata) and which task reads which ranges (``task_groups``: every range its
own group, a spread table's ranges one group, groups packed into
``TASKS_PER_CORE`` tasks per core)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from calving.commit.spec.metadata import task_metadata_json
from calving.commit.table.ledger import read_ledger
from calving.commit.table.table import Table, refresh_tables
from calving.ingest.config.format import FormatConfig, build_decoder
from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.sink.dead_letters import DEFAULT_TOPIC_MAX_BYTES, DeadLetterTarget
from calving.ingest.sink.executor import TaskPlan
from calving.ingest.sink.many.route import RoutedTable
from calving.ingest.sink.many.runner import RangeRow
from calving.ingest.sink.many.tasks import TablePlan
from calving.ingest.sink.many.transactions import TransactionScope
from calving.ingest.sink.messages import Coordinates

#: Tasks per core a batch's ranges are packed into: many small topics share tasks (a
#: task per topic-partition costs more than its records when tables are many).
TASKS_PER_CORE = 2
#: A batch of fewer records than this per core gets one task per core: its tasks'
#: fixed costs (a Kafka fetch round, a task's scheduling) outweigh any imbalance
#: between them (50 tables of one event each on 2 cores: about 0.26 s in 2 tasks,
#: 0.44 s in 4).
SMALL_BATCH_RECORDS_PER_CORE = 8192


@dataclass(frozen=True)
class Planner:
    """What every table plan of a pipeline shares: the writer, the format, and where
    dead letters go."""

    writer_id: str
    format: FormatConfig
    dead_letter_table: Table | None = None
    dead_letter_topic: str | None = None
    kafka_config: Mapping[str, str] = field(default_factory=dict)
    dead_letter_max_bytes: int = DEFAULT_TOPIC_MAX_BYTES

    def dead_letters(self, already_sent: frozenset[Coordinates]) -> DeadLetterTarget:
        """Where this write's dead letters go (the dead-letter table as it is now)."""
        return DeadLetterTarget.of(
            self.dead_letter_table,
            self.dead_letter_topic,
            self.kafka_config,
            self.dead_letter_max_bytes,
            already_sent,
        )

    def plans(
        self,
        batch_id: int,
        tables: Mapping[str, RoutedTable],
        already_sent: frozenset[Coordinates],
        scope: TransactionScope | None = None,
        judge: bool = True,
    ) -> dict[str, TablePlan]:
        """A plan per topic of ``tables`` (topic -> its table); topics of one table share
        one plan."""
        target = self.dead_letters(already_sent)
        # The batch's tables as the catalog has them now, read together.
        refresh_tables(list({r.name: r.table for r in tables.values()}.values()))
        by_table: dict[str, TablePlan] = {}
        plans = {}
        for topic, routed in tables.items():
            plan = by_table.get(routed.name)
            if plan is None:
                plan = by_table[routed.name] = self.plan(routed, batch_id, target, scope, judge)
            plans[topic] = plan
        return plans

    def plan(
        self,
        routed: RoutedTable,
        batch_id: int,
        target: DeadLetterTarget,
        scope: TransactionScope | None = None,
        judge: bool = True,
    ) -> TablePlan:
        """How ``routed``'s records are written in batch ``batch_id`` (its table as
        refreshed by ``plans``; its decoder and metadata JSON made again only when it
        changed)."""
        table = routed.table
        schema = table.metadata.schema
        if routed.decoder is None or routed.decoder[0] != schema.schema_id:
            routed.decoder = (schema.schema_id, build_decoder(self.format, schema))
        if routed.serialized is None or routed.serialized[0] != table.metadata_location:
            routed.serialized = (table.metadata_location, task_metadata_json(table.metadata))
        safe = routed.name.replace(".", "_")
        task = TaskPlan(
            metadata_json=routed.serialized[1],
            metadata_location=table.metadata_location,
            decoder=routed.decoder[1],
            ledger=read_ledger(table.metadata, self.writer_id),
            file_prefix=f"{self.writer_id}-b{batch_id}-{safe}",
            dead_letters=target,
            io_properties=table.io.properties,
        )
        keyed = bool(schema.identifier_field_ids)
        settled = None
        if not judge:
            settled = frozenset(t for t, sid in routed.settled.items() if sid == schema.schema_id)
        return TablePlan(routed.name, task, keyed, routed.stopped, scope, settled)


def task_groups(
    spans: Mapping[str, list[OffsetRange]],
    table_of: Mapping[str, str],
    parallelism: int,
    together: Collection[str] = frozenset(),
) -> list[list[RangeRow]]:
    """The range rows of ``spans`` grouped into tasks: each range on its own, except
    that the ranges of the tables in ``together`` (``table_of``: topic -> table name)
    stay in one task each (their keys may span partitions); packed into
    ``parallelism * TASKS_PER_CORE`` tasks at most (``parallelism`` for a small
    batch)."""
    groups: list[list[RangeRow]] = []
    joint: dict[str, list[RangeRow]] = {}
    for topic, ranges in spans.items():
        name = table_of[topic]
        for r in ranges:
            row = (r.topic, r.partition, r.start, r.end)
            if name in together:
                joint.setdefault(name, []).append(row)
            else:
                groups.append([row])
    groups += joint.values()
    records = sum(r[3] - r[2] for group in groups for r in group)
    small = records < parallelism * SMALL_BATCH_RECORDS_PER_CORE
    return pack(groups, parallelism * (1 if small else TASKS_PER_CORE))


def pack(groups: list[list[RangeRow]], slots: int) -> list[list[RangeRow]]:
    """``groups`` (each kept whole) packed into at most ``slots`` tasks of about equal
    record counts (largest first, each into the lightest task)."""
    if len(groups) <= slots:
        return groups
    bins: list[list[RangeRow]] = [[] for _ in range(max(1, slots))]
    weights = [0] * len(bins)
    for group in sorted(groups, key=lambda g: -sum(r[3] - r[2] for r in g)):
        i = weights.index(min(weights))
        bins[i].extend(group)
        weights[i] += sum(r[3] - r[2] for r in group)
    return bins
