"""Consumer lag per partition: the broker's latest offset minus the next offset the
table's ledger holds for the writer, asked once per batch on the driver."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from calving.commit.errors import CalvingError
from calving.ingest.kafka.offsets import TopicPartition
from calving.ingest.kafka.options import KafkaSourceOptions

log = logging.getLogger("calving.metrics")


class LagProbe:
    """Latest offsets of the subscribed partitions through one cached admin client (the
    source's ``BrokerView``: same cluster settings, same isolation level, so with
    ``read_committed`` the latest offset is the last stable offset).

    The partition list is re-read at most every ``partitions_every_s`` seconds (new
    topics matching a pattern, added partitions); the offsets are read every call:
    one ListOffsets request for all partitions."""

    def __init__(self, options: KafkaSourceOptions, partitions_every_s: float = 30.0) -> None:
        from calving.ingest.kafka.source import BrokerView

        self.view = BrokerView(options)
        self.partitions_every_s = partitions_every_s
        self._partitions: list[TopicPartition] = []
        self._partitions_at = -float("inf")

    def partitions(self) -> list[TopicPartition]:
        now = time.monotonic()
        if now - self._partitions_at >= self.partitions_every_s:
            self._partitions = self.view.partitions()
            self._partitions_at = now
        return self._partitions

    def lag(self, ledger: Mapping[TopicPartition, int]) -> dict[TopicPartition, int] | None:
        """Records per subscribed partition not yet committed; a partition the ledger
        has never seen counts from its earliest offset. None if the broker did not
        answer (logged; a metric never fails a batch)."""
        try:
            tps = self.partitions()
            latest = self.view.latest(tps)
            unseen = [tp for tp in tps if tp not in ledger]
            earliest = self.view.earliest(unseen) if unseen else {}
        except CalvingError as err:
            log.warning("consumer lag not measured: %s", err)
            return None
        return {
            tp: max(0, latest[tp] - ledger.get(tp, earliest.get(tp, latest[tp])))
            for tp in tps
            if tp in latest
        }


__all__ = ["LagProbe"]
