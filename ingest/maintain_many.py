"""Inline maintenance of a many-table pipeline, within one budget for all its tables.

After a batch, once ``inline_interval`` has passed since the last round, a round runs
passes within ``inline_budget`` (for the whole round) over the tables that committed
since their last pass: most commits since then first, then the longest waiting. A
table the budget did not reach keeps its commits and its place for the next round; a
table with no commits since its last pass (an idle table) is never visited. Each
table's pass is the single-table ``Maintainer``'s inline pass (it yields to no one,
as it runs between the stream's batches, and never fails the stream), on the
pipeline's catalog, with the per-table maintenance figures on the stream's endpoint.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from calving.commit.maintenance.run import MaintenanceReport
from calving.commit.table.table import Table
from calving.ingest.config.maintenance import MaintenanceConfig
from calving.ingest.maintain import Maintainer, compaction_due, rewriter_for
from calving.ingest.metrics.exposition import Registry
from calving.ingest.metrics.maintenance import MaintenanceMetrics, maintenance_families
from calving.ingest.sink.many.sink import ManyTablesSink

log = logging.getLogger("calving.maintenance")


@dataclass
class Waiting:
    """A table due for a pass: commits since its last one, and since when it waits."""

    commits: int = 0
    since: float = field(default_factory=time.monotonic)


class ManyMaintainer:
    """Inline maintenance across ``sink``'s tables (see the module docstring)."""

    def __init__(
        self,
        sink: ManyTablesSink,
        config: MaintenanceConfig,
        *,
        spark: Any | None = None,
        io_properties: dict[str, str] | None = None,
        registry: Registry | None = None,
        log_passes: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.config = config
        self.spark = spark
        self.io_properties = dict(io_properties or {})
        self.registry = registry or Registry()
        self.families = maintenance_families(self.registry)
        self.log_passes = log_passes
        self.clock = clock
        #: Table name -> its maintainer (made at its first pass).
        self.maintainers: dict[str, Maintainer] = {}
        #: Tables committed since their last pass.
        self.waiting: dict[str, Waiting] = {}
        self.last_round: float | None = None
        self._batches_seen = 0
        #: Each round's passes (table name -> report), the newest last.
        self.rounds: list[dict[str, MaintenanceReport | None]] = []

    def after_batch(self) -> dict[str, MaintenanceReport | None]:
        """Note the batches committed since the last call; run a round when due, else
        compactions alone of the waiting tables that have a partition of
        ``compact_files_threshold`` small files. The passes run (None for one that
        raised); empty when none ran."""
        self._note_batches()
        now = self.clock()
        if not self.waiting:
            return {}
        if self.last_round is not None and now - self.last_round < self.config.inline_interval_s:
            return self._compactions(now + self.config.inline_budget_s)
        self.last_round = now
        passes = self._round(now + self.config.inline_budget_s)
        self.rounds = [*self.rounds, passes][-10:]
        return passes

    def order(self) -> list[str]:
        """The waiting tables, most commits first, then the longest waiting."""
        return sorted(
            self.waiting, key=lambda n: (-self.waiting[n].commits, self.waiting[n].since, n)
        )

    def _note_batches(self) -> None:
        history = self.sink.history
        for stats in history.since(self._batches_seen):
            for name in stats.committed:
                self.waiting.setdefault(name, Waiting()).commits += 1
        self._batches_seen = history.total

    def _round(self, deadline: float) -> dict[str, MaintenanceReport | None]:
        passes: dict[str, MaintenanceReport | None] = {}
        for name in self.order():
            left = deadline - self.clock()
            if left <= 0:
                break
            report = self._maintainer(name).inline_pass(left)
            passes[name] = report
            if report is not None:
                del self.waiting[name]
        left_out = len(self.waiting) - sum(1 for n in passes if n in self.waiting)
        if left_out > 0:
            log.info("inline maintenance: %d table(s) wait for the next round (budget spent)",
                     left_out)  # fmt: skip
        return passes

    def _compactions(self, deadline: float) -> dict[str, MaintenanceReport | None]:
        """Between rounds: a compaction alone of each waiting table due by file count
        (the table as the stream holds it), within the budget. The tables keep their
        place for the next round (its other jobs are still due)."""
        passes: dict[str, MaintenanceReport | None] = {}
        for name in self.order():
            left = deadline - self.clock()
            if left <= 0:
                break
            routed = self.sink.tables.get(name)
            if routed is None or not compaction_due(
                self.config, self.sink.io, routed.table.metadata
            ):
                continue
            passes[name] = self._maintainer(name).inline_pass(left, by_file_count=True)
        return passes

    def _maintainer(self, name: str) -> Maintainer:
        if name not in self.maintainers:
            routed = self.sink.tables[name]
            table = Table.load(self.sink.catalog, routed.table.ident, self.sink.io)
            rewriter = rewriter_for(self.config, table, self.spark, self.io_properties)
            metrics = MaintenanceMetrics(
                table.name, registry=self.registry, log_passes=self.log_passes,
                families=self.families,
            )  # fmt: skip
            self.maintainers[name] = Maintainer(table, self.config, rewriter, metrics=metrics)
        return self.maintainers[name]
