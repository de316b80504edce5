"""Consumer lag per partition: the broker's latest offset minus the next offset the
table's ledger holds for the writer, asked once per batch on the driver.

The sink asks (``ask``) as its commit stage starts: the broker's reply is read on a
background thread while the batch commits, and the lag after the commit uses it, so
the batch never waits for the broker. The latest offsets are then those of the
moment the commit started."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from concurrent.futures import Future

from calving.commit.errors import CalvingError
from calving.commit.thread_pools import shared_pool
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
        #: The latest offsets of every subscribed partition, being read since ``ask``.
        self._asked: Future[dict[TopicPartition, int]] | None = None

    def ask(self) -> None:
        """Start reading the latest offsets of every subscribed partition in the
        background; the next ``lag``/``lag_of_tables`` uses that reply (one read at a
        time: asking again before then does nothing)."""
        if self._asked is None:
            self._asked = shared_pool("calving-lag", 1).submit(self._latest_subscribed)

    def _latest_subscribed(self) -> dict[TopicPartition, int]:
        return self.view.latest(self.partitions())

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
        by_table = self.lag_of_tables({"": (ledger, None)})
        return None if by_table is None else by_table[""]

    def lag_of_tables(
        self, tables: Mapping[str, tuple[Mapping[TopicPartition, int], Collection[str] | None]]
    ) -> dict[str, dict[TopicPartition, int]] | None:
        """``lag`` for several tables at once (one ListOffsets request for the latest
        offsets, one for the earliest of partitions some ledger has never seen): per
        table name, its ledger and the topics that feed it (None: every subscribed
        topic). None if the broker did not answer."""
        asked, self._asked = self._asked, None
        try:
            known = asked.result() if asked is not None else {}
            subscribed = self.partitions()
            feeds = {
                name: [tp for tp in subscribed if topics is None or tp[0] in topics]
                for name, (_, topics) in tables.items()
            }
            fed = sorted({tp for tps in feeds.values() for tp in tps})
            missing = [tp for tp in fed if tp not in known]  # not asked, or new since
            latest = {tp: known[tp] for tp in fed if tp in known}
            latest.update(self.view.latest(missing) if missing else {})
            unseen = sorted(
                {tp for name, tps in feeds.items() for tp in tps if tp not in tables[name][0]}
            )
            earliest = self.view.earliest(unseen) if unseen else {}
        except CalvingError as err:
            log.warning("consumer lag not measured: %s", err)
            return None
        return {
            name: {
                tp: max(0, latest[tp] - tables[name][0].get(tp, earliest.get(tp, latest[tp])))
                for tp in tps
                if tp in latest
            }
            for name, tps in feeds.items()
        }


__all__ = ["LagProbe"]
