"""What a many-table sink tells its observer after each batch (the per-table metrics,
``calving.ingest.metrics.many.ManyMetrics``): a protocol, so the sink does not import
the metrics package that observes it (tests/test_layers.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from calving.commit.table.table import Table
from calving.ingest.sink.coordinator import BatchStats, Coordinator, ParsedMessages


@dataclass(frozen=True)
class TableFigures:
    """One table of a batch as the figures read it."""

    table: Table
    coordinator: Coordinator
    writer_id: str
    #: The topics routed to the table (its lag is measured over their partitions).
    topics: Collection[str]
    parsed: ParsedMessages
    stats: BatchStats


class ManyBatchObserver(Protocol):
    def commit_starting(self) -> object:
        """The batch's commit stage starts (the lag probe's broker read overlaps it)."""

    def batch_done(
        self, tables: Mapping[str, TableFigures], started: float, commit_started: float
    ) -> object:
        """After a batch committed (``time.monotonic()`` readings)."""

    def batch_failed(
        self, names: Collection[str], batch_id: int, error: BaseException, started: float
    ) -> object:
        """The batch's commit raised ``error`` (the sink re-raises it)."""

    def close(self) -> None:
        """Stop what serves the figures."""
