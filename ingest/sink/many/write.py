"""Stage 3, write: one run of tasks (on a ``TaskRunner``) reads, decodes and writes the
planned ranges (``tasks``); the messages come back by table name. A keyed table whose
keys two tasks wrote is written again with all its ranges in one task, and a table the
evolve or horizon stage sends back is written again without its first files."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from calving.ingest.kafka.offsets import OffsetRange
from calving.ingest.kafka.options import KafkaSourceOptions
from calving.ingest.sink.coordinator import ParsedMessages
from calving.ingest.sink.foreach_batch import forget_files, keys_in_two_tasks
from calving.ingest.sink.many.plan import Planner, task_groups
from calving.ingest.sink.many.route import RoutedTable, Routing
from calving.ingest.sink.many.runner import TaskRunner
from calving.ingest.sink.many.tasks import decode_task_output, many_tables_task
from calving.ingest.sink.many.transactions import TransactionScope
from calving.ingest.sink.messages import Coordinates, Message, decode_tagged

log = logging.getLogger("calving.many")

#: A batch's messages by table name.
Messages = dict[str, list[Message]]


@dataclass(frozen=True)
class Writes:
    """The writes of batch ``batch_id``: its tables' plans from ``planner``, its tasks
    on ``runner``."""

    batch_id: int
    runner: TaskRunner
    planner: Planner
    routing: Routing
    options: KafkaSourceOptions
    reuse_consumer: bool = True

    def write(
        self,
        spans: Mapping[str, list[OffsetRange]],
        already_sent: frozenset[Coordinates] = frozenset(),
        together: frozenset[str] = frozenset(),
        scope: TransactionScope | None = None,
        judge: bool = True,
    ) -> Messages:
        """Run one set of tasks writing ``spans``; messages by table name. The ranges of
        tables in ``together`` go to one task (their keys may span partitions). Unless
        ``judge``, a table's records that do not decode are not dead letters yet when its
        events carry a schema not checked against the table (``TablePlan.settled``)."""
        if not spans:
            return {}
        tables = {topic: self._table(topic) for topic in spans}
        plans = self.planner.plans(self.batch_id, tables, already_sent, scope, judge)
        table_of = {topic: plan.table for topic, plan in plans.items()}
        groups = task_groups(spans, table_of, self.runner.parallelism, together)
        task = many_tables_task(plans, self.options, self.reuse_consumer)
        messages = decode_tagged(decode_task_output(self.runner.run(task, groups)))
        spread = spread_tables(messages, self.routing.tables)
        if spread and not together:
            for name in spread:
                log.warning(
                    "batch %d: a key of %s is in two tasks; writing it in one", self.batch_id, name
                )
                forget_files(self._named(name).table, ParsedMessages.of(messages.pop(name)))
            again = {t: s for t, s in spans.items() if plans[t].table in spread}
            messages.update(self.write(again, already_sent, frozenset(spread), scope, judge))
        return messages

    def write_again(
        self,
        spans: Mapping[str, list[OffsetRange]],
        messages: Messages,
        names: Collection[str],
        scope: TransactionScope | None,
    ) -> None:
        """Drop the files ``names`` were written to in this batch and write them again
        (in ``messages``); dead letters already sent to the topic are not sent twice."""
        sent: set[Coordinates] = set()
        for name in names:
            parsed = ParsedMessages.of(messages.pop(name))
            sent |= parsed.dead_letters_sent
            forget_files(self._named(name).table, parsed)
        redo = {t: s for t, s in spans.items() if _name(self.routing.table_of(t)) in names}
        messages.update(self.write(redo, frozenset(sent), scope=scope))

    def _table(self, topic: str) -> RoutedTable:
        routed = self.routing.table_of(topic)
        assert routed is not None
        return routed

    def _named(self, name: str) -> RoutedTable:
        return self.routing.tables[name]


def spread_tables(
    messages: Mapping[str, list[Message]], tables: Mapping[str, RoutedTable]
) -> list[str]:
    """The keyed tables of ``messages`` some key of which two tasks wrote."""
    out = []
    for name, ms in messages.items():
        schema = tables[name].table.metadata.schema
        if schema.identifier_field_ids and keys_in_two_tasks(ParsedMessages.of(ms), schema):
            out.append(name)
    return out


def _name(routed: RoutedTable | None) -> str | None:
    return routed.name if routed is not None else None
