"""Per-table figures of a many-table pipeline: the families of ``batch.METRICS`` on one
registry (one endpoint), each table's series labelled with its name, and one JSON line
per table and batch on ``calving.metrics``. A table gets its series when a batch first
brings it records; an idle table costs nothing per batch. Consumer lag is asked once
per batch for all the batch's tables (``LagProbe.lag_of_tables``), each table against
the partitions of the topics routed to it."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from calving.commit.table.ledger import read_ledger
from calving.ingest.kafka.offsets import TopicPartition
from calving.ingest.metrics.batch import SinkMetrics, batch_families
from calving.ingest.metrics.exposition import Registry
from calving.ingest.metrics.lag import LagProbe
from calving.ingest.metrics.server import MetricsServer
from calving.ingest.sink.many.observer import TableFigures


class ManyMetrics:
    """The figures of a many-table pipeline (``writer_id``)."""

    def __init__(
        self,
        writer_id: str,
        *,
        registry: Registry | None = None,
        lag: LagProbe | None = None,
        log_batches: bool = True,
    ) -> None:
        self.writer_id = writer_id
        self.registry = registry or Registry()
        self.lag = lag
        self.log_batches = log_batches
        self.families = batch_families(self.registry)
        #: Table name -> its series (made when a batch first brings it records).
        self.tables: dict[str, SinkMetrics] = {}
        self.server: MetricsServer | None = None

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
        if self.server is None:
            self.server = MetricsServer(self.registry, host, port)
        return self.server

    def close(self) -> None:
        self.lag = None
        if self.server is not None:
            self.server.close()
            self.server = None

    def of(self, name: str) -> SinkMetrics:
        """Table ``name``'s series (made on first use)."""
        if name not in self.tables:
            self.tables[name] = SinkMetrics(
                name,
                self.writer_id,
                registry=self.registry,
                log_batches=self.log_batches,
                families=self.families,
            )
        return self.tables[name]

    def commit_starting(self) -> None:
        """The batch's commit stage starts: the lag probe reads the broker meanwhile."""
        if self.lag is not None:
            self.lag.ask()

    def batch_done(
        self, tables: Mapping[str, TableFigures], started: float, commit_started: float
    ) -> list[dict[str, object]]:
        """After a batch committed: each of its tables' figures; the logged records."""
        lags = self._lags(tables)
        return [
            self.of(name).batch_done(
                t, t.parsed, t.stats, started, commit_started, lags.get(name) if lags else None
            )
            for name, t in sorted(tables.items())
        ]

    def batch_failed(
        self, names: Collection[str], batch_id: int, error: BaseException, started: float
    ) -> None:
        """The batch's commit raised ``error``: a failed batch for each of its tables."""
        for name in sorted(names):
            self.of(name).batch_failed(None, batch_id, error, started)

    def _lags(
        self, tables: Mapping[str, TableFigures]
    ) -> dict[str, dict[TopicPartition, int]] | None:
        if self.lag is None or not tables:
            return None
        asked = {
            name: (read_ledger(t.table.metadata, t.writer_id), t.topics)
            for name, t in tables.items()
        }
        return self.lag.lag_of_tables(asked)


__all__ = ["ManyMetrics"]
