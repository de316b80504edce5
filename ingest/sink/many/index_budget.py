"""The driver's memory for primary-key indexes across a many-table pipeline's tables.

After each batch the indexes held in memory are summed; while they exceed the budget
(``[sink] index_memory_bytes``), the least recently used table's index is saved with
its table (when it holds unsaved commits) and dropped. The tables of the batch just
committed go last. A dropped index costs nothing until its table's next batch, which
opens it again from the saved file and catches up from the table (``pk.open_index``),
so an idle table holds no driver memory and a restart needs nothing from this state.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from calving.ingest.sink.many.route import RoutedTable

log = logging.getLogger("calving.many")


@dataclass
class IndexBudget:
    limit_bytes: int
    #: Table name -> the batch that last used its index.
    last_used: dict[str, int] = field(default_factory=dict)
    #: Indexes dropped so far (for figures and tests).
    evictions: int = 0

    def after_batch(
        self, tables: Mapping[str, RoutedTable], used: Collection[str], batch_id: int
    ) -> list[str]:
        """Drop indexes until those in memory fit the budget; returns the tables whose
        index was dropped, least recently used first."""
        for name in used:
            self.last_used[name] = batch_id
        held = {
            name: routed.coordinator.index.nbytes
            for name, routed in tables.items()
            if routed.coordinator.index is not None
        }
        total = sum(held.values())
        dropped: list[str] = []
        for name in sorted(held, key=lambda n: (self.last_used.get(n, -1), n)):
            if total <= self.limit_bytes:
                break
            total -= tables[name].coordinator.evict_index()
            dropped.append(name)
        if dropped:
            self.evictions += len(dropped)
            log.info(
                "index memory over %d bytes: dropped the indexes of %d table(s) (least "
                "recently used first: %s); %d bytes held",
                self.limit_bytes,
                len(dropped),
                ", ".join(dropped[:5]) + (", ..." if len(dropped) > 5 else ""),
                total,
            )
        return dropped
